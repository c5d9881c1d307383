# cython: annotation_typing=False
"""`StreamCore`: one object that owns a stream's socket I/O.

It is the read core (`tornado_readinto._readcore.ReadCore`, which it
extends: the read-ahead buffer and the one pending read), the receive
(``recv_into`` into the buffer the read core hands out, through the
socket calls of `tornado_readinto._sockcalls`, the proof that the socket is
empty and the busy-poll policy's hooks) and the write queue with its cork (gather
``sendmsg``).  `tornado_readinto._facecore.FaceCore` extends it with the
Tornado face's per-message state (the Futures, the registration state);
`tornado_readinto.iostream.ReadIntoIOStream` is the thin face over that.

Strategy:

* The core imports nothing from Tornado and holds no event loop: every
  method returns what the face needs (a read's result or `PENDING`, a write's
  status) and raises the errors the face's policy must see.  It calls back
  into the face for four things only, each a plain callable field:

  - ``read_from_fd(view) -> int | None``: the receive of a stream that does
    not use a plain socket's ``recv_into`` (TLS, a subclass or an instance
    that replaced Tornado's ``read_from_fd``); None for the others, which
    the core receives from itself (`SocketCalls.recv_into`);
  - ``write_to_fd(view) -> int``: the send of a stream without ``sendmsg``
    (TLS), one segment at a time;
  - ``close(exc_info)``: the peer closed (``close(False)``);
  - ``fail(error, where)``: the face's error policy, for the bytes a reader
    rejected (``"data"``) and for a failed send (``"write"``).

* Fields are plain and typed, methods are ordinary methods, and the hot ones
  call no other Python function but the socket's and the read core's, so
  that Cython can compile this module in pure-Python mode with a ``.pxd``.
* A ``recv`` that returns fewer bytes than asked for (plain sockets) or EAGAIN
  proves the socket empty for a while (`tornado_readinto._emptyproof`): a
  read that has to wait then parks without trying the socket.  On TLS,
  decrypted bytes can sit inside the SSL object, where the selector does
  not see them; but a TLS receive returns at most one record, so one shorter
  than asked and shorter than a full record (`TLS_RECORD_NBYTES`) emptied
  the SSL object at the end of the peer's write, and proves the same.
* A read that waits for `RCVLOWAT_MIN_MISSING` bytes or more of its own
  buffer sets the socket's receive low-water mark to what it still needs,
  at most `RCVLOWAT_NBYTES` (`tornado_readinto._lowat`), so that the loop
  wakes once per `RCVLOWAT_NBYTES` instead of once per arriving batch, and
  once more when the read's last byte has arrived.
* Writes go out in ``sendmsg`` calls of up to `IOV_MAX` buffers; on an idle
  socket straight from the caller's objects, queued only if the kernel took
  part of them.  Replies written while more input is already read ahead are
  corked (copied, at most `CORK_MAX_NBYTES`) until the reads catch up.
* Every ``recv_into`` and gathered ``sendmsg`` on a plain socket goes
  through one `tornado_readinto._sockcalls.SocketCalls`, which keeps the GIL
  where that pays (while another thread is seen to hold it, or, compiled, in
  a process with no other Python thread) and times the calls that may show
  a stall.
"""

from __future__ import annotations

import operator
import os
import socket
from collections.abc import Iterable, Sequence
from time import perf_counter
from typing import Any, Callable, Final

from . import _gilheld
from ._emptyproof import DRAINED_VALID_S, EmptyProof
from ._lowat import RCVLOWAT_MIN_MISSING, RCVLOWAT_NBYTES, LowWaterMark
from ._readcore import (
    _INTO,
    DEFAULT_MAX_BUFFER_SIZE,
    DEFAULT_READ_CHUNK_SIZE,
    DIRECT_READ_MIN_NBYTES,
    PENDING,
    ReadCore,
)
from ._sockcalls import SocketCalls
from ._tornado_compat import StreamBufferFullError, UnsatisfiableReadError
from .busypoll import BusyPoll
from .framing import FrameReader
from .writebuffer import ChunkedWriteBuffer

__all__ = [
    "CORKED",
    "CORK_MAX_NBYTES",
    "DRAINED_VALID_S",
    "IOV_MAX",
    "MAX_SEND_NBYTES",
    "QUEUED",
    "RCVLOWAT_MIN_MISSING",
    "RCVLOWAT_NBYTES",
    "SEND",
    "SENT",
    "StreamCore",
    "TLS_RECORD_NBYTES",
]


def _iov_max() -> int:
    try:
        return max(1, os.sysconf("SC_IOV_MAX"))
    except (AttributeError, ValueError, OSError):  # pragma: no cover
        return 16  # POSIX's minimum _XOPEN_IOV_MAX


#: Buffers per ``sendmsg``: the kernel's limit (1024 on Linux).
IOV_MAX: Final = _iov_max()

#: The most plaintext bytes of one TLS record (TLS 1.2 and 1.3: 2**14).  A
#: receive through the ``ssl`` module returns at most one record (OpenSSL
#: without read-ahead, as Python runs it).
TLS_RECORD_NBYTES: Final = 16 * 1024  # bytes

#: The most bytes of replies a stream holds back while more input is
#: already read ahead (see `StreamCore.writelines`): one coalescing chunk of
#: the write buffer.
CORK_MAX_NBYTES: Final = 64 * 1024  # bytes

#: Only buffers under this size are held back: they are copied, so their
#: writers may reuse them at once (the write buffer's own threshold).
_CORK_MAX_BUFFER_NBYTES: Final = 8 * 1024  # bytes

#: Bytes offered to one ``sendmsg``.  Linux's default TCP send buffer tops out
#: at 4 MiB (net.ipv4.tcp_wmem), so a larger offer only makes more views.
MAX_SEND_NBYTES: Final = 16 * 1024 * 1024  # bytes

# What `StreamCore.writelines` returns.
#: Nothing to wait for: every byte was sent, or held by the cork.
SENT: Final = 0
#: Held by the cork, which was empty: the face calls `StreamCore.uncork` on
#: the event loop's next iteration.
CORKED: Final = 1
#: Queued: the face makes the write's Future and sends now (`send_queued`).
SEND: Final = 2
#: Queued behind a full socket buffer or a connect: the face makes the
#: write's Future and waits for WRITE.
QUEUED: Final = 3

#: Up to this many buffers, `_total_nbytes` sums them one by one.
_FEW_BUFFERS: Final = 8

_nbytes = operator.attrgetter("nbytes")


def _buffer_nbytes(data: Any) -> int:
    """The size of a bytes-like object in bytes (``len`` would count the
    items of a typed buffer)."""
    if type(data) in (bytes, bytearray):
        return len(data)
    return data.nbytes if type(data) is memoryview else memoryview(data).nbytes  # type: ignore[no-any-return]


def _total_nbytes(buffers: Sequence[Any]) -> int:
    """The total size in bytes of bytes-like objects.  A few buffers (a
    message's head and frames) are summed one by one, ``bytes`` and
    ``bytearray`` by ``len`` with no ``memoryview`` made (compiled, a C
    loop); many (a message may have thousands) in C with ``map``, with no
    bytecode per buffer in the pure build either."""
    if len(buffers) > _FEW_BUFFERS:
        return sum(map(_nbytes, map(memoryview, buffers)))  # type: ignore[arg-type]
    total = 0
    for data in buffers:
        total += _buffer_nbytes(data)
    return total


def _no_close(exc_info: Any) -> None:  # pragma: no cover - replaced by the face
    raise RuntimeError("StreamCore.close was not set by the stream")


def _no_fail(error: BaseException, where: str) -> bool:  # pragma: no cover - replaced by the face
    raise error


class StreamCore(ReadCore):
    """The socket I/O of one stream: the read core, the receive, the write
    queue and the cork (see the module's strategy).

    Not thread-safe: one core belongs to one stream, on its event loop's
    thread.

    :arg sock: the stream's socket (unused by TLS streams, whose face
        receives and sends through ``read_from_fd``/``write_to_fd``).
    :arg gather: send with ``sock.sendmsg`` (plain sockets); else one
        ``write_to_fd`` per segment.
    :arg short_read_drains: a ``recv`` shorter than asked proves the socket
        empty (plain sockets; not TLS).
    :arg tls_record_nbytes: a receive shorter than asked and shorter than
        this proves the socket drained (TLS: `TLS_RECORD_NBYTES`; 0: none).
    :arg own_socket_io: ``sock`` is a real socket whose own C methods may be
        replaced by `tornado_readinto._gilheld`'s calls (`SocketCalls`'s
        ``keep_gil``: held calls while the GIL is contended, and in the
        compiled build untimed native calls in a process with no other
        Python thread).
    :arg busy_poll: the busy-poll policy told when a read parks, or None.
    :arg read_from_fd: the face's receive (TLS, a subclass's override), or
        None: the core receives on ``sock`` itself.
    :arg write_to_fd: the face's send of one segment (without ``gather``).
    :arg close: closes the stream (``close(exc_info)``).
    :arg fail: the face's error policy (``fail(error, where)``).
    :arg proof: the proof that the socket is empty (default: a new
        `EmptyProof`).

    ``read_chunk_size``, ``max_buffer_size`` and ``direct_min_nbytes`` are
    the read core's.

    .. versionadded:: 0.1
    """

    __slots__ = (
        # the socket
        "calls",
        "gather",
        "short_read_drains",
        "tls_record_nbytes",
        "closed",
        # the receive
        "proof",
        "nbytes_received",
        "busy_poll",
        "lowat",
        "wait_nbytes",
        # the write queue and the cork
        "write_buffer",
        "write_index",
        "done_index",
        "cork_nbytes",
        # callbacks into the face
        "read_from_fd",
        "write_to_fd",
        "close",
        "fail",
    )

    def __init__(
        self,
        sock: socket.socket | None = None,
        *,
        gather: bool = True,
        short_read_drains: bool = True,
        tls_record_nbytes: int = 0,
        own_socket_io: bool = False,
        read_chunk_size: int = DEFAULT_READ_CHUNK_SIZE,
        max_buffer_size: int = DEFAULT_MAX_BUFFER_SIZE,
        direct_min_nbytes: int = DIRECT_READ_MIN_NBYTES,
        busy_poll: BusyPoll | None = None,
        read_from_fd: Callable[[memoryview], int | None] | None = None,
        write_to_fd: Callable[[memoryview], int] | None = None,
        close: Callable[[Any], None] | None = None,
        fail: Callable[[BaseException, str], bool] | None = None,
        proof: EmptyProof | None = None,
    ) -> None:
        """Every option is settled here, once: the stream's owner passes
        them all (`tornado_readinto.iostream` does), and none is assigned
        from outside afterwards (the receive hook ``read_from_fd`` alone may
        be replaced, as Tornado's tests do)."""
        super().__init__(read_chunk_size, max_buffer_size, direct_min_nbytes)
        #: The receive and send calls on the socket (plain streams receive
        #: and send on it directly; its ``sock`` is None only for a TLS
        #: stream's core, or once start_tls took the socket), keeping the
        #: GIL where that pays (`SocketCalls`: a heuristic).
        self.calls = SocketCalls(sock, own_socket_io)
        #: Sends gather with ``sendmsg`` (else ``write_to_fd`` per segment).
        self.gather = gather
        #: A short ``recv`` proves the socket empty (not on TLS).
        self.short_read_drains = short_read_drains
        #: TLS: a receive shorter than asked and than this proves it too.
        self.tls_record_nbytes = tls_record_nbytes
        #: True once the stream closed: nothing is received or sent any more.
        self.closed = False
        #: Whether the socket is proved empty (`EmptyProof`: a heuristic,
        #: told what each receive, READ event and write showed).
        self.proof = EmptyProof() if proof is None else proof
        #: Bytes received so far.
        self.nbytes_received = 0
        #: The busy-poll policy told when a read parks, or None.
        self.busy_poll: BusyPoll | None = busy_poll
        #: The receive low-water mark of large waits (`LowWaterMark`: a
        #: heuristic, plain TCP on Linux).
        self.lowat = LowWaterMark(sock, short_read_drains)
        #: Bytes the pending read is sure to need after the last receive
        #: (the rest of its own buffer, received in place: a read_into that
        #: is not partial, a FrameReader's frame), or 0.
        self.wait_nbytes = 0
        #: Queued bytes (``append``/``peek``/``advance``, as Tornado's).
        self.write_buffer = ChunkedWriteBuffer()
        #: Bytes ever queued (Tornado's ``_total_write_index``).
        self.write_index = 0
        #: Bytes ever sent (Tornado's ``_total_write_done_index``).
        self.done_index = 0
        #: Bytes at the end of the write queue that the cork holds back.
        self.cork_nbytes = 0
        #: The face's receive, or None: ``calls.recv_into`` on the socket.
        self.read_from_fd: Callable[[memoryview], int | None] | None = read_from_fd
        #: The face's send of one segment (streams without ``sendmsg``).
        self.write_to_fd: Callable[[memoryview], int] | None = write_to_fd
        #: Closes the stream (the face's ``close(exc_info)``).
        self.close: Callable[[Any], None] = _no_close if close is None else close
        #: The face's error policy: ``fail(error, where)`` logs, records the
        #: error and closes the stream.
        self.fail: Callable[[BaseException, str], bool] = _no_fail if fail is None else fail

    def detach_socket(self) -> None:
        """The socket now belongs to another stream (``start_tls``): this
        core is closed and never touches it again."""
        self.closed = True
        self.calls.off()
        self.lowat.off()

    def socket_closed(self) -> None:
        """The face closed the socket: this core is closed, and its calls
        never use the socket's fd number again (it may already be another
        socket's)."""
        self.closed = True
        self.calls.socket_closed()

    # -- Incoming flow ----------------------------------------------------------

    def receive(self) -> Any:
        """Receive what the socket has now and feed it to the read core;
        return the pending read's result, or `PENDING`.

        With a read pending: receive until it completes, the socket has no
        more data or the stream closes.  With none: one ``recv`` bounded by
        ``read_chunk_size`` (which also notices EOF), none when that many
        bytes are read ahead already.

        Cost: per receive one ``recv_into`` (two ``perf_counter`` reads), one
        `get_buffer` and one `buffer_updated`.

        :raises OSError: the receive failed (the stream is not closed yet:
            the face's error policy closes it).
        :raises StreamBufferFullError: more than ``max_buffer_size`` bytes are
            read ahead.
        :raises UnsatisfiableReadError: a ``max_bytes`` was exceeded.
        """
        reading = self._mode != 0  # not _IDLE
        read_from_fd = self.read_from_fd
        proof = self.proof
        proof.receiving()
        self.wait_nbytes = 0
        while not self.closed:
            try:
                view = self.get_buffer()
            except Exception as e:  # a reader that failed earlier, or no memory
                self.fail(e, "data")
                return PENDING
            requested = len(view)
            if not requested:
                return PENDING  # idle, read_chunk_size bytes read ahead: none
            received = self.calls.recv_into(view) if read_from_fd is None else read_from_fd(view)
            view = None  # type: ignore[assignment]  # (a slice of read-ahead storage alive would keep it from its pool)
            if received is None:  # EAGAIN
                # (TLS: "want read" proves nothing, so that a read started
                # next tries the socket, as Tornado's does: a failing socket
                # raises inline after a handshake.)
                if self.short_read_drains:
                    proof.emptied(False)
                break
            if not received:
                proof.ended()
                self.close(False)  # the peer closed: a pending read ends
                break
            if received < requested and (self.short_read_drains or received < self.tls_record_nbytes):
                proof.emptied(True)
            self.nbytes_received += received
            if not reading:
                self.buffer_updated(received)
                self.spare_storage()
                return PENDING
            try:
                result = self.buffer_updated(received, True)
            except (StreamBufferFullError, UnsatisfiableReadError):
                raise
            except Exception as e:  # the reader rejected the bytes (FramingError…)
                self.fail(e, "data")
                return PENDING
            if result is not PENDING:
                self.lowat.reset()
                self.spare_storage()
                return result
            if not proof.readable:
                break
        if not self.buffered_nbytes and self._ra is not None:
            self._release_read_ahead()  # (EAGAIN: an idle stream holds no storage)
        if self.closed or not reading:
            return PENDING
        # The read waits (EAGAIN or a short receive): what is left of its own
        # buffer, if the receive went there, is what it is sure to need, for
        # a read_into that is not partial and for a FrameReader's frame (its
        # view is exactly the frame's rest); another MessageReader's buffer
        # may be larger than its message.
        if self._direct and (not self._partial if self._mode == _INTO else type(self._reader) is FrameReader):
            self.wait_nbytes = requested - (received or 0)
        return self.search()  # a regex search put off by buffer_updated(n, True)

    def park(self) -> bool:
        """The pending read waits for the socket: send the replies the cork
        holds (the reads caught up), set or clear the receive low-water mark
        of a large wait (`RCVLOWAT_MIN_MISSING`), and tell the busy-poll
        policy unless a mark is set.  Returns True if written bytes are left
        queued (the face waits for WRITE)."""
        left = False
        if self.cork_nbytes:
            left = self.uncork()
        if self.lowat.wait(self.wait_nbytes if self.read_from_fd is None else 0):
            return left  # a long wait for the mark: no spin
        poll = self.busy_poll
        if poll is not None:
            now = perf_counter()
            if now >= _gilheld.held_until:  # contended GIL: no spinning, no bookkeeping
                poll.parked(now)
        return left

    def readable(self) -> None:
        """A READ event: the socket has data (the busy-poll policy is told
        if a read was parked)."""
        self.proof.data_ready()
        poll = self.busy_poll
        if poll is not None and poll.parked_at:
            poll.data_came(perf_counter())

    # -- Outgoing flow ----------------------------------------------------------

    def writelines(self, buffers: Iterable[Any], connecting: bool, max_write_nbytes: int | None) -> int:
        """Take a write of ``buffers``: send it now, cork it or queue it.
        Returns `SENT`, `CORKED`, `SEND` or `QUEUED` (see each).

        On an idle plain socket the buffers go out in one ``sendmsg``
        straight from the caller's objects; only what the kernel did not
        take is queued (large buffers by reference, small ones copied).
        While bytes of further input are read ahead, small buffers (each
        under 8 KiB, up to `CORK_MAX_NBYTES` in all) are copied and held.

        :arg connecting: the stream is still connecting (queue only).
        :arg max_write_nbytes: Tornado's ``max_write_buffer_size`` (None: no
            limit).
        :raises StreamBufferFullError: ``max_write_nbytes`` would be exceeded
            (nothing is queued).
        """
        self.proof.wrote()
        write_buffer = self.write_buffer
        if self.buffered_nbytes and self.gather and len(write_buffer) == self.cork_nbytes:
            # (Never behind bytes queued by someone else, e.g. dask's direct
            # _write_buffer appends: their write(b"") must wait for them.)
            if not connecting and max_write_nbytes is None:
                was_corked = self.cork_nbytes
                if self._cork(buffers):
                    return SENT if was_corked else CORKED
        sent = 0
        blocked = False  # the kernel took only part: wait for WRITE
        if self.gather and max_write_nbytes is None and not connecting and not write_buffer:
            if not isinstance(buffers, (list, tuple)):
                buffers = list(buffers)
            if len(buffers) <= IOV_MAX:
                total = _total_nbytes(buffers)
                try:
                    sent = self.calls.sendmsg(buffers, total) if total else 0
                except BlockingIOError:
                    blocked = True
                    self.proof.unconfirmed = False  # (a socket with an error fails a send)
                except Exception:
                    pass  # the queued path below sends again and handles the error
                else:
                    self.proof.unconfirmed = False
                    if sent == total:
                        self.write_index += total
                        self.done_index += total
                        return SENT
                    blocked = True
        self.cork_nbytes = 0  # whatever the cork holds goes out with this write
        queued = len(write_buffer)
        if max_write_nbytes is not None:
            if not isinstance(buffers, (list, tuple)):
                buffers = list(buffers)
            if queued + _total_nbytes(buffers) > max_write_nbytes:
                raise StreamBufferFullError("Reached maximum write buffer size")
        for data in buffers:
            write_buffer.append(data)
        self.write_index += len(write_buffer) - queued
        if sent:
            write_buffer.advance(sent)
            self.done_index += sent
        return QUEUED if blocked or connecting else SEND

    def send_queued(self) -> None:
        """Send queued bytes until the socket takes no more: ``sendmsg`` of
        up to `IOV_MAX` buffers at a time, or (TLS) one ``write_to_fd`` per
        segment, so that a retry after "want write" starts at the same byte
        with at least as many bytes, as OpenSSL requires (the queue only
        grows at its end).  A failed send goes to ``fail(error, "write")``.
        """
        write_buffer = self.write_buffer
        if not self.gather:
            self._write_segments()
            return
        while write_buffer:
            views = write_buffer.peek_buffers(IOV_MAX, MAX_SEND_NBYTES)
            try:
                offered = 0
                for view in views:
                    offered += len(view)
                sent = self.calls.sendmsg(views, offered)
            except BlockingIOError:
                self.proof.unconfirmed = False  # (a socket with an error fails a send)
                break
            except OSError as e:
                self.fail(e, "write")
                return
            finally:
                for view in views:
                    view.release()
            self.proof.unconfirmed = False
            if not sent:
                break
            write_buffer.advance(sent)
            self.done_index += sent
            if sent < offered:
                break  # the socket buffer is full: wait for WRITE

    def _write_segments(self) -> None:
        """`send_queued` without ``sendmsg``: Tornado's send loop (one
        ``write_to_fd`` of the first segment at a time)."""
        write_buffer = self.write_buffer
        write_to_fd = self.write_to_fd
        assert write_to_fd is not None
        while True:
            size = len(write_buffer)
            if not size:
                break
            try:
                with write_buffer.peek(size) as view:
                    sent = write_to_fd(view)
                self.proof.unconfirmed = False  # (a socket with an error fails a send)
                if sent == 0:
                    break
                write_buffer.advance(sent)
                self.done_index += sent
            except BlockingIOError:
                self.proof.unconfirmed = False
                break
            except OSError as e:
                self.fail(e, "write")
                return

    def uncork(self) -> bool:
        """Send what the cork holds (one ``sendmsg`` for all of it).  Returns
        True if bytes are left queued (the face waits for WRITE)."""
        if not self.cork_nbytes:
            return False
        self.cork_nbytes = 0
        if self.closed or not self.write_buffer:
            return False
        self.send_queued()
        return not self.closed and bool(self.write_buffer)

    def _cork(self, buffers: Iterable[Any]) -> bool:
        """Hold ``buffers`` back (copied) if they are small and the cork has
        room; see `writelines`."""
        if not isinstance(buffers, (list, tuple)):
            return False
        total = 0
        for data in buffers:
            nbytes = _buffer_nbytes(data)
            if nbytes >= _CORK_MAX_BUFFER_NBYTES:
                return False
            total += nbytes
        write_buffer = self.write_buffer
        if not total or len(write_buffer) + total > CORK_MAX_NBYTES:
            return False  # an empty write is a flush: it waits for what is queued
        for data in buffers:
            write_buffer.append(data)
        self.write_index += total
        self.cork_nbytes += total
        return True
