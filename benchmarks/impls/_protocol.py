"""asyncio ``BufferedProtocol`` implementations (also run on uvloop).

``asyncio-protocol`` is the anchor as a good user writes it: the transport
receives into the tail of a read-ahead buffer (256 KiB, grown for a bigger
message), and ``buffer_updated`` handles every complete message in it, so a
``recv`` can bring several messages at once.  ``asyncio-protocol-exact`` is the
heavier variant: ``get_buffer`` returns exactly the bytes still missing from
the current count, lengths or frame buffer, so a message costs at least three
``recv`` calls.  Both servers echo from the callback.  Over TLS (the
servers of ``benchmarks.load --tls``) the same protocols sit on the loop's
SSL transport, which decrypts into the buffer ``get_buffer`` hands out.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import ssl
from collections.abc import Sequence
from typing import Any, ClassVar

from ._async import AsyncConn
from ._common import U64, Buffer, ConnClosed, check_nframes, pack_header, unpack_lengths

#: The read-ahead buffer of `_ReadAheadProtocol` (a message that does not fit
#: gets a buffer of its size).
READ_AHEAD_NBYTES = 256 << 10
#: `_ReadAheadProtocol` compacts its buffer when less than this is free at the end.
MIN_TAIL_NBYTES = 64 << 10

#: `_ExactProtocol`: released receive buffers kept per size (enough for a full
#: pipeline window).
_MAX_FREE_PER_SIZE = 16


class _ProtocolBase(asyncio.BufferedProtocol):
    """What both protocols share: the transport callbacks, the server's count
    of echoes, the client's queue of messages and flow control on `send`.

    Subclasses parse the bytes (``get_buffer``/``buffer_updated``), call
    `_deliver` with each complete message and write the echo in `_echo`.
    """

    def __init__(self, echo: bool) -> None:
        self.echo = echo
        self.transport: asyncio.Transport | None = None
        self.nechoed = 0
        loop = asyncio.get_running_loop()
        self.made: asyncio.Future[None] = loop.create_future()
        self.lost: asyncio.Future[int] = loop.create_future()
        # client side
        self._messages: collections.deque[Sequence[Buffer]] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None
        self._error: BaseException | None = None

    def _fail(self, exc: BaseException) -> None:
        self._error = exc
        assert self.transport is not None
        self.transport.abort()

    def _deliver(self, frames: Sequence[Buffer]) -> None:
        """One complete message: echo it (server) or queue it for `recv` (client)."""
        if self.echo:
            self._echo(frames)
            self.nechoed += 1
            return
        self._messages.append(frames)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _echo(self, frames: Sequence[Buffer]) -> None:
        raise NotImplementedError

    def release(self, frames: Sequence[Any]) -> None:
        """The client is done with a message from `recv`."""

    # -- transport callbacks ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no asyncio.Transport
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
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    # -- client ----------------------------------------------------------------

    async def recv(self) -> Sequence[Buffer]:
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
        self.transport.writelines([pack_header(frames), *frames])
        if self._drained is not None:
            await self._drained


class _ReadAheadProtocol(_ProtocolBase):
    """Receives into the free tail of one read-ahead buffer; every
    ``buffer_updated`` delivers all the complete messages in it, their frames
    as memoryview slices of the buffer (no copy).

    The buffer is compacted (the incomplete rest moved to its start) when its
    tail runs short, or replaced by a fresh one when something may still
    hold a slice of it: a message the client has not released, or an echo
    the server's transport has not sent yet.  The server echoes each message
    with one ``writelines`` and, with the default write buffer limits, stops
    reading and parsing while the transport asks it to pause.
    """

    def __init__(self, echo: bool) -> None:
        super().__init__(echo)
        self._buf = bytearray(READ_AHEAD_NBYTES)
        self._view = memoryview(self._buf)
        self._start = 0  # the first byte of the first message not delivered yet
        self._end = 0  # the end of the bytes received
        self._want = U64.size  # bytes that message needs, as far as its header tells yet
        self._lengths: tuple[int, ...] | None = None  # its frame lengths, once its header is in
        self._outstanding = 0  # client: messages delivered and not released
        self._paused = False  # server: the transport asked to pause writing

    # -- the buffer ------------------------------------------------------------

    def get_buffer(self, sizehint: int) -> memoryview:
        free = len(self._buf) - self._end
        if free < MIN_TAIL_NBYTES or len(self._buf) - self._start < self._want:
            self._make_room()
        return self._view[self._end :]

    def _in_use(self) -> bool:
        """Whether a slice of the buffer may still be held elsewhere."""
        if self._outstanding:
            return True
        return self.echo and self.transport is not None and self.transport.get_write_buffer_size() > 0

    def _make_room(self) -> None:
        start, end = self._start, self._end
        pending = end - start
        need = max(self._want, pending + MIN_TAIL_NBYTES)
        if len(self._buf) >= need and not self._in_use():
            self._view[:pending] = self._view[start:end]  # memoryview copies overlapping bytes safely
        else:
            buf = bytearray(max(READ_AHEAD_NBYTES, need))
            buf[:pending] = self._view[start:end]
            self._buf, self._view = buf, memoryview(buf)
        self._start, self._end = 0, pending

    def buffer_updated(self, nbytes: int) -> None:
        self._end += nbytes
        try:
            self._parse()
        except Exception as exc:
            self._fail(exc)

    def _parse(self) -> None:
        """Deliver every complete message in the buffer."""
        view = self._view
        while not self._paused:
            start = self._start
            available = self._end - start
            if available < self._want:
                return
            lengths = self._lengths
            if lengths is None:
                nframes = check_nframes(U64.unpack_from(view, start)[0])
                head = U64.size * (1 + nframes)
                self._want = head
                if available < head:
                    return
                lengths = self._lengths = unpack_lengths(nframes, view[start + U64.size : start + head])
                self._want = head + sum(lengths)
                if available < self._want:
                    return
            pos = start + U64.size * (1 + len(lengths))
            frames = []
            for n in lengths:
                frames.append(view[pos : pos + n])
                pos += n
            self._start, self._want, self._lengths = pos, U64.size, None
            if not self.echo:
                self._outstanding += 1
            self._deliver(frames)

    def release(self, frames: Sequence[Any]) -> None:
        if self._outstanding:
            self._outstanding -= 1

    # -- server ----------------------------------------------------------------

    def _echo(self, frames: Sequence[Buffer]) -> None:
        assert self.transport is not None
        self.transport.writelines([pack_header(frames), *frames])

    def pause_writing(self) -> None:
        super().pause_writing()
        if self.echo:
            self._paused = True
            assert self.transport is not None
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        super().resume_writing()
        if self.echo and self._paused:
            self._paused = False
            assert self.transport is not None
            self.transport.resume_reading()
            try:
                self._parse()  # the messages that arrived while paused
            except Exception as exc:
                self._fail(exc)


# parser states of _ExactProtocol
_COUNT, _LENGTHS, _FRAME = range(3)


class _ExactProtocol(_ProtocolBase):
    """Receives straight into the frame buffers: ``get_buffer`` returns exactly
    the bytes still missing from the current count, lengths or frame buffer.

    Server side the write buffer limit is 0, so ``resume_writing`` means
    "all sent"; only then do the echoed buffers return to the free list (the
    transport may hold them by reference).
    """

    def __init__(self, echo: bool) -> None:
        super().__init__(echo)
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

    # -- buffers ---------------------------------------------------------------

    def _alloc(self, nbytes: int) -> bytearray:
        free = self._free.get(nbytes)
        return free.pop() if free else bytearray(nbytes)

    def release(self, frames: Sequence[Any]) -> None:
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
            self._fail(exc)

    def _advance(self) -> None:
        if self._state == _COUNT:
            nframes = check_nframes(U64.unpack(self._count)[0])
            if not nframes:
                self._complete([])
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
            self._complete(self._frames)

    def _complete(self, frames: list[bytearray]) -> None:
        self._state = _COUNT
        self._expect(self._count)
        self._deliver(frames)

    # -- server ----------------------------------------------------------------

    def _echo(self, frames: Sequence[Buffer]) -> None:
        assert self.transport is not None
        write = self.transport.write
        write(pack_header(frames))
        for frame in frames:
            write(frame)
        if self.transport.get_write_buffer_size():
            if len(self._held) >= _MAX_FREE_PER_SIZE:
                del self._held[0]  # never resumed (yet): let those go to the GC
            self._held.append(frames)
        else:
            self.release(frames)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.echo:
            transport.set_write_buffer_limits(high=0)  # type: ignore[attr-defined]
        super().connection_made(transport)

    def resume_writing(self) -> None:
        for frames in self._held:
            self.release(frames)
        self._held.clear()
        super().resume_writing()

    # -- client ----------------------------------------------------------------

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


class _ProtocolConn(AsyncConn):
    """An ``asyncio.BufferedProtocol`` echo; the server echoes from the callback."""

    protocol_class: ClassVar[type[_ProtocolBase]]
    supports_tls = True

    def __init__(self, protocol: _ProtocolBase) -> None:
        self.protocol = protocol

    @classmethod
    async def _connect(
        cls, sock: socket.socket, echo: bool, server_ssl_context: ssl.SSLContext | None = None
    ) -> _ProtocolBase:
        loop = asyncio.get_running_loop()
        protocol = cls.protocol_class(echo)
        if server_ssl_context is None:
            await loop.create_connection(lambda: protocol, sock=sock)
        else:
            # (uvloop returns its own SSLProtocol here, not ours: keep ours)
            await loop.connect_accepted_socket(lambda: protocol, sock, ssl=server_ssl_context)
        await protocol.made  # uvloop returns before connection_made
        return protocol

    @classmethod
    async def from_socket(cls, sock: socket.socket) -> AsyncConn:
        return cls(await cls._connect(sock, echo=False))

    @classmethod
    async def serve_connection(cls, sock: socket.socket, ssl_context: ssl.SSLContext | None = None) -> int:
        protocol = await cls._connect(sock, echo=True, server_ssl_context=ssl_context)
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


class AsyncioProtocol(_ProtocolConn):
    """The ``BufferedProtocol`` anchor: a read-ahead buffer, every complete
    message handled per ``buffer_updated``."""

    protocol_class = _ReadAheadProtocol


class AsyncioProtocolExact(_ProtocolConn):
    """The heavier variant: one ``recv`` per count, lengths and frame buffer."""

    protocol_class = _ExactProtocol
