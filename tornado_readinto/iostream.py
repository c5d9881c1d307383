"""`ReadIntoIOStream`: a Tornado `IOStream` whose reads land where they belong.

Strategy:

* Stock Tornado allocates a zero-filled ``bytearray(read_chunk_size)`` for every
  ``recv`` attempt (EAGAIN ones included), appends what arrived to
  ``_read_buffer`` and then slices a ``bytes`` copy out for the caller: three
  copies of every byte and a 64 KiB memset per syscall.
* The read state machine is a pure object, `tornado_readinto._readcore.ReadCore`,
  with the shape of an ``asyncio.BufferedProtocol``; this class is its
  selector engine: from the readable callback (or inline, when a read
  starts) it calls ``recv_into`` on the view ``core.get_buffer()`` hands out and
  reports the count with ``core.buffer_updated(n)``, which completes reads.
* Every stream owns one *read-ahead* buffer (in its core), allocated once and
  reused.  A ``recv_into`` lands in its free tail; ``read_bytes`` and friends
  copy their result out of it once.  It grows only for a pending read that
  needs more room (a big ``read_bytes`` or ``read_until``) and shrinks back
  when drained.
* ``read_into(buf)`` first copies whatever is already read ahead (bounded: at
  most one read-ahead buffer), then ``recv_into``\\ s the rest *directly into the
  unfilled tail of* ``buf``, for exactly the bytes still missing, so large
  frames are never copied in user space.  Small remainders (under
  `DIRECT_READ_MIN_NBYTES`) go through the read-ahead buffer instead, so that
  a whole small message costs one syscall.
* A ``recv`` that returns fewer bytes than asked for (plain sockets) or EAGAIN
  means the kernel had nothing more: we then wait for the selector instead of
  issuing a speculative ``recv`` that would fail with EAGAIN.  That proof
  holds for `DRAINED_VALID_S` after that recv or after the stream's last
  write, whichever is later: a read that starts later (the loop thread was
  held up, typically waiting for the GIL while another thread ran Python)
  tries the ``recv`` first, since the data has most likely arrived, and a
  read it satisfies completes inline, in the same loop turn.  TLS sockets only
  wait after OpenSSL itself says "want read", since decrypted bytes can sit
  inside the SSL object where the selector cannot see them.
* READ interest stays registered while the read-ahead buffer has room, so a
  busy stream does not drop and re-add it (an ``epoll_ctl`` pair) between
  consecutive reads as stock Tornado does whenever bytes are left over.
* Before a pending read parks, its stream may ask the event loop to keep
  polling instead of blocking for up to `DEFAULT_BUSY_POLL_S` (adaptive; see
  `tornado_readinto.busypoll`): in a request/response exchange the answer
  often arrives within tens of microseconds, and parking (then waking a
  halted CPU) costs more than that.  The stream never spins inside its own
  callback, so other connections and callbacks are never held up, on any
  event loop.  ``busy_poll_s=0`` turns it off.
* While another thread holds the GIL (a dask worker's task threads running
  Python), every ``socket`` call's GIL release can hand the GIL over, and
  the loop thread then waits up to the 5 ms switch interval for it.  Plain
  sockets time their ``recv_into``/``sendmsg`` (two ``perf_counter`` reads);
  once one is seen to stall that long, the process's plain streams make
  those calls through `tornado_readinto._gilheld` (``recv``/``writev`` that
  keep the GIL: non-blocking, they return in microseconds) for the next
  second, then probe again.  Only the loop's own wait for the network
  (``epoll_wait``) still releases the GIL.
* Reads and writes that can finish at once take a short path: a read whose
  bytes are already read ahead is copied out and returned as a resolved
  Future (no read state, no syscall); a write to an idle plain socket is one
  ``sendmsg`` of the caller's buffers, queued only if the kernel did not take
  them all.
* Replies written while more input is already read ahead (pipelined
  requests) are corked: held, copied, until the reads catch up, then sent
  together in one ``sendmsg``.  A reply to a lone message is never held.
* A cancelled read closes the stream: bytes may already have been consumed,
  so the only safe state is closed, never silently out of step.

Layout: this module is the Tornado face and the selector engine; the read
state machine is `tornado_readinto._readcore`, the write path (``write``,
``writelines``, the cork, the gather send) the mixin
`tornado_readinto._writepath.WritePath`.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import ssl
import sys
import warnings
from time import perf_counter
from typing import Any, Union

from tornado import ioloop
from tornado.concurrent import Future
from tornado.log import gen_log

from . import _gilheld, busypoll
from ._readcore import DIRECT_READ_MIN_NBYTES, PENDING, ReadCore
from ._tornado_compat import (
    IOStream,
    SSLIOStream,
    StreamBufferFullError,
    StreamClosedError,
    UnsatisfiableReadError,
    default_ssl_context,
    ssl_wrap_socket,
)
from ._writepath import CORK_MAX_NBYTES, IOV_MAX, MAX_SEND_NBYTES, WritePath
from .busypoll import DEFAULT_BUSY_POLL_S, BusyPoll, spinner_for
from .errors import BufferBusyError, ReadIntoError
from .framing import MessageReader
from .writebuffer import ChunkedWriteBuffer

__all__ = [
    "ReadIntoIOStream",
    "SSLReadIntoIOStream",
    "DIRECT_READ_MIN_NBYTES",
    "DRAINED_VALID_S",
    "IOV_MAX",
    "CORK_MAX_NBYTES",
    "MAX_SEND_NBYTES",
]

#: How long a short ``recv`` proves a plain socket empty.  A read that starts
#: later tries ``recv`` before waiting for the event loop: when the loop thread
#: was held up this long (by a thread holding the GIL: a hand-off takes up to
#: the 5 ms switch interval), the peer has most likely answered, and a read
#: completed inline costs no poll, no parked Future and no extra loop turn,
#: each of which releases the GIL again.  Without such stalls, reads come
#: within tens of microseconds of the last ``recv`` and keep the saving of the
#: ``recv`` that would fail with EAGAIN.
DRAINED_VALID_S = 1e-3  # seconds


#: The environment variable that chose the retired transport engine; a
#: process that sets it is warned once that it is ignored.
ENGINE_ENV_VAR = "TORNADO_READINTO_ENGINE"

_NOT_GIVEN: Any = object()
_engine_env_warned = False


def _warn_engine_env() -> None:
    """Warn once per process if `ENGINE_ENV_VAR` is set: it is ignored."""
    global _engine_env_warned
    if not _engine_env_warned and os.environ.get(ENGINE_ENV_VAR):
        _engine_env_warned = True
        warnings.warn(
            f"{ENGINE_ENV_VAR} is ignored: the transport engine was retired",
            DeprecationWarning,
            stacklevel=3,
        )


#: Socket families whose streams have ``TCP_NODELAY`` (`set_nodelay`).
_TCP_FAMILIES = (socket.AF_INET, socket.AF_INET6)

_READ = ioloop.IOLoop.READ
_WRITE = ioloop.IOLoop.WRITE
_ERROR = ioloop.IOLoop.ERROR

BytesLike = Union[bytes, bytearray, memoryview]

_STALL_S = _gilheld.STALL_S
_COPY_S_PER_BYTE = _gilheld.COPY_S_PER_BYTE
# A real socket's own C methods (see _own_socket_io).
_SOCKET_RECV_INTO = socket.socket.recv_into
_SOCKET_SENDMSG = getattr(socket.socket, "sendmsg", None)


class _ReadFuture(Future):  # type: ignore[type-arg]
    """The Future of one read; cancelling it closes its stream."""

    __slots__ = ("_stream",)
    _stream: ReadIntoIOStream | None

    def cancel(self, msg: Any = None) -> bool:
        cancelled = super().cancel(msg)
        if cancelled:
            stream = self._stream
            self._stream = None
            if stream is not None:
                stream._on_read_cancelled(self)
        return cancelled


def _writable_bytes_view(buf: Any) -> memoryview:
    """A 1-D, ``'B'``-format view over all of ``buf``'s bytes.

    :raises TypeError: ``buf`` has no buffer interface, is read-only or is not
        C-contiguous.
    """
    view = memoryview(buf)
    if view.readonly:
        view.release()
        raise TypeError(f"read_into needs a writable buffer, got read-only {type(buf).__name__}")
    if not view.c_contiguous:
        view.release()
        raise TypeError(f"read_into needs a C-contiguous buffer, got a strided {type(buf).__name__}")
    if view.format == "B" and view.ndim == 1:
        return view
    if view.nbytes == 0:  # cast() refuses shapes with a zero in them
        view.release()
        return memoryview(bytearray())
    with view:
        return view.cast("B")


class ReadIntoIOStream(WritePath, IOStream):
    """A drop-in `tornado.iostream.IOStream` with a zero-copy `read_into`.

    Takes the same arguments as `IOStream`.  Every stock method keeps its
    behaviour; the differences are in what they cost:

    * one read-ahead buffer per stream instead of a fresh zero-filled 64 KiB
      ``bytearray`` per ``recv``; ``read_bytes`` returns a ``bytes`` copied once
      from it (stock copies three times);
    * `read_into` receives straight into the caller's buffer, sized by
      ``nbytes``, not counted against ``max_buffer_size``;
    * no speculative ``recv`` that is known to fail with EAGAIN, and no
      ``epoll_ctl`` churn between consecutive reads;
    * on a plain socket, while other threads are seen to hold the GIL,
      ``recv``/``writev`` calls that keep the GIL instead of the ``socket``
      methods, whose every GIL release can cost a 5 ms hand-off (1-3 us
      more per call; see `tornado_readinto._gilheld`);
    * a read whose Future is cancelled closes the stream;
    * a stream that closes in the middle of `read_bytes` or `read_into` fails
      the read with `IncompleteReadError` (a ``StreamClosedError``) carrying the
      expected and received byte counts.

    :arg busy_poll_s: see `tornado_readinto.busypoll`.
    :arg engine: ignored, with a ``DeprecationWarning``: the transport
        engine was retired (so was ``TORNADO_READINTO_ENGINE``).
    :raises ValueError: a negative ``busy_poll_s``.

    .. versionadded:: 0.1
    """

    # Plain sockets: a short recv means the kernel buffer was drained.
    _short_read_drains = True
    # Plain sockets gather with sendmsg (TLS sockets have none).
    _gather = True

    def __init__(
        self,
        socket: socket.socket,
        *args: Any,
        busy_poll_s: float = DEFAULT_BUSY_POLL_S,
        engine: object = _NOT_GIVEN,
        **kwargs: Any,
    ) -> None:
        if engine is not _NOT_GIVEN:
            warnings.warn(
                "ReadIntoIOStream(engine=...) is ignored: the transport engine was retired",
                DeprecationWarning,
                stacklevel=2,
            )
        _warn_engine_env()
        if not busy_poll_s >= 0:
            raise ValueError(f"busy_poll_s must be >= 0 seconds, got {busy_poll_s}")
        #: Base busy-poll budget of a pending read that parks (0: never spin);
        #: adaptive, see `tornado_readinto.busypoll`.
        self.busy_poll_s = busy_poll_s
        self._busy_poll: BusyPoll | None = None  # made with the IOLoop below
        # Bytes of the write buffer that the cork holds back (see writelines).
        self._cork_nbytes = 0
        # The read state machine: the read-ahead buffer and the pending read
        # (see tornado_readinto._readcore); this class is its selector engine.
        # Made first: BaseIOStream.__init__ sets its sizes (properties below).
        self._core = ReadCore()
        # A read completed inside Tornado's _try_inline_read, until its
        # _finish_read hook hands it over.
        self._read_result: Any = None
        # False only when the last recv proved the socket (and SSL object)
        # empty; a READ event sets it back.  Lets reads skip a doomed recv,
        # for DRAINED_VALID_S after _drained_at (perf_counter seconds).
        self._readable_hint = True
        self._drained_at = 0.0
        #: Bytes received so far (for idle timeouts and statistics).
        self.nbytes_received = 0
        super().__init__(socket, *args, **kwargs)
        # Same append/peek/advance contract as Tornado's _StreamBuffer (which
        # dask.distributed appends to directly), plus peek_buffers for sendmsg.
        self._write_buffer: ChunkedWriteBuffer = ChunkedWriteBuffer()  # type: ignore[assignment]
        self._gather = self._gather and hasattr(self.socket, "sendmsg")
        # The GIL-keeping calls of _gilheld stand in only for a real socket's
        # own C methods, never for a wrapper's or a subclass's overrides.
        sock_type = type(self.socket)
        self._own_socket_io = (
            _gilheld.AVAILABLE
            and self._gather
            and sock_type.recv_into is _SOCKET_RECV_INTO
            and sock_type.sendmsg is _SOCKET_SENDMSG
        )
        # set_nodelay applies to TCP sockets only (the family never changes).
        self._tcp = self.socket.family in _TCP_FAMILIES
        # The stream's asyncio loop, given to its Futures: a Future made
        # without one looks the running loop up (on Python < 3.12 that is a
        # getpid() syscall per Future).
        self._loop: asyncio.AbstractEventLoop = self.io_loop.asyncio_loop  # type: ignore[attr-defined]
        if busy_poll_s and busypoll.room_to_spin():  # never on one CPU or under a one-CPU quota
            self._busy_poll = BusyPoll(busy_poll_s, spinner_for(self._loop))

    # -- compatibility shims ---------------------------------------------------

    @property  # type: ignore[override]
    def _read_buffer(self) -> bytes:
        """A *copy* of the bytes read ahead and not yet consumed.

        Stock Tornado keeps a ``bytearray`` here; this stream's read core
        keeps a reusable buffer with an offset instead, so outside code gets a
        snapshot.
        """
        return self._core.peek_buffered()

    @_read_buffer.setter
    def _read_buffer(self, data: BytesLike) -> None:
        # BaseIOStream.__init__ assigns an empty bytearray; any assignment
        # replaces the read-ahead bytes with ``data``.
        self._core.replace_buffered(data)

    @property  # type: ignore[override]
    def _read_buffer_size(self) -> int:
        """Bytes read ahead and not yet consumed (kept by the read core)."""
        return self._core.buffered_nbytes

    @_read_buffer_size.setter
    def _read_buffer_size(self, nbytes: int) -> None:
        # BaseIOStream.__init__ assigns 0: the count itself is the core's.
        if nbytes != self._core.buffered_nbytes:
            raise AttributeError("_read_buffer_size counts the bytes read ahead: assign _read_buffer instead")

    @property  # type: ignore[override]
    def max_buffer_size(self) -> int:
        """As stock: the most bytes read ahead (a `read_into` buffer does not
        count); kept by the read core."""
        return self._core.max_buffer_size

    @max_buffer_size.setter
    def max_buffer_size(self, nbytes: int) -> None:
        self._core.max_buffer_size = nbytes

    @property  # type: ignore[override]
    def read_chunk_size(self) -> int:
        """As stock: the usual size of one read-ahead ``recv``; kept by the
        read core."""
        return self._core.read_chunk_size

    @read_chunk_size.setter
    def read_chunk_size(self, nbytes: int) -> None:
        self._core.read_chunk_size = nbytes

    # -- reads -----------------------------------------------------------------

    def read_into(self, buf: Any, partial: bool = False) -> Future[int]:
        """Read into ``buf`` until it is full (or, with ``partial``, until any
        bytes arrived); resolve to the number of bytes read.

        ``buf`` may be any writable C-contiguous buffer: ``bytearray``,
        ``memoryview`` of any format and shape, numpy array, ``mmap``,
        ``array.array``.  Its size is its ``nbytes``.  Bytes already read ahead
        are copied into it once; the rest are received with ``recv_into``
        directly into its unfilled tail, never past its end (remainders under
        `DIRECT_READ_MIN_NBYTES` go through the read-ahead buffer).  ``buf``
        is not counted against ``max_buffer_size``.  When the bytes are
        already read ahead, this is one copy and an already resolved Future,
        with no syscall.  A zero-byte ``buf`` resolves at once with no
        syscall.

        :arg buf: where the bytes land; must not be resized until the read is
            done.
        :arg partial: resolve as soon as at least one byte was read.
        :raises TypeError: ``buf`` is read-only or not C-contiguous (raised
            before anything is read).
        :raises BufferBusyError: another read is in progress.
        :raises StreamClosedError: the stream is closed.  If it closes before
            ``buf`` is full, the Future fails with `IncompleteReadError`.
        """
        # A bytearray is always writable, contiguous and of format 'B'.
        view = memoryview(buf) if type(buf) is bytearray else _writable_bytes_view(buf)
        if self._read_future is not None:
            view.release()
            self._start_read()  # raises: closed, or a read is in progress
        result = self._core.read_into(view, partial)
        if result is PENDING:
            return self._pending_read_into()
        return self._resolved(result)

    def read_bytes(self, num_bytes: int, partial: bool = False) -> Future[bytes]:
        """Read ``num_bytes`` bytes (or, with ``partial``, at least one).

        Same as stock; the result is copied once out of the read-ahead buffer.
        If the stream closes first, the Future fails with `IncompleteReadError`.

        :raises ValueError: ``num_bytes`` is negative.
        """
        if num_bytes < 0:
            raise ValueError(f"read_bytes needs num_bytes >= 0, got {num_bytes}")
        if self._read_future is not None:
            self._start_read()  # raises: closed, or a read is in progress
        result = self._core.read_bytes(num_bytes, partial)
        if result is PENDING:
            return self._pending_read()
        return self._resolved(result)

    def read_until(self, delimiter: bytes, max_bytes: int | None = None) -> Future[bytes]:
        """As stock: read up to and including ``delimiter``.

        Each search resumes where the last one stopped, so a line arriving in
        many pieces is scanned once.  If more than ``max_bytes`` bytes come
        before the end of the delimiter, the stream is closed and the Future
        fails with ``StreamClosedError`` (``real_error``:
        ``UnsatisfiableReadError``).
        """
        if self._read_future is not None:
            self._start_read()  # raises: closed, or a read is in progress
        try:
            result = self._core.read_until(delimiter, max_bytes)
        except UnsatisfiableReadError as e:
            return self._unsatisfiable(e)
        if result is PENDING:
            return self._pending_read()
        return self._resolved(result)

    def read_until_regex(self, regex: bytes, max_bytes: int | None = None) -> Future[bytes]:
        """As stock: read up to the end of the first match of ``regex``;
        ``max_bytes`` as in `read_until`."""
        if self._read_future is not None:
            self._start_read()  # raises: closed, or a read is in progress
        try:
            result = self._core.read_until_regex(re.compile(regex), max_bytes)
        except UnsatisfiableReadError as e:
            return self._unsatisfiable(e)
        if result is PENDING:
            return self._pending_read()
        return self._resolved(result)

    def read_until_close(self) -> Future[bytes]:
        """As stock: read everything until the peer closes (bounded by
        ``max_buffer_size``); resolves at once on a closed stream."""
        if self._read_future is not None:
            self._start_read()  # raises: closed, or a read is in progress
        result = self._core.read_until_close()
        if result is PENDING:
            return self._pending_read()
        return self._resolved(result)

    def read_message(self, reader: MessageReader) -> Future[Any]:
        """Read one message with an incremental ``reader`` (such as
        `tornado_readinto.framing.FrameReader`); resolve to what its
        ``next_message()`` returned.

        Bytes already read ahead are handed to ``reader.feed()`` (which copies
        them once and stops at the end of the message).  Then, while the
        buffer from ``reader.get_buffer()`` is at least
        `DIRECT_READ_MIN_NBYTES` long (a large frame), bytes are received with
        ``recv_into`` straight into it; smaller stages (headers, small frames)
        take one read-ahead ``recv`` that usually brings the whole message.
        The Future is already resolved when the message was buffered.

        :raises BufferBusyError: another read is in progress.
        :raises StreamClosedError: the stream is closed.  The Future fails with
            the reader's exception (e.g. `FramingError`, with the stream
            closed), with `IncompleteReadError` if the stream closes in the
            middle of a message, or with ``StreamClosedError`` if it closes
            between messages.
        """
        error = self.error
        if self._closed and isinstance(error, ReadIntoError) and not isinstance(error, StreamClosedError):
            # Closed because the data was rejected: what is left read ahead
            # belongs to that bad message.
            raise StreamClosedError(real_error=error)
        if self._read_future is not None:
            self._start_read()  # raises: closed, or a read is in progress
        try:
            result = self._core.read_message(reader)
        except Exception as e:
            # The reader rejected the bytes read ahead: the read fails with
            # its error and the stream closes (see _signal_closed).
            future = self._start_read()
            self.close(exc_info=e)
            return future
        if result is PENDING:
            return self._pending_read()
        return self._resolved(result)

    def _pending_read_into(self) -> Future[int]:
        """The Future of a `read_into` that the bytes read ahead did not
        complete: the socket is tried now, else READ awaited."""
        future = self._start_read()
        if self._closed:
            # Nothing more will come: raise, as stock does (its Future stays
            # pending); the core's read ends, which releases ``buf``.
            self._core.connection_lost(self.error)
            raise StreamClosedError(real_error=self.error)
        try:
            if not self._parked_at_once():
                self._receive_or_park()
        except BaseException:
            future.add_done_callback(lambda f: f.exception())
            raise
        return future

    def _pending_read(self) -> Future[Any]:
        """The Future of a read that the bytes read ahead did not complete,
        as stock: Tornado's ``_try_inline_read`` (which calls
        `_find_read_pos`, `_read_to_buffer_loop` and `_finish_read` below)
        tries the socket now, else waits for READ."""
        future = self._start_read()
        try:
            if not self._parked_at_once():
                self._try_inline_read()
        except UnsatisfiableReadError as e:
            # As stock read_until: the stream closes, the Future fails.
            gen_log.info("Unsatisfiable read, closing connection: %s", e)
            self.close(exc_info=e)
        except BaseException:
            future.add_done_callback(lambda f: f.exception())
            raise
        return future

    def _find_read_pos(self) -> int | None:
        """Tornado's hook, asked before receiving: None, since the core
        completes a read as soon as its bytes are there.  On a closed stream
        the core's read ends here (stock then raises ``StreamClosedError``)."""
        if self._closed:
            self._core.connection_lost(self.error)
        return None

    def _read_to_buffer_loop(self) -> int | None:  # type: ignore[override]
        """Tornado's hook: receive for the pending read; a dummy position
        once it completed (its result waits for `_finish_read`), else None."""
        result = self._receive_for_read()
        if result is PENDING:
            return None
        self._read_result = result
        return 0

    def _finish_read(self, size: int) -> None:
        """Tornado's hook (through ``_read_from_buffer``): resolve the read
        that `_read_to_buffer_loop` completed."""
        result, self._read_result = self._read_result, None
        self._complete(result)

    def _unsatisfiable(self, error: UnsatisfiableReadError) -> Future[Any]:
        """The bytes read ahead already break a ``max_bytes``: as stock, the
        stream closes and the read's Future fails with ``StreamClosedError``."""
        future = self._start_read()
        gen_log.info("Unsatisfiable read, closing connection: %s", error)
        self.close(exc_info=error)
        return future

    def _resolved(self, result: Any) -> Future[Any]:
        """A Future already resolved to ``result``: a read that the
        read-ahead bytes satisfied without entering the read state."""
        future: Future[Any] = Future(loop=self._loop)
        future.set_result(result)
        state = self._state
        if state is None or state == _ERROR:
            self._maybe_add_error_listener()
        return future

    def _complete(self, result: Any) -> None:
        """Resolve the pending read's Future to ``result``."""
        future = self._read_future
        if future is not None:
            self._read_future = None
            future._stream = None  # type: ignore[attr-defined]
            if not future.cancelled():
                future.set_result(result)
        state = self._state
        if state is None or state == _ERROR:
            self._maybe_add_error_listener()

    def _start_read(self) -> Future:  # type: ignore[type-arg]
        if self._read_future is not None:
            self._check_closed()
            raise BufferBusyError("a read is already in progress on this stream")
        future = _ReadFuture(loop=self._loop)
        future._stream = self  # type: ignore[assignment]
        self._read_future = future
        return future

    def _on_read_cancelled(self, future: Future) -> None:  # type: ignore[type-arg]
        if self._read_future is future and not self.closed():
            gen_log.debug("read cancelled; closing %r so it cannot get out of step", self)
            self._read_future = None
            # Drop what was read ahead too: it belongs to the abandoned read.
            self._core.discard()
            self.close(exc_info=asyncio.CancelledError("a read was cancelled, so the stream was closed"))

    def _handle_read(self) -> None:
        try:
            result = self._receive_for_read()
        except UnsatisfiableReadError:
            raise
        except asyncio.CancelledError:
            raise
        except Exception as e:
            gen_log.warning("error on read: %s", e)
            self.close(exc_info=e)
            return
        if result is not PENDING:
            self._complete(result)

    def _receive_for_read(self) -> Any:
        """Receive until the pending read completes, the socket has no more
        data, or the stream closes; return the read's result, or `PENDING`
        (the read then waits for the selector)."""
        result = self._receive_now()
        if result is PENDING and self._read_future is not None and not self._closed:
            self._read_parked()
        return result

    def _read_parked(self) -> None:
        """The pending read waits for the selector:
        send the replies the cork holds (the reads caught up), and tell the
        busy poll that a read parked."""
        if self._cork_nbytes:
            self._uncork()
        poll = self._busy_poll
        if poll is not None:
            now = perf_counter()
            if now >= _gilheld.held_until:  # contended GIL: no spinning, no bookkeeping
                poll.parked(now)

    def _parked_at_once(self) -> bool:
        """Park the pending read without trying the socket if a recv just
        proved it empty with READ registered (what receiving now would
        conclude, minus the calls): True if it parked."""
        if self._readable_hint or self.closed() or not self._proved_empty():
            return False
        self._read_parked()
        return True

    def _receive_or_park(self) -> None:
        """The pending read cannot be satisfied from the buffer: receive what
        the socket has, else wait for READ (keeping the loop polling a while
        if busy-polling is on)."""
        result = self._receive_for_read()
        if result is not PENDING:
            self._complete(result)
        elif not self._closed:
            state = self._state
            if state is None or not state & _READ:
                self._add_io_state(_READ)

    def _read_would_wait(self) -> bool:
        """True when a read started now would certainly wait for the event
        loop: nothing is read ahead and, as in `_receive_now`, a recv just
        proved the (plain) socket empty with READ registered.  No syscall.
        Lets a serving loop skip its own yield between requests."""
        if self._core.buffered_nbytes:
            return False
        return self._proved_empty()

    def _proved_empty(self) -> bool:
        """The last recv, less than `DRAINED_VALID_S` ago, found the (plain)
        socket empty, and READ is registered: the (level-triggered) selector
        will report new data, so a recv now would only fail with EAGAIN."""
        return (
            not self._readable_hint
            and self._short_read_drains
            and bool((self._state or 0) & _READ)
            and perf_counter() - self._drained_at < DRAINED_VALID_S
        )

    def _receive_now(self) -> Any:
        """Feed the read core what the socket has now: ``recv_into`` the
        buffer it hands out, then tell it how many bytes arrived; return the
        pending read's result or `PENDING`."""
        if not self._readable_hint and self._proved_empty():
            return PENDING  # wait for the selector
        core = self._core
        if not core.reading:
            # Idle read-ahead (READ stays registered): one recv bounded by the
            # read chunk size, which also notices EOF for the close callback.
            view = core.get_buffer()
            if len(view):
                received = self._recv_into(view)
                if received:
                    core.buffer_updated(received)
            return PENDING
        recv_into = self._recv_into
        while not self._closed:
            try:
                view = core.get_buffer()
            except Exception as e:  # a reader that failed earlier
                self.close(exc_info=e)
                return PENDING
            received = recv_into(view)
            if not received:
                break  # EAGAIN, or closed (EOF, reset: close() ended the read)
            try:
                result = core.buffer_updated(received, more=True)
            except StreamBufferFullError as e:
                gen_log.error("Reached maximum read buffer size")
                self.close(exc_info=e)
                raise
            except UnsatisfiableReadError:
                raise
            except Exception as e:  # the reader rejected the bytes (FramingError…)
                self.close(exc_info=e)
                return PENDING
            if result is not PENDING:
                return result
            if not self._readable_hint:
                break
        if self._closed:
            return PENDING
        return core.search()  # a regex search put off by more=True

    def _recv_into(self, view: memoryview) -> int | None:
        """One ``recv_into(view)``; the single place where reads meet the
        socket.  Returns the byte count, 0 on EAGAIN or EOF (after closing),
        None after a connection reset (closed).  Other errors close the stream
        and propagate."""
        requested = len(view)
        try:
            received = self.read_from_fd(view)
        except OSError as e:
            self.close(exc_info=e)
            if self._is_connreset(e):
                return None
            raise
        if received is None:
            self._readable_hint = False
            self._drained_at = perf_counter()
            return 0
        if received == 0:
            self._readable_hint = False
            self.close()
            return 0
        if received < requested and self._short_read_drains:
            self._readable_hint = False
            self._drained_at = perf_counter()
        self.nbytes_received += received
        return received

    def read_from_fd(self, buf: bytearray | memoryview) -> int | None:
        """As stock (``recv_into``; None on EAGAIN), but while the GIL is
        contended a real socket is read with a ``recv`` that keeps it (see
        `tornado_readinto._gilheld`).  Costs two ``perf_counter`` reads."""
        start = perf_counter()
        if self._own_socket_io and start < _gilheld.held_until:
            try:
                return _gilheld.recv_into(self.socket.fileno(), buf)
            except BlockingIOError:
                return None
        try:
            received = self.socket.recv_into(buf)
        except BlockingIOError:
            received = None
        end = perf_counter()
        if end - start > _STALL_S + (received or 0) * _COPY_S_PER_BYTE:
            _gilheld.note_stall(end)
        return received  # type: ignore[no-any-return]

    def _signal_closed(self) -> None:
        future = self._read_future
        # The core says what the pending read fails with (IncompleteReadError
        # with counts, the reader's own error, or StreamClosedError), and gives
        # back a drained read-ahead buffer.
        error = self._core.connection_lost(self.error)
        if error is not None and future is not None and not future.done():
            future.set_exception(error)
            future.exception()  # retrieved: the caller gets it by awaiting
        if self._write_buffer is not None:
            # Release our views of the caller's buffers now (Tornado 6.5 just
            # drops the buffer and leaves that to the garbage collector).
            self._write_buffer.clear()
        super()._signal_closed()

    def close(self, exc_info: Any = False) -> None:
        """As stock `IOStream.close`; replies held by the cork (see
        `writelines`) are sent first, unless closing for an error.

        As stock, a pending read that the bytes read ahead satisfy completes,
        and ``read_until_close`` completes with them unless the stream closes
        for an error (a connection reset counts as a close)."""
        if self._cork_nbytes and not exc_info:
            self._uncork()
        self._cork_nbytes = 0
        if not self._closed:
            # Stock close(), with the read core deciding what a pending read
            # gets (stock asks _find_read_pos and _finish_read).
            if exc_info:
                if isinstance(exc_info, tuple):
                    self.error = exc_info[1]
                elif isinstance(exc_info, BaseException):
                    self.error = exc_info
                else:
                    exc_info = sys.exc_info()
                    if any(exc_info):
                        self.error = exc_info[1]
            error = self.error
            result = self._core.eof_received(error is None or self._is_connreset(error))
            if result is not PENDING:
                self._complete(result)
            if self._state is not None:
                self.io_loop.remove_handler(self.fileno())
                self._state = None
            self.close_fd()
            self._closed = True
        self._signal_closed()

    # -- events ----------------------------------------------------------------

    def _handle_events(self, fd: Any, events: int) -> None:
        if self._closed:
            gen_log.warning("Got events for closed stream %s", fd)
            return
        try:
            if self._connecting:
                self._handle_connect()
                if self._closed:
                    return
            if events & _READ:
                self._readable_hint = True
                poll = self._busy_poll
                if poll is not None and poll.parked_at:
                    poll.data_came(perf_counter())
                self._handle_read()
                if self._closed:
                    return
                core = self._core
                if events == _READ and (self._read_future is not None or core.buffered_nbytes < core.read_chunk_size):
                    return  # READ was registered and stays: nothing to update
            if events & _WRITE:
                self._handle_write()
            if self.closed():
                return
            if events & _ERROR:
                self.error = self.get_fd_error()
                self.io_loop.add_callback(self.close)
                return
            state = _ERROR
            # Unlike stock, keep READ while the read-ahead buffer has room, so
            # consecutive reads on a busy stream cost no epoll_ctl.
            core = self._core
            if self.reading() or core.buffered_nbytes < core.read_chunk_size:
                state |= _READ
            if self.writing():
                state |= _WRITE
            if state != self._state:
                assert self._state is not None, "_handle_events without self._state"
                self._state = state
                self.io_loop.update_handler(self.fileno(), self._state)
        except UnsatisfiableReadError as e:
            gen_log.info("Unsatisfiable read, closing connection: %s", e)
            self.close(exc_info=e)
        except Exception as e:
            gen_log.error("Uncaught exception, closing connection.", exc_info=True)
            self.close(exc_info=e)
            raise


    # -- TLS -------------------------------------------------------------------

    def start_tls(  # type: ignore[override]
        self,
        server_side: bool,
        ssl_options: dict | ssl.SSLContext | None = None,  # type: ignore[type-arg]
        server_hostname: str | None = None,
    ) -> Future[SSLReadIntoIOStream]:
        """Convert this stream to an `SSLReadIntoIOStream` (as stock
        `IOStream.start_tls`, which would return a plain `SSLIOStream`).

        :raises ValueError: the stream is not idle (reads, writes or buffered
            bytes pending).
        """
        if (
            self._read_future
            or self._write_futures
            or self._connect_future
            or self._closed
            or self._core.buffered_nbytes
            or self._write_buffer
        ):
            raise ValueError("IOStream is not idle; cannot convert to SSL")
        if ssl_options is None:
            ssl_options = default_ssl_context(server_side)
        sock = self.socket
        self.io_loop.remove_handler(sock)
        self.socket = None  # type: ignore[assignment]
        # The socket now belongs to the TLS stream: closing this one later
        # must not touch it (stock raises AttributeError there).
        self._closed = True
        self._state = None
        sock = ssl_wrap_socket(
            sock,
            ssl_options,
            server_hostname=server_hostname,
            server_side=server_side,
            do_handshake_on_connect=False,
        )
        close_callback, self._close_callback = self._close_callback, None
        future: Future[SSLReadIntoIOStream] = Future()
        ssl_stream = SSLReadIntoIOStream(
            sock,
            ssl_options=ssl_options,
            max_buffer_size=self.max_buffer_size,
            read_chunk_size=self.read_chunk_size,
            max_write_buffer_size=self.max_write_buffer_size,
            busy_poll_s=self.busy_poll_s,
        )
        ssl_stream.set_close_callback(close_callback)
        ssl_stream._ssl_connect_future = future  # type: ignore[assignment]
        future.add_done_callback(lambda f: ssl_stream.close() if f.cancelled() else None)
        return future


class SSLReadIntoIOStream(ReadIntoIOStream, SSLIOStream):
    """`ReadIntoIOStream` over TLS: a drop-in `tornado.iostream.SSLIOStream`.

    Reads wait on the selector only after OpenSSL reports "want read" (bytes
    already decrypted inside the SSL object are invisible to the selector),
    each ``recv_into`` is clipped to 1 GiB (OpenSSL takes an ``int``), and no
    read is attempted before the handshake has finished.

    .. versionadded:: 0.1
    """

    # A TLS recv returns at most one record: short reads prove nothing.
    _short_read_drains = False
    # Its socket starts plain and is wrapped after connect(): decide here.
    _gather = False
    # SSL_read through the ssl object (SSLIOStream's), never the plain path.
    read_from_fd = SSLIOStream.read_from_fd

    def _handle_read(self) -> None:
        if self._ssl_accepting:
            self._do_ssl_handshake()
            if self._ssl_accepting or self.closed():
                return
            # Records may already sit decrypted in the SSL object.
            self._readable_hint = True
        ReadIntoIOStream._handle_read(self)

    def _handle_write(self) -> None:
        if self._ssl_accepting:
            self._do_ssl_handshake()
            if self._ssl_accepting or self.closed():
                return
            self._readable_hint = True
            if self._read_future is not None:
                ReadIntoIOStream._handle_read(self)
                if self.closed():
                    return
        ReadIntoIOStream._handle_write(self)

