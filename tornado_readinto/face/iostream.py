# cython: annotation_typing=False
"""`ReadIntoIOStream`: a Tornado `IOStream` whose reads land where they belong.

Strategy:

* Stock Tornado allocates a zero-filled ``bytearray(read_chunk_size)`` for every
  ``recv`` attempt (EAGAIN ones included), appends what arrived to
  ``_read_buffer`` and then slices a ``bytes`` copy out for the caller: three
  copies of every byte and a 64 KiB memset per syscall.
* This module is the thin Tornado face over small objects that hold one
  another: `tornado_readinto.face._facecore.FaceCore`, the face's per-message
  half (the read's Future, Tornado's ``_state``/``_read_future``, the write
  Futures), over `tornado_readinto.core._streamcore.StreamCore`, the mechanism
  (the receive loop, the write queue and the cork), which holds the read
  state (`tornado_readinto.core._readcore.ReadCore`, the shape of an
  ``asyncio.BufferedProtocol``), the socket calls and one policy object
  with every heuristic (`tornado_readinto.core._policy.StreamPolicy`).  Each hot
  method of the face is one call into its ``FaceCore``; the face keeps the
  event-loop registration, ``close``, ``start_tls`` and the error policy,
  and Tornado's attributes are properties over those objects' fields.
* Every read goes one way (`FaceCore.started`): the core starts it and
  returns its result when the bytes read ahead complete it (a resolved
  Future, no syscall); else the read gets its Future, and either parks at
  once (a short ``recv`` just proved the socket empty) or receives now and
  parks if that was not enough.  READ events resume it.
* Every read-ahead byte lives in storage the stream borrows from the
  process's pool only while it has unread bytes (an idle stream holds
  none: ``docs/internals.rst``, "Who owns the read-ahead storage");
  ``read_into(buf)`` receives the bytes not read ahead straight into
  ``buf``.  READ interest stays registered while the read-ahead buffer has
  room, so consecutive reads cost no ``epoll_ctl``.
* A READ event goes straight to the core (`FaceCore.read_ready`, the fd's
  reader on the asyncio loop): Tornado's ``IOLoop`` keeps the books of the
  registration, but its reader is replaced through the public
  ``add_reader``.  WRITE events go through Tornado's dispatch as stock.
* Before a pending read parks, its stream may ask the event loop to keep
  polling instead of blocking (see `tornado_readinto.core.busypoll`); the stream
  never spins inside its own callback.
* Errors follow one policy (`ReadIntoIOStream._fail`): logged as Tornado
  logs them, recorded as the stream's ``error``, then the stream closes.  A
  cancelled read closes the stream too: bytes may already have been
  consumed, so the only safe state is closed, never silently out of step.

`docs/internals.rst` draws the call graph of a read and the core's states.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import re
import socket
import ssl
import sys
from collections.abc import Callable
from typing import Any, ClassVar

from tornado import ioloop
from tornado.concurrent import Future
from tornado.log import gen_log
from tornado.platform.asyncio import BaseAsyncIOLoop

from ..core import _cpus, _gilheld, busypoll
from ..core._policy import StreamPolicy
from ..core._readcore import DIRECT_READ_MIN_NBYTES, PENDING
from ..core._streamcore import CORK_MAX_NBYTES, DRAINED_VALID_S, IOV_MAX, MAX_SEND_NBYTES, TLS_RECORD_NBYTES, StreamCore
from ..core.busypoll import BusyPoll, spinner_for
from ..errors import ReadIntoError
from ..wire.framing import MessageReader
from . import _sslerrors
from ._facecore import FaceCalls, FaceCore, _EagerReadFuture
from ._tornado_compat import (
    IOStream,
    SSLIOStream,
    StreamBufferFullError,
    StreamClosedError,
    UnsatisfiableReadError,
    default_ssl_context,
    ssl_wrap_socket,
)

__all__ = [
    "ReadIntoIOStream",
    "SSLReadIntoIOStream",
    "DIRECT_READ_MIN_NBYTES",
    "DRAINED_VALID_S",
    "IOV_MAX",
    "CORK_MAX_NBYTES",
    "MAX_SEND_NBYTES",
]

#: Once the GIL is seen contended, reads on loops other than asyncio's own
#: (uvloop) wake their coroutine eagerly only where at least this many
#: threads of the process can run at once (`tornado_readinto.core._cpus.parallel_cpus`;
#: the tuning guide, "Threads that hold the GIL", says why).
EAGER_CONTENDED_MIN_CPUS = 2

#: Socket families whose streams have ``TCP_NODELAY`` (`set_nodelay`).
_TCP_FAMILIES = (socket.AF_INET, socket.AF_INET6)

_READ = ioloop.IOLoop.READ
_WRITE = ioloop.IOLoop.WRITE
_ERROR = ioloop.IOLoop.ERROR

BytesLike = bytes | bytearray | memoryview

# A real socket's own C methods (see own_socket_io).
_SOCKET_RECV_INTO = socket.socket.recv_into
_SOCKET_SENDMSG = getattr(socket.socket, "sendmsg", None)

# The IOLoop methods whose bookkeeping the direct READ callback relies on.
_REGISTRATION = ("add_handler", "update_handler", "remove_handler")
# Windows' proactor loop has no add_reader: Tornado polls on a thread of its own there.
_PROACTOR: Any = getattr(asyncio, "ProactorEventLoop", None)


def direct_read_loop(io_loop: ioloop.IOLoop) -> asyncio.AbstractEventLoop | None:
    """The asyncio loop with which a stream of ``io_loop`` registers its
    READ callback itself (`ReadIntoIOStream._read_ready`, through the public
    ``add_reader``), or None: the stream keeps Tornado's dispatch.

    What the direct callback relies on is how Tornado's ``BaseAsyncIOLoop``
    keeps its books (the same in Tornado 6.5 and 6.6): ``add_handler`` and
    ``update_handler`` call ``add_reader(fd, ...)`` only for an fd not in
    its ``readers`` set, and ``update_handler`` and ``remove_handler`` (so
    ``IOLoop.close``) call ``remove_reader(fd)``, which removes whichever
    reader the fd has.  So: an IOLoop of that class whose registration
    methods are Tornado's own, over a loop on which Tornado registers
    readers itself (not Windows' proactor loop).
    """
    if not isinstance(io_loop, BaseAsyncIOLoop):
        return None
    cls = type(io_loop)
    for name in _REGISTRATION:
        if getattr(cls, name) is not getattr(BaseAsyncIOLoop, name):
            return None
    loop = io_loop.asyncio_loop
    if _PROACTOR is not None and isinstance(loop, _PROACTOR):
        return None
    return loop


class ReadIntoIOStream(IOStream):
    """A drop-in `tornado.iostream.IOStream` with a zero-copy `read_into`.

    Takes the same arguments as `IOStream`.  Every stock method keeps its
    behaviour; the differences are in what they cost:

    * read-ahead storage borrowed from a process-wide pool while bytes are
      read ahead (none while idle) instead of a fresh zero-filled 64 KiB
      ``bytearray`` per ``recv``; ``read_bytes`` returns a ``bytes`` copied
      once from it (stock copies three times);
    * `read_into` receives straight into the caller's buffer, sized by
      ``nbytes``, not counted against ``max_buffer_size``;
    * no speculative ``recv`` that is known to fail with EAGAIN, and no
      ``epoll_ctl`` churn between consecutive reads;
    * a READ event reaches the stream in one Python call (the asyncio loop
      calls its reader directly) instead of three;
    * on a plain socket, while other threads are seen to hold the GIL,
      ``recv``/``writev`` calls that keep the GIL instead of the ``socket``
      methods, whose every GIL release can cost a switch-interval hand-off
      (see `tornado_readinto.core._gilheld`);
    * a read whose Future is cancelled closes the stream;
    * a stream that closes in the middle of `read_bytes` or `read_into` fails
      the read with `IncompleteReadError` (a ``StreamClosedError``) carrying the
      expected and received byte counts.

    The socket I/O is one `tornado_readinto.core._streamcore.StreamCore`; this
    class is its Tornado face (see ``docs/internals.rst``).

    :arg busy_poll_s: the base busy-poll budget of a read that waits, in
        seconds; 0 (the default) never spins.  See
        `tornado_readinto.core.busypoll` (``BUSY_POLL_BUDGET_S`` is the budget to
        ask for): spinning trades CPU for latency, and pays only where a
        peer answers within the budget.
    :raises ValueError: a negative ``busy_poll_s``.

    .. versionadded:: 0.1
    """

    # Plain sockets: a short recv means the kernel buffer was drained.
    _short_read_drains = True
    # TLS: a receive shorter than asked and than this drained the SSL object.
    _tls_record_nbytes = 0
    # Plain sockets gather with sendmsg (TLS sockets have none).
    _gather = True
    # How long a receive proves the socket empty (0: never; see _policy.StreamPolicy).
    _empty_proof_s = DRAINED_VALID_S
    # Only for instances made without __init__ (read_from_fd's fallback).
    _core: FaceCore = None  # type: ignore[assignment]
    # The loop with which READ goes to _read_ready directly (None: Tornado's
    # dispatch).  None until __init__ decides: Tornado's __init__ registers
    # WRITE at most (SSLIOStream's handshake).
    _read_loop: asyncio.AbstractEventLoop | None = None
    #: This class's `FaceCalls`, once a stream of it was made (`_face_calls`).
    _face_calls_made: ClassVar[FaceCalls]

    def __init__(
        self,
        socket: socket.socket,
        *args: Any,
        busy_poll_s: float = 0.0,
        **kwargs: Any,
    ) -> None:
        if not busy_poll_s >= 0:
            raise ValueError(f"busy_poll_s must be >= 0 seconds, got {busy_poll_s}")
        #: Base busy-poll budget of a pending read that parks (0: never spin);
        #: adaptive, see `tornado_readinto.core.busypoll`.
        self.busy_poll_s = busy_poll_s
        # Every option of the core is settled here, from the socket and the
        # current IOLoop (BaseIOStream.__init__ takes the same one), and the
        # core is made with them before BaseIOStream.__init__ sets the sizes,
        # the write queue and the state it keeps (properties below, over the
        # core's fields); nothing assigns a core option afterwards.
        sock = socket
        gather = self._gather and hasattr(sock, "sendmsg")
        # The GIL-keeping calls of _gilheld stand in only for a real socket's
        # own C methods, never for a wrapper's or a subclass's overrides.
        sock_type = type(sock)
        own_socket_io = (
            _gilheld.AVAILABLE
            and gather
            and sock_type.recv_into is _SOCKET_RECV_INTO
            and sock_type.sendmsg is _SOCKET_SENDMSG
        )
        read_from_fd = self._own_read_from_fd()
        # The stream's asyncio loop, given to its Futures: a Future made
        # without one looks the running loop up (on Python < 3.12 that is a
        # getpid() syscall per Future).
        loop: asyncio.AbstractEventLoop = ioloop.IOLoop.current().asyncio_loop  # type: ignore[attr-defined]
        # asyncio's own loop is Python: a loop turn saved by an eager wake-up
        # saves more than the wake-up costs, contended or not (uvloop's turn
        # is C: there only a GIL hand-off is worth it).
        eager = isinstance(loop, asyncio.BaseEventLoop)
        cls = type(self)
        # The core receives and sends on the socket itself unless the face
        # does both (TLS: SSL_read and SSL_write through the ssl object).
        core_sock = sock if gather or read_from_fd is None else None
        policy = StreamPolicy(
            # (the receive low-water mark: plain TCP only, never TLS)
            core_sock if self._short_read_drains else None,
            empty_proof_s=self._empty_proof_s,
            busy_poll=BusyPoll(busy_poll_s, spinner_for(loop))
            if busy_poll_s and busypoll.room_to_spin()  # never on one CPU or under a one-CPU quota
            else None,
            eager=eager,
            # ...and others (uvloop) once the GIL is seen contended, where two
            # threads can run at once (see EAGER_CONTENDED_MIN_CPUS).
            eager_contended=_cpus.parallel_cpus() >= EAGER_CONTENDED_MIN_CPUS,
        )
        io = StreamCore(
            core_sock,
            gather=gather,
            short_read_drains=self._short_read_drains,
            tls_record_nbytes=self._tls_record_nbytes,
            own_socket_io=own_socket_io,
            policy=policy,
            read_from_fd=read_from_fd,
            write_to_fd=None if gather else self.write_to_fd,
        )
        self._core = FaceCore(
            self,
            loop,
            io,
            calls=cls._face_calls(),
            # asyncio's own loops watch a socket for as long as its reader is
            # registered; another (uvloop) may stop after an error event.
            drops_on_error=not eager,
        )
        super().__init__(socket, *args, **kwargs)
        # set_nodelay applies to TCP sockets only (the family never changes).
        self._tcp = sock.family in _TCP_FAMILIES
        self._loop = loop
        self._read_loop = direct_read_loop(self.io_loop)

    @classmethod
    def _face_calls(cls) -> FaceCalls:
        """What the core may call on a stream of this class (`FaceCalls`):
        made once per class, from the class's own methods (a subclass's
        overrides included), and kept on the class (it goes with it)."""
        calls: FaceCalls | None = cls.__dict__.get("_face_calls_made")
        if calls is None:
            calls = cls._face_calls_made = FaceCalls(
                fail=cls._fail,
                failed_read=cls._failed_read,
                add_io_state=cls._add_io_state,
                listen_for_close=cls._maybe_add_error_listener,
                dispatch=cls._handle_events,
                readable=cls._readable,
                writable=cls._writable,
                update_state=cls._update_state,
                uncork=cls._uncork,
                # The core runs READ and WRITE events itself unless a
                # subclass (TLS) handles them.
                plain_events=cls._readable is ReadIntoIOStream._readable
                and cls._writable is ReadIntoIOStream._writable,
            )
        return calls

    def _own_read_from_fd(self) -> Callable[[memoryview], int | None] | None:
        """The receive the core calls instead of its own ``recv_into``: a
        subclass's ``read_from_fd`` (Tornado's hook for that), else None."""
        override = type(self).read_from_fd
        if override is ReadIntoIOStream.read_from_fd:
            return None
        return self.read_from_fd  # type: ignore[no-any-return]

    # -- Tornado's attributes, kept by the core -----------------------------------

    @property  # type: ignore[override]
    def read_from_fd(self) -> Callable[[memoryview], int | None]:
        """Tornado's hook: one receive into ``buf``; the byte count, None on
        EAGAIN, 0 at EOF.  On a plain socket, a ``recv_into`` that keeps the
        GIL while it is contended (see `tornado_readinto.core._gilheld`).

        Assigning a function here (as Tornado's tests do) makes the stream
        receive through it; deleting it restores the stream's own.
        """
        core = self._core
        if core is not None and core.io.read_from_fd is not None:
            return core.io.read_from_fd
        if core is None or core.io.calls.sock is None:  # made without __init__ (TLS tests)
            return self._socket_read_from_fd()
        return core.io.calls.recv_into  # type: ignore[no-any-return]

    @read_from_fd.setter
    def read_from_fd(self, function: Callable[[memoryview], int | None]) -> None:  # type: ignore[override]
        self._core.io.read_from_fd = function

    @read_from_fd.deleter
    def read_from_fd(self) -> None:
        self._core.io.read_from_fd = self._own_read_from_fd()

    def _socket_read_from_fd(self) -> Callable[[memoryview], int | None]:
        return IOStream.read_from_fd.__get__(self)  # type: ignore[no-any-return]

    @property  # type: ignore[override]
    def _read_buffer(self) -> bytes:
        """A *copy* of the bytes read ahead and not yet consumed (stock
        Tornado keeps a ``bytearray`` here; the core keeps a reusable buffer
        with an offset)."""
        return self._core.reads.peek_buffered()

    @_read_buffer.setter
    def _read_buffer(self, data: BytesLike) -> None:
        # BaseIOStream.__init__ assigns an empty bytearray; any assignment
        # replaces the read-ahead bytes with ``data``.
        self._core.reads.replace_buffered(data)

    @property  # type: ignore[override]
    def _read_buffer_size(self) -> int:
        """Bytes read ahead and not yet consumed (Tornado's
        ``_maybe_add_error_listener`` reads it)."""
        return self._core.reads.buffered_nbytes

    @_read_buffer_size.setter
    def _read_buffer_size(self, nbytes: int) -> None:
        # BaseIOStream.__init__ assigns 0: the count itself is the core's.
        if nbytes != self._core.reads.buffered_nbytes:
            raise AttributeError("_read_buffer_size counts the bytes read ahead: assign _read_buffer instead")

    @property  # type: ignore[override]
    def _write_buffer(self) -> Any:
        """The write queue (a `~tornado_readinto.core.writebuffer.ChunkedWriteBuffer`:
        ``append``/``peek``/``advance``, as dask.distributed uses it), None
        once closed (as stock)."""
        core = self._core
        return None if core.io.closed else core.io.write_buffer

    @_write_buffer.setter
    def _write_buffer(self, value: Any) -> None:
        # BaseIOStream.__init__ assigns a _StreamBuffer, _signal_closed None:
        # the queue itself is the core's.
        pass

    @property  # type: ignore[override]
    def _total_write_index(self) -> int:
        """Bytes ever queued (dask.distributed bumps it after appending to
        `_write_buffer`, then calls ``write(b"")``)."""
        return self._core.io.write_index

    @_total_write_index.setter
    def _total_write_index(self, nbytes: int) -> None:
        self._core.io.write_index = nbytes

    @property  # type: ignore[override]
    def _total_write_done_index(self) -> int:
        """Bytes ever sent."""
        return self._core.io.done_index

    @_total_write_done_index.setter
    def _total_write_done_index(self, nbytes: int) -> None:
        self._core.io.done_index = nbytes

    @property  # type: ignore[override]
    def max_buffer_size(self) -> int:
        """As stock: the most bytes read ahead (a `read_into` buffer does not
        count); kept by the core."""
        return self._core.reads.max_buffer_size

    @max_buffer_size.setter
    def max_buffer_size(self, nbytes: int) -> None:
        self._core.reads.max_buffer_size = nbytes

    @property  # type: ignore[override]
    def read_chunk_size(self) -> int:
        """As stock: the usual size of one read-ahead ``recv``; kept by the
        core."""
        return self._core.reads.read_chunk_size

    @read_chunk_size.setter
    def read_chunk_size(self, nbytes: int) -> None:
        self._core.reads.read_chunk_size = nbytes

    @property
    def nbytes_received(self) -> int:
        """Bytes received so far (for statistics)."""
        return self._core.io.counts.nbytes

    @property
    def receive_calls(self) -> int:
        """Receive calls made so far, those that found nothing included (for
        statistics: `nbytes_received` per call).

        .. versionadded:: 0.1
        """
        return self._core.io.counts.calls

    @property
    def nbytes_received_in_place(self) -> int:
        """Of `nbytes_received`, the bytes the kernel wrote straight into a
        read's own buffer (a `read_into` target, a frame of `read_message`):
        the copies avoided (for statistics).

        .. versionadded:: 0.1
        """
        return self._core.io.counts.nbytes_in_place

    @property
    def nbytes_sent(self) -> int:
        """Bytes sent so far (for statistics; Tornado's
        ``_total_write_done_index``).

        .. versionadded:: 0.1
        """
        return self._core.io.done_index

    @property
    def nbytes_arrived(self) -> int:
        """Bytes the peer has delivered so far, for idle timeouts:
        `nbytes_received` plus the bytes waiting in the kernel below a large
        read's receive low-water mark, which do not wake the loop until the
        mark is reached.  Costs one ``ioctl`` while a mark is set, else
        nothing."""
        core = self._core
        return core.io.counts.nbytes + core.policy.lowat.unreported_nbytes()  # type: ignore[no-any-return]

    # Tornado's per-message state: plain attributes of BaseIOStream, kept in
    # the core's C fields (Tornado's own methods read and write them here).

    @property  # type: ignore[override]
    def _read_future(self) -> Future[Any] | None:
        """The pending read's Future (Tornado's), kept by the core."""
        return self._core.read_future  # type: ignore[no-any-return]

    @_read_future.setter
    def _read_future(self, future: Future[Any] | None) -> None:
        self._core.read_future = future

    @property  # type: ignore[override]
    def _state(self) -> int | None:
        """The events registered with the IOLoop, or None (Tornado's)."""
        return self._core.state  # type: ignore[no-any-return]

    @_state.setter
    def _state(self, state: int | None) -> None:
        self._core.state = state

    @property  # type: ignore[override]
    def _closed(self) -> bool:
        """Tornado's: the stream closed; the core receives and sends no more."""
        return self._core.io.closed

    @_closed.setter
    def _closed(self, closed: bool) -> None:
        self._core.io.closed = closed

    @property  # type: ignore[override]
    def _connecting(self) -> bool:
        """Tornado's: ``connect`` has not finished."""
        return self._core.connecting

    @_connecting.setter
    def _connecting(self, connecting: bool) -> None:
        self._core.connecting = connecting

    @property  # type: ignore[override]
    def _write_futures(self) -> Any:
        """Tornado's ``(write index, Future)`` deque of the pending writes
        (the core keeps none while no write waits: one is made for a
        reader)."""
        core = self._core
        futures = core.write_futures
        if futures is None:
            futures = core.write_futures = collections.deque()
        return futures

    @_write_futures.setter
    def _write_futures(self, futures: Any) -> None:
        # (BaseIOStream.__init__ assigns an empty deque: none is kept)
        self._core.write_futures = futures if futures else None

    @property  # type: ignore[override]
    def max_write_buffer_size(self) -> int | None:
        """As stock: the most bytes queued for sending (None: no limit)."""
        return self._core.max_write_nbytes  # type: ignore[no-any-return]

    @max_write_buffer_size.setter
    def max_write_buffer_size(self, nbytes: int | None) -> None:
        self._core.max_write_nbytes = nbytes

    # The core's state, for tests and introspection.

    @property
    def _busy_poll(self) -> BusyPoll | None:
        return self._core.policy.busy_poll

    @property
    def _own_socket_io(self) -> bool:
        return self._core.io.calls.keep_gil  # type: ignore[no-any-return]

    @property
    def _cork_nbytes(self) -> int:
        return self._core.io.cork_nbytes

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
        with no syscall: the stream's one such Future while the byte count
        repeats (no Future is made), a new one when it changes.  A zero-byte
        ``buf`` resolves at once with no syscall.

        :arg buf: where the bytes land; must not be resized until the read is
            done.
        :arg partial: resolve as soon as at least one byte was read.
        :raises TypeError: ``buf`` is read-only or not C-contiguous (raised
            before anything is read).
        :raises BufferBusyError: another read is in progress.
        :raises StreamClosedError: the stream is closed.  If it closes before
            ``buf`` is full, the Future fails with `IncompleteReadError`.
        """
        return self._core.read_into_future(buf, partial)  # type: ignore[no-any-return]

    def read_bytes(self, num_bytes: int, partial: bool = False) -> Future[bytes]:
        """Read ``num_bytes`` bytes (or, with ``partial``, at least one).

        Same as stock; the result is copied once out of the read-ahead buffer.
        If the stream closes first, the Future fails with `IncompleteReadError`.

        :raises ValueError: ``num_bytes`` is negative.
        """
        return self._core.read_bytes_future(num_bytes, partial)  # type: ignore[no-any-return]

    def read_until(self, delimiter: bytes, max_bytes: int | None = None) -> Future[bytes]:
        """As stock: read up to and including ``delimiter``.

        Each search resumes where the last one stopped, so a line arriving in
        many pieces is scanned once.  If more than ``max_bytes`` bytes come
        before the end of the delimiter, the stream is closed and the Future
        fails with ``StreamClosedError`` (``real_error``:
        ``UnsatisfiableReadError``).
        """
        return self._read(self._core.reads.read_until, delimiter, max_bytes)

    def read_until_regex(self, regex: bytes, max_bytes: int | None = None) -> Future[bytes]:
        """As stock: read up to the end of the first match of ``regex``;
        ``max_bytes`` as in `read_until`."""
        return self._read(self._core.reads.read_until_regex, re.compile(regex), max_bytes)

    def read_until_close(self) -> Future[bytes]:
        """As stock: read everything until the peer closes (bounded by
        ``max_buffer_size``); resolves at once on a closed stream."""
        return self._read(self._core.reads.read_until_close)

    def read_message(self, reader: MessageReader) -> Future[Any]:
        """Read one message with an incremental ``reader`` (such as
        `tornado_readinto.wire.framing.FrameReader`); resolve to what its
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
        return self._core.read_message_future(reader)  # type: ignore[no-any-return]

    def _read(self, start: Callable[..., Any], *args: Any) -> Future[Any]:
        """The path of the reads that have no entry of their own in the core
        (``read_until``, ``read_until_regex``, ``read_until_close``):
        ``start(*args)`` is one of the core's ``read_*`` methods, and
        `FaceCore.started` does the rest, as for every read.

        * The bytes read ahead complete the read: an already resolved Future
          (no read state, no syscall).
        * They break a limit (``read_until``'s ``max_bytes``) or a reader
          rejects them: the stream closes and the read's Future fails.
        * Else the read gets its Future and, unless a ``recv`` just proved
          the socket empty, receives now; if that does not complete it, it
          parks (busy-poll policy, cork flushed) and waits for READ.

        :raises BufferBusyError: another read is in progress.
        :raises StreamClosedError: the stream is closed (and the bytes read
            ahead do not complete the read).
        :raises OSError: the receive failed (the stream is closed).
        """
        core = self._core
        if core.read_future is not None:
            return core.busy()  # type: ignore[no-any-return]
        try:
            result = start(*args)
        except Exception as e:
            return core.start_failed(e)  # type: ignore[no-any-return]
        return core.started(result)  # type: ignore[no-any-return]

    def _failed_read(self, error: Exception, where: str) -> Future[Any]:
        """A read whose start already failed (`_read`): its Future fails as
        the stream closes."""
        future: Future[Any] = Future(loop=self._loop)
        self._read_future = future
        self._fail(error, where)
        return future

    def _complete(self, result: Any) -> None:
        """Resolve the pending read's Future to ``result`` (the core's
        ``complete``)."""
        self._core.complete(result)

    def read_would_wait(self) -> bool:
        """True when a read started now would certainly wait for the event
        loop: nothing is read ahead and a ``recv`` just proved the (plain)
        socket empty with READ registered.  No syscall.  Lets a serving loop
        skip its own yield between requests."""
        return self._core.read_would_wait()  # type: ignore[no-any-return]

    def _readable(self) -> None:
        """A READ event: receive for the pending read (or read ahead)."""
        self._core.readable_event()

    # -- writes ----------------------------------------------------------------

    def set_nodelay(self, value: bool) -> None:
        """As stock `IOStream.set_nodelay`: one ``setsockopt(TCP_NODELAY)``
        on a TCP socket, nothing on other families, errors of a socket being
        closed ignored.  The family is looked up once, when the stream is
        made, not per call (Tornado's ``HTTP1Connection`` calls this twice
        per response)."""
        if self._tcp and self.socket is not None:
            try:
                self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1 if value else 0)
            except OSError as e:
                if e.errno != errno.EINVAL and not self._is_connreset(e):
                    raise

    @property
    def write_buffer_nbytes(self) -> int:
        """Bytes queued and not yet sent (0 once closed): for backpressure."""
        return len(self._core.io.write_buffer)

    def writing(self) -> bool:
        """As stock: True while written bytes wait to be sent."""
        return bool(self._core.io.write_buffer)

    def write(self, data: Any) -> Future[None]:
        """Queue ``data`` and send what the socket takes now; the Future
        resolves once all of it was sent.

        As stock `IOStream.write` (same ``max_write_buffer_size`` check, same
        Future), but ``data`` may be any C-contiguous buffer and is sized by
        ``nbytes``.  Data over 8 KiB is kept by reference until sent (do not
        modify it before the Future resolves); smaller data is copied into a
        shared chunk.  Sending gathers up to `IOV_MAX` queued buffers per
        ``sendmsg`` on plain sockets.

        :raises StreamClosedError: the stream is closed.
        :raises StreamBufferFullError: ``max_write_buffer_size`` would be
            exceeded (nothing is queued).
        """
        return self.writelines((data,))

    def writelines(self, buffers: Any) -> Future[None]:
        """Queue many buffers under one Future and send them with as few
        gather syscalls as the socket allows.

        Costs one Future for the whole call (no per-buffer Future or
        callback); buffers over 8 KiB are sent by reference (zero copy),
        smaller ones are coalesced by one copy into shared chunks.  On plain
        sockets every ``sendmsg`` carries up to `IOV_MAX` buffers, and when
        nothing is queued the buffers go out in one ``sendmsg`` straight from
        the caller's objects: nothing is copied or queued unless the kernel
        takes only part of them, and when it takes them all the returned
        Future is already resolved: the same Future for every such write of
        every stream of the event loop, so that none is made (a write that
        has to wait gets a Future of its own).

        Cork: while bytes of further input are already read ahead (pipelined
        requests), a write of small buffers (each under 8 KiB, up to
        `CORK_MAX_NBYTES` held in all) is copied and held, and its Future is
        resolved at once; the held bytes leave in one ``sendmsg`` with the
        first write made once the read-ahead is drained, or when a read has
        to wait for the socket, or on the next event-loop iteration, or
        before `close`, whichever comes first.  A write made with nothing
        read ahead is never held.

        :arg buffers: bytes-like objects (any C-contiguous buffer, sized by
            ``nbytes``); they must stay unchanged until the Future resolves.
        :raises StreamClosedError: the stream is closed.
        :raises StreamBufferFullError: ``max_write_buffer_size`` would be
            exceeded (nothing is queued).
        """
        return self._core.write_future(buffers)  # type: ignore[no-any-return]

    def _writable(self) -> None:
        """A WRITE event (or a write to send now): send what is queued,
        then resolve the writes whose bytes all left."""
        self._core.writable_event()

    def _uncork(self) -> None:
        """Send what the cork holds (on the event loop's next iteration, or
        before closing)."""
        if self._core.uncork():
            self._add_io_state(_WRITE)

    # -- the error policy --------------------------------------------------------

    def _fail(self, error: BaseException, where: str) -> bool:
        """The stream's one error policy: log ``error`` as Tornado logs it
        where it happened, record it as the stream's ``error`` and close the
        stream.  Returns True when the caller must raise it on (what stock
        raises to the caller of a read or out of the event handler).

        :arg where: ``"read"`` (a read being started), ``"event"`` (a READ
            event), ``"events"`` (the event handler's last resort),
            ``"write"`` (a send), ``"data"`` (a reader rejected the bytes:
            not logged) or ``"cancel"`` (a read's Future was cancelled).
        """
        raise_on = False
        if isinstance(error, UnsatisfiableReadError):
            gen_log.info("Unsatisfiable read, closing connection: %s", error)
        elif where == "events":
            gen_log.error("Uncaught exception, closing connection.", exc_info=error)
            raise_on = True
        elif where == "data":
            pass
        elif where == "cancel":
            gen_log.debug("read cancelled; closing %r so it cannot get out of step", self)
        elif isinstance(error, StreamBufferFullError):
            gen_log.error("Reached maximum read buffer size")
            if where == "event":
                gen_log.warning("error on read: %s", error)
            raise_on = where == "read"
        elif not self._is_connreset(error):
            if where == "write":
                gen_log.warning("Write error on %s: %s", self.fileno(), error)
            elif where == "event":
                gen_log.warning("error on read: %s", error)
            else:
                raise_on = True  # an inline read raises, as stock
        self.close(exc_info=error)
        return raise_on

    # -- close and events: Tornado's bodies, edited --------------------------------

    def close(self, exc_info: Any = False) -> None:
        """As stock `IOStream.close`; replies held by the cork (see
        `writelines`) are sent first, unless closing for an error.

        As stock, a pending read that the bytes read ahead satisfy completes,
        and ``read_until_close`` completes with them unless the stream closes
        for an error (a connection reset counts as a close)."""
        core = self._core
        if core.io.cork_nbytes and not exc_info:
            self._uncork()
        core.io.cork_nbytes = 0
        if not self._closed:
            # Stock close(), with the core deciding what a pending read gets
            # (stock asks _find_read_pos and _finish_read).
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
            future = self._read_future
            if future is not None and future.cancelled():
                self._read_future = None  # its done callback finds the stream closed
            result = core.reads.eof_received(error is None or self._is_connreset(error))
            if result is not PENDING:
                self._complete(result)
            if self._state is not None:
                self.io_loop.remove_handler(self.fileno())
                self._state = None
            try:
                self.close_fd()
            finally:
                # Also when close_fd raised: the stream is closed all the
                # same, the kernel may give the fd number to the next socket,
                # and the pending read, the write Futures and the close
                # callback must learn it.
                core.io.socket_closed()
                self._signal_closed()
            return
        self._signal_closed()

    def _signal_closed(self) -> None:
        future = self._read_future
        # The core says what the pending read fails with (IncompleteReadError
        # with counts, the reader's own error, or StreamClosedError), and gives
        # back a drained read-ahead buffer.
        error = self._core.reads.connection_lost(self.error)
        if error is not None and future is not None and not future.done():
            if type(future) is not _EagerReadFuture:
                # The stream is closed already: the cancellation callback has
                # nothing to do (and the loop may be closed too).
                future.remove_done_callback(self._core.done_cb)
            future.set_exception(error)
            future.exception()  # retrieved: the caller gets it by awaiting
        # Release our views of the caller's buffers now.
        self._core.io.write_buffer.clear()
        super()._signal_closed()

    def _handle_events(self, fd: Any, events: int) -> None:
        """The readiness callback that Tornado registers (through
        ``AsyncIOLoop._handle_events``): `_dispatch_events`, then the wake-up
        of the read it completed, in the same loop turn, if that read is an
        `_EagerReadFuture` (see `_read`).  WRITE events come here; READ
        events only where the stream keeps Tornado's dispatch
        (`direct_read_loop`), or while it connects (see `_read_ready`)."""
        core = self._core
        if core.in_events:  # re-entered: the outer call wakes the waiters
            self._dispatch_events(fd, events)
            return
        core.in_events = True
        try:
            self._dispatch_events(fd, events)
        finally:
            core.end_events()

    def _read_ready(self) -> None:
        """The READ callback that the asyncio loop calls directly
        (`FaceCore.read_ready`, which `_read_directly` registers itself
        unless this method is replaced on the instance): what
        ``_handle_events(fd, READ)`` does, with none of the three Python
        frames of Tornado's dispatch (``AsyncIOLoop._handle_events``,
        `_handle_events`, `_dispatch_events`).

        Registered with the public ``add_reader`` in place of the reader
        Tornado just registered for READ (`_add_io_state`, `_update_state`):
        Tornado's books (``IOLoop.handlers``, its ``readers`` set) stay as
        they are, and its ``update_handler``/``remove_handler`` remove this
        reader as they would have removed theirs.  A stream that is
        connecting, closed, or inside a readiness callback already goes the
        general way (`_handle_events`).
        """
        self._core.read_ready()

    def _dispatch_events(self, fd: Any, events: int) -> None:
        """Tornado's ``_handle_events``, edited: the events of one readiness
        callback (`_read_ready` is its READ-only case)."""
        if self._closed:
            gen_log.warning("Got events for closed stream %s", fd)
            return
        try:
            if self._connecting:
                self._handle_connect()
                if self._closed:
                    return
            reads = self._core.reads
            if events & _READ:
                self._core.policy.data_ready()
                self._readable()
                if self._closed:
                    return
                if events == _READ and (self._read_future is not None or reads.buffered_nbytes < reads.read_chunk_size):
                    return  # READ was registered and stays: nothing to update
            if events & _WRITE:
                self._writable()
            if self._closed:
                return
            if events & _ERROR:
                self.error = self.get_fd_error()
                self.io_loop.add_callback(self.close)
                return
            self._update_state()
        except Exception as e:
            if self._fail(e, "events"):
                raise

    def _update_state(self) -> None:
        """Register with the IOLoop what the stream waits for now (the end of
        Tornado's ``_handle_events``)."""
        core = self._core
        state = _ERROR
        # Unlike stock, keep READ while the read-ahead buffer has room, so
        # consecutive reads on a busy stream cost no epoll_ctl.
        if self.reading() or core.reads.buffered_nbytes < core.reads.read_chunk_size:
            state |= _READ
        if self.writing():
            state |= _WRITE
        before = self._state
        if state != before:
            assert before is not None, "_update_state without self._state"
            self._state = state
            self.io_loop.update_handler(self.fileno(), state)
            if state & _READ and not before & _READ:
                self._read_directly()

    def _add_io_state(self, state: int) -> None:
        """Tornado's: add ``state`` to what the IOLoop watches
        (``add_handler`` or ``update_handler``: the IOLoop's books).  When
        that registered READ, `_read_ready` becomes the fd's reader."""
        before = self._state
        super()._add_io_state(state)
        after = self._state
        if after is not None and after & _READ and (before is None or not before & _READ):
            self._read_directly()

    def _maybe_add_error_listener(self) -> None:
        """Tornado's: once the IOLoop watches nothing but errors, the stream
        is open, nothing is read ahead and a close callback is set, watch
        READ too, so that the peer closing is seen.  Stock's test on the
        core's fields, in one call (stock's reads three of this class's
        properties); runs after each read or write that completes."""
        core = self._core
        state = core.state
        if (
            (state is None or state == _ERROR)
            and self._close_callback is not None
            and not core.io.closed
            and not core.reads.buffered_nbytes
        ):
            self._add_io_state(_READ)

    def _read_directly(self) -> None:
        """Replace the reader that Tornado just registered for the stream's
        fd with `_read_ready` (the public ``add_reader`` replaces a reader;
        no syscall on asyncio's loop or uvloop: the fd was reading already).
        Nothing on a stream that keeps Tornado's dispatch."""
        loop = self._read_loop
        if loop is not None:
            reader = self._read_ready
            if getattr(reader, "__func__", None) is ReadIntoIOStream._read_ready:
                reader = self._core.read_ready  # the same, with no call of ours before it
            loop.add_reader(self.socket.fileno(), reader)

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
        core = self._core
        if (
            self._read_future
            or self._write_futures
            or self._connecting
            or self._closed
            or core.reads.buffered_nbytes
            or core.io.write_buffer
        ):
            raise ValueError("IOStream is not idle; cannot convert to SSL")
        if ssl_options is None:
            ssl_options = default_ssl_context(server_side)
        sock = self.socket
        self.io_loop.remove_handler(sock)
        self.socket = None  # type: ignore[assignment]
        # The socket now belongs to the TLS stream: closing this one later
        # must not touch it (stock raises AttributeError there).
        core.io.detach_socket()
        self._state = None
        sock = ssl_wrap_socket(
            sock,
            ssl_options,
            server_hostname=server_hostname,
            server_side=server_side,
            do_handshake_on_connect=False,
        )
        close_callback, self._close_callback = self._close_callback, None
        ssl_stream = SSLReadIntoIOStream(
            sock,
            ssl_options=ssl_options,
            max_buffer_size=self.max_buffer_size,
            read_chunk_size=self.read_chunk_size,
            max_write_buffer_size=self.max_write_buffer_size,
            busy_poll_s=self.busy_poll_s,
        )
        ssl_stream.set_close_callback(close_callback)
        # Tornado's public way to the handshake's Future (its start_tls sets
        # the attribute behind it): nothing else is pending on a new stream.
        future: Future[SSLReadIntoIOStream] = ssl_stream.wait_for_handshake()  # type: ignore[assignment]
        future.add_done_callback(lambda f: ssl_stream.close() if f.cancelled() else None)
        return future


class SSLReadIntoIOStream(ReadIntoIOStream, SSLIOStream):  # type: ignore[misc]
    """`ReadIntoIOStream` over TLS: a drop-in `tornado.iostream.SSLIOStream`.

    Reads wait on the selector only when no decrypted byte can be left inside
    the SSL object, where the selector cannot see it: after OpenSSL reported
    "want read", or after a receive shorter than asked and shorter than a full
    record (the end of the peer's write; so a small message costs no
    ``SSL_read`` bound to fail with "want read").  Each ``recv_into`` is
    clipped to 1 GiB (OpenSSL takes an ``int``), and no read is attempted
    before the handshake has finished.  Writes go out one
    ``SSL_write`` per coalesced segment.

    .. versionadded:: 0.1
    """

    # A TLS recv returns at most one record: a short read proves the socket
    # drained only if it is also shorter than a full record (the end of the
    # peer's write, nothing left decrypted in the SSL object).
    _short_read_drains = False
    _tls_record_nbytes = TLS_RECORD_NBYTES
    # Its socket starts plain and is wrapped after connect(): decide here.
    _gather = False

    def _own_read_from_fd(self) -> Callable[[memoryview], int | None] | None:
        # SSL_read through the ssl object (SSLIOStream's), never the plain path.
        override = type(self).read_from_fd
        if override is ReadIntoIOStream.read_from_fd:
            return self._socket_read_from_fd()
        return self.read_from_fd  # type: ignore[no-any-return]

    def _socket_read_from_fd(self) -> Callable[[memoryview], int | None]:
        return SSLIOStream.read_from_fd.__get__(self)  # type: ignore[no-any-return]

    def _readable(self) -> None:
        if self._ssl_accepting:
            self._do_ssl_handshake()
            if self._ssl_accepting or self._closed:
                return
            # Records may already sit decrypted in the SSL object.
            self._core.policy.may_have_data()
        super()._readable()

    def _writable(self) -> None:
        if self._ssl_accepting:
            self._do_ssl_handshake()
            if self._ssl_accepting or self._closed:
                return
            self._core.policy.may_have_data()
            if self._read_future is not None:
                super()._readable()
                if self._closed:
                    return
        super()._writable()

    def close_fd(self) -> None:
        """As stock (close the socket), after emptying this thread's OpenSSL
        error queue: the error the stream closes for may have left entries
        there that would fail the next read of another connection (see
        `tornado_readinto.face._sslerrors`).  `close` calls it once, in the loop
        callback where the error was raised."""
        _sslerrors.clear()
        super().close_fd()
