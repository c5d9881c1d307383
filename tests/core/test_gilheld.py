"""The socket calls that keep the GIL (`tornado_readinto.core._gilheld`) and the
streams' switch to them while the GIL is contended.

The calls themselves are checked on real socket pairs (bytes, errors, buffer
exports, and that they really keep the GIL).  The switch is checked on
explicit clocks (a stalled call is one that took long on the stream's
clock) and once with a real thread running Python, by what happened:
which calls carried the bytes, never how fast."""

import asyncio
import errno
import math
import socket
import struct
import sys
import threading

import numpy as np
import pytest
from tornado.iostream import StreamClosedError

from tornado_readinto import ReadIntoIOStream, SSLReadIntoIOStream
from tornado_readinto.core import _gilheld, _sockcalls, busypoll
from tornado_readinto.core.busypoll import spinner_for
from tornado_readinto.diagnostics.testing import RecordingSocket, buffer_address, stream_pair

from ..conftest import Clock, HeldCalls, gil_holding_thread, patch_stream_clock, run, thread_until_stopped

PAYLOAD = bytes(range(256)) * 4  # 1 KiB
HEADER = struct.pack("<QQ", 1, len(PAYLOAD))


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    yield a, b
    a.close()
    b.close()


def timed_calls_only(monkeypatch):
    """Turn off the compiled build's untimed native calls: every socket call
    of a stream is timed, as in the pure build (for the stall tests)."""
    monkeypatch.setattr(_sockcalls, "_NATIVE_RECV_INTO", None)
    monkeypatch.setattr(_sockcalls, "_NATIVE_WRITEV", None)


def idle_thread():
    """Another Python thread exists (waiting, holding nothing)."""
    return thread_until_stopped(lambda stop: stop.wait())


# -- the calls -------------------------------------------------------------------


def test_available_on_this_platform():
    """CI runs CPython with a GIL on Linux: the calls must exist there."""
    assert _gilheld.AVAILABLE


def test_recv_into_lands_in_the_view_and_raises_as_the_socket_method_does(pair):
    a, b = pair
    target = np.zeros(100, dtype=np.uint8)
    with pytest.raises(BlockingIOError):
        _gilheld.recv_into(b.fileno(), memoryview(target))
    a.send(b"0123456789")
    assert _gilheld.recv_into(b.fileno(), memoryview(target)[5:8]) == 3  # at most len(view)
    assert bytes(target[:10]) == b"\0" * 5 + b"012" + b"\0\0"
    rest = bytearray(20)
    assert _gilheld.recv_into(b.fileno(), memoryview(rest)) == 7
    assert rest[:7] == b"3456789"
    rest += b"x"  # the export ended with the call: the bytearray can resize
    a.close()
    assert _gilheld.recv_into(b.fileno(), memoryview(rest)) == 0  # EOF


def test_recv_into_fills_a_typed_view_by_its_size_in_bytes(pair):
    """As ``socket.recv_into`` does: a view of 3 float64 takes 24 bytes, a
    2x3 array 6, not ``len()`` of either."""
    a, b = pair
    a.send(bytes(range(40)))
    floats = np.zeros(3, dtype="f8")
    assert _gilheld.recv_into(b.fileno(), memoryview(floats)) == 24
    assert floats.tobytes() == bytes(range(24))
    grid = np.zeros((2, 3), dtype=np.uint8)
    assert _gilheld.recv_into(b.fileno(), memoryview(grid)) == 6
    assert grid.tobytes() == bytes(range(24, 30))
    assert _gilheld.recv_into(b.fileno(), bytearray(100)) == 10  # not only memoryviews


def test_recv_into_rejects_what_it_cannot_fill(pair):
    a, b = pair
    a.send(b"x")
    with pytest.raises(TypeError):
        _gilheld.recv_into(b.fileno(), memoryview(b"read-only"))
    with pytest.raises(TypeError):
        _gilheld.recv_into(b.fileno(), memoryview(bytearray(10))[::2])
    with pytest.raises(ValueError):
        _gilheld.recv_into(b.fileno(), memoryview(bytearray()))
    assert b.recv(10) == b"x"  # nothing was received


def test_recv_into_reports_a_reset_connection():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    with client, server:
        server.setblocking(False)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # RST
        with pytest.raises(ConnectionResetError):
            _gilheld.recv_into(server.fileno(), memoryview(bytearray(10)))


def test_writev_sends_every_kind_of_buffer_in_order_without_copying_them(pair):
    a, b = pair
    floats = np.arange(10, dtype="f8")
    parts = [
        b"bytes",
        bytearray(b"bytearray"),
        memoryview(b"--read-only slice--")[2:-2],  # read-only, offset
        b"",
        memoryview(bytearray(b"writable view"))[:8],
        floats,  # not bytes-formatted: sized by nbytes
    ]
    expected = b"".join(memoryview(p).tobytes() for p in parts)
    assert _gilheld.writev(a.fileno(), parts) == len(expected)
    assert b.recv(1000) == expected
    grown = parts[1]
    grown += b"!"  # every export ended with the call


def test_writev_rejects_a_non_contiguous_buffer_and_releases_what_it_exported(pair):
    a, b = pair
    first = bytearray(b"first")
    with pytest.raises(BufferError):
        _gilheld.writev(a.fileno(), [memoryview(b"abc")[::-1], first])
    with pytest.raises(BufferError):
        _gilheld.writev(a.fileno(), [first, np.arange(10)[::2]])
    first += b"!"  # not left exported by the failed call
    with pytest.raises(BlockingIOError):
        b.recv(10)  # nothing was sent


def test_an_error_leaves_no_buffer_exported_while_the_exception_lives(pair):
    """A stream may keep the exception (its ``error``), and with it the
    traceback and the frames of the call: they must not keep the caller's
    buffers exported."""
    a, b = pair
    b.close()
    base = bytearray(b"base")
    buffers = [bytearray(b"writable"), memoryview(b"read-only"), memoryview(base)[1:]]
    with pytest.raises(BrokenPipeError) as info:
        _gilheld.writev(a.fileno(), buffers)
    with pytest.raises(OSError) as info_recv:
        _gilheld.recv_into(-1, buffers[0])
    assert info.value.errno == errno.EPIPE and info_recv.value.errno == errno.EBADF
    buffers[0] += b"!"  # resizable: not exported
    buffers[1].release()  # BufferError if still exported
    buffers[2].release()
    base += b"!"


def test_writev_sends_part_when_the_buffer_fills_then_raises_eagain_then_epipe(pair):
    a, b = pair
    big = bytes(64 * 1024 * 1024)
    sent = _gilheld.writev(a.fileno(), [big])
    assert 0 < sent < len(big)
    with pytest.raises(BlockingIOError):
        _gilheld.writev(a.fileno(), [big])
    b.close()
    with pytest.raises((BrokenPipeError, ConnectionResetError)):
        _gilheld.writev(a.fileno(), [b"x"])


def test_the_calls_keep_the_gil_and_the_socket_methods_release_it():
    """The main thread waits in a blocking ``recv`` for the byte that a
    Python thread sends once it runs again; the switch interval is raised
    so that nothing but the call itself hands the thread the GIL.  Through
    the socket method the thread runs during the call, so the call returns
    its byte; through the held call it cannot run a single bytecode until
    the call returns, so the call ends empty (the kernel's SO_RCVTIMEO)
    and the byte arrives after it.  What happened, not how long it took."""

    def during(call, timeout_us):
        a, b = socket.socketpair()
        with a, b:
            b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", *divmod(timeout_us, 10**6)))
            go = threading.Event()
            sender = threading.Thread(target=lambda: go.wait() and a.send(b"x"), daemon=True)
            sender.start()
            interval = sys.getswitchinterval()
            sys.setswitchinterval(1000.0)  # no forced hand-over: only a call that releases the GIL lets it run
            try:
                go.set()
                buf = bytearray(10)
                try:
                    got = bytes(buf[: call(b, buf)])
                except BlockingIOError:
                    got = None  # nothing arrived during the call
            finally:
                sys.setswitchinterval(interval)
            sender.join()
            b.settimeout(10)
            late = b.recv(10) if got is None else b""  # the sender's byte, once it could run
        return got, late

    # (a long timeout: the call returns as soon as the byte arrives)
    assert during(lambda b, buf: b.recv_into(buf), 60 * 10**6) == (b"x", b"")
    assert during(lambda b, buf: _gilheld.recv_into(b.fileno(), memoryview(buf)), 300_000) == (None, b"x")


# -- the streams' switch -------------------------------------------------------


async def _echo_rounds(server, client, n):
    """``n`` 1 KiB ping-pongs: ``client`` writes, ``server`` echoes."""
    head, body = bytearray(16), bytearray(len(PAYLOAD))
    for i in range(n):
        payload = i.to_bytes(8, "little") + PAYLOAD[8:]
        await client.write(HEADER + payload)
        await server.read_into(head)
        await server.read_into(body)
        await server.writelines([head, body])
        assert await client.read_bytes(16 + len(PAYLOAD)) == HEADER + payload


def test_a_stalled_socket_call_switches_the_process_to_held_calls_until_a_probe_finds_none(
    loop_name, monkeypatch
):
    """On a clock where every call takes 3 ms (over STALL_S): the first
    socket call stalls, and from then on every recv and send of every plain
    stream goes through the held calls, straight into the caller's buffers.
    After HOLD_S a probe goes through the socket again; on a quick clock it
    finds no stall, and the socket methods stay."""
    clock = Clock(step=3e-3)
    patch_stream_clock(monkeypatch, clock)
    monkeypatch.setattr(_gilheld, "HOLD_S", 1e6)  # however many readings the rounds take
    timed_calls_only(monkeypatch)
    held = HeldCalls(monkeypatch)

    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        try:
            with idle_thread():
                await _echo_rounds(server, client, 1)
                assert _gilheld.held(clock.now)
                held.clear()
                head, body = bytearray(16), bytearray(len(PAYLOAD))
                for _ in range(5):
                    await client.write(HEADER + PAYLOAD)
                    await server.read_into(head)
                    await server.read_into(body)
                    await server.writelines([head, body])
                    assert await client.read_bytes(16 + len(PAYLOAD)) == HEADER + PAYLOAD
                # the server's reads and writes, and the (plain) client's too
                assert len(held.writes) == 10 and set(held.writes) == {16 + len(PAYLOAD)}
                landed = [r for r in held.recvs if r[2]]
                assert landed and sum(r[2] for r in landed) == 10 * (16 + len(PAYLOAD))

                clock.step = 0.0
                clock.now = _gilheld.held_until  # HOLD_S later: the next call probes
                held.clear()
                await _echo_rounds(server, client, 3)
                assert not _gilheld.held(clock.now)
                assert held.recvs == [] and held.writes == []
        finally:
            server.close()
            client.close()

    run(main(), loop=loop_name)


def test_a_slow_large_socket_call_is_no_stall(loop_name, monkeypatch):
    """On a clock where every call takes 50 ms, a receive into a view and a
    send of more than `HOLD_MAX_NBYTES` leave the process on the socket
    methods: such a call takes its time copying (and faulting in fresh
    pages), which says nothing about the GIL, so it is not timed.  A small
    receive on the same clock is a stall."""
    clock = Clock(step=50e-3)
    patch_stream_clock(monkeypatch, clock)
    timed_calls_only(monkeypatch)
    held = HeldCalls(monkeypatch)
    large = 4 * _sockcalls.HOLD_MAX_NBYTES

    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        try:
            with idle_thread():
                core = server._core.io
                client.socket.sendall(b"\x01" * large)
                received = 0
                while received < large:
                    got = core.calls.recv_into(memoryview(bytearray(large + 1)))
                    assert got, got
                    received += got
                    assert not _gilheld.held(clock.now)
                await server.write(b"\x02" * large)
                assert not _gilheld.held(clock.now)
                assert held.recvs == [] and held.writes == []
                core.calls.recv_into(memoryview(bytearray(1024)))  # a small call, timed (EAGAIN too)
                assert _gilheld.held(clock.now)
        finally:
            server.close()
            client.close()

    run(main(), loop=loop_name)


def test_a_large_read_into_or_write_never_keeps_the_gil(loop_name, monkeypatch):
    """While the GIL is held for small calls, a large ``read_into`` and a
    large write still release it: no held call moves more than
    `HOLD_MAX_NBYTES`, so a receive that copies megabytes into fresh memory
    (page faults included) never stops a dask worker's other threads.  The
    bytes land exact, and the small echo after it is held again."""
    monkeypatch.setattr(_gilheld, "held_until", math.inf)
    held = HeldCalls(monkeypatch)

    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        try:
            nbytes = 8 * 1024 * 1024
            payload = np.random.default_rng(7).integers(0, 256, nbytes, dtype=np.uint8)
            buf = np.empty(nbytes, dtype=np.uint8)
            reading = server.read_into(buf)
            await client.write(memoryview(payload))
            assert await reading == nbytes
            assert np.array_equal(buf, payload)
            lo = buffer_address(buf)
            # Released until what is left of the read fits in a held call: a
            # held receive lands in the last HOLD_MAX_NBYTES of the buffer
            # only (how the bytes arrive decides whether one happens).
            tail = lo + nbytes - _sockcalls.HOLD_MAX_NBYTES
            assert not [r for r in held.recvs if lo <= r[0] < tail], held.recvs
            assert all(requested <= _sockcalls.HOLD_MAX_NBYTES for _, requested, _ in held.recvs)
            assert held.writes == []
            await _echo_rounds(server, client, 3)
            assert held.writes and all(n <= _sockcalls.HOLD_MAX_NBYTES for n in held.writes)
        finally:
            server.close()
            client.close()

    run(main(), loop=loop_name)


def test_a_stall_without_other_threads_is_the_machines_not_the_gils(loop_name, monkeypatch):
    """Only a thread that wants the GIL makes held calls worth their cost: in
    a process with no other Python thread, a stalled call changes nothing."""
    clock = Clock(step=5e-3)
    patch_stream_clock(monkeypatch, clock)
    monkeypatch.setattr(_gilheld, "other_threads", lambda: False)  # what the stall check asks
    timed_calls_only(monkeypatch)
    held = HeldCalls(monkeypatch)

    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        try:
            await _echo_rounds(server, client, 3)
        finally:
            server.close()
            client.close()

    run(main(), loop=loop_name)
    assert not _gilheld.held(clock.now)
    assert held.recvs == [] and held.writes == []


@pytest.mark.skipif(_sockcalls._NATIVE_RECV_INTO is None, reason="the pure build times every socket call")
@pytest.mark.parametrize("threads", [1, 2], ids=["alone", "other-thread"])
def test_the_compiled_build_moves_small_messages_with_untimed_native_calls(loop_name, monkeypatch, threads):
    """Compiled, in a process with no other Python thread: a real socket's
    receives and sends of up to HOLD_MAX_NBYTES are native calls that keep
    the GIL, with no clock read.  With another thread, every call is timed,
    as in the pure build: here, uncontended, the socket's own method.  A
    larger receive (a big frame received in place) is the socket's method
    either way."""
    # (what SocketCalls asks: busypoll.other_threads, native in this build)
    monkeypatch.setattr(_sockcalls, "other_threads", lambda: threads > 1)
    readings = [0]

    def clock():
        readings[0] += 1
        return 100.0

    patch_stream_clock(monkeypatch, clock)
    held = HeldCalls(monkeypatch)
    rounds = 64

    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        try:
            assert server._own_socket_io and client._own_socket_io
            readings[0] = 0
            await _echo_rounds(server, client, rounds)
            # every write (the server's echo, the client's request) is sent
            # at once, as one call: native and untimed when alone
            writes = 2 * rounds
            if threads == 1:
                assert len(held.writes) == writes and set(held.writes) == {16 + len(PAYLOAD)}
                # the clock is read only for the proof that a short recv
                # drained the socket, not twice per call
                assert readings[0] < 4 * rounds + 2 * len(held.recvs)
            else:
                assert held.writes == [] and held.recvs == []
                assert readings[0] > 2 * 2 * writes  # two readings per timed call
            # a large read_into: its in-place receives are the socket's own
            nbytes = 4 * _sockcalls.HOLD_MAX_NBYTES
            held.clear()
            buf = bytearray(nbytes)
            reading = server.read_into(buf)
            await client.write(bytes(range(256)) * (nbytes // 256))
            assert await reading == nbytes and buf == bytes(range(256)) * (nbytes // 256)
            assert all(requested <= _sockcalls.HOLD_MAX_NBYTES for _, requested, _ in held.recvs)
        finally:
            server.close()
            client.close()

    run(main(), loop=loop_name)


def test_wrapped_sockets_and_tls_streams_keep_their_own_methods(loop_name, monkeypatch, tls_contexts):
    """The held calls stand in only for a real socket's own C methods: a
    wrapper's (here a RecordingSocket's) are called as they are, and TLS
    streams read and write through their SSL object."""
    monkeypatch.setattr(_gilheld, "held_until", math.inf)
    held = HeldCalls(monkeypatch)

    async def main():
        server, client = await stream_pair(ReadIntoIOStream, wrap_socket=RecordingSocket)
        try:
            assert not server._own_socket_io and client._own_socket_io
            await _echo_rounds(server, client, 3)
            sock = server.socket
            assert sum(r.received or 0 for r in sock.recvs) == 3 * (16 + len(PAYLOAD))
            assert sock.sends == [16 + len(PAYLOAD)] * 3
            assert len(held.writes) == 3  # the client's
        finally:
            server.close()
            client.close()
        server_ctx, client_ctx = tls_contexts
        server, client = await stream_pair(SSLReadIntoIOStream, server_ssl=server_ctx, client_ssl=client_ctx)
        try:
            assert not server._own_socket_io and not client._own_socket_io
            held.clear()
            await _echo_rounds(server, client, 3)
            assert held.recvs == [] and held.writes == []
        finally:
            server.close()
            client.close()

    run(main(), loop=loop_name)


def test_held_calls_report_a_reset_peer_and_a_broken_pipe_as_closed_streams(loop_name, monkeypatch):
    monkeypatch.setattr(_gilheld, "held_until", math.inf)
    HeldCalls(monkeypatch)

    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        reading = server.read_into(bytearray(10))
        client.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # RST
        with pytest.raises(StreamClosedError):
            await reading
        assert server.closed() and isinstance(server.error, ConnectionResetError)

        server, client = await stream_pair(ReadIntoIOStream)
        client.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()
        await asyncio.sleep(0)
        with pytest.raises(StreamClosedError):
            for _ in range(100):  # the first write may land before the RST is seen
                await server.write(b"x" * 100_000)
        assert server.closed()

    run(main(), loop=loop_name)


@pytest.mark.parametrize("interval_s", [None, 5e-4], ids=["default-interval", "interval-500us"])
def test_with_a_thread_running_python_the_streams_switch_to_held_calls(
    loop_name, monkeypatch, switch_interval, interval_s
):
    """Real contention: a thread runs Python beside the loop, so the loop
    thread's socket calls lose the GIL to it, the stream sees such a stall
    and switches to the held calls, and the echo goes on, byte for byte.
    Also at a 0.5 ms switch interval (the dask backend's opt-in), where a
    hand-off lasts about 0.5 ms, under the 2 ms default threshold.  (HOLD_S
    is stretched so that no probe ends the switch mid-test on a slow
    machine.)"""
    if interval_s is not None:
        switch_interval(interval_s)
    monkeypatch.setattr(_gilheld, "HOLD_S", 1e6)
    monkeypatch.setattr(busypoll, "room_to_spin", lambda: True)  # a policy to watch, even on one CPU

    async def main():
        server, client = await stream_pair(ReadIntoIOStream, busy_poll_s=busypoll.BUSY_POLL_BUDGET_S)
        try:
            with gil_holding_thread():
                for _ in range(200):  # bounded: the first stall switches
                    await _echo_rounds(server, client, 5)
                    if _gilheld.held(_sockcalls.perf_counter()):
                        break
                assert _gilheld.held(_sockcalls.perf_counter())
                parks = server._busy_poll.parks
                ticks = spinner_for(asyncio.get_running_loop()).ticks
                await _echo_rounds(server, client, 20)
                # held: parked reads neither spin nor run the busy-poll policy
                assert server._busy_poll.parks == parks
                assert spinner_for(asyncio.get_running_loop()).ticks == ticks
        finally:
            server.close()
            client.close()

    run(main(), loop=loop_name)


@pytest.fixture
def switch_interval():
    """Set this process's switch interval for one test (put back after)."""
    import sys

    before = sys.getswitchinterval()
    yield sys.setswitchinterval
    sys.setswitchinterval(before)


def test_the_stall_threshold_follows_the_switch_interval(switch_interval):
    """2 ms at the default 5 ms interval, half the interval below 4 ms, never
    under MIN_STALL_S; `stalled` reads the interval in force and allows the
    copy's time on top."""
    assert _gilheld.stall_threshold(5e-3) == _gilheld.STALL_S == 2e-3
    assert _gilheld.stall_threshold(1.0) == _gilheld.STALL_S
    assert _gilheld.stall_threshold(1e-3) == pytest.approx(0.5e-3)
    assert _gilheld.stall_threshold(5e-4) == pytest.approx(0.25e-3)
    assert _gilheld.stall_threshold(5e-5) == _gilheld.MIN_STALL_S
    switch_interval(5e-3)
    assert not _gilheld.stalled(1.5e-3, 0)
    switch_interval(5e-4)
    assert _gilheld.stalled(0.3e-3, 0)
    assert not _gilheld.stalled(0.3e-3, 1 << 20)  # a 1 MiB copy may take 1 ms
    assert not _gilheld.stalled(0.2e-3, 0)


@pytest.mark.parametrize("interval_s, switches", [(5e-3, False), (1e-3, True), (5e-4, True)])
def test_a_hand_off_as_long_as_a_short_switch_interval_counts_as_a_stall(
    loop_name, monkeypatch, switch_interval, interval_s, switches
):
    """On a clock where every socket call takes 0.6 ms: at the default 5 ms
    interval that is no wait for the GIL (a hand-off lasts about 5 ms), so the
    stream keeps the socket methods; at 1 ms or 0.5 ms a hand-off lasts about
    that long, so the call counts as one and the held calls take over (a
    fixed 2 ms threshold would never see them)."""
    switch_interval(interval_s)
    patch_stream_clock(monkeypatch, Clock(step=0.6e-3))
    monkeypatch.setattr(_gilheld, "HOLD_S", 1e6)

    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        try:
            with idle_thread():
                await _echo_rounds(server, client, 3)
                assert (_gilheld.held_until > 0) is switches
        finally:
            server.close()
            client.close()

    run(main(), loop=loop_name)
