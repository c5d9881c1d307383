"""The write path of a `~tornado_readinto.iostream.ReadIntoIOStream`: a mixin
(`WritePath`) with ``write``/``writelines``, the cork, and the gather send.

Strategy:

* Writes are queued in a `~tornado_readinto.writebuffer.ChunkedWriteBuffer`
  (large buffers by reference, small ones coalesced) and leave in
  ``sendmsg`` calls of up to `IOV_MAX` buffers; a whole ``writelines`` call
  costs one Future.
* On an idle plain socket the caller's buffers go out in one ``sendmsg``
  straight from the caller's objects: nothing is queued or copied unless the
  kernel takes only part of them, and when it takes them all the write
  returns the stream's one resolved Future (no Future is made).
* Replies written while more input is already read ahead (pipelined
  requests) are corked: held (copied, small buffers only) until the reads
  catch up, then sent together.  A reply to a lone message is never held.
* ``sendmsg`` is timed; while other threads hold the GIL it goes through
  `tornado_readinto._gilheld` (``writev`` that keeps the GIL).
* TLS streams (no ``sendmsg``) send through Tornado's own path, one
  ``SSL_write`` per coalesced segment.
"""

from __future__ import annotations

import errno
import operator
import os
import socket
from collections.abc import Iterable
from time import perf_counter
from typing import TYPE_CHECKING, Any

from tornado import ioloop
from tornado.concurrent import Future
from tornado.log import gen_log

from . import _gilheld
from ._tornado_compat import IOStream, StreamBufferFullError, future_set_result_unless_cancelled

if TYPE_CHECKING:  # pragma: no cover
    import asyncio

    from ._readcore import ReadCore
    from .writebuffer import ChunkedWriteBuffer

__all__ = ["CORK_MAX_NBYTES", "IOV_MAX", "MAX_SEND_NBYTES", "WritePath"]


def _iov_max() -> int:
    try:
        return max(1, os.sysconf("SC_IOV_MAX"))
    except (AttributeError, ValueError, OSError):  # pragma: no cover
        return 16  # POSIX's minimum _XOPEN_IOV_MAX

#: Buffers per ``sendmsg``: the kernel's limit (1024 on Linux).
IOV_MAX = _iov_max()

#: The most bytes of replies a stream holds back while more input is
#: already read ahead (see `ReadIntoIOStream.writelines`): one coalescing
#: chunk of the write buffer.
CORK_MAX_NBYTES = 64 * 1024  # bytes

#: Only buffers under this size are held back: they are copied, so their
#: writers may reuse them at once (the write buffer's own threshold).
_CORK_MAX_BUFFER_NBYTES = 8 * 1024  # bytes

#: Bytes offered to one ``sendmsg``.  Linux's default TCP send buffer tops out
#: at 4 MiB (net.ipv4.tcp_wmem), so a larger offer only makes more views.
MAX_SEND_NBYTES = 16 * 1024 * 1024  # bytes

_WRITE = ioloop.IOLoop.WRITE
_ERROR = ioloop.IOLoop.ERROR
_STALL_S = _gilheld.STALL_S
_COPY_S_PER_BYTE = _gilheld.COPY_S_PER_BYTE


#: Types whose ``len`` is their size in bytes.
_LEN_IS_NBYTES = (bytes, bytearray)
_nbytes = operator.attrgetter("nbytes")


def _buffer_nbytes(data: Any) -> int:
    """The size of a bytes-like object in bytes (``len`` would count the
    items of a typed buffer)."""
    return len(data) if type(data) in _LEN_IS_NBYTES else memoryview(data).nbytes


def _total_nbytes(buffers: Iterable[Any]) -> int:
    """The total size in bytes of bytes-like objects, summed in C (no
    bytecode per buffer: a message may have thousands)."""
    return sum(map(_nbytes, map(memoryview, buffers)))  # type: ignore[arg-type]



class WritePath(IOStream):
    """The write path of `~tornado_readinto.iostream.ReadIntoIOStream` (a
    mixin base of it): see the module's strategy."""

    if TYPE_CHECKING:  # what the stream class provides
        _core: ReadCore
        _write_buffer: ChunkedWriteBuffer  # type: ignore[assignment]
        _loop: asyncio.AbstractEventLoop
        _cork_nbytes: int
        _readable_hint: bool
        _drained_at: float
        _gather: bool
        _own_socket_io: bool
        _tcp: bool

        def _resolved(self, result: Any) -> Future[Any]: ...

    # The resolved Future that `_written` hands out (made on first use).
    _sent_future: Future[None] | None = None

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
        write_buffer = self._write_buffer
        return len(write_buffer) if write_buffer is not None else 0

    def writing(self) -> bool:
        """As stock: True while written bytes wait to be sent."""
        return bool(self._write_buffer)

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

    def writelines(self, buffers: Iterable[Any]) -> Future[None]:
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
        the stream, so that none is made (a write that has to wait gets a
        Future of its own).

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
        self._check_closed()
        if not self._readable_hint:
            # A request/response peer answers only after this write: the
            # window in which the socket counts as empty starts again here,
            # so a slow handler does not make the next read try a doomed
            # recv (a stall from here on, such as a GIL hand-off at the
            # sendmsg below, still counts).
            self._drained_at = perf_counter()
        write_buffer = self._write_buffer
        if self._core.buffered_nbytes and self._gather and len(write_buffer) == self._cork_nbytes:
            # (Never behind bytes queued by someone else, e.g. dask's direct
            # _write_buffer appends: their write(b"") must wait for them.)
            if self._cork(buffers):
                return self._written()
        sent = 0
        blocked = False  # the kernel took only part: wait for WRITE
        idle = not write_buffer and not self._connecting
        if idle and self._gather and self.max_write_buffer_size is None:
            # Idle plain socket: one sendmsg straight from the caller's
            # buffers; only what the kernel did not take is queued below.
            if not isinstance(buffers, (list, tuple)):
                buffers = list(buffers)
            if len(buffers) <= IOV_MAX:
                total = _total_nbytes(buffers)
                try:
                    sent = self._sendmsg(buffers) if total else 0
                except BlockingIOError:
                    blocked = True
                except Exception:
                    pass  # the queued path below sends again and handles the error
                else:
                    if sent == total:
                        self._total_write_index += total
                        self._total_write_done_index += total
                        return self._written()
                    blocked = True
        self._cork_nbytes = 0  # whatever the cork holds goes out with this write
        queued = len(write_buffer)
        if self.max_write_buffer_size is not None:
            if not isinstance(buffers, (list, tuple)):
                buffers = list(buffers)
            nbytes = _total_nbytes(buffers)
            if queued + nbytes > self.max_write_buffer_size:
                raise StreamBufferFullError("Reached maximum write buffer size")
        for data in buffers:
            write_buffer.append(data)
        self._total_write_index += len(write_buffer) - queued
        if sent:
            write_buffer.advance(sent)
            self._total_write_done_index += sent
        future: Future[None] = Future(loop=self._loop)
        self._write_futures.append((self._total_write_index, future))
        if not self._connecting:
            if not blocked:
                self._handle_write()
            if self._write_buffer:
                self._add_io_state(_WRITE)
            self._maybe_add_error_listener()
        return future

    def _written(self) -> Future[None]:
        """The Future of a write that was sent (or corked) at once: one
        resolved Future per stream, shared by every such write, so that a
        write the kernel takes makes no Future at all."""
        future = self._sent_future
        if future is None:
            future = self._sent_future = Future(loop=self._loop)
            future.set_result(None)
        state = self._state
        if state is None or state == _ERROR:
            self._maybe_add_error_listener()
        return future

    def _cork(self, buffers: Iterable[Any]) -> bool:
        """Hold ``buffers`` back (copied) if they are small and the cork has
        room; see `writelines`."""
        if self._connecting or self.max_write_buffer_size is not None:
            return False
        if not isinstance(buffers, (list, tuple)):
            return False
        total = 0
        for data in buffers:
            nbytes = _buffer_nbytes(data)
            if nbytes >= _CORK_MAX_BUFFER_NBYTES:
                return False
            total += nbytes
        write_buffer = self._write_buffer
        if not total or len(write_buffer) + total > CORK_MAX_NBYTES:
            return False  # an empty write is a flush: it waits for what is queued
        for data in buffers:
            write_buffer.append(data)
        self._total_write_index += total
        if not self._cork_nbytes:
            self._loop.call_soon(self._uncork)
        self._cork_nbytes += total
        return True

    def _uncork(self) -> None:
        """Send what the cork holds (one ``sendmsg`` for all of it)."""
        if not self._cork_nbytes:
            return
        self._cork_nbytes = 0
        if self._closed or not self._write_buffer:
            return
        self._handle_write()
        if self._write_buffer:
            self._add_io_state(_WRITE)

    def _sendmsg(self, buffers: Any) -> int:
        """``sendmsg(buffers)`` on a plain socket, keeping the GIL while it
        is contended (see `tornado_readinto._gilheld`).

        :raises BlockingIOError: the send buffer is full.
        :raises OSError: the send failed.
        """
        start = perf_counter()
        if self._own_socket_io and start < _gilheld.held_until:
            return _gilheld.writev(self.socket.fileno(), buffers)
        sent = self.socket.sendmsg(buffers)
        end = perf_counter()
        if end - start > _STALL_S + sent * _COPY_S_PER_BYTE:
            _gilheld.note_stall(end)
        return sent  # type: ignore[no-any-return]

    def _handle_write(self) -> None:
        if not self._gather:
            # TLS: one SSL_write per segment.  Small writes arrive coalesced
            # into chunks (record-sized or larger), and a retry after "want
            # write" starts at the same byte with at least as many bytes,
            # as OpenSSL requires, because the queue only grows at its end.
            super()._handle_write()
            return
        write_buffer = self._write_buffer
        sendmsg = self._sendmsg
        while write_buffer:
            views = write_buffer.peek_buffers(IOV_MAX, MAX_SEND_NBYTES)
            try:
                offered = 0
                for view in views:
                    offered += len(view)
                sent = sendmsg(views)
            except BlockingIOError:
                break
            except OSError as e:
                if not self._is_connreset(e):
                    gen_log.warning("Write error on %s: %s", self.fileno(), e)
                self.close(exc_info=e)
                return
            finally:
                for view in views:
                    view.release()
            if not sent:
                break
            write_buffer.advance(sent)
            self._total_write_done_index += sent
            if sent < offered:
                break  # the socket buffer is full: wait for WRITE
        done_index = self._total_write_done_index
        futures = self._write_futures
        while futures and futures[0][0] <= done_index:
            future_set_result_unless_cancelled(futures.popleft()[1], None)
