"""`FramedChannel`: the lifecycle of one framed connection, shared by
`tornado_readinto.channel.comm.Comm` and the dask backend's ``ReadIntoComm``.

A channel is open, then closed for good: `~FramedChannel.abort` closes at
once, dropping what is queued; a close flushes what is queued, then closes;
any error in the middle of a read or a write aborts it (what was consumed or
sent of the message is unknown, so the stream cannot be trusted any more)
and is raised as the comm's own "closed" error.

The per-message work stays in the comms' ``read``/``write`` methods, which
await `FramedStream.read_frames` / `FramedStream.send_frames` directly: this
mixin adds nothing to a message that goes well (no call, no await); it runs
only on errors and on close.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, Final, NoReturn

from tornado.iostream import StreamClosedError

from ..face.iostream import ReadIntoIOStream
from .framed import FramedStream

__all__ = ["FramedChannel", "WRITE_HIGH_WATER_NBYTES"]

#: A comm's ``write`` waits for the stream to send everything queued once
#: more than this many bytes are queued, instead of letting the queue (which
#: holds references to the caller's buffers) grow without bound when the peer
#: reads slower than we write.  64 MiB: several times a socket send buffer
#: (4 MiB at most by default on Linux), so a fast peer never makes a writer
#: wait.  (Re-exported as `tornado_readinto.channel.comm.WRITE_HIGH_WATER_NBYTES`.)
WRITE_HIGH_WATER_NBYTES: Final = 64 * 1024 * 1024  # bytes


class FramedChannel:
    """Mixin: close, abort and error handling over ``self._stream`` (a
    `ReadIntoIOStream`) and ``self._framed`` (its `FramedStream`), with
    ``self._closed`` set once the owner called close or abort.

    Subclasses set those three attributes in ``__init__``, say how a
    low-level error reads for their users in `_closed_error`, and may
    override `_release` (the one place the stream gets closed).
    """

    _stream: ReadIntoIOStream
    _framed: FramedStream
    _closed: bool

    def closed(self) -> bool:
        """True once close or abort was called or the connection broke."""
        return self._closed or self._stream.closed()

    def abort(self) -> None:
        """Close at once, dropping what is still queued.  Idempotent."""
        self._closed = True
        if not self._stream.closed():
            self._release()

    def _release(self) -> None:
        """Close the stream; called once the channel is done with it."""
        self._stream.close()

    def _begin_close(self) -> Coroutine[Any, Any, None] | None:
        """Mark the channel closed.  Return a coroutine that sends what is
        queued and then closes the stream (awaiting it is the caller's
        choice), or None when nothing was queued: the stream is then closed
        already."""
        stream = self._stream
        if self._closed or stream.closed() or not stream.writing():
            self.abort()
            return None
        self._closed = True
        return self._flush_then_close()

    async def _flush_then_close(self) -> None:
        """Send what is queued, then close; errors while sending are
        swallowed (the channel ends closed either way), and a cancellation
        closes at once."""
        try:
            await self._stream.write(b"")
        except StreamClosedError:
            pass
        finally:
            self._release()

    def _fail(self, exc: BaseException, doing: str) -> NoReturn:
        """Abort, and raise what `_closed_error` makes of ``exc`` (chained),
        or ``exc`` itself (a cancellation…).  Call it from the ``except``
        clause of a failed read, write or flush.

        :arg doing: what failed, e.g. ``"read from"``, for the message.
        """
        error = self._closed_error(exc, doing)  # before abort: it may look at self._closed
        self.abort()
        try:
            if error is None:
                raise exc
            raise error from exc
        finally:
            # The raised exception's traceback holds this frame: without the
            # del, exception -> frame -> exception is a cycle that keeps the
            # failed message's buffers alive until the garbage collector runs.
            del exc, error

    def _closed_error(self, exc: BaseException, doing: str) -> BaseException | None:
        """The exception to raise for ``exc``, or None to raise ``exc``
        itself.  The default: None."""
        return None
