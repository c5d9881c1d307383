# cython: annotation_typing=False
"""`FramedStream`: multi-frame messages over a `ReadIntoIOStream`.

A message is a list of frames (bytes-like buffers).  On the wire it is the
header of `tornado_readinto.wire.framing` (frame count and lengths, little-endian
u64) followed by the frames, byte for byte dask.distributed's
``pack_frames`` layout.  Sending is a gather write of the header and the
frames by reference; receiving parses the header (limits checked before any
allocation) and receives every frame into its own buffer from the allocator.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tornado.concurrent import Future

from ..errors import ReadTimeoutError
from ..face.iostream import ReadIntoIOStream
from ..wire.framing import (
    DEFAULT_MAX_FRAME_NBYTES,
    DEFAULT_MAX_FRAMES,
    DEFAULT_MAX_MESSAGE_NBYTES,
    Allocator,
    FrameReader,
    message_header,
    prefixed_message_header,
)

__all__ = ["FramedStream"]


class FramedStream:
    """Send and receive framed messages over a `ReadIntoIOStream` (or
    `SSLReadIntoIOStream`).

    :arg stream: the connected stream; `FramedStream` takes over all reads
        and writes on it.
    :arg allocator: ``allocator(nbytes)`` returns the writable buffer a frame
        is received into (default: `tornado_readinto.wire.allocators.bytearray_allocator`;
        see `~tornado_readinto.wire.allocators.uninitialized_allocator` and
        `~tornado_readinto.wire.allocators.BufferPool`).
    :arg max_frames: most frames a message may have (default 1 Mi).
    :arg max_frame_nbytes: largest frame (default 64 GiB).
    :arg max_message_nbytes: largest sum of frame sizes (default 64 GiB).
    :arg read_idle_timeout: if set (seconds), a pending `read_frames` that
        receives no byte for between this long and 1.5 times this long fails
        with `ReadTimeoutError` and the stream is closed.  Costs one timer
        callback per half timeout while the stream is open; nothing per read.
    :arg nosplit_prefix: speak distributed's ``tcp://`` byte stream: each
        message starts with tcp.py's ``P`` field, written as tcp.py computes
        it and checked on receipt (`tornado_readinto.wire.framing.prefixed_message_header`).

        .. versionadded:: 0.1

    A header over a limit makes `read_frames` fail with `FrameTooLargeError`
    before anything is allocated for that message, and closes the stream.

    .. versionadded:: 0.1
    """

    def __init__(
        self,
        stream: ReadIntoIOStream,
        *,
        allocator: Allocator | None = None,
        max_frames: int = DEFAULT_MAX_FRAMES,
        max_frame_nbytes: int = DEFAULT_MAX_FRAME_NBYTES,
        max_message_nbytes: int = DEFAULT_MAX_MESSAGE_NBYTES,
        read_idle_timeout: float | None = None,
        nosplit_prefix: bool = False,
    ) -> None:
        if not isinstance(stream, ReadIntoIOStream):
            raise TypeError(f"FramedStream needs a ReadIntoIOStream, got {type(stream).__name__}")
        self.stream = stream
        self._reader = FrameReader(
            allocator,
            max_frames=max_frames,
            max_frame_nbytes=max_frame_nbytes,
            max_message_nbytes=max_message_nbytes,
            nosplit_prefix=nosplit_prefix,
        )
        self._message_header = prefixed_message_header if nosplit_prefix else message_header
        if read_idle_timeout is not None and not read_idle_timeout > 0:
            raise ValueError(f"read_idle_timeout must be > 0 seconds, got {read_idle_timeout}")
        self.read_idle_timeout = read_idle_timeout
        self._idle_timer: object | None = None
        self._idle_mark = -1
        self._idle_ticks = 0

    def __repr__(self) -> str:
        state = "closed" if self.stream.closed() else "open"
        return f"<{type(self).__name__} {state} {self._reader.describe_progress()}>"

    def write_frames(self, frames: Sequence[Any]) -> Future[None]:
        """Send one message; the Future resolves once all of it was sent.

        Costs one small ``bytes`` for the header, one Future, and gather
        ``sendmsg`` calls carrying the header and the frames; frames over
        8 KiB are sent by reference (leave them unchanged until the Future
        resolves), smaller ones are coalesced by one copy.

        :arg frames: a sequence (a list or tuple: it is sized, then read) of
            bytes-like objects (any C-contiguous buffer, sized by ``nbytes``);
            zero frames and empty frames are valid.
        :raises StreamClosedError: the stream is closed.
        :raises TypeError: ``frames`` is not a sequence, or a frame is not
            bytes-like (the message is not sent).
        """
        return self._queue(frames)[0]

    async def send_frames(self, frames: Sequence[Any], *, high_water_nbytes: int) -> int:
        """Queue one message as `write_frames` does and return without
        waiting for it to be sent (as distributed's own comm does), after
        first waiting until the stream has sent everything already queued
        if that is more than ``high_water_nbytes`` bytes (backpressure).

        Waiting before queuing, not after, lets the caller drop the message
        at once: each large frame is then freed as soon as it is sent,
        instead of the whole message living until its last byte left (a
        process that forwards a 512 MiB reply would hold it twice).  The
        queue stays bounded by ``high_water_nbytes`` plus one message.  If
        queuing closed the stream, this waits for the send so that the
        error is raised here.

        Returns the bytes the message takes on the wire, header included.
        Same costs as `write_frames`, plus one empty write's Future when it
        waits; frames sent by reference must stay unchanged until a later
        wait (or ``stream.write(b"")``) returns.

        :raises StreamClosedError: the stream is closed or the send failed.
        """
        stream = self.stream
        if stream.write_buffer_nbytes > high_water_nbytes:
            await stream.write(b"")
        future, wire_nbytes = self._queue(frames)
        if stream.closed():
            await future
        return wire_nbytes

    def _queue(self, frames: Sequence[Any]) -> tuple[Future[None], int]:
        header, wire_nbytes = self._message_header(frames)
        return self.stream.writelines([header, *frames]), wire_nbytes

    def read_frames(self) -> Future[list[memoryview]]:
        """Receive one message: a list with one writable ``memoryview``
        (format ``'B'``) per frame, each over its own allocator buffer, owned
        by the caller.

        A small message already read ahead costs no syscall; large frames are
        received with ``recv_into`` straight into their buffers (zero copy).
        One Future per message.

        :raises BufferBusyError: a read is already in progress.
        :raises StreamClosedError: the stream is closed (between messages).
        :raises FrameTooLargeError: (through the Future) a header over a limit;
            the stream is closed and nothing of the message is delivered.
        :raises FramingError: (through the Future) any other bad header.
        :raises IncompleteReadError: (through the Future) the stream closed in
            the middle of a message; ``expected``/``received`` byte counts.
        """
        future = self.stream.read_message(self._reader)
        if self.read_idle_timeout is not None and self._idle_timer is None and not future.done():
            self._schedule_idle_check()
        return future

    def _schedule_idle_check(self) -> None:
        assert self.read_idle_timeout is not None
        self._idle_timer = self.stream.io_loop.call_later(self.read_idle_timeout / 2, self._check_idle)

    def _check_idle(self) -> None:
        # Ticks every half timeout; three silent ticks in a row with a read
        # pending mean between 1 and 1.5 timeouts without a byte.
        self._idle_timer = None
        stream = self.stream
        if stream.closed():
            return
        received = stream.nbytes_arrived  # bytes below a low-water mark count
        if stream.reading() and received == self._idle_mark:
            self._idle_ticks += 1
            if self._idle_ticks >= 3:
                assert self.read_idle_timeout is not None
                error = ReadTimeoutError(self.read_idle_timeout, self._reader.describe_progress())
                stream.close(exc_info=error)
                return
        else:
            self._idle_ticks = 1 if stream.reading() else 0
        self._idle_mark = received
        self._schedule_idle_check()

    def close(self) -> None:
        """Close the stream (pending reads and writes fail)."""
        self.stream.close()

    def closed(self) -> bool:
        return self.stream.closed()
