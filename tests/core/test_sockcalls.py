"""`SocketCalls` alone, over a real TCP connection on 127.0.0.1: the
receive and send calls of a plain socket, and the GIL-keeping heuristic
switched on and off (``keep_gil``), with an explicit clock."""

import asyncio
import errno
import math
import select
import socket

import pytest

from tornado_readinto.core import _gilheld, _sockcalls
from tornado_readinto.core._sockcalls import HOLD_MAX_NBYTES, PROBE_EVERY, SocketCalls

from ..conftest import Clock, HeldCalls


@pytest.fixture
def tcp_pair():
    listener = socket.create_server(("127.0.0.1", 0))
    a = socket.create_connection(listener.getsockname())
    b, _ = listener.accept()
    listener.close()
    a.setblocking(False)
    b.setblocking(False)
    yield a, b
    a.close()
    b.close()


def count_readings(monkeypatch, clock):
    """``_sockcalls``' clock is ``clock``; returns a one-item list that
    counts its readings."""
    readings = [0]

    def reading():
        readings[0] += 1
        return clock()

    monkeypatch.setattr(_sockcalls, "perf_counter", reading)
    return readings


def _recv_all(calls, nbytes, ask=0):
    """``nbytes`` received with ``calls``, each call asking for what is left
    (or for ``ask`` bytes, if given)."""
    out = bytearray()
    buf = bytearray(max(nbytes, ask))
    while len(out) < nbytes:
        got = calls.recv_into(memoryview(buf)[: ask or nbytes - len(out)])
        if got is None:
            assert select.select([calls.sock], [], [], 5.0)[0], f"{nbytes - len(out)} bytes never came"
            continue
        assert got, "EOF before every byte came"
        out += buf[:got]
    return bytes(out)


@pytest.mark.parametrize(
    "keep_gil, contended", [(True, False), (True, True), (False, True)], ids=["keep-gil", "held", "socket-methods"]
)
def test_calls_keep_the_read_from_fd_contract(tcp_pair, monkeypatch, keep_gil, contended):
    """Bytes sent with `sendmsg` arrive whole with `recv_into`; an empty
    socket gives None (EAGAIN), a closed peer 0 (EOF): through the native
    calls (compiled, alone), the held ones (the GIL seen contended), or the
    socket's own."""
    if contended:
        monkeypatch.setattr(_gilheld, "held_until", math.inf)
        monkeypatch.setattr(_sockcalls, "other_threads", lambda: True)  # (compiled: not the native calls)
    a, b = tcp_pair
    sender, receiver = SocketCalls(a, keep_gil), SocketCalls(b, keep_gil)
    assert sender.keep_gil is keep_gil and (sender.fd == a.fileno()) is keep_gil
    assert receiver.recv_into(memoryview(bytearray(16))) is None
    parts = [b"head" * 4, bytes(range(256)) * 8, b"tail"]
    assert sender.sendmsg(parts, sum(map(len, parts))) == sum(map(len, parts))
    assert _recv_all(receiver, sum(map(len, parts))) == b"".join(parts)
    a.shutdown(socket.SHUT_WR)
    got = None
    for _ in range(1000):  # the FIN is on its way
        got = receiver.recv_into(memoryview(bytearray(16)))
        if got is not None:
            break
    assert got == 0


@pytest.mark.parametrize("keep_gil", [True, False], ids=["keep-gil", "socket-methods"])
def test_a_contended_gil_is_kept_only_when_keep_gil_says_so(tcp_pair, monkeypatch, keep_gil):
    """While the process has seen the GIL contended, small calls are the
    held ones with ``keep_gil``, the socket's own without it; a large call
    is always the socket's own, untimed."""
    a, b = tcp_pair
    clock = Clock()
    held, readings = HeldCalls(monkeypatch), count_readings(monkeypatch, clock)
    monkeypatch.setattr(_sockcalls, "other_threads", lambda: True)  # every small call timed or held
    monkeypatch.setattr(_gilheld, "held_until", math.inf)
    sender, receiver = SocketCalls(a, keep_gil), SocketCalls(b, keep_gil)
    assert receiver.recv_into(memoryview(bytearray(64))) is None  # EAGAIN: held, or the socket's, timed
    assert [(asked, got) for _, asked, got in held.recvs] == ([(64, None)] if keep_gil else [])
    assert held.writes == []
    assert readings[0] == (1 if keep_gil else 2)  # a held call reads the clock once, a timed one twice
    held.clear()
    assert sender.sendmsg([b"x" * 100], 100) == 100
    assert _recv_all(receiver, 100) == b"x" * 100
    if keep_gil:
        assert held.writes == [100] and held.recvs
    else:
        assert held.writes == [] and held.recvs == []
    held.clear()
    readings[0] = 0
    large = 4 * HOLD_MAX_NBYTES  # the socket's own calls, untimed, whatever keep_gil says
    sent = sender.sendmsg([b"y" * large], large)
    assert sent > 0 and _recv_all(receiver, sent, ask=large) == b"y" * sent
    assert held.writes == [] and held.recvs == [] and readings[0] == 0


def test_a_slow_small_call_is_a_stall_that_turns_the_held_calls_on(tcp_pair, monkeypatch):
    """A small receive that took far longer than its copy (a clock that
    steps 50 ms per reading) notes a stall, process-wide: the next small
    call keeps the GIL.  Without ``keep_gil`` the call is still timed (so
    the process notices), but never held."""
    a, b = tcp_pair
    clock = Clock(step=50e-3)
    held, readings = HeldCalls(monkeypatch), count_readings(monkeypatch, clock)
    monkeypatch.setattr(_sockcalls, "other_threads", lambda: True)
    monkeypatch.setattr(_gilheld, "other_threads", lambda: True)  # (a stall needs another thread)
    plain = SocketCalls(b, keep_gil=False)
    assert plain.recv_into(memoryview(bytearray(64))) is None  # EAGAIN, timed: 50 ms
    assert _gilheld.held(clock.now) and readings[0] == 2 and held.recvs == [] and held.writes == []
    SocketCalls(a, keep_gil=True).sendmsg([b"z" * 10], 10)
    assert held.writes == [10] and held.recvs == []
    assert plain.recv_into(memoryview(bytearray(64))) in (None, 10)
    assert held.writes == [10] and held.recvs == []  # plain: never held


@pytest.mark.skipif(_sockcalls._NATIVE_RECV_INTO is None, reason="the pure build times every socket call")
def test_compiled_alone_small_calls_are_native_and_untimed_and_threads_are_probed_every_32(tcp_pair, monkeypatch):
    """Compiled, with no other Python thread: small calls are the native
    ones, no clock read; whether another thread exists is asked once per
    `PROBE_EVERY` calls.  Once one exists, the next probe makes the calls
    timed."""
    a, b = tcp_pair
    held, readings = HeldCalls(monkeypatch), count_readings(monkeypatch, Clock())
    probes = []
    others = [False]

    def other_threads():
        probes.append(others[0])
        return others[0]

    monkeypatch.setattr(_sockcalls, "other_threads", other_threads)
    sender = SocketCalls(a, keep_gil=True)
    for _ in range(2 * PROBE_EVERY):
        sender.sendmsg([b"p"], 1)
    assert len(held.writes) == 2 * PROBE_EVERY and readings[0] == 0 and probes == [False, False]
    others[0] = True
    held.clear()
    for _ in range(PROBE_EVERY + 1):
        sender.sendmsg([b"q"], 1)
    assert held.writes == [] and readings[0] == 2 * (PROBE_EVERY + 1) and probes[-1] is True
    assert _recv_all(SocketCalls(b, keep_gil=False), 3 * PROBE_EVERY + 1) == b"p" * 2 * PROBE_EVERY + b"q" * (
        PROBE_EVERY + 1
    )


def test_off_lets_the_socket_go(tcp_pair):
    """``off`` (``start_tls`` took the socket): no socket, no fd, no held calls."""
    a, _ = tcp_pair
    calls = SocketCalls(a, keep_gil=True)
    calls.off()
    assert calls.sock is None and calls.fd == -1 and not calls.keep_gil
    assert SocketCalls(None, keep_gil=True).keep_gil is False


@pytest.mark.parametrize("threads", [False, True], ids=["alone", "other-thread"])
def test_after_its_socket_closes_no_call_uses_the_fd_number_again(monkeypatch, threads):
    """A stream's socket closes, and the process's next socket gets the same
    fd number: the closed stream's calls fail with EBADF (as the closed
    socket's own methods do) and never touch the new socket, in either build
    and whether or not the native untimed calls were on (only the compiled
    build's native calls, ``alone``, ever used the stored number: the
    other cases are the socket's own methods, safe before the fix too)."""
    from tornado_readinto import ReadIntoIOStream

    monkeypatch.setattr(_sockcalls, "other_threads", lambda: threads)

    async def main():
        opened = []
        with socket.create_server(("127.0.0.1", 0)) as listener:
            try:
                a = socket.create_connection(listener.getsockname())
                opened.append(a)
                b, _ = listener.accept()
                opened.append(b)
                stream = ReadIntoIOStream(a)
                calls = stream._core.io.calls
                assert calls.keep_gil
                b.sendall(b"x")
                assert _recv_all(calls, 1) == b"x"  # the calls as they run while open
                fd = a.fileno()
                stream.close()
                # the process's next socket takes the lowest free number: the one just freed
                c = socket.create_connection(listener.getsockname())
                opened.append(c)
                d, _ = listener.accept()
                opened.append(d)
                if c.fileno() != fd:  # pragma: no cover - another thread took the number first
                    pytest.skip(f"fd {fd} went to another socket of the process, not this test's")
                c.setblocking(False)  # a regression must not hang in a blocking recv
                d.sendall(b"not yours")
                with pytest.raises(OSError) as raised:
                    calls.recv_into(memoryview(bytearray(16)))
                assert raised.value.errno == errno.EBADF
                with pytest.raises(OSError) as raised:
                    calls.sendmsg([b"nor this"], 8)
                assert raised.value.errno == errno.EBADF
                assert _recv_all(SocketCalls(c), 9) == b"not yours"  # untouched, and nothing sent
                d.setblocking(False)
                with pytest.raises(BlockingIOError):
                    d.recv(1)
                assert calls.fd == -1 and not calls.keep_gil
            finally:
                for sock in opened:
                    sock.close()

    asyncio.run(main())


def test_a_socket_whose_close_fails_still_leaves_no_fd_number_behind(tcp_pair):
    """``close_fd`` raises (the socket's ``close`` failed, as ``close(2)``
    may): the error reaches the caller, the calls no longer hold the fd
    number (the kernel frees it even when ``close`` fails), and the stream is
    closed all the same: its pending read fails and its close callback
    runs."""
    from tornado.iostream import StreamClosedError

    from tornado_readinto import ReadIntoIOStream

    async def main():
        a, _ = tcp_pair
        stream = ReadIntoIOStream(a)
        calls = stream._core.io.calls
        assert calls.fd == a.fileno()
        closed = []
        stream.set_close_callback(lambda: closed.append(True))
        pending = stream.read_bytes(10)

        def failing_close_fd():
            raise OSError(errno.EIO, "close failed")

        stream.close_fd = failing_close_fd
        with pytest.raises(OSError, match="close failed"):
            stream.close()
        with pytest.raises(StreamClosedError):
            await asyncio.wait_for(pending, 10)  # (without the fix it never fails)
        await asyncio.sleep(0)  # (the close callback runs on the loop)
        assert stream.closed() and closed == [True]
        assert calls.fd == -1

    asyncio.run(main())
