"""Blocking sockets, one thread per connection: ``recv_into`` into reused
buffers and one gather ``sendmsg`` per message.  No event loop and no
Futures: the practical limit of Python on this machine.

Pipelined clients use a second thread per connection for writing.
"""

from __future__ import annotations

import collections
import functools
import os
import queue
import socket
import threading
from collections.abc import Callable, Sequence
from time import perf_counter
from typing import Any

from ._async import HOST
from ._common import (
    U64,
    Buffer,
    CasePlan,
    ConnClosed,
    ConnStats,
    MessageRing,
    Recorder,
    ReusedBuffers,
    check_nframes,
    pack_header,
    unpack_lengths,
)

#: Buffers per sendmsg (POSIX IOV_MAX; 1024 on Linux).
try:
    IOV_MAX = os.sysconf("SC_IOV_MAX")
except (AttributeError, OSError, ValueError):  # pragma: no cover
    IOV_MAX = 16  # the POSIX minimum


def _recv_exact(sock: socket.socket, buf: bytearray) -> bool:
    """Fill ``buf``; False on EOF before its first byte."""
    view = memoryview(buf)
    while view:
        n = sock.recv_into(view)
        if not n:
            if len(view) == len(buf):
                return False
            raise ConnectionError(f"peer closed after {len(buf) - len(view)} of {len(buf)} bytes")
        view = view[n:]
    return True


def _sendmsg_all(sock: socket.socket, buffers: Sequence[Buffer]) -> None:
    views = [memoryview(b) for b in buffers]
    i = 0
    while i < len(views):
        sent = sock.sendmsg(views[i : i + IOV_MAX])
        while i < len(views) and sent >= views[i].nbytes:
            sent -= views[i].nbytes
            i += 1
        if sent:
            views[i] = views[i][sent:]


class Threads:
    """One connection, client or server side."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._count = bytearray(U64.size)
        self._lengths = bytearray()
        self._reused = ReusedBuffers()

    def recv(self) -> list[Any]:
        if not _recv_exact(self.sock, self._count):
            raise ConnClosed
        nframes = check_nframes(U64.unpack(self._count)[0])
        if len(self._lengths) != U64.size * nframes:
            self._lengths = bytearray(U64.size * nframes)
        _recv_exact(self.sock, self._lengths)
        frames = self._reused.get(unpack_lengths(nframes, self._lengths))
        for frame in frames:
            _recv_exact(self.sock, frame)
        return frames

    def send(self, frames: Sequence[Buffer]) -> None:
        _sendmsg_all(self.sock, [pack_header(frames), *frames])

    def close(self) -> None:
        self.sock.close()

    # -- process entry points (see __main__.py) --------------------------------

    @classmethod
    def run_server(cls, listener: socket.socket, loop_name: str, nclients: int, timeout_s: float) -> int:
        listener.settimeout(timeout_s)
        socks = []
        for _ in range(nclients):
            sock, _ = listener.accept()
            socks.append(sock)
        listener.close()
        return sum(_run_threads([functools.partial(_echo_loop, cls(_prepare(s, timeout_s))) for s in socks]))

    @classmethod
    def run_client(
        cls, port: int, plan: CasePlan, loop_name: str, timeout_s: float, host: str = HOST
    ) -> list[ConnStats]:
        conns = [
            cls(_prepare(socket.create_connection((host, port), timeout_s), timeout_s)) for _ in range(plan.clients)
        ]
        try:
            return _run_threads([functools.partial(_drive, c, plan) for c in conns])
        finally:
            for conn in conns:
                conn.close()


class ThreadsUninit(Threads):
    """`Threads` with its reused frame buffers from ``uninitialized_allocator``
    (``numpy.empty``: transparent huge pages from 4 MiB), as ``readinto-uninit``."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(sock)
        from tornado_readinto.wire.allocators import uninitialized_allocator

        self._reused = ReusedBuffers(uninitialized_allocator)


def _prepare(sock: socket.socket, timeout_s: float) -> socket.socket:
    sock.settimeout(timeout_s)  # bounds every blocking call
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _run_threads(jobs: Sequence[Callable[[], Any]]) -> list[Any]:
    """Run each job in its own thread (the only job in this one); re-raise the first error."""
    if len(jobs) == 1:
        return [jobs[0]()]
    results: list[Any] = [None] * len(jobs)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = jobs[i]()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


def _echo_loop(conn: Threads) -> int:
    nmessages = 0
    try:
        while True:
            try:
                frames = conn.recv()
            except ConnClosed:
                return nmessages
            conn.send(frames)
            nmessages += 1
    finally:
        conn.close()


def _drive(conn: Threads, plan: CasePlan) -> ConnStats:
    """The threaded twin of ``_async.drive``."""
    ring = MessageRing(plan.msize, plan.nframes, plan.window)
    _roundtrip_compared(conn, ring, 0)
    recorder = Recorder(plan, perf_counter())
    if plan.mode == "pingpong":
        seq = _pingpong(conn, ring, recorder, 1)
    else:
        seq = _pipelined(conn, ring, recorder, 1, plan.window)
    _roundtrip_compared(conn, ring, seq)
    return ConnStats(recorder.repeats, seq + 1, ring.verified_messages, ring.full_compares)


def _roundtrip_compared(conn: Threads, ring: MessageRing, seq: int) -> None:
    conn.send(ring.stamp(seq))
    ring.compare(conn.recv(), seq)


def _pingpong(conn: Threads, ring: MessageRing, recorder: Recorder, seq: int) -> int:
    more = True
    while more:
        t_sent = perf_counter()
        conn.send(ring.stamp(seq))
        echo = conn.recv()
        now = perf_counter()
        ring.check(echo, seq)
        seq += 1
        more = recorder.on_echo(now, now - t_sent)
    return seq


def _pipelined(conn: Threads, ring: MessageRing, recorder: Recorder, seq: int, window: int) -> int:
    """A writer thread keeps ``window`` messages in flight; this thread reads
    and checks the echoes.  Returns the next sequence number."""
    slots = threading.Semaphore(window)
    sent_at: queue.SimpleQueue[float] = queue.SimpleQueue()
    stopping = threading.Event()
    written = collections.deque([seq])  # the writer's next seq, once it is done
    errors: list[BaseException] = []

    def writer(seq: int) -> None:
        try:
            while True:
                slots.acquire()
                if stopping.is_set():
                    written.append(seq)
                    return
                frames = ring.stamp(seq)
                sent_at.put(perf_counter())
                conn.send(frames)
                seq += 1
        except BaseException as exc:
            errors.append(exc)
            conn.sock.shutdown(socket.SHUT_RDWR)  # wakes the reader

    thread = threading.Thread(target=writer, args=(seq,), daemon=True)
    thread.start()
    try:
        while not stopping.is_set():
            t_sent = sent_at.get(timeout=conn.sock.gettimeout())
            echo = conn.recv()
            now = perf_counter()
            ring.check(echo, seq)
            seq += 1
            slots.release()
            if not recorder.on_echo(now, now - t_sent):
                stopping.set()
        slots.release()  # wakes the writer to exit
        while True:
            try:
                sent_at.get_nowait()
            except queue.Empty:
                # Nothing unechoed in flight, except perhaps one message the
                # writer sends after checking ``stopping``: its send completes
                # (the server reads it whole), and we then read its echo.
                thread.join()
                if sent_at.empty():
                    break
                continue
            ring.check(conn.recv(), seq)
            seq += 1
            slots.release()
    except BaseException as exc:
        if errors:
            raise errors[0] from exc
        raise
    if errors:
        raise errors[0]
    if written[-1] != seq:  # pragma: no cover - internal invariant
        raise AssertionError(f"writer sent up to {written[-1]}, echoes up to {seq}")
    return seq
