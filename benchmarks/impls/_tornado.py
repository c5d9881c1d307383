"""Tornado implementations: stock IOStream (read_bytes, read_into), our
ReadIntoIOStream, and FramedStream with each allocator.

Over TLS (``serve_connection(sock, ssl_context)``, the servers of
``benchmarks.load --tls``) the accepted socket is wrapped as
`tornado.tcpserver.TCPServer` wraps it (handshake on the stream's first
events) and served by stock `SSLIOStream`, or by `SSLReadIntoIOStream`
where the plain server uses `ReadIntoIOStream`.

All streams get ``max_buffer_size=MAX_BUFFER_NBYTES``: stock's default
(100 MB) rejects a 100 MiB ``read_bytes``, and stock ``read_into`` counts the
caller's buffer against it.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Sequence
from typing import Any, ClassVar

from tornado.iostream import IOStream, SSLIOStream, StreamClosedError

from tornado_readinto import ReadIntoIOStream, SSLReadIntoIOStream
from tornado_readinto.core.busypoll import BUSY_POLL_BUDGET_S

from ._async import AsyncConn
from ._common import (
    HEAD_NBYTES,
    U64,
    Buffer,
    ConnClosed,
    ReusedBuffers,
    WireError,
    check_nframes,
    pack_header,
    unpack_lengths,
)

#: Far above any benchmark message; nothing is allocated from it.
MAX_BUFFER_NBYTES = 1 << 40


class _TornadoConn(AsyncConn):
    stream_class: ClassVar[type[IOStream]] = IOStream
    #: The stream over TLS.
    tls_stream_class: ClassVar[type[SSLIOStream]] = SSLIOStream
    stream_kwargs: ClassVar[dict[str, Any]] = {}
    supports_tls = True

    def __init__(self, stream: IOStream) -> None:
        self.stream = stream

    @classmethod
    async def from_socket(cls, sock: socket.socket) -> AsyncConn:
        return cls(cls.stream_class(sock, max_buffer_size=MAX_BUFFER_NBYTES, **cls.stream_kwargs))

    @classmethod
    async def from_tls_socket(cls, sock: socket.socket, ssl_context: ssl.SSLContext) -> AsyncConn:
        # As TCPServer does: the stream runs the handshake when its socket becomes ready.
        wrapped = ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return cls(cls.tls_stream_class(wrapped, max_buffer_size=MAX_BUFFER_NBYTES, **cls.stream_kwargs))

    def close(self) -> None:
        self.stream.close()


class StockReadBytes(_TornadoConn):
    """Stock IOStream: ``read_bytes`` for everything, one ``write`` per buffer."""

    async def _read_lengths(self) -> tuple[int, ...]:
        try:
            head = await self.stream.read_bytes(U64.size)
        except StreamClosedError:
            raise ConnClosed from None
        nframes = check_nframes(U64.unpack(head)[0])
        if not nframes:
            return ()
        return unpack_lengths(nframes, await self.stream.read_bytes(U64.size * nframes))

    async def recv(self) -> Sequence[Buffer]:
        return [await self.stream.read_bytes(n) for n in await self._read_lengths()]

    async def send(self, frames: Sequence[Buffer]) -> None:
        # stock has no gather write: one write (and one Future) per buffer
        future = self.stream.write(pack_header(frames))
        for frame in frames:
            future = self.stream.write(frame)
        await future  # futures resolve in order


class StockReadInto(StockReadBytes):
    """Stock IOStream: header by ``read_bytes``, each frame by ``read_into``
    a fresh ``bytearray``."""

    def _buffers(self, lengths: tuple[int, ...]) -> list[bytearray]:
        return [bytearray(n) for n in lengths]

    async def recv(self) -> Sequence[Buffer]:
        frames = self._buffers(await self._read_lengths())
        for frame in frames:
            await self.stream.read_into(frame)
        return frames


class StockReadIntoReuse(StockReadInto):
    """As `StockReadInto`, with the frame buffers reused across messages."""

    def __init__(self, stream: IOStream) -> None:
        super().__init__(stream)
        self._reused = ReusedBuffers()

    def _buffers(self, lengths: tuple[int, ...]) -> list[bytearray]:
        return self._reused.get(lengths)


class ReadInto(_TornadoConn):
    """`ReadIntoIOStream`: as few ``read_into`` calls as the message needs,
    into reused buffers, as the ``asyncio-streams`` anchor reads: the count
    and the first length (16 bytes), the other lengths if any, then each
    frame.  One ``writelines`` per message."""

    stream_class = ReadIntoIOStream
    tls_stream_class = SSLReadIntoIOStream

    def __init__(self, stream: IOStream) -> None:
        super().__init__(stream)
        self._head = bytearray(HEAD_NBYTES)
        self._lengths = bytearray(U64.size)
        self._reused = ReusedBuffers()

    async def recv(self) -> Sequence[Buffer]:
        stream = self.stream
        head = self._head
        try:
            await stream.read_into(head)
        except StreamClosedError:
            raise ConnClosed from None
        nframes = check_nframes(U64.unpack_from(head)[0])
        if not nframes:
            raise WireError("a message without frames (this reader needs at least one)")
        if len(self._lengths) != U64.size * nframes:
            self._lengths = bytearray(U64.size * nframes)
        lengths = self._lengths
        lengths[: U64.size] = head[U64.size :]
        if nframes > 1:
            await stream.read_into(memoryview(lengths)[U64.size :])
        frames = self._reused.get(unpack_lengths(nframes, lengths))
        for frame in frames:
            await stream.read_into(frame)
        return frames

    async def send(self, frames: Sequence[Buffer]) -> None:
        await self.stream.writelines([pack_header(frames), *frames])  # type: ignore[attr-defined]


class ReadInto3Reads(ReadInto):
    """The heavier `ReadInto` (an extra row, as ``asyncio-streams-3reads``):
    one ``read_into`` for the count, one for the lengths and one per frame."""

    def __init__(self, stream: IOStream) -> None:
        super().__init__(stream)
        self._count = bytearray(U64.size)
        self._lengths = bytearray()

    async def recv(self) -> Sequence[Buffer]:
        stream = self.stream
        try:
            await stream.read_into(self._count)
        except StreamClosedError:
            raise ConnClosed from None
        nframes = check_nframes(U64.unpack(self._count)[0])
        if len(self._lengths) != U64.size * nframes:
            self._lengths = bytearray(U64.size * nframes)
        if nframes:
            await stream.read_into(self._lengths)
        frames = self._reused.get(unpack_lengths(nframes, self._lengths))
        for frame in frames:
            await stream.read_into(frame)
        return frames


class ReadIntoSpin(ReadInto):
    """`ReadInto` with busy polling on (``busy_poll_s=BUSY_POLL_BUDGET_S``;
    the default, 0, parks a read that finds no data at once, as stock)."""

    stream_kwargs = {"busy_poll_s": BUSY_POLL_BUDGET_S}


class ReadIntoUninit(ReadInto):
    """`ReadInto` with its reused frame buffers from
    ``uninitialized_allocator`` (``numpy.empty``, which numpy backs with
    transparent huge pages from 4 MiB, as ``BufferPool`` does), where
    `ReadInto` reuses ``bytearray`` objects (4 KiB pages where huge pages
    are opt-in)."""

    def __init__(self, stream: IOStream) -> None:
        super().__init__(stream)
        from tornado_readinto.wire.allocators import uninitialized_allocator

        self._reused = ReusedBuffers(uninitialized_allocator)


class _Framed(_TornadoConn):
    """`FramedStream` over a `ReadIntoIOStream`; subclasses pick the allocator."""

    stream_class = ReadIntoIOStream
    tls_stream_class = SSLReadIntoIOStream

    def __init__(self, stream: IOStream) -> None:
        super().__init__(stream)
        from tornado_readinto.channel.framed import FramedStream  # optional: see the registry

        self.allocator = self.make_allocator()
        self.framed = FramedStream(stream, allocator=self.allocator)  # type: ignore[arg-type]

    def make_allocator(self) -> Any:
        raise NotImplementedError

    async def recv(self) -> Sequence[Buffer]:
        try:
            return await self.framed.read_frames()  # type: ignore[no-any-return]
        except StreamClosedError:
            raise ConnClosed from None

    async def send(self, frames: Sequence[Buffer]) -> None:
        await self.framed.write_frames(frames)


class FramedBytearray(_Framed):
    def make_allocator(self) -> Any:
        from tornado_readinto.wire.allocators import bytearray_allocator

        return bytearray_allocator


class FramedUninit(_Framed):
    def make_allocator(self) -> Any:
        from tornado_readinto.wire.allocators import uninitialized_allocator

        return uninitialized_allocator


class FramedPool(_Framed):
    """One `BufferPool` per connection; frames go back to it once echoed
    (server) or checked (client)."""

    def make_allocator(self) -> Any:
        from tornado_readinto.wire.allocators import BufferPool

        return BufferPool()

    def release(self, frames: Sequence[Buffer]) -> None:
        self.allocator.release_all(frames)


class FramedPoolSpin(FramedPool):
    """`FramedPool` with busy polling on (``busy_poll_s=BUSY_POLL_BUDGET_S``)."""

    stream_kwargs = {"busy_poll_s": BUSY_POLL_BUDGET_S}
