"""The event-loop side of the echo benchmark: the connection interface that
every asyncio/Tornado implementation fills in, the echo server loop, and the
client driver (ping-pong and pipelined) that checks every echo.
"""

from __future__ import annotations

import abc
import asyncio
import collections
import socket
import ssl
from collections.abc import Awaitable, Callable, Sequence
from time import perf_counter
from typing import Any, ClassVar, TypeVar

from ._common import Buffer, CasePlan, ConnClosed, ConnStats, MessageRing, Recorder

T = TypeVar("T")
#: Where the server listens and the client connects unless told otherwise
#: (``--host``: the server's veth address on a network-namespace path).
HOST = "127.0.0.1"


def prepare_socket(sock: socket.socket) -> None:
    """Every implementation gets the same socket options: non-blocking, TCP_NODELAY."""
    sock.setblocking(False)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def run_loop(loop_name: str, main: Callable[[], Awaitable[T]], timeout_s: float) -> T:
    """Run ``main()`` on a fresh asyncio or uvloop loop, bounded by ``timeout_s``."""
    if loop_name == "uvloop":
        import uvloop

        loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(asyncio.wait_for(main(), timeout_s))
    finally:
        asyncio.set_event_loop(None)
        loop.close()


class AsyncConn(abc.ABC):
    """One connection of an event-loop implementation, client or server side.

    Subclasses implement `from_socket`, `send`, `recv` and `close`; the same
    class serves both ends, so both run the same code.  A class that can
    also serve over TLS sets `supports_tls` and writes `from_tls_socket` (or
    its own `serve_connection`).
    """

    #: Whether `serve_connection` takes an ``ssl_context``: the server side
    #: of a TLS connection (``benchmarks.load --tls``).
    supports_tls: ClassVar[bool] = False

    @classmethod
    @abc.abstractmethod
    async def from_socket(cls, sock: socket.socket) -> AsyncConn:
        """Wrap a connected, non-blocking socket."""

    @abc.abstractmethod
    async def send(self, frames: Sequence[Buffer]) -> None:
        """Send one message; return once its buffers may be reused or are
        queued by copy (asyncio streams), as the library does it."""

    @abc.abstractmethod
    async def recv(self) -> Sequence[Buffer]:
        """Receive one message's frames (valid until the next `recv` or
        `release`); raise `ConnClosed` on EOF before the message."""

    @classmethod
    async def from_tls_socket(cls, sock: socket.socket, ssl_context: ssl.SSLContext) -> AsyncConn:
        """Wrap an accepted, connected, non-blocking socket as the server side
        of a TLS connection (``ssl_context`` holds the certificate)."""
        raise NotImplementedError(f"{cls.__name__} has no TLS server")

    def release(self, frames: Sequence[Buffer]) -> None:  # noqa: B027 - an optional hook
        """The caller is done with ``frames`` (pooled implementations reuse them)."""

    @abc.abstractmethod
    def close(self) -> None: ...

    @classmethod
    async def serve_connection(cls, sock: socket.socket, ssl_context: ssl.SSLContext | None = None) -> int:
        """Echo messages until the peer closes (over TLS with ``ssl_context``); return how many."""
        if ssl_context is None:
            return await echo_loop(await cls.from_socket(sock))
        return await echo_loop(await cls.from_tls_socket(sock, ssl_context))

    # -- process entry points (see __main__.py) --------------------------------

    @classmethod
    def run_server(
        cls,
        listener: socket.socket,
        loop_name: str,
        nclients: int,
        timeout_s: float,
        ssl_context: ssl.SSLContext | None = None,
    ) -> int:
        return run_loop(loop_name, lambda: serve(cls, listener, nclients, ssl_context), timeout_s)

    @classmethod
    def run_client(
        cls, port: int, plan: CasePlan, loop_name: str, timeout_s: float, host: str = HOST
    ) -> list[ConnStats]:
        return run_loop(loop_name, lambda: run_clients(cls, port, plan, host), timeout_s)


async def echo_loop(conn: AsyncConn) -> int:
    """Read a message, write it back (waiting as `send` does), repeat until EOF."""
    nmessages = 0
    try:
        while True:
            try:
                frames = await conn.recv()
            except ConnClosed:
                return nmessages
            await conn.send(frames)
            conn.release(frames)
            nmessages += 1
    finally:
        conn.close()


async def serve(
    cls: type[AsyncConn], listener: socket.socket, nclients: int, ssl_context: ssl.SSLContext | None = None
) -> int:
    """Accept ``nclients`` connections, echo on all of them (over TLS with
    ``ssl_context``), return the total messages."""
    loop = asyncio.get_running_loop()
    listener.setblocking(False)
    tasks = []
    for _ in range(nclients):
        sock, _ = await loop.sock_accept(listener)
        prepare_socket(sock)
        tasks.append(asyncio.ensure_future(cls.serve_connection(sock, ssl_context)))
    listener.close()
    return sum(await asyncio.gather(*tasks))


async def run_clients(cls: type[AsyncConn], port: int, plan: CasePlan, host: str = HOST) -> list[ConnStats]:
    """Open ``plan.clients`` connections to ``host:port`` and drive them concurrently."""
    loop = asyncio.get_running_loop()
    conns = []
    try:
        for _ in range(plan.clients):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            prepare_socket(sock)
            await loop.sock_connect(sock, (host, port))
            conns.append(await cls.from_socket(sock))
        return list(await asyncio.gather(*(drive(conn, plan) for conn in conns)))
    finally:
        for conn in conns:
            conn.close()


async def drive(conn: AsyncConn, plan: CasePlan) -> ConnStats:
    """One connection's whole case: a fully compared first message, warm-up
    and repeats, a fully compared last message."""
    ring = MessageRing(plan.msize, plan.nframes, plan.window)
    await _roundtrip_compared(conn, ring, 0)
    recorder = Recorder(plan, perf_counter())
    if plan.mode == "pingpong":
        seq = await _pingpong(conn, ring, recorder, 1)
    else:
        seq = await _pipelined(conn, ring, recorder, 1, plan.window)
    await _roundtrip_compared(conn, ring, seq)
    return ConnStats(recorder.repeats, seq + 1, ring.verified_messages, ring.full_compares)


async def _roundtrip_compared(conn: AsyncConn, ring: MessageRing, seq: int) -> None:
    await conn.send(ring.stamp(seq))
    echo = await conn.recv()
    ring.compare(echo, seq)
    conn.release(echo)


async def _pingpong(conn: AsyncConn, ring: MessageRing, recorder: Recorder, seq: int) -> int:
    more = True
    while more:
        t_sent = perf_counter()
        await conn.send(ring.stamp(seq))
        echo = await conn.recv()
        now = perf_counter()
        ring.check(echo, seq)
        conn.release(echo)
        seq += 1
        more = recorder.on_echo(now, now - t_sent)
    return seq


async def _pipelined(conn: AsyncConn, ring: MessageRing, recorder: Recorder, seq: int, window: int) -> int:
    """A writer task keeps ``window`` messages in flight; this coroutine reads
    and checks the echoes.  Returns the next sequence number."""
    slots = asyncio.Semaphore(window)
    sent_at: collections.deque[float] = collections.deque()
    in_flight = asyncio.Event()
    stopping = False

    async def writer(seq: int) -> int:
        while True:
            await slots.acquire()
            if stopping:
                return seq
            frames = ring.stamp(seq)
            sent_at.append(perf_counter())
            in_flight.set()
            await conn.send(frames)
            seq += 1

    def close_on_error(task: asyncio.Future[Any]) -> None:
        if not task.cancelled() and task.exception() is not None:
            conn.close()  # wakes a reader waiting for an echo that will not come

    task = asyncio.ensure_future(writer(seq))
    task.add_done_callback(close_on_error)
    try:
        while True:
            if not sent_at:
                if stopping:
                    # Nothing unechoed is in flight, so the writer is at most
                    # finishing a send whose echo came back: waiting is safe.
                    end = await task
                    if end != seq:  # pragma: no cover - internal invariant
                        raise AssertionError(f"writer sent up to {end}, echoes up to {seq}")
                    return seq
                in_flight.clear()
                await in_flight.wait()
                continue
            echo = await conn.recv()
            now = perf_counter()
            ring.check(echo, seq)
            conn.release(echo)
            seq += 1
            latency = now - sent_at.popleft()
            if not stopping and not recorder.on_echo(now, latency):
                stopping = True
            slots.release()  # one more permit after stopping wakes the writer to exit
    except BaseException as exc:
        if task.done() and not task.cancelled() and task.exception() is not None:
            raise task.exception() from exc  # type: ignore[misc]
        task.cancel()
        raise


class SelfListeningConn(AsyncConn):
    """A connection of a comm library that makes its own sockets
    (``tornado_readinto.channel.comm``, ``distributed.comm``).

    The server closes the listener the harness bound and listens again on the
    same address and port; the client's connect retries until it is up.  Subclasses
    implement `listen_on`, `connect_to`, `send` and `recv`, and for a TLS
    server `listen_tls_on` (setting `supports_tls`).
    """

    def __init__(self, comm: Any) -> None:
        self.comm = comm

    @classmethod
    async def from_socket(cls, sock: socket.socket) -> AsyncConn:  # pragma: no cover - the comm owns sockets
        raise NotImplementedError(f"{cls.__name__} makes its own sockets")

    @classmethod
    async def listen_on(
        cls, port: int, handler: Callable[[Any], Awaitable[None]], host: str = HOST
    ) -> Callable[[], None]:
        """Listen on ``host:port``; return a function that stops listening."""
        raise NotImplementedError

    @classmethod
    async def listen_tls_on(
        cls, port: int, handler: Callable[[Any], Awaitable[None]], ssl_context: ssl.SSLContext, host: str = HOST
    ) -> Callable[[], None]:
        """`listen_on`, over TLS with ``ssl_context``."""
        raise NotImplementedError(f"{cls.__name__} has no TLS server")

    @classmethod
    async def connect_to(cls, port: int, host: str = HOST) -> Any:
        """A connected comm to ``host:port``."""
        raise NotImplementedError

    def close(self) -> None:
        self.comm.abort()

    @classmethod
    def run_server(
        cls,
        listener: socket.socket,
        loop_name: str,
        nclients: int,
        timeout_s: float,
        ssl_context: ssl.SSLContext | None = None,
    ) -> int:
        host, port = listener.getsockname()[:2]
        listener.close()
        return run_loop(loop_name, lambda: cls._serve(host, port, nclients, ssl_context), timeout_s)

    @classmethod
    async def _serve(cls, host: str, port: int, nclients: int, ssl_context: ssl.SSLContext | None) -> int:
        done: asyncio.Queue[int] = asyncio.Queue()

        async def handler(comm: Any) -> None:
            await done.put(await echo_loop(cls(comm)))

        if ssl_context is None:
            stop = await cls.listen_on(port, handler, host)
        else:
            stop = await cls.listen_tls_on(port, handler, ssl_context, host)
        try:
            return sum([await done.get() for _ in range(nclients)])
        finally:
            stop()

    @classmethod
    def run_client(
        cls, port: int, plan: CasePlan, loop_name: str, timeout_s: float, host: str = HOST
    ) -> list[ConnStats]:
        async def main() -> list[ConnStats]:
            conns = [cls(await cls.connect_to(port, host)) for _ in range(plan.clients)]
            try:
                return list(await asyncio.gather(*(drive(conn, plan) for conn in conns)))
            finally:
                for conn in conns:
                    await conn.comm.close()

        return run_loop(loop_name, main, timeout_s)
