"""Busy polling: the adaptive policy of one stream (pure, on explicit
clocks), and the loop spinner over real sockets on asyncio's default loop and
on uvloop.  These check what happens (spins, hits, ticks, CPU left idle),
never how fast."""

import asyncio
import socket
import threading
import time
from time import perf_counter

import pytest

from tornado_readinto import ReadIntoIOStream
from tornado_readinto.busypoll import MAX_BUDGET_FACTOR, MAX_PROBE_INTERVAL, BusyPoll, spinner_for
from tornado_readinto.testing import stream_pair

from .conftest import run

B = 1e-3  # the base budget of the policy tests, seconds


class FakeSpinner:
    """Records the deadlines a policy asks for."""

    def __init__(self):
        self.deadlines = []

    def spin_until(self, deadline):
        self.deadlines.append(deadline)


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


def test_policy_ignores_readiness_of_a_stream_that_did_not_park():
    poll = BusyPoll(B, FakeSpinner())
    poll.data_came(100.0)
    assert (poll.spins, poll.hits, poll.spin, poll.scale) == (0, 0, True, 1)


# -- the spinner and streams, on both loops ------------------------------------------


def test_spinner_keeps_the_loop_polling_until_the_deadline_then_idles(loop_name):
    async def main():
        loop = asyncio.get_running_loop()
        spinner = spinner_for(loop)
        assert spinner_for(loop) is spinner  # one per loop
        fired = []
        loop.call_later(0.005, fired.append, "timer")
        started = perf_counter()
        cpu_started = time.process_time()
        spinner.spin_until(started + 0.1)
        ticks = spinner.ticks
        await asyncio.sleep(0.05)  # timers and tasks run while the loop polls
        assert fired == ["timer"] and spinner.spinning and spinner.ticks > ticks + 10
        while spinner.spinning:
            await asyncio.sleep(0.005)
        assert perf_counter() - started >= 0.1
        # polling, not blocking: the process was on the CPU for much of the spin
        assert time.process_time() - cpu_started > 0.02
        ticks = spinner.ticks
        cpu_idle = time.process_time()
        await asyncio.sleep(0.1)
        assert spinner.ticks == ticks  # nothing runs once the deadline passed
        assert time.process_time() - cpu_idle < 0.05

    run(main(), loop=loop_name)


def test_a_spinning_stream_never_holds_up_other_work(loop_name):
    """A read that parks with a 5 s budget returns at once, and another
    connection is served while the loop polls for it."""

    async def main():
        a_server, a_client = await stream_pair(ReadIntoIOStream, busy_poll_s=5.0)
        b_server, b_client = await stream_pair(ReadIntoIOStream, busy_poll_s=5.0)
        try:
            started = perf_counter()
            pending = a_server.read_into(bytearray(4))  # nothing there: it parks
            assert perf_counter() - started < 0.5 and not pending.done()
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

    run(main(), loop=loop_name)


def test_busy_poll_catches_a_peer_answering_from_another_thread(loop_name):
    async def main():
        server, client = await stream_pair(ReadIntoIOStream, busy_poll_s=0.5)
        try:
            threading.Timer(0.005, client.socket.send, (b"pong",)).start()
            assert await server.read_into(bytearray(4)) == 4
            poll = server._busy_poll
            assert (poll.spins, poll.hits, poll.spin) == (1, 1, True)
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


def test_a_thousand_idle_connections_cost_no_cpu(loop_name):
    """Each has a read pending (default busy polling) that never completes:
    after the first spins the loop blocks, and the process stays idle."""
    nconns = 1000

    async def main():
        listener = socket.create_server(("127.0.0.1", 0), backlog=nconns)
        clients, streams, reads = [], [], []
        try:
            for _ in range(nconns):
                clients.append(socket.create_connection(listener.getsockname()))
                sock, _ = listener.accept()
                stream = ReadIntoIOStream(sock)
                streams.append(stream)
                reads.append(stream.read_into(bytearray(16)))
            spinner = spinner_for(asyncio.get_running_loop())
            await asyncio.sleep(0.05)  # the first spins (50 us each) are long over
            assert not spinner.spinning
            ticks, cpu = spinner.ticks, time.process_time()
            await asyncio.sleep(0.5)
            assert spinner.ticks == ticks
            assert time.process_time() - cpu < 0.05  # under 10% of a core, idle
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


def test_slow_peers_stop_spinning_after_their_first_late_message(loop_name):
    """16 connections that each get a message every 20 ms (a rate-limited
    load): each stream spins for its first read and never again."""

    async def main():
        pairs = [await stream_pair(ReadIntoIOStream) for _ in range(16)]
        try:
            for _ in range(5):
                reads = [server.read_into(bytearray(4)) for server, _ in pairs]
                await asyncio.sleep(0.02)
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


def test_a_saturated_loop_stops_spinning(loop_name):
    """64 connections ping-ponging as fast as they can on one loop: each
    stream's next message comes only after the loop has served the others,
    so the streams stop spinning (the loop is busy anyway) and the default
    setting costs what busy_poll_s=0 does."""

    async def main():
        pairs = [await stream_pair(ReadIntoIOStream) for _ in range(64)]

        async def echo(server):
            buf = bytearray(64)
            for _ in range(30):
                await server.read_into(buf)
                await server.writelines([buf])

        async def ping(client):
            buf = bytearray(64)
            for i in range(30):
                await client.writelines([bytes([i]) * 64])
                await client.read_into(buf)
                assert buf == bytes([i]) * 64

        try:
            await asyncio.gather(*(echo(s) for s, _ in pairs), *(ping(c) for _, c in pairs))
            polls = [server._busy_poll for server, _ in pairs]
            assert sum(poll.parks for poll in polls) >= 64 * 29
            # the first read of each stream spins, catches nothing, and no
            # read spins after it
            assert sum(poll.spins for poll in polls) <= 64 * 2
        finally:
            for server, client in pairs:
                server.close()
                client.close()

    run(main(), loop=loop_name)
