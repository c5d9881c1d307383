"""asyncio implementations (also run on uvloop): streams, and a
``BufferedProtocol`` with its own small parser."""

from __future__ import annotations

import asyncio
import collections
import socket
from collections.abc import Sequence
from typing import Any

from ._async import AsyncConn
from ._common import U64, Buffer, ConnClosed, check_nframes, pack_header, unpack_lengths


class AsyncioStreams(AsyncConn):
    """``StreamReader.readexactly`` per header part and frame; ``write`` per
    buffer, one ``drain`` per message (default limits)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def from_socket(cls, sock: socket.socket) -> AsyncConn:
        return cls(*await asyncio.open_connection(sock=sock))

    async def recv(self) -> Sequence[Buffer]:
        readexactly = self.reader.readexactly
        try:
            head = await readexactly(U64.size)
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                raise
            raise ConnClosed from None
        nframes = check_nframes(U64.unpack(head)[0])
        lengths = unpack_lengths(nframes, await readexactly(U64.size * nframes)) if nframes else ()
        return [await readexactly(n) for n in lengths]

    async def send(self, frames: Sequence[Buffer]) -> None:
        write = self.writer.write
        write(pack_header(frames))
        for frame in frames:
            write(frame)
        await self.writer.drain()

    def close(self) -> None:
        self.writer.close()


# parser states
_COUNT, _LENGTHS, _FRAME = range(3)

#: Released receive buffers kept per size (enough for a full pipeline window).
_MAX_FREE_PER_SIZE = 16


class _FrameProtocol(asyncio.BufferedProtocol):
    """Receives straight into the frame buffers: ``get_buffer`` returns exactly
    the bytes still missing from the current count, lengths or frame buffer.

    Server side (``echo=True``) it writes every message back from the
    callback.  The write buffer limit is 0, so ``resume_writing`` means "all
    sent"; only then do the echoed buffers return to the free list (the
    transport may hold them by reference).  Client side it queues messages
    for `recv` and applies the default flow control to `send`.
    """

    def __init__(self, echo: bool) -> None:
        self.echo = echo
        self.transport: asyncio.Transport | None = None
        self.nechoed = 0
        loop = asyncio.get_running_loop()
        self.made: asyncio.Future[None] = loop.create_future()
        self.lost: asyncio.Future[int] = loop.create_future()
        self._free: dict[int, list[bytearray]] = {}
        self._held: list[Sequence[bytearray]] = []  # echoed, maybe still queued
        self._count = bytearray(U64.size)
        self._lengths_buf = bytearray()
        self._lengths: tuple[int, ...] = ()
        self._frames: list[bytearray] = []
        self._index = 0
        self._state = _COUNT
        self._target = memoryview(self._count)
        self._filled = 0
        # client side
        self._messages: collections.deque[list[bytearray]] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None
        self._error: BaseException | None = None

    # -- buffers ---------------------------------------------------------------

    def _alloc(self, nbytes: int) -> bytearray:
        free = self._free.get(nbytes)
        return free.pop() if free else bytearray(nbytes)

    def release(self, frames: Sequence[bytearray]) -> None:
        for frame in frames:
            free = self._free.setdefault(len(frame), [])
            if len(free) < _MAX_FREE_PER_SIZE:
                free.append(frame)

    # -- parser ----------------------------------------------------------------

    def _expect(self, buf: bytearray) -> None:
        self._target = memoryview(buf)
        self._filled = 0

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._target[self._filled :]

    def buffer_updated(self, nbytes: int) -> None:
        self._filled += nbytes
        if self._filled < len(self._target):
            return
        try:
            self._advance()
        except Exception as exc:
            self._error = exc
            assert self.transport is not None
            self.transport.abort()

    def _advance(self) -> None:
        if self._state == _COUNT:
            nframes = check_nframes(U64.unpack(self._count)[0])
            if not nframes:
                self._deliver([])
                return
            if len(self._lengths_buf) != U64.size * nframes:
                self._lengths_buf = bytearray(U64.size * nframes)
            self._state = _LENGTHS
            self._expect(self._lengths_buf)
            return
        if self._state == _LENGTHS:
            self._lengths = unpack_lengths(len(self._lengths_buf) // U64.size, self._lengths_buf)
            self._frames = [self._alloc(n) for n in self._lengths]
            self._index = -1
            self._state = _FRAME
        self._index += 1
        while self._index < len(self._frames) and not self._lengths[self._index]:
            self._index += 1  # zero-length frame: nothing to receive
        if self._index < len(self._frames):
            self._expect(self._frames[self._index])
        else:
            self._deliver(self._frames)

    def _deliver(self, frames: list[bytearray]) -> None:
        self._state = _COUNT
        self._expect(self._count)
        if self.echo:
            self._echo(frames)
            return
        self._messages.append(frames)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    # -- server ----------------------------------------------------------------

    def _echo(self, frames: list[bytearray]) -> None:
        assert self.transport is not None
        write = self.transport.write
        write(pack_header(frames))
        for frame in frames:
            write(frame)
        self.nechoed += 1
        if self.transport.get_write_buffer_size():
            if len(self._held) >= _MAX_FREE_PER_SIZE:
                del self._held[0]  # never resumed (yet): let those go to the GC
            self._held.append(frames)
        else:
            self.release(frames)

    # -- transport callbacks ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no asyncio.Transport
        if self.echo:
            transport.set_write_buffer_limits(high=0)  # type: ignore[attr-defined]
        self.made.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self._error = self._error or exc or ConnClosed()
        for future in (self._waiter, self._drained):
            if future is not None and not future.done():
                future.set_exception(self._error)
        if not self.lost.done():
            self.lost.set_result(self.nechoed)

    def pause_writing(self) -> None:
        if not self.echo:
            self._drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        for frames in self._held:
            self.release(frames)
        self._held.clear()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    # -- client ----------------------------------------------------------------

    async def recv(self) -> list[bytearray]:
        while not self._messages:
            if self._error is not None:
                raise self._error
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        return self._messages.popleft()

    async def send(self, frames: Sequence[Buffer]) -> None:
        if self._error is not None:
            raise self._error
        assert self.transport is not None
        write = self.transport.write
        write(pack_header(frames))
        for frame in frames:
            write(frame)
        if self._drained is not None:
            await self._drained


class AsyncioProtocol(AsyncConn):
    """An ``asyncio.BufferedProtocol`` echo; the server echoes from the callback."""

    def __init__(self, protocol: _FrameProtocol) -> None:
        self.protocol = protocol

    @classmethod
    async def _connect(cls, sock: socket.socket, echo: bool) -> _FrameProtocol:
        loop = asyncio.get_running_loop()
        _, protocol = await loop.create_connection(lambda: _FrameProtocol(echo), sock=sock)
        await protocol.made  # uvloop returns before connection_made
        return protocol

    @classmethod
    async def from_socket(cls, sock: socket.socket) -> AsyncConn:
        return cls(await cls._connect(sock, echo=False))

    @classmethod
    async def serve_connection(cls, sock: socket.socket) -> int:
        protocol = await cls._connect(sock, echo=True)
        nechoed = await protocol.lost
        if protocol._error is not None and not isinstance(protocol._error, ConnClosed):
            raise protocol._error
        return nechoed

    async def recv(self) -> Sequence[Buffer]:
        return await self.protocol.recv()

    async def send(self, frames: Sequence[Buffer]) -> None:
        await self.protocol.send(frames)

    def release(self, frames: Sequence[Any]) -> None:
        self.protocol.release(frames)

    def close(self) -> None:
        if self.protocol.transport is not None:
            self.protocol.transport.close()
