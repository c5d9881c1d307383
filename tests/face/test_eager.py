"""`tornado_readinto.face._facecore.EagerFuture`: resolved the ordinary way it
behaves as an asyncio Future; resolved eagerly, its producer wakes the
waiting task in the same loop turn (where no task is running), on asyncio's
loop and uvloop.  Turns are counted with loop callbacks, never timed."""

from __future__ import annotations

import asyncio

import pytest

from tornado_readinto.face._facecore import EagerFuture, run_callbacks

from ..conftest import run


async def _awaited(loop):
    """An EagerFuture, a task that has started awaiting it (it appends
    ``("woke", result)`` to the returned list when woken), and that task."""
    future = EagerFuture(loop=loop)
    order = []

    async def waiter():
        order.append(("woke", await future))

    task = asyncio.ensure_future(waiter())
    await asyncio.sleep(0)
    return future, order, task


def test_eager_future_ordinary_resolution_wakes_the_waiter_next_turn(loop_name):
    async def main():
        loop = asyncio.get_running_loop()
        future, order, task = await _awaited(loop)
        future.set_result(1)
        order.append("resolved")
        await task
        assert order == ["resolved", ("woke", 1)]

    run(main(), loop=loop_name)


def test_eager_future_eager_resolution_wakes_the_waiter_before_the_callback_returns(loop_name):
    """From a plain loop callback (no task running), as a readiness callback
    is: the waiting task has run its next step when run_callbacks returns."""

    async def main():
        loop = asyncio.get_running_loop()
        future, order, task = await _awaited(loop)
        done = loop.create_future()

        def readiness_callback():
            callbacks = future.set_result_eager(2)
            order.append("resolved")
            run_callbacks(future, callbacks, loop)
            order.append("returned")
            done.set_result(None)

        loop.call_soon(readiness_callback)
        await done
        assert order == ["resolved", ("woke", 2), "returned"]
        await task

    run(main(), loop=loop_name)


def test_eager_future_inside_a_task_falls_back_to_the_next_turn(loop_name):
    async def main():
        loop = asyncio.get_running_loop()
        future, order, task = await _awaited(loop)
        callbacks = future.set_result_eager(3)
        run_callbacks(future, callbacks, loop)  # this task runs: no task step may start here
        order.append("returned")
        await task
        assert order == ["returned", ("woke", 3)]

    run(main(), loop=loop_name)


def test_eager_future_cancel_and_exception_wake_the_waiter(loop_name):
    async def main():
        loop = asyncio.get_running_loop()
        cancelled = EagerFuture(loop=loop)
        task = asyncio.ensure_future(cancelled)
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert cancelled.cancelled()

        failing = EagerFuture(loop=loop)

        async def waiter():
            await failing

        task = asyncio.ensure_future(waiter())
        await asyncio.sleep(0)
        failing.set_exception(ValueError("bad 1"))
        with pytest.raises(ValueError, match="bad 1"):
            await task

    run(main(), loop=loop_name)


def test_eager_future_callbacks_added_or_removed(loop_name):
    async def main():
        loop = asyncio.get_running_loop()
        future = EagerFuture(loop=loop)
        seen = []

        def first(f):
            seen.append(("first", f.result()))

        def second(f):
            seen.append(("second", f.result()))

        future.add_done_callback(first)
        future.add_done_callback(second)
        assert future.remove_done_callback(first) == 1
        callbacks = future.set_result_eager(4)
        done = loop.create_future()
        loop.call_soon(lambda: (run_callbacks(future, callbacks, loop), done.set_result(list(seen))))
        assert await done == [("second", 4)]
        future.add_done_callback(first)  # already done: scheduled, as asyncio does
        await asyncio.sleep(0)
        assert seen == [("second", 4), ("first", 4)]

    run(main(), loop=loop_name)


def test_eager_future_a_failing_callback_goes_to_the_exception_handler(loop_name):
    async def main():
        loop = asyncio.get_running_loop()
        reported = []
        loop.set_exception_handler(lambda loop, context: reported.append(context["exception"]))
        future = EagerFuture(loop=loop)
        seen = []

        def bad(f):
            raise RuntimeError("callback 1 failed")

        future.add_done_callback(bad)
        future.add_done_callback(lambda f: seen.append(f.result()))
        callbacks = future.set_result_eager(5)
        done = loop.create_future()
        loop.call_soon(lambda: (run_callbacks(future, callbacks, loop), done.set_result(None)))
        await done
        assert seen == [5] and [str(e) for e in reported] == ["callback 1 failed"]

    run(main(), loop=loop_name)


def test_eager_future_with_no_waiter_hands_out_nothing(loop_name):
    async def main():
        future = EagerFuture(loop=asyncio.get_running_loop())
        assert future.set_result_eager(6) is None and future.result() == 6

    run(main(), loop=loop_name)
