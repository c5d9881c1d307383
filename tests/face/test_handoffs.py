"""What one small message on the dask comm path costs the event-loop thread
in GIL releases while another thread runs Python: counted with
`tornado_readinto.diagnostics.gilcount` (a profile hook on the loop thread), never
timed.

Per message, the floor of a selector-driven loop is one poll (the one that
reports the data).  Ours: no GIL-releasing call at all (the socket calls keep
the GIL once a stall was seen), and the read's waiter runs in the loop turn
that received the message, so no second poll (asyncio's loop: 1 poll per
message; it was 2 before `tornado_readinto.face._facecore.EagerFuture`)."""

from __future__ import annotations

import asyncio
import gc
import time

import pytest

pytest.importorskip("distributed")

from distributed.comm import connect, listen  # noqa: E402

import tornado_readinto  # noqa: E402
from tornado_readinto.core import (
    _cpus,  # noqa: E402
    _gilheld,  # noqa: E402
)
from tornado_readinto.diagnostics.gilcount import ReleaseCounter  # noqa: E402

from ..conftest import gil_holding_thread, new_event_loop  # noqa: E402

MESSAGES = 40  # 20 round trips: each a message each way


async def _echo_round_trips(scheme, rounds_before, count):
    """Start an echo server and a client on this loop; with a thread running
    Python, make round trips until the streams keep the GIL across socket
    calls, then count the loop thread's releases over ``count`` more."""

    served = asyncio.Event()

    async def echo(comm):
        try:
            while True:
                await comm.write(await comm.read())
        except Exception:  # closed at the end
            pass
        finally:
            served.set()

    async with listen(f"{scheme}://127.0.0.1:0", echo) as listener:
        comm = await connect(listener.contact_address)
        try:
            with gil_holding_thread():
                for i in range(rounds_before):
                    await comm.write({"op": "ping", "i": i})
                    await comm.read()
                    if i > 10 and _gilheld.held(time.perf_counter()):
                        break
                assert _gilheld.held(time.perf_counter()), "no stall seen: the socket calls still release the GIL"
                # The collector would run earlier tests' finalizers (a
                # coroutine's ``finally``, a ``__del__``) on this thread, some
                # straight from the loop's C code: entries that are no return
                # from libuv.  Collected before, paused during the count.
                gc.collect()
                gc.disable()
                counter = ReleaseCounter()
                counter.install()
                try:
                    started = rounds_before + 1
                    for i in range(started, started + count):
                        await comm.write({"op": "ping", "i": i})
                        assert (await comm.read())["i"] == i
                finally:
                    counter.uninstall()
                    gc.enable()
                turns = await _turns_per_round_trip(comm, count)
        finally:
            comm.abort()
        # The caller closes the loop next: let the server's handler end first
        # (see tests/face/test_served_tasks.py).
        await served.wait()
    return counter.counts, turns


async def _turns_per_round_trip(comm, count):
    """Loop turns per round trip, counted by a callback that re-schedules
    itself (one run per turn; it keeps the loop polling with a zero timeout,
    which changes when, not how many turns a message takes)."""
    loop = asyncio.get_running_loop()
    turns = [0]
    ticking = [True]

    def tick():
        turns[0] += 1
        if ticking[0]:
            loop.call_soon(tick)

    loop.call_soon(tick)
    await asyncio.sleep(0)
    before = turns[0]
    for i in range(count):
        await comm.write({"op": "ping", "i": i})
        await comm.read()
    ticking[0] = False
    return (turns[0] - before) / count


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_a_small_message_costs_the_loop_thread_at_most_one_poll_and_nothing_of_ours(loop_name, monkeypatch):
    monkeypatch.setattr(_gilheld, "HOLD_S", 1e6)  # no probe through the socket methods mid-count
    monkeypatch.setattr(_cpus, "parallel_cpus", lambda: 2)  # uvloop's eager wake-up, even if run on one CPU
    loop = new_event_loop(loop_name)
    try:
        counts, turns = loop.run_until_complete(asyncio.wait_for(_echo_round_trips("readinto", 500, MESSAGES // 2), 60))
    finally:
        loop.close()
    # A round trip is two messages, each received in one turn, its waiter
    # woken in that same turn: on asyncio's loop the call_soon wake-up took
    # a turn (and a poll) of its own, four per round trip.  uvloop runs
    # call_soon callbacks before its next poll, so it counted two turns
    # either way; there the wake-up saved a return from libuv to Python
    # (below: entries).
    assert turns <= 2.5, turns
    # Nothing of ours, of Tornado's or of the comm's (dask's) released the GIL.
    assert counts.total("ours") == 0, counts
    assert counts.total("tornado") == 0 and counts.total("dask") == 0, counts
    if loop_name == "asyncio":
        # asyncio's loop: its polls are visible, one per message at most
        # (some turns serve both ends of this one-process echo at once).
        assert counts.total("loop", "poll") <= MESSAGES, counts
        assert counts.total() == counts.total("loop", "poll"), counts
    else:
        # uvloop polls inside libuv, where a profile hook sees nothing; what
        # it sees is each return from libuv into Python, which takes the GIL
        # back: one per message (the readiness callback, which also runs the
        # waiter; it was two, the waiter's wake-up being a ready callback).
        assert counts.total() == 0, counts
        if not tornado_readinto.COMPILED:
            assert counts.entries <= MESSAGES + 2, counts  # + a stray timer or two
        # The compiled build's readiness callback has no Python frame: each
        # Python call it makes (the waiter's step; asyncio.current_task on
        # Python 3.11) counts as an entry, so the count is exact under the
        # pure build only, which tests/test_builds.py runs this file under.
