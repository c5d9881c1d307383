"""Helpers for testing streams: connected pairs, a recording socket, a scripted
fake socket, and reusable ``check_*`` conformance coroutines (trio.testing
style) that run the same body against any stream class.

Everything here talks only to 127.0.0.1 / unix sockets made on the spot.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import hashlib
import random
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tornado.iostream import IOStream, SSLIOStream, StreamClosedError

__all__ = [
    "StreamPair",
    "StreamPairMaker",
    "stream_pair",
    "buffer_address",
    "RecvRecord",
    "RecordingSocket",
    "FakeSocket",
    "check_exact_reads",
    "check_straddling_reads",
    "check_write_types",
    "check_random_duplex",
    "check_eof_mid_read",
]

StreamPair = tuple[IOStream, IOStream]
StreamPairMaker = Callable[..., Awaitable[StreamPair]]


async def stream_pair(
    stream_class: type[IOStream] = IOStream,
    *,
    server_ssl: ssl.SSLContext | None = None,
    client_ssl: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    wrap_socket: Callable[[socket.socket], Any] | None = None,
    **kwargs: Any,
) -> StreamPair:
    """Connect two streams of ``stream_class`` over 127.0.0.1; return
    ``(server, client)``.  With ``server_ssl``/``client_ssl`` both ends are TLS
    (``stream_class`` must then be an `SSLIOStream` subclass) and the
    handshake is complete on return.  ``wrap_socket`` may wrap the *server*
    socket (e.g. in a `RecordingSocket`) before the stream takes it.
    """
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        client_sock = socket.create_connection(listener.getsockname())
        server_sock, _ = listener.accept()
    finally:
        listener.close()
    for s in (client_sock, server_sock):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if server_ssl is None:
        server_obj: Any = wrap_socket(server_sock) if wrap_socket else server_sock
        return stream_class(server_obj, **kwargs), stream_class(client_sock, **kwargs)
    assert client_ssl is not None and issubclass(stream_class, SSLIOStream)
    tls_server = server_ssl.wrap_socket(server_sock, server_side=True, do_handshake_on_connect=False)
    tls_client = client_ssl.wrap_socket(
        client_sock, server_hostname=server_hostname or "127.0.0.1", do_handshake_on_connect=False
    )
    server_obj = wrap_socket(tls_server) if wrap_socket else tls_server
    server = stream_class(server_obj, ssl_options=server_ssl, **kwargs)
    client = stream_class(tls_client, ssl_options=client_ssl, **kwargs)
    await asyncio.gather(server.wait_for_handshake(), client.wait_for_handshake())
    return server, client


def buffer_address(buf: Any) -> int:
    """The address of the first byte of a writable buffer."""
    view = memoryview(buf)
    if view.nbytes == 0:
        return 0
    with view.cast("B") as flat:
        return ctypes.addressof(ctypes.c_char.from_buffer(flat))


@dataclass
class RecvRecord:
    """One ``recv_into`` call seen by `RecordingSocket`."""

    address: int  # where the bytes were asked to land
    requested: int  # bytes asked for
    received: int | None  # bytes returned; None for EAGAIN


class RecordingSocket:
    """Wraps a real (non-blocking) socket and records every ``recv_into``
    and ``send``/``sendmsg``, so tests can assert where bytes landed and how
    many syscalls a read or write took.  Everything else is delegated."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.recvs: list[RecvRecord] = []
        self.sends: list[int] = []  # bytes per send/sendmsg call
        self.sendmsg_buffers: list[int] = []  # buffers per sendmsg call

    def recv_into(self, buf: Any, nbytes: int = 0, flags: int = 0) -> int:
        requested = nbytes or memoryview(buf).nbytes
        address = buffer_address(buf)
        try:
            received = self._sock.recv_into(buf, nbytes, flags)
        except (BlockingIOError, ssl.SSLWantReadError):
            self.recvs.append(RecvRecord(address, requested, None))
            raise
        self.recvs.append(RecvRecord(address, requested, received))
        return received

    def send(self, data: Any, flags: int = 0) -> int:
        sent = self._sock.send(data, flags)
        self.sends.append(sent)
        return sent

    def sendmsg(self, buffers: Any, *args: Any) -> int:
        buffers = list(buffers)
        sent = self._sock.sendmsg(buffers, *args)
        self.sends.append(sent)
        self.sendmsg_buffers.append(len(buffers))
        return sent

    def reset(self) -> None:
        self.recvs.clear()
        self.sends.clear()
        self.sendmsg_buffers.clear()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


ScriptItem = bytes | BaseException | int


@dataclass
class FakeSocket:
    """A socket whose ``recv_into`` follows a script, for fault injection.

    Each script item is consumed by one ``recv_into``: ``bytes`` are delivered
    (at most what was asked for; the rest stays for the next call), ``b""``
    is EOF, an exception instance is raised (``BlockingIOError``,
    ``ConnectionResetError``…), an ``int`` n claims n bytes arrived without
    touching memory (to test bookkeeping of multi-GiB buffers).  ``fileno``
    is a real socketpair end so the selector works; `make_readable` makes it
    report READ.
    """

    script: list[ScriptItem] = field(default_factory=list)
    recv_sizes: list[int] = field(default_factory=list)
    sent: bytearray = field(default_factory=bytearray)

    def __post_init__(self) -> None:
        self._real, self._peer = socket.socketpair()
        self._real.setblocking(False)
        self.family = socket.AF_UNIX

    def recv_into(self, buf: Any, nbytes: int = 0, flags: int = 0) -> int:
        try:  # consume the wake-up bytes, as a recv drains a real socket
            self._real.recv(4096)
        except BlockingIOError:
            pass
        view = memoryview(buf).cast("B")
        nbytes = nbytes or view.nbytes
        self.recv_sizes.append(nbytes)
        if not self.script:
            raise BlockingIOError(errno.EAGAIN, "fake socket: script exhausted")
        item = self.script.pop(0)
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, int):
            return min(item, nbytes)
        n = min(len(item), nbytes)
        view[:n] = item[:n]
        if n < len(item):
            self.script.insert(0, item[n:])
        return n

    def send(self, data: Any, flags: int = 0) -> int:
        self.sent += data
        return memoryview(data).nbytes

    def make_readable(self) -> None:
        self._peer.send(b"!")

    def fileno(self) -> int:
        return self._real.fileno()

    def setblocking(self, flag: bool) -> None:
        pass

    def setsockopt(self, *args: Any) -> None:
        pass

    def getsockopt(self, *args: Any) -> int:
        return 0

    def close(self) -> None:
        self._real.close()
        self._peer.close()


# -- conformance checks: the same body against any stream class ---------------


async def check_exact_reads(make_pair: StreamPairMaker) -> None:
    """Exact reads of 0, 1 and N bytes, with read_bytes and read_into."""
    server, client = await make_pair()
    try:
        for n in (0, 1, 5000, 300_000):
            payload = random.Random(n).randbytes(n)
            await client.write(payload)
            assert await server.read_bytes(n) == payload
            await client.write(payload)
            buf = bytearray(n)
            assert await server.read_into(buf) == n
            assert buf == payload
    finally:
        server.close()
        client.close()


async def check_straddling_reads(make_pair: StreamPairMaker) -> None:
    """A read whose first bytes are already buffered and the rest still on
    the socket."""
    server, client = await make_pair()
    try:
        head = b"H" * 10
        await client.write(head + b"a" * 100)
        assert await server.read_bytes(10) == head  # 100 bytes now read ahead
        buf = bytearray(100 + 200_000)
        reading = server.read_into(buf)
        await asyncio.sleep(0)
        await client.write(b"b" * 200_000)
        assert await reading == len(buf)
        assert buf == b"a" * 100 + b"b" * 200_000
        await client.write(b"xyz")
        assert await server.read_bytes(3) == b"xyz"
    finally:
        server.close()
        client.close()


async def check_write_types(make_pair: StreamPairMaker) -> None:
    """``bytes``, ``bytearray`` and (typed) ``memoryview`` writes arrive intact."""
    server, client = await make_pair()
    try:
        pieces: list[Any] = [
            b"bytes",
            bytearray(b"bytearray"),
            memoryview(b"memoryview"),
            memoryview(bytes(range(64))).cast("d"),
            memoryview(bytearray(70_000)),
        ]
        expected = b"".join(memoryview(p).tobytes() for p in pieces)
        for p in pieces:
            client.write(p)
        assert await server.read_bytes(len(expected)) == expected
    finally:
        server.close()
        client.close()


async def check_random_duplex(make_pair: StreamPairMaker, seed: int = 0, total_nbytes: int = 2_000_000) -> None:
    """Both ends write random-size chunks and read them back with a random
    mix of read_bytes / read_into / partial reads; hashes must match."""

    async def pump(writer: IOStream, reader: IOStream, rng: random.Random) -> None:
        data = rng.randbytes(total_nbytes)
        sent_hash = hashlib.sha256(data).hexdigest()

        async def write_all() -> None:
            pos = 0
            while pos < len(data):
                n = rng.choice((1, 7, 100, 4096, 65536, 300_000))
                await writer.write(data[pos : pos + n])
                pos += n

        async def read_all() -> str:
            h = hashlib.sha256()
            got = 0
            while got < total_nbytes:
                n = min(rng.choice((1, 8, 1000, 16384, 70_000, 500_000)), total_nbytes - got)
                kind = rng.randrange(3)
                if kind == 0:
                    chunk = await reader.read_bytes(n)
                elif kind == 1:
                    buf = bytearray(n)
                    await reader.read_into(buf)
                    chunk = bytes(buf)
                else:
                    chunk = await reader.read_bytes(n, partial=True)
                h.update(chunk)
                got += len(chunk)
            return h.hexdigest()

        _, got_hash = await asyncio.gather(write_all(), read_all())
        assert got_hash == sent_hash

    server, client = await make_pair()
    try:
        await asyncio.gather(
            pump(client, server, random.Random(seed)),
            pump(server, client, random.Random(seed + 1)),
        )
    finally:
        server.close()
        client.close()


async def check_eof_mid_read(make_pair: StreamPairMaker, use_read_into: bool) -> BaseException:
    """The peer closes after 10 of 100 bytes: the read fails with a
    ``StreamClosedError``; returns it for further checks."""
    server, client = await make_pair()
    try:
        await client.write(b"x" * 10)
        client.close()
        try:
            if use_read_into:
                await server.read_into(bytearray(100))
            else:
                await server.read_bytes(100)
        except StreamClosedError as e:
            return e
        raise AssertionError("read did not fail at EOF")
    finally:
        server.close()
        client.close()
