# cython: annotation_typing=False
"""`StreamCore`: the mechanism of one stream's socket I/O.

It composes three objects and adds the two loops they serve:

* `reads` (`tornado_readinto.core._readcore.ReadCore`): the read-ahead bytes and
  the one pending read, in the shape of an ``asyncio.BufferedProtocol``;
* `calls` (`tornado_readinto.core._sockcalls.SocketCalls`): ``recv_into`` and
  ``sendmsg`` on the socket;
* `policy` (`tornado_readinto.core._policy.StreamPolicy`): every heuristic (the
  proof that the socket is empty, the receive low-water mark, busy
  polling, the cork's size), told what happens through named hooks;
* the receive loop (`StreamCore.receive`: ``recv_into`` into the buffer the
  read state hands out, until the read completes or the socket is empty)
  and the write queue with its cork (gather ``sendmsg``).

`tornado_readinto.face._facecore.FaceCore`, the face's per-message state (its
Futures, its registration), holds one; `tornado_readinto.face.iostream.ReadIntoIOStream`
is the Tornado face over both.

Strategy:

* The core imports nothing from Tornado, holds no event loop and calls
  nothing of its owner: every method returns what happened (a read's result,
  `PENDING`, `EOF`, a write's status) or raises what the owner's error
  policy must see (`CoreFailure` for bytes a reader rejected and for a
  failed send; ``OSError`` and the read limits' errors for the receive).
  Its one outside hook is the transport of a stream that does not use a
  plain socket: ``read_from_fd(view)`` (TLS, a subclass or an instance that
  replaced Tornado's ``read_from_fd``) and ``write_to_fd(view)`` (TLS).
* Fields are plain and typed, methods are ordinary methods, and the hot ones
  call no other Python function but the socket's and those of the three
  objects above, held in typed fields, so that Cython compiles this module
  in pure-Python mode with a ``.pxd`` and every call between them is a C
  call.
* Writes go out in ``sendmsg`` calls of up to `IOV_MAX` buffers; on an idle
  socket straight from the caller's objects, queued only if the kernel took
  part of them.  Replies written while more input is already read ahead are
  corked (copied, at most the policy's ``cork_max_nbytes``) until the reads
  catch up.
"""

from __future__ import annotations

import operator
import os
import socket
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from ..errors import StreamBufferFullError, UnsatisfiableReadError
from ._policy import CORK_MAX_NBYTES, DRAINED_VALID_S, RCVLOWAT_MIN_MISSING, RCVLOWAT_NBYTES, StreamPolicy
from ._readcore import (
    DEFAULT_MAX_BUFFER_SIZE,
    DEFAULT_READ_CHUNK_SIZE,
    DIRECT_READ_MIN_NBYTES,
    EOF,
    PENDING,
    ReadCore,
)
from ._sockcalls import SocketCalls
from .writebuffer import ChunkedWriteBuffer

__all__ = [
    "CORKED",
    "CORK_MAX_NBYTES",
    "CoreFailure",
    "EOF",
    "DRAINED_VALID_S",
    "IOV_MAX",
    "MAX_SEND_NBYTES",
    "QUEUED",
    "RCVLOWAT_MIN_MISSING",
    "RCVLOWAT_NBYTES",
    "SEND",
    "SENT",
    "ReceiveCounts",
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


class CoreFailure(Exception):
    """What `StreamCore` raises where its owner's error policy must act: the
    bytes were rejected (``where`` is ``"data"``: a reader's error, or no
    memory for a frame) or a send failed (``"write"``).  The core has not
    closed the stream; ``error`` is the exception to report."""

    def __init__(self, error: BaseException, where: str) -> None:
        super().__init__(error, where)
        #: The exception to report (the stream closes with it).
        self.error = error
        #: ``"data"`` or ``"write"``.
        self.where = where


class ReceiveCounts:
    """What one stream's receives did, counted where the receive loop
    already is (three integer additions per ``recv``): `nbytes` received,
    `calls` made (those that found nothing too: ``nbytes / calls`` is the
    bytes per receive call) and, of `nbytes`, `nbytes_in_place`: those the
    kernel wrote straight into a pending read's own buffer (a ``read_into``
    target, a frame of a `tornado_readinto.wire.framing.FrameReader`), the
    copies avoided.

    .. versionadded:: 0.1
    """

    __slots__ = ("nbytes", "calls", "nbytes_in_place")

    def __init__(self) -> None:
        self.nbytes = 0
        self.calls = 0
        self.nbytes_in_place = 0

    def __repr__(self) -> str:
        return f"ReceiveCounts(nbytes={self.nbytes}, calls={self.calls}, nbytes_in_place={self.nbytes_in_place})"


class StreamCore:
    """The mechanism of one stream: the receive loop and the write queue
    (see the module's strategy).  It holds its read state (`reads`), its
    socket calls (`calls`) and its heuristics (`policy`), and calls nothing
    of its owner: every method returns what happened or raises.

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
        replaced by `tornado_readinto.core._gilheld`'s calls (`SocketCalls`'s
        ``keep_gil``: held calls while the GIL is contended, and in the
        compiled build untimed native calls in a process with no other
        Python thread).
    :arg policy: the stream's heuristics (default: a `StreamPolicy` with
        its defaults and no busy polling).
    :arg read_from_fd: the face's receive (TLS, a subclass's override), or
        None: the core receives on ``sock`` itself.
    :arg write_to_fd: the face's send of one segment (without ``gather``).

    ``read_chunk_size``, ``max_buffer_size`` and ``direct_min_nbytes`` are
    the read core's (`reads`).

    .. versionadded:: 0.1
    """

    __slots__ = (
        # the parts
        "reads",
        "policy",
        "calls",
        # the socket
        "gather",
        "short_read_drains",
        "tls_record_nbytes",
        "closed",
        # the receive
        "counts",
        "wait_nbytes",
        # the write queue and the cork
        "write_buffer",
        "write_index",
        "done_index",
        "cork_nbytes",
        # the face's transport (TLS, or a replaced read_from_fd)
        "read_from_fd",
        "write_to_fd",
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
        policy: StreamPolicy | None = None,
        read_from_fd: Callable[[memoryview], int | None] | None = None,
        write_to_fd: Callable[[memoryview], int] | None = None,
    ) -> None:
        """Every option is settled here, once: the stream's owner passes
        them all (`tornado_readinto.face.iostream` does), and none is assigned
        from outside afterwards (the receive hook ``read_from_fd`` alone may
        be replaced, as Tornado's tests do)."""
        #: The read state: the read-ahead bytes and the one pending read.
        self.reads = ReadCore(read_chunk_size, max_buffer_size, direct_min_nbytes)
        #: The heuristics, told what happens and asked what to do.
        self.policy = StreamPolicy(sock if short_read_drains else None) if policy is None else policy
        #: The receive and send calls on the socket (plain streams receive
        #: and send on it directly; its ``sock`` is None only for a TLS
        #: stream's core, or once start_tls took the socket), keeping the
        #: GIL where that pays (``own_socket_io``).
        self.calls = SocketCalls(sock, own_socket_io)
        #: Sends gather with ``sendmsg`` (else ``write_to_fd`` per segment).
        self.gather = gather
        #: A short ``recv`` proves the socket empty (not on TLS).
        self.short_read_drains = short_read_drains
        #: TLS: a receive shorter than asked and than this proves it too.
        self.tls_record_nbytes = tls_record_nbytes
        #: True once the stream closed: nothing is received or sent any more.
        self.closed = False
        #: What the receives did: bytes, calls, bytes received in place.
        self.counts = ReceiveCounts()
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

    def detach_socket(self) -> None:
        """The socket now belongs to another stream (``start_tls``): this
        core is closed and never touches it again."""
        self.closed = True
        self.calls.off()
        self.policy.off()

    def socket_closed(self) -> None:
        """The face closed the socket: this core is closed, and its calls
        never use the socket's fd number again (it may already be another
        socket's)."""
        self.closed = True
        self.calls.socket_closed()

    # -- Incoming flow ----------------------------------------------------------

    def receive(self) -> Any:
        """Receive what the socket has now and feed it to the read state;
        return the pending read's result, `PENDING`, or `EOF` (the peer
        closed: the owner closes the stream).

        With a read pending: receive until it completes, the socket has no
        more data or the peer closes.  With none: one ``recv`` bounded by
        ``read_chunk_size`` (which also notices EOF), none when that many
        bytes are read ahead already.

        Cost: per receive one ``recv_into`` (two ``perf_counter`` reads), one
        `get_buffer` and one `buffer_updated`.

        :raises OSError: the receive failed (the owner closes the stream).
        :raises StreamBufferFullError: more than ``max_buffer_size`` bytes are
            read ahead.
        :raises UnsatisfiableReadError: a ``max_bytes`` was exceeded.
        :raises CoreFailure: the read's reader rejected the bytes, or its
            buffer could not be made (``where`` is ``"data"``).
        """
        reads = self.reads
        counts = self.counts
        reading = reads.has_read()
        read_from_fd = self.read_from_fd
        policy = self.policy
        policy.receiving()
        self.wait_nbytes = 0
        received = None
        while not self.closed:
            try:
                view = reads.get_buffer()
            except Exception as e:  # a reader that failed earlier, or no memory
                raise CoreFailure(e, "data") from None
            requested = len(view)
            if not requested:
                return PENDING  # idle, read_chunk_size bytes read ahead: none
            received = self.calls.recv_into(view) if read_from_fd is None else read_from_fd(view)
            counts.calls += 1
            view = None  # type: ignore[assignment]  # (a slice of read-ahead storage alive would keep it from its pool)
            if received is None:  # EAGAIN
                # (TLS: "want read" proves nothing, so that a read started
                # next tries the socket, as Tornado's does: a failing socket
                # raises inline after a handshake.)
                if self.short_read_drains:
                    policy.drained(False)
                break
            if not received:
                policy.ended()
                break
            if received < requested and (self.short_read_drains or received < self.tls_record_nbytes):
                policy.drained(True)
            counts.nbytes += received
            if reads.lent_in_place:
                counts.nbytes_in_place += received
            if not reading:
                reads.buffer_updated(received)
                reads.spare_storage()
                return PENDING
            try:
                result = reads.buffer_updated(received, True)
            except (StreamBufferFullError, UnsatisfiableReadError):
                raise
            except Exception as e:  # the reader rejected the bytes (FramingError…)
                raise CoreFailure(e, "data") from None
            if result is not PENDING:
                policy.read_done()
                reads.spare_storage()
                return result
            if not policy.keep_receiving():
                break
        reads.release_if_empty()  # (EAGAIN or EOF)
        if received == 0:
            return EOF  # the peer closed: the owner closes (a pending read ends)
        if self.closed or not reading:
            return PENDING
        # The read waits (EAGAIN or a short receive): what is left of its own
        # buffer, if the receive went there, is what it is sure to need.
        self.wait_nbytes = reads.needed_for_sure(requested - (received or 0))
        return reads.search()  # a regex search put off by buffer_updated(n, True)

    def park(self) -> bool:
        """The pending read waits for the socket: send the replies the cork
        holds (the reads caught up) and tell the policy (`StreamPolicy.parked`:
        the low-water mark of a large wait, or busy polling).  Returns True
        if written bytes are left queued (the owner waits for WRITE).

        :raises CoreFailure: sending the cork's bytes failed (``"write"``).
        """
        left = False
        if self.cork_nbytes:
            left = self.uncork()
        self.policy.parked(self.wait_nbytes if self.read_from_fd is None else 0)
        return left

    # -- Outgoing flow ----------------------------------------------------------

    def writelines(self, buffers: Iterable[Any], connecting: bool, max_write_nbytes: int | None) -> int:
        """Take a write of ``buffers``: send it now, cork it or queue it.
        Returns `SENT`, `CORKED`, `SEND` or `QUEUED` (see each).

        On an idle plain socket the buffers go out in one ``sendmsg``
        straight from the caller's objects; only what the kernel did not
        take is queued (large buffers by reference, small ones copied).
        While bytes of further input are read ahead, small buffers (each
        under 8 KiB, up to the policy's ``cork_max_nbytes`` in all) are copied
        and held.

        :arg connecting: the stream is still connecting (queue only).
        :arg max_write_nbytes: Tornado's ``max_write_buffer_size`` (None: no
            limit).
        :raises StreamBufferFullError: ``max_write_nbytes`` would be exceeded
            (nothing is queued).
        """
        self.policy.wrote()
        write_buffer = self.write_buffer
        if self.reads.buffered_nbytes and self.gather and len(write_buffer) == self.cork_nbytes:
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
                    self.policy.confirmed()  # (a socket with an error fails a send)
                except Exception:
                    pass  # the queued path below sends again and handles the error
                else:
                    self.policy.confirmed()
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
        grows at its end).

        :raises CoreFailure: a send failed (``"write"``).
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
                self.policy.confirmed()  # (a socket with an error fails a send)
                break
            except OSError as e:
                raise CoreFailure(e, "write") from None
            finally:
                for view in views:
                    view.release()
            self.policy.confirmed()
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
                self.policy.confirmed()  # (a socket with an error fails a send)
                if sent == 0:
                    break
                write_buffer.advance(sent)
                self.done_index += sent
            except BlockingIOError:
                self.policy.confirmed()
                break
            except OSError as e:
                raise CoreFailure(e, "write") from None

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
        if not total or len(write_buffer) + total > self.policy.cork_max_nbytes:
            return False  # an empty write is a flush: it waits for what is queued
        for data in buffers:
            write_buffer.append(data)
        self.write_index += total
        self.cork_nbytes += total
        return True
