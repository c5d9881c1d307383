"""asyncio streams implementations (also run on uvloop): the anchor as a
good user writes it, and the heavier one read per header part.

Both assume, as every benchmark message has, at least one frame per message.
Over TLS (the servers of ``benchmarks.load --tls``) the same reader and
writer sit on the loop's SSL transport, made as ``asyncio.start_server(...,
ssl=...)`` makes them for each accepted connection.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Sequence

from ._async import AsyncConn
from ._common import HEAD_NBYTES, U64, Buffer, ConnClosed, WireError, check_nframes, pack_header, unpack_lengths


class _StreamsConn(AsyncConn):
    supports_tls = True

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def from_socket(cls, sock: socket.socket) -> AsyncConn:
        return cls(*await asyncio.open_connection(sock=sock))

    @classmethod
    async def from_tls_socket(cls, sock: socket.socket, ssl_context: ssl.SSLContext) -> AsyncConn:
        # What open_connection() builds, on the server side of the handshake
        # (start_server's own reader, protocol and writer, for an accepted socket).
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        protocol = asyncio.StreamReaderProtocol(reader)
        transport, _ = await loop.connect_accepted_socket(lambda: protocol, sock, ssl=ssl_context)
        return cls(reader, asyncio.StreamWriter(transport, protocol, reader, loop))

    async def _read_first(self, nbytes: int) -> bytes:
        """``readexactly(nbytes)``; `ConnClosed` on EOF before its first byte."""
        try:
            return await self.reader.readexactly(nbytes)
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                raise
            raise ConnClosed from None

    def close(self) -> None:
        self.writer.close()


class AsyncioStreams(_StreamsConn):
    """The asyncio Streams anchor: the fewest ``readexactly`` calls a message
    needs.  One frame: ``readexactly(16)`` (count and length), then
    ``readexactly(n)``.  k frames: ``readexactly(16)``, the other k-1 lengths,
    then all the frames in one ``readexactly`` (sliced by memoryview).  One
    ``writelines([header, *frames])`` and one ``drain`` per message."""

    async def recv(self) -> Sequence[Buffer]:
        head = await self._read_first(HEAD_NBYTES)
        nframes = check_nframes(U64.unpack_from(head)[0])
        if not nframes:
            raise WireError("a message without frames (this reader needs at least one)")
        rest = await self.reader.readexactly(U64.size * (nframes - 1)) if nframes > 1 else b""
        lengths = unpack_lengths(nframes, head[U64.size :] + rest)
        payload = memoryview(await self.reader.readexactly(sum(lengths)))
        if nframes == 1:
            return [payload]
        frames, start = [], 0
        for n in lengths:
            frames.append(payload[start : start + n])
            start += n
        return frames

    async def send(self, frames: Sequence[Buffer]) -> None:
        self.writer.writelines([pack_header(frames), *frames])
        await self.writer.drain()


class AsyncioStreams3Reads(_StreamsConn):
    """The heavier Streams variant: ``readexactly`` for the count, for the
    lengths and for every frame (three for a one-frame message); ``write``
    per buffer, one ``drain`` per message (default limits)."""

    async def recv(self) -> Sequence[Buffer]:
        readexactly = self.reader.readexactly
        head = await self._read_first(U64.size)
        nframes = check_nframes(U64.unpack(head)[0])
        lengths = unpack_lengths(nframes, await readexactly(U64.size * nframes)) if nframes else ()
        return [await readexactly(n) for n in lengths]

    async def send(self, frames: Sequence[Buffer]) -> None:
        write = self.writer.write
        write(pack_header(frames))
        for frame in frames:
            write(frame)
        await self.writer.drain()
