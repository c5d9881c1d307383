"""Compiled-core spike: the ``read_into`` ping-pong path as one typed,
compiled object.  A benchmark prototype (``benchmarks/spike/``), not part
of the package: ``tornado_readinto`` does not ship it.

Strategy:

* Cython pure-Python mode: this file runs as it is (the pure twin) and
  compiles with the types of ``_spikecore.pxd`` (a ``cdef class`` with C
  fields; built on demand by `benchmarks.spike.compiled_module`, or
  ``python -m benchmarks.spike``).  `COMPILED` says
  which one was imported.  Only the calls that touch memory or the socket
  differ (``if cython.compiled``): libc ``recv`` into a raw pointer and a
  ``Py_buffer`` export of the caller's buffer, against ``sock.recv_into`` and
  memoryview slices.
* The readable callback is registered with the asyncio loop itself
  (``loop.add_reader``: public API, the same on asyncio's loop and uvloop),
  once, and stays registered (level-triggered) except while the read-ahead
  is full and no read is pending.  No Tornado dispatch, no speculative
  ``recv``: a read that the read-ahead cannot satisfy waits for the
  callback.
* One ``recv`` per callback, keeping the GIL (a non-blocking socket): into
  the pending target's unfilled tail when `DIRECT_NBYTES` or more are
  missing, else into the read-ahead buffer, from which the target takes at
  most what it still needs (never past its end); the rest waits for the next
  read, which completes at once, with no syscall, when it can.
* Futures are asyncio's (built in C with ``asyncio.Future(loop=loop)`` where
  the loop's ``create_future`` is asyncio's own, which does exactly that;
  ``loop.create_future()`` otherwise) and resolved from the callback
  directly.
* ``writelines`` makes one ``sendmsg`` of all the buffers; only what the
  kernel did not take is copied and queued, sent from a writable callback,
  and later writes queue behind it.  A write the kernel took whole returns
  one shared, already resolved Future.
* EOF and socket errors close the stream: the pending read fails with
  ``StreamClosedError`` (`IncompleteReadError` if some bytes had arrived), a
  queued write's Future too.  A read cancelled by its awaiter closes the
  stream when its bytes arrive (it can no longer be trusted).

What it leaves out (the full core must add them): the other read modes,
limits (``max_buffer_size``), close callbacks, the busy-poll policy, TLS,
Tornado's ``IOStream`` face.
"""

# The C names (recv, sendmsg, errno, memcpy, PyObject_GetBuffer...) and the
# C-only fields come from _spikecore.pxd and are used only under
# ``if cython.compiled``; neither linter can see them.
# ruff: noqa: F821
# mypy: ignore-errors

import asyncio
import os

try:
    import cython
except ImportError:  # the pure twin runs without Cython installed

    class cython:  # type: ignore[no-redef]  # noqa: N801 - stands in for the module
        """What the uncompiled module reads of Cython's shadow module."""

        compiled = False
        bint = bool


from tornado.ioloop import IOLoop
from tornado.iostream import StreamClosedError

from tornado_readinto.errors import BufferBusyError, IncompleteReadError

__all__ = ["COMPILED", "DIRECT_NBYTES", "READ_AHEAD_NBYTES", "SpikeStream"]

#: True when this module is the compiled extension.
COMPILED = cython.compiled

#: The read-ahead buffer's size: the most one ``recv`` brings for small reads.
READ_AHEAD_NBYTES = 64 * 1024  # bytes (Tornado's read_chunk_size)
#: A pending read missing at least this many bytes receives straight into its
#: own buffer (as `tornado_readinto._readcore.DIRECT_READ_MIN_NBYTES`).
DIRECT_NBYTES = 16 * 1024  # bytes
_DIRECT_NBYTES = DIRECT_NBYTES  # (a C variable when compiled)
#: Buffers one ``sendmsg`` takes (``SPIKE_MAX_IOV`` in the .pxd); a longer
#: list is joined into one copy first.
MAX_IOV = 64

_BASE_CREATE_FUTURE = asyncio.BaseEventLoop.create_future


def _future_factory(loop):  # type: ignore[no-untyped-def]
    """``(asyncio.Future, {"loop": loop})`` when ``loop.create_future`` is
    asyncio's own (``return futures.Future(loop=self)``: a Python frame per
    Future), else ``(None, None)``: call ``loop.create_future()``."""
    if getattr(type(loop), "create_future", None) is _BASE_CREATE_FUTURE:
        return asyncio.Future, {"loop": loop}
    return None, None


class SpikeStream:
    """``read_into`` and ``writelines`` on a connected non-blocking socket,
    driven by the loop's readable callback (see the module docstring).

    :arg sock: a connected, non-blocking ``socket.socket``; the stream owns
        it (closes it).
    :arg loop: the asyncio loop (default: the current IOLoop's).
    :arg read_ahead_nbytes: the read-ahead buffer's size.
    :arg share_done_reads: an experiment: a read that the read-ahead completes
        returns the resolved Future of the last such read when the byte count
        is the same, instead of a new one.

    Other keyword arguments (an IOStream's ``max_buffer_size``...) are
    accepted and ignored.
    """

    def __init__(  # type: ignore[no-untyped-def]
        self, sock, loop=None, read_ahead_nbytes=READ_AHEAD_NBYTES, share_done_reads=False, **_ignored
    ):
        if read_ahead_nbytes < 1:
            raise ValueError(f"read_ahead_nbytes must be >= 1 byte, got {read_ahead_nbytes}")
        if loop is None:
            loop = IOLoop.current().asyncio_loop  # type: ignore[attr-defined]
        self._sock = sock
        self._fd = sock.fileno()
        self._loop = loop
        self._future_type, self._future_kwargs = _future_factory(loop)
        self._ra = bytearray(read_ahead_nbytes)
        self._ra_nbytes = read_ahead_nbytes
        self._start = 0
        self._end = 0
        if cython.compiled:
            self._ra_ptr = PyByteArray_AS_STRING(self._ra)
            self._ra_view = None
        else:
            self._ra_view = memoryview(self._ra)
        self._future = None
        self._has_target = False
        self._tview = None
        self._want = 0
        self._filled = 0
        self._partial = False
        self._sent = None
        self._share_done_reads = share_done_reads
        self._done_read = None
        self._done_read_nbytes = -1
        self._wq = None
        self._wq_start = 0
        self._wfuture = None
        self._closed = False
        self._reading = False
        self._writing = False
        self.error = None
        self.nbytes_received = 0
        self._watch()

    def __dealloc__(self):  # type: ignore[no-untyped-def]
        if cython.compiled:
            if self._has_target:
                PyBuffer_Release(cython.address(self._target))

    # -- Incoming flow ---------------------------------------------------------

    def _new_future(self):  # type: ignore[no-untyped-def]
        """A fresh asyncio Future of this loop (no Python frame on either loop)."""
        if self._future_type is not None:
            if cython.compiled:
                return PyObject_Call(self._future_type, (), self._future_kwargs)
            return self._future_type(**self._future_kwargs)
        return self._loop.create_future()

    def read_into(self, buf, partial: cython.bint = False):  # type: ignore[no-untyped-def]
        """Fill ``buf`` (any writable C-contiguous buffer, sized by nbytes);
        the Future resolves to the bytes read (with ``partial``, as soon as
        any arrived).  Bytes already read ahead are copied at once; a read
        they complete returns a resolved Future, with no syscall.

        :raises BufferBusyError: a read is pending.
        :raises StreamClosedError: the stream is closed and the bytes read
            ahead cannot complete the read.
        """
        want: cython.Py_ssize_t
        take: cython.Py_ssize_t
        if self._future is not None:
            if self._future.done():  # cancelled by its awaiter: out of step
                self.close(asyncio.CancelledError("a read was cancelled, so the stream was closed"))
                raise StreamClosedError(real_error=self.error)
            raise BufferBusyError("a read is already in progress on this stream")
        if cython.compiled:
            PyObject_GetBuffer(buf, cython.address(self._target), PyBUF_WRITABLE)
            want = self._target.len
        else:
            view = memoryview(buf)
            if view.readonly:
                raise TypeError(f"read_into needs a writable buffer, got read-only {type(buf).__name__}")
            if not view.c_contiguous:
                raise TypeError(f"read_into needs a C-contiguous buffer, got a strided {type(buf).__name__}")
            if view.format != "B" or view.ndim != 1:
                view = view.cast("B") if view.nbytes else memoryview(bytearray())
            self._tview = view
            want = view.nbytes
        self._has_target = True
        self._filled = 0
        take = self._end - self._start
        if take > want:
            take = want
        if take:
            self._copy_out(take)
        if take == want or (partial and take):
            self._release_target()
            if self._share_done_reads:
                # (an experiment) one resolved Future per result size, as
                # writelines shares one for writes
                if take == self._done_read_nbytes:
                    return self._done_read
                self._done_read_nbytes = take
                self._done_read = future = self._new_future()
            else:
                future = self._new_future()
            future.set_result(take)
            return future
        if self._closed:
            self._release_target()
            raise StreamClosedError(real_error=self.error)
        future = self._new_future()
        self._future = future
        self._want = want
        self._partial = partial
        if not self._reading:
            self._watch()  # the read-ahead had filled up with no read pending
        return future

    def _on_readable(self):  # type: ignore[no-untyped-def]
        """The loop's readable callback: one ``recv``, then complete the
        pending read if it can."""
        n: cython.Py_ssize_t
        take: cython.Py_ssize_t
        if self._closed:
            return
        if self._future is not None and self._want - self._filled >= _DIRECT_NBYTES:
            n = self._recv(True)  # straight into the target's tail
            if n > 0:
                self._filled += n
                if self._filled == self._want or self._partial:
                    self._finish()
            return
        if self._start == self._end:
            self._start = self._end = 0
        elif self._end == self._ra_nbytes:
            if self._start == 0:
                # Full, so no read is pending (one would have taken bytes):
                # stop watching until one is (level-triggered: else called again at once).
                self._unwatch()
                return
            self._compact()
        n = self._recv(False)
        if n <= 0 or self._future is None:
            return
        take = self._end - self._start
        if take > self._want - self._filled:
            take = self._want - self._filled
        self._copy_out(take)
        if self._filled == self._want or self._partial:
            self._finish()

    def _compact(self):  # type: ignore[no-untyped-def]
        """Move the read-ahead bytes to the buffer's start."""
        nbytes = self._end - self._start
        if cython.compiled:
            memmove(self._ra_ptr, self._ra_ptr + self._start, nbytes)
        else:
            self._ra_view[:nbytes] = self._ra_view[self._start : self._end]
        self._start = 0
        self._end = nbytes
        return 0

    def _recv(self, direct):  # type: ignore[no-untyped-def]
        """One ``recv`` into the target's tail (``direct``) or the
        read-ahead's; return the byte count, -1 when the socket had nothing
        (EAGAIN), 0 on EOF and -2 on an error (after closing the stream)."""
        n: cython.Py_ssize_t
        err: cython.int
        if cython.compiled:
            ptr: cython.p_char
            length: cython.size_t
            if direct:
                ptr = cython.cast(cython.p_char, self._target.buf) + self._filled
                length = self._want - self._filled
            else:
                ptr = self._ra_ptr + self._end
                length = self._ra_nbytes - self._end
            while True:
                n = recv(self._fd, ptr, length, 0)
                if n >= 0:
                    break
                err = errno
                if err == EINTR:
                    continue
                if err == EAGAIN:  # (== EWOULDBLOCK on Linux)
                    return -1
                self.close(OSError(err, os.strerror(err)))
                return -2
        else:
            if direct:
                view = self._tview[self._filled : self._want]
            else:
                view = self._ra_view[self._end :]
            try:
                n = self._sock.recv_into(view)
            except BlockingIOError:
                return -1
            except OSError as exc:
                self.close(exc)
                return -2
        if n == 0:
            self.close(None)
            return 0
        if not direct:
            self._end += n
        self.nbytes_received += n
        return n

    def _copy_out(self, n):  # type: ignore[no-untyped-def]
        """Move ``n`` read-ahead bytes into the target after its filled part."""
        if cython.compiled:
            memcpy(cython.cast(cython.p_char, self._target.buf) + self._filled, self._ra_ptr + self._start, n)
        else:
            self._tview[self._filled : self._filled + n] = self._ra_view[self._start : self._start + n]
        self._filled += n
        self._start += n
        if self._start == self._end:
            self._start = self._end = 0
        return 0

    def _release_target(self):  # type: ignore[no-untyped-def]
        if self._has_target:
            self._has_target = False
            if cython.compiled:
                PyBuffer_Release(cython.address(self._target))
            else:
                self._tview.release()
                self._tview = None
        return 0

    def _finish(self):  # type: ignore[no-untyped-def]
        """Resolve the pending read with the bytes filled."""
        future = self._future
        self._future = None
        self._release_target()
        try:
            future.set_result(self._filled)
        except asyncio.InvalidStateError:  # cancelled by its awaiter: out of step
            self.close(asyncio.CancelledError("a read was cancelled, so the stream was closed"))
        return 0

    def _watch(self):  # type: ignore[no-untyped-def]
        self._loop.add_reader(self._fd, self._on_readable)
        self._reading = True
        return 0

    def _unwatch(self):  # type: ignore[no-untyped-def]
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._fd)
        return 0

    # -- Outgoing flow ---------------------------------------------------------

    def writelines(self, buffers):  # type: ignore[no-untyped-def]
        """Send ``buffers`` (bytes-like objects) with one gather ``sendmsg``;
        the Future resolves once the kernel took them all (at once if it did
        now: a shared, resolved Future).  Only what it did not take is copied.

        :raises StreamClosedError: the stream is closed.
        """
        if self._closed:
            raise StreamClosedError(real_error=self.error)
        if self._wfuture is not None:  # a tail is queued: keep the order
            self._queue(buffers, 0)
            return self._wfuture
        if type(buffers) is not list:
            buffers = list(buffers)
        if self._sendmsg(buffers) < 0:  # the stream closed on the error
            future = self._new_future()
            future.set_exception(StreamClosedError(real_error=self.error))
            return future
        if self._wfuture is not None:
            return self._wfuture
        future = self._sent
        if future is None:
            future = self._sent = self._new_future()
            future.set_result(None)
        return future

    def write(self, data):  # type: ignore[no-untyped-def]
        """`writelines` of one buffer."""
        return self.writelines([data])

    def _sendmsg(self, buffers):  # type: ignore[no-untyped-def]
        """One ``sendmsg`` of ``buffers``; queue the tail it did not take.
        Return 0, or -1 after an error closed the stream."""
        if cython.compiled:
            nbuf: cython.Py_ssize_t = len(buffers)
            held: cython.Py_ssize_t = 0
            i: cython.Py_ssize_t
            total: cython.Py_ssize_t = 0
            sent: cython.Py_ssize_t
            skip: cython.Py_ssize_t
            err: cython.int
            msg: msghdr
            if nbuf > SPIKE_MAX_IOV:
                buffers = [b"".join(buffers)]
                nbuf = 1
            try:
                for i in range(nbuf):
                    PyObject_GetBuffer(buffers[i], cython.address(self._pbufs[i]), PyBUF_SIMPLE)
                    held = i + 1
                    self._iov[i].iov_base = self._pbufs[i].buf
                    self._iov[i].iov_len = self._pbufs[i].len
                    total += self._pbufs[i].len
                memset(cython.address(msg), 0, cython.sizeof(msg))
                msg.msg_iov = self._iov
                msg.msg_iovlen = nbuf
                while True:
                    sent = sendmsg(self._fd, cython.address(msg), MSG_NOSIGNAL)
                    if sent >= 0:
                        break
                    err = errno
                    if err == EINTR:
                        continue
                    if err == EAGAIN:  # (== EWOULDBLOCK on Linux)
                        sent = 0
                        break
                    self.close(OSError(err, os.strerror(err)))
                    return -1
                if sent < total:
                    # Copy the tail the kernel did not take, while the buffers are held.
                    wq = bytearray(total - sent)
                    dst: cython.p_char = PyByteArray_AS_STRING(wq)
                    skip = sent
                    for i in range(nbuf):
                        if skip >= self._pbufs[i].len:
                            skip -= self._pbufs[i].len
                            continue
                        memcpy(dst, cython.cast(cython.p_char, self._pbufs[i].buf) + skip, self._pbufs[i].len - skip)
                        dst += self._pbufs[i].len - skip
                        skip = 0
                    self._start_queue(wq)
            finally:
                for i in range(held):
                    PyBuffer_Release(cython.address(self._pbufs[i]))
            return 0
        else:
            try:
                sent = self._sock.sendmsg(buffers)
            except BlockingIOError:
                sent = 0
            except OSError as exc:
                self.close(exc)
                return -1
            if sent < sum(memoryview(b).nbytes for b in buffers):
                self._start_queue(bytearray())
                self._queue(buffers, sent)
            return 0

    def _start_queue(self, wq):  # type: ignore[no-untyped-def]
        self._wq = wq
        self._wq_start = 0
        self._wfuture = self._new_future()
        self._loop.add_writer(self._fd, self._on_writable)
        self._writing = True
        return 0

    def _queue(self, buffers, skip):  # type: ignore[no-untyped-def]
        """Append ``buffers`` to the queued tail, less their first ``skip`` bytes."""
        for b in buffers:
            view = memoryview(b).cast("B") if not isinstance(b, (bytes, bytearray)) else memoryview(b)
            if skip >= len(view):
                skip -= len(view)
                continue
            self._wq += view[skip:]
            skip = 0
        return 0

    def _on_writable(self):  # type: ignore[no-untyped-def]
        """The loop's writable callback: send what is queued."""
        n: cython.Py_ssize_t
        err: cython.int
        if self._closed or self._wq is None:
            return
        if cython.compiled:
            while True:
                n = send(
                    self._fd,
                    PyByteArray_AS_STRING(self._wq) + self._wq_start,
                    PyByteArray_GET_SIZE(self._wq) - self._wq_start,
                    MSG_NOSIGNAL,
                )
                if n >= 0:
                    break
                err = errno
                if err == EINTR:
                    continue
                if err == EAGAIN:  # (== EWOULDBLOCK on Linux)
                    return
                self.close(OSError(err, os.strerror(err)))
                return
        else:
            try:
                n = self._sock.send(memoryview(self._wq)[self._wq_start :])
            except BlockingIOError:
                return
            except OSError as exc:
                self.close(exc)
                return
        self._wq_start += n
        if self._wq_start == len(self._wq):
            self._loop.remove_writer(self._fd)
            self._writing = False
            self._wq = None
            future = self._wfuture
            self._wfuture = None
            future.set_result(None)

    # -- closing ---------------------------------------------------------------

    def closed(self):  # type: ignore[no-untyped-def]
        return self._closed

    def close(self, exc_info=None):  # type: ignore[no-untyped-def]
        """Close the socket; a pending read and a queued write fail with
        ``StreamClosedError`` (whose ``real_error`` is ``exc_info`` when it is
        an exception).  Bytes read ahead stay readable."""
        if self._closed:
            return
        self._closed = True
        if isinstance(exc_info, BaseException):
            self.error = exc_info
        self._unwatch()
        if self._writing:
            self._writing = False
            self._loop.remove_writer(self._fd)
        future = self._future
        if future is not None:
            self._future = None
            self._release_target()
            if not future.done():
                if self._filled:
                    future.set_exception(IncompleteReadError(self._want, self._filled, real_error=self.error))
                else:
                    future.set_exception(StreamClosedError(real_error=self.error))
        future = self._wfuture
        if future is not None:
            self._wfuture = None
            self._wq = None
            if not future.done():
                future.set_exception(StreamClosedError(real_error=self.error))
        self._sock.close()
