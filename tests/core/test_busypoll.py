"""Busy polling: the adaptive policy of one stream (pure, on explicit
clocks), and the loop spinner over real sockets on asyncio's default loop and
on uvloop.  These check what happens (spins, hits, ticks, when the spinner stops),
never how fast: the clock they read is explicit."""

import asyncio
import functools
import os
import socket
import threading

import pytest

from tornado_readinto import ReadIntoIOStream
from tornado_readinto.core import busypoll
from tornado_readinto.core.busypoll import (
    BUSY_POLL_BUDGET_S,
    MAX_BUDGET_FACTOR,
    MAX_PROBE_INTERVAL,
    REARM_FACTOR,
    BusyPoll,
    spinner_for,
)
from tornado_readinto.diagnostics.testing import stream_pair

from ..conftest import gil_holding_thread, inject_cpu_limits, run

B = 1e-3  # the base budget of the policy tests, seconds


class FakeSpinner:
    """Records the deadlines a policy asks for."""

    def __init__(self):
        self.deadlines = []

        self.misses = []

    def spin_until(self, deadline):
        self.deadlines.append(deadline)
        return True

    def missed(self, now):
        self.misses.append(now)


# -- the policy, on explicit clocks ------------------------------------------------
# Times are perf_counter() seconds; 0 means "not parked", so they start at 100.


def test_policy_spins_while_the_data_comes_within_the_budget():
    spinner = FakeSpinner()
    poll = BusyPoll(B, spinner)
    for i in range(3):
        now = 100.0 + i
        poll.parked(now)
        assert spinner.deadlines[-1] == now + B
        poll.data_came(now + B / 2)  # within the spin
    assert (poll.spins, poll.hits, poll.spin, poll.scale) == (3, 3, True, 1)


def test_policy_stops_spinning_for_late_data_and_never_probes_where_spinning_never_worked():
    """A rate-limited, slow or idle peer: one spin, for the first read."""
    spinner = FakeSpinner()
    poll = BusyPoll(B, spinner)
    for i in range(1000):
        poll.parked(100.0 + i)
        poll.data_came(100.0 + i + 0.1)  # 100 budgets later (10 messages/s)
    assert poll.spins == len(spinner.deadlines) == 1 and poll.parks == 1000 and not poll.spin
    poll.parked(2000.0)
    poll.data_came(2000.0 + 3 * B)  # not spun for, but soon: spin next time
    assert poll.spin and poll.spins == 1
    poll.parked(2001.0)
    assert poll.spins == 2 and spinner.deadlines[-1] == 2001.0 + B


def test_policy_probes_ever_less_often_where_spinning_has_worked():
    """After late data, a stream whose spins have caught data before spins
    only for probes after 1, 3, 7, ... up to 255 parks."""
    spinner = FakeSpinner()
    poll = BusyPoll(B, spinner)
    poll.parked(50.0)
    poll.data_came(50.0 + B / 2)  # a hit
    spun = []
    for i in range(1100):
        now = 100.0 + i
        before = poll.spins
        poll.parked(now)
        spun.append(poll.spins > before)
        poll.data_came(now + 0.1)  # 100 budgets later (10 messages/s)
    spins = [i for i, s in enumerate(spun) if s]
    gaps = [b - a - 1 for a, b in zip(spins, spins[1:])]
    assert gaps[:8] == [1, 3, 7, 15, 31, 63, 127, 255]
    assert set(gaps[8:]) == {MAX_PROBE_INTERVAL}
    assert not poll.spin and poll.hits == 1 and len(spinner.deadlines) == poll.spins == 12


def test_policy_resumes_spinning_when_data_is_quick_again():
    """Two processes that have both stopped spinning: a probe that catches
    the answer, or any quick data, brings the stream back to spinning."""
    spinner = FakeSpinner()
    poll = BusyPoll(B, spinner)
    poll.parked(50.0)
    poll.data_came(50.0 + B / 2)  # a hit: spinning worked here
    for i in range(20):
        poll.parked(100.0 + i)
        poll.data_came(100.0 + i + 0.1)
    assert not poll.spin
    poll.parked(200.0)
    poll.data_came(200.0 + 3 * B)  # soon, probe or not
    assert poll.spin and poll.scale == 1
    spins = poll.spins
    poll.parked(201.0)
    assert poll.spins == spins + 1 and spinner.deadlines[-1] == 201.0 + B


def test_policy_doubles_the_budget_up_to_the_cap_for_data_just_after_the_spin():
    spinner = FakeSpinner()
    poll = BusyPoll(B, spinner)
    now = 100.0
    for scale in (2, 4, MAX_BUDGET_FACTOR):
        now += 1.0
        poll.parked(now)
        poll.data_came(now + 5 * B)  # the spin ended first, but the data came soon
        assert poll.scale == scale and poll.spin
    now += 1.0
    poll.parked(now)
    assert spinner.deadlines[-1] == now + MAX_BUDGET_FACTOR * B
    poll.data_came(now + 3 * B)  # caught by the longer spin
    assert poll.hits == 1 and poll.scale == MAX_BUDGET_FACTOR
    now += 1.0
    poll.parked(now)
    poll.data_came(now + 50 * B)  # late: no spin next time, base budget again
    assert not poll.spin and poll.scale == 1


def test_data_late_for_rearming_is_late_for_every_budget():
    """``data_came`` tests for late data first (the common case on a busy
    loop), which is the policy above only while the re-arm window is longer
    than the longest budget: data just past it, after a spin of the
    longest budget, stops the spinning."""
    assert REARM_FACTOR > MAX_BUDGET_FACTOR
    poll = BusyPoll(B, FakeSpinner())
    poll.scale = MAX_BUDGET_FACTOR
    poll.parked(100.0)
    poll.data_came(100.0 + REARM_FACTOR * B * 1.001)  # just past the edge
    assert not poll.spin and poll.scale == 1


def test_policy_ignores_readiness_of_a_stream_that_did_not_park():
    poll = BusyPoll(B, FakeSpinner())
    poll.data_came(100.0)
    assert (poll.spins, poll.hits, poll.spin, poll.scale) == (0, 0, True, 1)


# -- the spinner and streams, on both loops ------------------------------------------
# The spinner and the streams read their clock from the module global
# ``perf_counter``; these tests give them an explicit one, so that what is
# checked (spins, hits, ticks, when the spinner stops) never depends on how
# fast the machine is.


@pytest.fixture
def clock(stream_clock, monkeypatch):
    """The streams' explicit clock, for the spinner too; and, since any
    other thread stops spinning and earlier tests may have left idle threads
    behind (executors), the process counts as having none."""
    monkeypatch.setattr(busypoll, "perf_counter", stream_clock)
    monkeypatch.setattr(busypoll, "other_threads", lambda: False)
    monkeypatch.setattr(busypoll, "room_to_spin", lambda: True)  # even if run on one CPU
    return stream_clock


def test_a_parked_read_never_spins_while_another_thread_runs_python(loop_name, monkeypatch):
    """Every poll releases the GIL, and each release can cost the loop a
    hand-off to the other thread: with one running, parked reads do not
    spin, on either loop (no spinner tick, no spin counted), whatever the
    policy would have chosen; the reads complete as usual.  (Without other
    threads they spin: the tests above, with the check pinned.)  The
    GIL-keeping socket calls, which skip the policy altogether once they are
    on (tests/core/test_gilheld.py), stay off here: this checks the spinner's own
    refusal."""
    from tornado_readinto.core import _gilheld

    monkeypatch.setattr(_gilheld, "note_stall", lambda now: None)
    monkeypatch.setattr(busypoll, "room_to_spin", lambda: True)  # a policy to watch, even on one CPU

    async def main():
        server, client = await stream_pair(ReadIntoIOStream, busy_poll_s=1.0)
        spinner = spinner_for(asyncio.get_running_loop())
        try:
            with gil_holding_thread():
                assert busypoll.other_threads()
                ticks = spinner.ticks
                for i in range(20):
                    reading = server.read_into(bytearray(4))  # parks: nothing there
                    assert not spinner.spinning
                    await client.write(b"%4d" % i)
                    assert await reading == 4
                assert spinner.ticks == ticks
                assert (server._busy_poll.parks, server._busy_poll.spins) == (20, 0)
        finally:
            server.close()
            client.close()

    run(main(), loop=loop_name)


def test_spinner_keeps_the_loop_polling_until_the_deadline_then_idles(loop_name, clock):
    """Before the deadline the spinner has a callback ready at every loop
    turn (so the loop polls instead of blocking) while timers and tasks run
    as usual; at the first turn past the deadline it stops, and nothing of
    it runs after that."""

    async def main():
        loop = asyncio.get_running_loop()
        spinner = spinner_for(loop)
        assert spinner_for(loop) is spinner  # one per loop
        spinner.spin_until(clock.now + 0.1)
        ticks = spinner.ticks
        for _ in range(20):
            await asyncio.sleep(0)
        assert spinner.spinning and spinner.ticks >= ticks + 19  # a tick every turn
        fired = asyncio.Event()
        loop.call_later(0.005, fired.set)
        await fired.wait()  # timers run while the loop polls
        assert spinner.spinning
        clock.now += 0.1  # the deadline is reached
        for _ in range(3):
            await asyncio.sleep(0)
        assert not spinner.spinning
        ticks = spinner.ticks
        await asyncio.sleep(0.05)  # the loop may block now
        for _ in range(10):
            await asyncio.sleep(0)
        assert spinner.ticks == ticks

    run(main(), loop=loop_name)


def test_a_spinning_stream_never_holds_up_other_work(loop_name, clock):
    """A read that parks returns at once (with the clock standing still, a
    read spinning inside its own call would never return), and another
    connection is served while the loop polls for it."""

    async def main():
        a_server, a_client = await stream_pair(ReadIntoIOStream, busy_poll_s=5.0)
        b_server, b_client = await stream_pair(ReadIntoIOStream, busy_poll_s=5.0)
        try:
            pending = a_server.read_into(bytearray(4))  # nothing there: it parks
            assert not pending.done()
            assert spinner_for(asyncio.get_running_loop()).spinning
            for i in range(20):
                await b_client.write(b"ping%d" % (i % 10))
                assert await b_server.read_bytes(5) == b"ping%d" % (i % 10)
            assert not pending.done()
            await a_client.write(b"pong")
            assert await pending == 4
            assert a_server._busy_poll.hits == 1  # caught while the loop polled
        finally:
            for stream in (a_server, a_client, b_server, b_client):
                stream.close()
            clock.now += 10  # let the spinner stop

    run(main(), loop=loop_name)


def test_busy_poll_catches_a_peer_answering_from_another_thread(loop_name, clock):
    """The peer's answer comes from another thread while the read's budget
    lasts (the clock stands still): the loop, polling, delivers it, and the
    read counts as a hit."""

    async def main():
        server, client = await stream_pair(ReadIntoIOStream, busy_poll_s=0.5)
        sender = threading.Thread(target=client.socket.send, args=(b"pong",))
        try:
            reading = server.read_into(bytearray(4))  # parks and spins
            assert spinner_for(asyncio.get_running_loop()).spinning
            sender.start()
            assert await reading == 4
            poll = server._busy_poll
            assert (poll.parks, poll.spins, poll.hits, poll.spin) == (1, 1, 1, True)
        finally:
            sender.join()
            server.close()
            client.close()
            clock.now += 10

    run(main(), loop=loop_name)


def test_busy_polling_is_off_by_default(loop_name):
    """A stream made without ``busy_poll_s`` has no busy-poll policy: its
    parked reads never ask the loop to spin, on any machine."""

    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        try:
            spinner = spinner_for(asyncio.get_running_loop())
            ticks = spinner.ticks
            for i in range(5):
                read = server.read_into(bytearray(1))
                await asyncio.sleep(0)
                client.write(bytes([i]))
                assert await read == 1
            assert server.busy_poll_s == 0 and server._busy_poll is None
            assert spinner.ticks == ticks and not spinner.spinning
        finally:
            server.close()
            client.close()

    run(main(), loop=loop_name)


def test_busy_poll_zero_never_spins_and_negative_is_rejected(loop_name):
    async def main():
        server, client = await stream_pair(ReadIntoIOStream, busy_poll_s=0)
        spinner = spinner_for(asyncio.get_running_loop())
        ticks = spinner.ticks
        try:
            assert server._busy_poll is None
            reading = server.read_into(bytearray(4))
            assert not spinner.spinning
            await client.write(b"data")
            assert await reading == 4
            assert spinner.ticks == ticks
        finally:
            server.close()
            client.close()

    run(main(), loop=loop_name)
    with socket.socket() as sock, pytest.raises(ValueError, match="busy_poll_s"):
        ReadIntoIOStream(sock, busy_poll_s=-1)


def test_a_thousand_idle_connections_leave_the_loop_idle(loop_name, clock):
    """Each has a read pending (busy polling on) that never completes:
    each spins once, for its first read; once the clock passes the budget
    the spinner stops, and the loop runs nothing more of ours."""
    nconns = 1000

    async def main():
        listener = socket.create_server(("127.0.0.1", 0), backlog=nconns)
        clients, streams, reads = [], [], []
        try:
            for _ in range(nconns):
                clients.append(socket.create_connection(listener.getsockname()))
                sock, _ = listener.accept()
                stream = ReadIntoIOStream(sock, busy_poll_s=BUSY_POLL_BUDGET_S)
                streams.append(stream)
                reads.append(stream.read_into(bytearray(16)))
            assert [stream._busy_poll.spins for stream in streams] == [1] * nconns
            spinner = spinner_for(asyncio.get_running_loop())
            clock.now += 1  # long past every budget
            for _ in range(3):
                await asyncio.sleep(0)
            assert not spinner.spinning
            ticks = spinner.ticks
            await asyncio.sleep(0.1)
            assert spinner.ticks == ticks
            assert [stream._busy_poll.spins for stream in streams] == [1] * nconns
            assert not any(read.done() for read in reads)
        finally:
            for read in reads:
                read.cancel()  # closes its stream
            for stream in streams:
                stream.close()
            for sock in clients:
                sock.close()
            listener.close()

    run(main(), timeout=60, loop=loop_name)


def test_slow_peers_stop_spinning_after_their_first_late_message(loop_name, clock):
    """16 connections that each get a message every 20 ms (a rate-limited
    load): each stream spins for its first read and never again."""

    async def main():
        pairs = [await stream_pair(ReadIntoIOStream, busy_poll_s=BUSY_POLL_BUDGET_S) for _ in range(16)]
        try:
            for _ in range(5):
                reads = [server.read_into(bytearray(4)) for server, _ in pairs]
                clock.now += 0.02
                for _, client in pairs:
                    client.write(b"ping")
                assert await asyncio.gather(*reads) == [4] * len(pairs)
            assert [server._busy_poll.spins for server, _ in pairs] == [1] * len(pairs)
            assert not any(server._busy_poll.spin for server, _ in pairs)
        finally:
            for server, client in pairs:
                server.close()
                client.close()

    run(main(), loop=loop_name)


@pytest.mark.parametrize("npairs", [1, 64])
def test_a_saturated_loop_stops_spinning(loop_name, clock, npairs):
    """Connections ping-ponging as fast as they can on one loop, with time
    counted as work: every clock reading (a park, a readiness, a spinner
    tick) takes a tenth of the budget.  Alone, a stream's answer comes
    within its budget and it keeps spinning.  Among 64, each stream's next
    message comes only after the loop has served the others, so the streams
    stop spinning (the loop is busy anyway) and busy polling costs what
    busy_poll_s=0 does."""
    clock.step = BUSY_POLL_BUDGET_S / 10
    nmessages = 30

    async def main():
        pairs = [await stream_pair(ReadIntoIOStream, busy_poll_s=BUSY_POLL_BUDGET_S) for _ in range(npairs)]

        async def echo(server):
            buf = bytearray(64)
            for _ in range(nmessages):
                await server.read_into(buf)
                await server.writelines([buf])

        async def ping(client):
            buf = bytearray(64)
            for i in range(nmessages):
                await client.writelines([bytes([i]) * 64])
                await client.read_into(buf)
                assert buf == bytes([i]) * 64

        try:
            await asyncio.gather(*(echo(s) for s, _ in pairs), *(ping(c) for _, c in pairs))
            return [server._busy_poll for server, _ in pairs]
        finally:
            for server, client in pairs:
                server.close()
                client.close()
            clock.step, clock.now = 0.0, clock.now + 10

    polls = run(main(), loop=loop_name)
    parks, spins = sum(poll.parks for poll in polls), sum(poll.spins for poll in polls)
    assert parks >= npairs * (nmessages - 1)
    if npairs == 1:
        # (a delivery that happens to come late may stop it for a read)
        assert spins >= parks - 2 and polls[0].hits >= parks - 3
    else:
        # the first read of each stream spins, catches nothing, and no
        # read spins after it
        assert spins <= npairs * 2


# -- one CPU, a CPU quota, a contended CPU ----------------------------------------


def test_policy_reports_every_spin_that_missed_its_data():
    """Data after the spin (a little later, or late): the spinner hears of it,
    since that spin may have kept the CPU the data needed; a hit, or a park
    that did not spin, is not reported."""
    spinner = FakeSpinner()
    poll = BusyPoll(B, spinner)
    poll.parked(100.0)
    poll.data_came(100.0 + B / 2)  # a hit
    poll.parked(101.0)
    poll.data_came(101.0 + 2 * B)  # a little later: a miss
    poll.parked(102.0)
    poll.data_came(102.0 + 100 * B)  # late: a miss too
    poll.parked(103.0)  # not spinning now (late data)
    poll.data_came(103.0 + 100 * B)
    assert spinner.misses == [101.0 + 2 * B, 102.0 + 100 * B]


@pytest.fixture
def limits(monkeypatch):
    """Inject the CPU limits the process reads (affinity, cgroup v2 and v1
    quotas, cpu_count), read afresh for each test; the cache is cleared
    again afterwards."""
    from tornado_readinto.core import _cpus

    yield functools.partial(inject_cpu_limits, monkeypatch)
    _cpus.usable_cpus.cache_clear()


def _parked_reads(loop_name, nreads=20):
    """``nreads`` reads that park on a fresh stream pair (busy polling asked
    for, 1 s budget, the clock standing still): how many spinner ticks they
    caused, and the server's busy-poll policy (None: not made)."""
    result = {}

    async def main():
        server, client = await stream_pair(ReadIntoIOStream, busy_poll_s=1.0)
        spinner = spinner_for(asyncio.get_running_loop())
        ticks = spinner.ticks
        try:
            for i in range(nreads):
                reading = server.read_into(bytearray(4))  # parks: nothing there
                await client.write(b"%4d" % i)
                assert await reading == 4
            result["ticks"] = spinner.ticks - ticks
            result["poll"] = server._busy_poll
        finally:
            server.close()
            client.close()

    run(main(), loop=loop_name)
    return result["ticks"], result["poll"]


@pytest.mark.parametrize(
    "one_cpu",
    [
        {"affinity": 1},  # taskset -c 1
        {"v2": 1.0},  # cpu.max "100000 100000"
        {"v2": 1.5},  # a quota under two CPUs
        {"v1": 1.0},  # cfs_quota_us = cfs_period_us
        {"count": 1},  # a one-CPU machine
    ],
    ids=["affinity", "cgroup-v2", "cgroup-v2-1.5", "cgroup-v1", "cpu_count"],
)
def test_on_one_cpu_a_parked_read_never_asks_the_loop_to_spin(loop_name, stream_clock, limits, monkeypatch, one_cpu):
    """With less than two usable CPUs, the stream makes no busy-poll policy:
    its parked reads never schedule a spinner tick, and complete as usual."""
    monkeypatch.setattr(busypoll, "perf_counter", stream_clock)
    monkeypatch.setattr(busypoll, "other_threads", lambda: False)
    limits(**one_cpu)
    assert not busypoll.room_to_spin()
    ticks, poll = _parked_reads(loop_name)
    assert ticks == 0 and poll is None


def test_with_two_cpus_and_no_quota_a_parked_read_spins_as_before(loop_name, stream_clock, limits, monkeypatch):
    monkeypatch.setattr(busypoll, "perf_counter", stream_clock)
    monkeypatch.setattr(busypoll, "other_threads", lambda: False)
    limits(affinity=2, v2=None, v1=None, count=2)
    assert busypoll.room_to_spin()
    ticks, poll = _parked_reads(loop_name)
    assert ticks > 0 and poll.parks == 20 and poll.spins == 20
    stream_clock.now += 10  # let the spinner stop


class NoLoop:
    """Stands in for an event loop that never runs its callbacks."""

    def call_soon(self, callback, *args):
        pass


class Waits:
    """An injected ``thread_run_delay_s``: the seconds a thread waited for a
    CPU, as the test sets them; counts the reads."""

    def __init__(self):
        self.seconds = 0.0
        self.reads = 0

    def __call__(self):
        self.reads += 1
        return self.seconds


def test_a_spinner_that_waited_for_its_cpu_stops_spinning_for_a_while(monkeypatch):
    """A spin that missed while the loop thread waited, runnable, for a CPU a
    quarter of the time or more (one CPU shared with the peer, other load):
    spins are refused for CONTENDED_HOLD_S, then allowed again."""
    waits = Waits()
    monkeypatch.setattr(busypoll, "thread_run_delay_s", waits)
    monkeypatch.setattr(busypoll, "other_threads", lambda: False)
    spinner = busypoll.LoopSpinner(NoLoop())  # no loop runs: only the verdict is tested
    t = 100.0
    spinner.missed(t)  # the first look only sets the baseline
    assert spinner.spin_until(t + B) and spinner.contended == 0
    waits.seconds += 0.5 * 0.02  # waited half of the next 20 ms
    spinner.missed(t + 0.02)
    assert spinner.contended == 1 and waits.reads == 2
    assert not spinner.spin_until(t + 0.02 + B)
    assert not spinner.spin_until(t + 0.02 + busypoll.CONTENDED_HOLD_S - B)
    assert spinner.spin_until(t + 0.02 + busypoll.CONTENDED_HOLD_S)


def test_a_spinner_with_a_cpu_to_itself_keeps_spinning(monkeypatch):
    """Misses with next to no wait for a CPU (the peer simply answers later
    than the budget, on its own CPU) never stop the spinner; looks are
    rate-limited to one per CONTENTION_SAMPLE_S however often spins miss."""
    waits = Waits()
    monkeypatch.setattr(busypoll, "thread_run_delay_s", waits)
    monkeypatch.setattr(busypoll, "other_threads", lambda: False)
    spinner = busypoll.LoopSpinner(NoLoop())
    t = 100.0
    for i in range(1000):  # a miss every 100 us for 100 ms
        waits.seconds += 1e-6  # 1% of the time waiting
        spinner.missed(t + i * 1e-4)
    assert spinner.contended == 0 and spinner.spin_until(t + 1.0)
    assert waits.reads == pytest.approx(0.1 / busypoll.CONTENTION_SAMPLE_S, abs=1)


def test_a_spinner_without_schedstat_decides_from_the_limits_alone(monkeypatch):
    monkeypatch.setattr(busypoll, "thread_run_delay_s", lambda: None)
    monkeypatch.setattr(busypoll, "other_threads", lambda: False)
    spinner = busypoll.LoopSpinner(NoLoop())
    for i in range(100):
        spinner.missed(100.0 + i)
    assert spinner.contended == 0 and spinner.spin_until(200.0)


def test_thread_run_delay_is_read_where_linux_has_it():
    delay = busypoll.thread_run_delay_s()
    if os.path.exists(busypoll.SCHEDSTAT_PATH):
        assert isinstance(delay, float) and delay >= 0
    else:
        assert delay is None
