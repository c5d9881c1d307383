"""The counting tools of `tornado_readinto.diagnostics.gilcount`: they count (context
switches, GIL-releasing calls by origin, polls by timeout), never time."""

from __future__ import annotations

import asyncio
import gc
import logging
import selectors
import socket
import sys
import threading
import time

import pytest

from tornado_readinto.diagnostics.gilcount import CountingSelector, ReleaseCounter, ReleaseCounts, thread_switches


def test_thread_switches_counts_a_wait_as_voluntary():
    before = thread_switches()
    for _ in range(5):
        time.sleep(0.001)  # each sleep blocks: a voluntary switch
    after = thread_switches()
    assert after[0] - before[0] >= 5
    assert after[1] >= before[1]


def test_thread_switches_of_another_thread_by_its_native_id():
    started, stop = threading.Event(), threading.Event()
    tid = []

    def wait():
        tid.append(threading.get_native_id())
        for _ in range(3):
            time.sleep(0.001)
        started.set()
        stop.wait()

    thread = threading.Thread(target=wait)
    thread.start()
    started.wait()
    try:
        voluntary, _ = thread_switches(tid[0])
        assert voluntary >= 3  # its sleeps
    finally:
        stop.set()
        thread.join()
    # No such thread: an id above the kernel's pid_max can never be in use.
    # (The joined thread's own id may still be listed for a moment after
    # join returns, so it cannot stand for a thread that is gone.)
    with open("/proc/sys/kernel/pid_max") as f:
        absent = int(f.read()) + 1
    with pytest.raises(OSError):
        thread_switches(absent)


def counted(work):
    counter = ReleaseCounter()
    counter.install()
    try:
        work()
    finally:
        counter.uninstall()
    return counter.counts


def test_release_counter_sees_socket_calls_polls_and_locks_by_origin():
    a, b = socket.socketpair()
    selector = selectors.DefaultSelector()
    selector.register(b, selectors.EVENT_READ)
    lock = threading.Lock()

    def work():
        a.send(b"x")
        selector.select(0)
        selector.select(0.001)
        b.recv_into(bytearray(1))
        lock.acquire()
        lock.release()
        time.sleep(0)
        sum(range(10))  # not a releasing call

    with a, b, selector:
        counts = counted(work)
    assert counts.calls[("other", "socket")] == 2  # called from this file
    assert counts.calls[("loop", "poll")] == 2 and counts.polls == {"zero": 1, "timed": 1}
    assert counts.calls[("locks", "lock")] == 1
    assert counts.calls[("other", "sleep")] == 1
    assert counts.total() == 6
    assert counts.by_origin() == {"ours": 0, "loop": 2, "tornado": 0, "dask": 0, "locks": 1, "logging": 0, "other": 3}


def test_release_counter_puts_logging_first_whoever_logs(tmp_path):
    handler = logging.FileHandler(tmp_path / "log.txt")
    logger = logging.getLogger("test_gilcount")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        counts = counted(lambda: logger.warning("hello"))
    finally:
        logger.removeHandler(handler)
        handler.close()
    if sys.version_info < (3, 13):
        # the handler's lock (may wait); from 3.13 Handler.handle takes it
        # with ``with self.lock:``, which makes no profile event (a limit
        # gilcount documents)
        assert counts.total("logging", "lock") >= 1
    assert counts.total("logging", "file") >= 1  # the write-out
    assert counts.total() == counts.total("logging")


def test_release_counter_restores_the_previous_hook_and_counts_only_its_thread():
    events = []

    def previous(frame, event, arg):
        events.append(event)

    sys.setprofile(previous)
    try:
        counter = ReleaseCounter()
        counter.install()
        assert sys.getprofile() is not previous
        other = threading.Thread(target=time.sleep, args=(0,))
        other.start()
        other.join()
        counter.uninstall()
        assert sys.getprofile() is previous
    finally:
        sys.setprofile(None)
    assert counter.counts.total("other", "sleep") == 0  # the other thread's sleep was not seen


def test_release_counts_difference_and_plain_data():
    counter = ReleaseCounter()
    counter.install()
    try:
        time.sleep(0)
        first = counter.snapshot()
        time.sleep(0)
        time.sleep(0)
    finally:
        counter.uninstall()
    since = counter.snapshot().minus(first)
    assert since.total() == 2
    assert since.as_dict() == {"calls": {"other/sleep": 2}, "polls": {}, "entries": 0, "entered": {}}
    assert ReleaseCounts().total() == 0


@pytest.mark.parametrize("timeout", [0, 0.001, None])
def test_counting_selector_counts_an_asyncio_loops_polls(timeout):
    timed_poll = threading.Event()

    class Selector(CountingSelector):
        def select(self, timeout=None):
            if timeout is not None and timeout > 0:
                timed_poll.set()
            return super().select(timeout)

    selector = Selector()
    loop = asyncio.SelectorEventLoop(selector)
    try:

        async def main():
            await asyncio.sleep(0)  # one turn with a ready callback: a zero-timeout poll
            # A timer that cannot expire first: the loop's next poll waits for
            # it, timed, until this thread, once that poll began, wakes it.
            far = loop.call_later(3600, lambda: None)
            woken = loop.create_future()

            def wake():
                timed_poll.wait()
                loop.call_soon_threadsafe(woken.set_result, None)

            waker = threading.Thread(target=wake)
            waker.start()
            await woken
            far.cancel()
            waker.join()

        loop.run_until_complete(main())
    finally:
        loop.close()
    assert selector.polls["zero"] >= 1 and selector.polls["timed"] >= 1
    assert selector.ctl >= 1  # the loop's self-pipe


def test_counting_selector_forwards_to_the_selector_it_wraps():
    a, b = socket.socketpair()
    with a, b, CountingSelector() as selector:
        key = selector.register(b, selectors.EVENT_READ, "data")
        assert selector.get_key(b) == key and b in [k.fileobj for k in selector.get_map().values()]
        a.send(b"x")
        assert [(k.data, ev) for k, ev in selector.select(None)] == [("data", selectors.EVENT_READ)]
        selector.modify(b, selectors.EVENT_READ, "other")
        selector.unregister(b)
        assert selector.ctl == 3 and selector.polls == {"blocking": 1}


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_release_counter_entries_are_returns_from_a_c_loop_into_python(loop_name):
    """Installed from a coroutine: on uvloop every callback that libuv runs
    (here: three task steps from ready callbacks) enters Python from C and
    counts; on asyncio's loop, a Python loop, nothing does."""
    from ..conftest import new_event_loop

    loop = new_event_loop(loop_name)

    async def main():
        counter = ReleaseCounter()
        counter.install()
        try:
            for _ in range(3):
                await asyncio.sleep(0)  # the task steps again from a ready callback
        finally:
            counter.uninstall()
        return counter.counts

    # No collection in the window: a finalizer that the collector runs (an
    # earlier test's garbage) enters Python from C too, and would count.
    gc.collect()
    gc.disable()
    try:
        counts = loop.run_until_complete(main())
    finally:
        gc.enable()
        loop.close()
    entries = counts.entries
    assert sum(counts.entered.values()) == entries, counts
    if loop_name == "uvloop":
        # What each entry entered: the coroutine, resumed by its task's step.
        assert entries == 3 and counts.entered == {
            f"{__name__}:test_release_counter_entries_are_returns_from_a_c_loop_into_python.<locals>.main": 3
        }, counts
    else:
        assert entries <= 1  # asyncio's Handle that ran the installing step returns: nothing to count
    outside = ReleaseCounter()
    outside.install()  # not from a coroutine: no loop to watch
    outside.uninstall()
    assert outside.counts.entries == 0
