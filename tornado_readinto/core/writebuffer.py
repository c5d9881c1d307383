# cython: annotation_typing=False
"""The write side's queue of outgoing bytes: `ChunkedWriteBuffer`.

A drop-in for Tornado's private ``tornado.iostream._StreamBuffer`` (same
``append`` / ``peek`` / ``advance`` / ``clear`` / ``len`` contract) that adds
``peek_buffers`` for gather writes with ``socket.sendmsg``.  Pure: imports
neither Tornado nor ``socket``.
"""

# Strategy:
#
# The buffer is a deque of *segments*.  A segment is one of two things, and
# its Python type says which (no (flag, buffer) tuple per segment):
#
# - ``memoryview``: a large piece of caller data (over ``_large_buf_threshold``
#   bytes), held by reference.  It is always a fresh 1-D, unsigned-byte view
#   (``memoryview(data).cast("B")``; plain ``memoryview(data)`` for bytes and
#   bytearray, which are that already) that belongs to us, so ``len(view)`` is
#   its size in bytes whatever the caller's format or shape was, and we can
#   ``release()`` it the moment it is consumed: the caller may then resize
#   their bytearray (or close their mmap) without waiting for the GC.
# - ``bytearray``: a coalescing chunk that owns copies of small pieces.  A
#   small append goes to the end of the last segment if that is a chunk shorter
#   than ``_chunk_nbytes``; otherwise it starts a new chunk.  A chunk can thus
#   overshoot the cap by less than one small piece, which bounds it by
#   ``chunk_nbytes + large_buf_threshold`` while keeping every append a single
#   copy (never split across two chunks).
#
# Consumption never modifies a segment.  ``_first_pos`` is the offset of the
# next unsent byte in the first segment; ``advance`` moves it and pops whole
# segments, so it costs O(segments crossed), never a memmove.  (CPython's
# ``del bytearray[:n]`` is cheap too, but it raises BufferError while a peeked
# view is alive; an offset cannot.)  The consumed head of a chunk stays
# allocated until the whole chunk is consumed, which the cap bounds.
#
# The only mutation of a segment is therefore ``chunk += data`` in ``append``.
# The contract says that peeked views are released before the buffer is
# modified, but if one is still alive the resize raises BufferError; we then
# start a new chunk instead, which costs one allocation and loses nothing.
#
# An empty buffer holds no deque (``_buffers`` is the empty tuple, which
# reads as an empty queue): a deque costs 760 bytes, and an idle stream's
# queue is empty.  The first append makes one; the advance or clear that
# empties the queue drops it.
#
# Invariants (checked by the tests, not at run time):
# - no segment is empty, and ``0 <= _first_pos < len(_buffers[0])`` when
#   there are segments (``_first_pos == 0`` otherwise);
# - ``_nbytes == sum(len(s) for s in _buffers) - _first_pos``.
#
# Views handed out (``peek``, ``peek_buffers``) are new memoryview objects,
# never our own segment views, so a caller's ``release()`` cannot release
# ours.  Views of chunks are cut from a temporary full view that is released at
# once, so that only the caller's slice pins the chunk (matters on PyPy, where
# unreleased views live until the GC runs).
#
# Compiled, the class is typed by writebuffer.pxd (C size fields, cpdef
# methods that StreamCore calls in C).  The sizes a caller passes stay Python
# ints until they are checked (or capped at what is queued), so a huge size
# behaves as in the pure build, never as an OverflowError.

from __future__ import annotations

import collections
import operator
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    # collections.abc.Buffer exists from Python 3.12 on; typing_extensions
    # is needed by the type checker only, never at run time.
    from typing_extensions import Buffer

    # A chunk we own, or our byte view of a large piece of caller data.
    _Segment = bytearray | memoryview

__all__ = [
    "DEFAULT_CHUNK_NBYTES",
    "DEFAULT_LARGE_BUF_THRESHOLD",
    "ChunkedWriteBuffer",
]

# Pieces of data larger than this are held by reference, smaller ones are
# copied into a chunk.  bytes.
#
# Where 8 KiB comes from: holding a piece by reference costs a fixed ~0.3-0.6
# microseconds whatever its size (a memoryview to create, cast, slice for the
# send and release, one deque slot and one iovec), whereas appending a copy to
# a chunk costs ~0.1 us plus the memcpy; on the development machine (CPython
# 3.11, x86-64) the two broke even between 4 and 8 KiB.  Also, with every
# referenced piece over 8 KiB, one sendmsg of IOV_MAX = 1024 buffers (the
# Linux limit) can carry over 8 MiB, more than a default-tuned TCP send
# buffer (Linux net.ipv4.tcp_wmem max is 4 MiB), so the iovec limit never
# shortens a syscall.  Tornado's _StreamBuffer uses 2048, tuned for one
# ``send`` per segment, where references are not worth as much.
DEFAULT_LARGE_BUF_THRESHOLD = 8 * 1024

# A chunk stops taking small pieces once it holds this many bytes.  bytes.
#
# Where 64 KiB comes from: it is Tornado's default read_chunk_size and the
# MTU of Linux's loopback device, so one chunk fills a typical send() on its
# own and a drain of small messages needs few iovecs.  The largest chunk
# (64 KiB + the 8 KiB threshold, plus CPython's ~1/8 bytearray over-allocation)
# stays under glibc's default M_MMAP_THRESHOLD of 128 KiB, so chunks come from
# the heap and do not cost an mmap/munmap pair each.
DEFAULT_CHUNK_NBYTES = 64 * 1024


#: ``_buffers`` while nothing is queued (reads as an empty deque).
_NO_SEGMENTS: tuple = ()


def _size_argument(name: str, value: int) -> int:
    """``value`` as an int (``operator.index``), capped at ``sys.maxsize``: a
    larger size is as good as infinite, and the compiled build stores sizes as
    C ``Py_ssize_t`` fields (see ``writebuffer.pxd``), so both builds agree."""
    try:
        size = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__}") from None
    return size if size < sys.maxsize else sys.maxsize


class ChunkedWriteBuffer:
    """A queue of bytes to send that copies small writes and references
    large ones.

    Small pieces (up to ``large_buf_threshold`` bytes) are copied into
    bounded ``bytearray`` chunks, so a burst of tiny writes becomes a few
    large segments.  Larger pieces are kept by reference (zero copy) until
    they have been sent: the caller must not modify them before then, and may
    resize them once `advance` has consumed them.

    Follows the contract of Tornado's private ``_StreamBuffer`` (``append``,
    ``peek``, ``advance``, ``clear``, ``len``) and adds `peek_buffers` for
    ``socket.sendmsg``.  Not thread safe.

    :arg large_buf_threshold: pieces larger than this many bytes are held by
        reference.  Stored as ``_large_buf_threshold`` and read on every
        `append`, so it may be changed at any time (Tornado's tests do).
    :arg chunk_nbytes: a chunk takes no more small pieces once it holds this
        many bytes (it may overshoot by less than one piece).  Stored as
        ``_chunk_nbytes`` and read on every `append`.
    :raises ValueError: if either argument is negative or ``chunk_nbytes`` is
        zero.
    :raises TypeError: if either argument is not an int (values over
        ``sys.maxsize`` are stored as ``sys.maxsize``: no limit).

    .. versionadded:: 0.1
    """

    __slots__ = ("_buffers", "_chunk_nbytes", "_first_pos", "_large_buf_threshold", "_nbytes")

    def __init__(
        self,
        large_buf_threshold: int = DEFAULT_LARGE_BUF_THRESHOLD,
        chunk_nbytes: int = DEFAULT_CHUNK_NBYTES,
    ) -> None:
        large_buf_threshold = _size_argument("large_buf_threshold", large_buf_threshold)
        chunk_nbytes = _size_argument("chunk_nbytes", chunk_nbytes)
        if large_buf_threshold < 0:
            raise ValueError(f"large_buf_threshold must be >= 0, got {large_buf_threshold}")
        if chunk_nbytes < 1:
            raise ValueError(f"chunk_nbytes must be >= 1, got {chunk_nbytes}")
        # Segments, oldest first; see "Strategy" above.
        # (the empty tuple while nothing is queued: see "Strategy")
        self._buffers: collections.deque[_Segment] = _NO_SEGMENTS  # type: ignore[assignment]
        # Offset of the next unsent byte in self._buffers[0].
        self._first_pos = 0
        # Unsent bytes in total.
        self._nbytes = 0
        self._large_buf_threshold = large_buf_threshold
        self._chunk_nbytes = chunk_nbytes

    def __len__(self) -> int:
        """The number of bytes appended and not yet consumed by `advance`."""
        return self._nbytes

    def __bool__(self) -> bool:
        return self._nbytes > 0

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} nbytes={self._nbytes} nbuffers={len(self._buffers)}"
            f" large_buf_threshold={self._large_buf_threshold} chunk_nbytes={self._chunk_nbytes}>"
        )

    @property
    def nbuffers(self) -> int:
        """The number of segments (chunks and referenced pieces) held.

        This is the number of buffers a gather write of everything would
        need.
        """
        return len(self._buffers)

    def append(self, data: Buffer) -> None:
        """Queue ``data`` to be sent after everything already queued.

        :arg data: any object supporting the buffer protocol whose buffer is
            C-contiguous: ``bytes``, ``bytearray``, ``memoryview`` of any
            format and shape, ``array.array``, numpy arrays, ``mmap``.  Its
            size is its ``nbytes``, not its ``len()``.  Empty data is
            ignored.

        Cost: data over ``_large_buf_threshold`` bytes is not copied: we keep
        a new memoryview of it (one or two small allocations; the caller must
        leave the data unchanged until it is consumed).  Smaller data is
        copied once into the last chunk, which may reallocate it (amortized
        O(1) per byte), or into a new chunk (one allocation).  For objects
        other than ``bytes`` and ``bytearray`` a temporary memoryview is
        created to read the size.

        :raises ValueError: if ``data``'s buffer is not C-contiguous.
        :raises TypeError: if ``data`` does not support the buffer protocol.
        """
        cls = type(data)
        view: memoryview | None = None
        if cls is bytes or cls is bytearray:
            # Fast path: len() is nbytes, no view needed to copy.
            nbytes = len(data)  # type: ignore[arg-type]
            if nbytes > self._large_buf_threshold:
                self._queue().append(memoryview(data))
                self._nbytes += nbytes
                return
            if nbytes == 0:
                return
        else:
            view = memoryview(data)
            nbytes = view.nbytes
            if nbytes == 0:
                view.release()
                return
            if not view.c_contiguous:
                strides = view.strides
                view.release()
                raise ValueError(
                    f"cannot queue a non-contiguous buffer ({nbytes} bytes, strides {strides})"
                )
            if nbytes > self._large_buf_threshold:
                # cast() makes a 1-D unsigned-byte view (len == nbytes) that
                # shares the underlying buffer; the temporary can go at once.
                self._queue().append(view.cast("B"))
                view.release()
                self._nbytes += nbytes
                return
            data = view

        buffers = self._buffers
        if buffers:
            last = buffers[-1]
            if type(last) is bytearray and len(last) < self._chunk_nbytes:
                try:
                    last += data
                except BufferError:
                    # A peeked view of this chunk is still alive, so it
                    # cannot be resized: leave it alone and start another.
                    buffers.append(bytearray(data))
            else:
                buffers.append(bytearray(data))
        else:
            self._queue().append(bytearray(data))
        self._nbytes += nbytes
        if view is not None:
            view.release()

    def peek(self, size: int) -> memoryview:
        """A view of up to ``size`` bytes at the current position.

        The view covers the unsent part of the first segment only, so it may
        be shorter than ``size`` even if more bytes are queued, but it is
        never empty unless the buffer is.  Its format is ``"B"``.

        The caller must release the view (e.g. with ``with``) before the
        buffer is modified again.

        Cost: one or two memoryview allocations, no copy.

        :arg size: the most bytes wanted; must be positive.
        :raises ValueError: if ``size <= 0``.
        """
        if size <= 0:
            raise ValueError(f"peek size must be positive, got {size}")
        buffers = self._buffers
        if not buffers:
            return memoryview(b"")
        seg = buffers[0]
        pos = self._first_pos
        if type(seg) is bytearray:
            # Release the full view at once so that only the slice pins the
            # chunk (PyPy frees unreleased views only at GC time).
            with memoryview(seg) as full:
                return full[pos : pos + size]
        return seg[pos : pos + size]  # type: ignore[return-value]

    def peek_buffers(self, max_buffers: int, max_nbytes: int) -> list[memoryview]:
        """Views of the unsent bytes at the start of the buffer, for a gather
        write such as ``socket.sendmsg(views)``.

        Returns one view per segment, oldest first: at most ``max_buffers``
        views of at most ``max_nbytes`` bytes in total (the last view is
        trimmed to fit).  No view is empty; the list is empty only if the
        buffer is.  Every view has format ``"B"``.

        The caller must release every view (e.g. with ``view.release()``)
        before the buffer is modified again.

        Cost: one list plus one or two memoryview allocations per view; no
        copy.  O(number of views returned).

        :arg max_buffers: the most views wanted (e.g. the platform's
            ``SC_IOV_MAX``); must be positive.
        :arg max_nbytes: the most bytes wanted in total; must be positive.
        :raises ValueError: if ``max_buffers`` or ``max_nbytes`` is not
            positive.
        """
        if max_buffers <= 0:
            raise ValueError(f"max_buffers must be positive, got {max_buffers}")
        if max_nbytes <= 0:
            raise ValueError(f"max_nbytes must be positive, got {max_nbytes}")
        views: list[memoryview] = []
        pos = self._first_pos
        # Never more than is queued (which also keeps the count a C size in
        # the compiled build, whatever int the caller passed).
        remaining = max_nbytes if max_nbytes < self._nbytes else self._nbytes
        nviews = max_buffers if max_buffers < len(self._buffers) else len(self._buffers)
        for seg in self._buffers:
            seg_nbytes = len(seg)
            end = seg_nbytes if seg_nbytes - pos < remaining else pos + remaining
            if type(seg) is bytearray:
                if pos == 0 and end == seg_nbytes:
                    views.append(memoryview(seg))
                else:
                    with memoryview(seg) as full:
                        views.append(full[pos:end])
            else:
                # Always a new view: the caller's release() must not
                # release our segment.
                views.append(seg[pos:end])  # type: ignore[arg-type]
            remaining -= end - pos
            if remaining == 0 or len(views) == nviews:
                break
            pos = 0
        return views

    def advance(self, nbytes: int) -> None:
        """Consume the first ``nbytes`` unsent bytes (they have been sent).

        ``nbytes`` may span any number of segments.  Our view of each fully
        consumed large piece is released before this returns, so the caller
        may resize or reuse that object right away.

        Cost: O(segments fully consumed); no copy, no allocation.

        :arg nbytes: how many bytes to consume, ``0 < nbytes <= len(self)``.
        :raises ValueError: if ``nbytes`` is not in that range (nothing is
            consumed then).
        """
        if nbytes <= 0 or nbytes > self._nbytes:
            raise ValueError(f"cannot advance by {nbytes} bytes, {self._nbytes} bytes are queued")
        todo = nbytes  # in range now (a C size in the compiled build)
        self._nbytes -= todo
        buffers = self._buffers
        pos = self._first_pos
        while True:
            seg = buffers[0]
            left = len(seg) - pos
            if todo < left:
                pos += todo
                break
            buffers.popleft()
            if type(seg) is memoryview:
                seg.release()
            pos = 0
            todo -= left
            if todo == 0:
                break
        self._first_pos = pos
        if not buffers:
            self._buffers = _NO_SEGMENTS  # type: ignore[assignment]  # nothing queued: no deque kept

    def _queue(self) -> collections.deque[_Segment]:
        """The deque of segments, made if nothing is queued (see "Strategy")."""
        buffers = self._buffers
        if type(buffers) is tuple:
            buffers = self._buffers = collections.deque()
        return buffers

    def clear(self) -> None:
        """Drop everything queued, releasing our views of large pieces.

        The buffer stays usable.  Cost: O(segments).
        """
        for seg in self._buffers:
            if type(seg) is memoryview:
                seg.release()
        self._buffers = _NO_SEGMENTS  # type: ignore[assignment]
        self._first_pos = 0
        self._nbytes = 0
