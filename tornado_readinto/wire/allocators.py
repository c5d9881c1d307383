# cython: annotation_typing=False
"""Where received frames land: allocators for `tornado_readinto.wire.framing.FrameReader`.

An allocator is any callable ``allocator(nbytes)`` that returns a writable,
C-contiguous buffer of at least ``nbytes`` bytes.  The reader receives each
frame straight into the buffer its allocator returns, so the allocator decides
what the first write of every frame costs:

* `bytearray_allocator`: zero-filled memory.  The memset is a full pass over
  the frame *before* the data arrives, and on fresh memory it is also where
  the page faults happen.
* `uninitialized_allocator`: no memset (numpy's ``empty`` when numpy is
  installed), with transparent huge pages for large frames, so fresh memory
  costs one page fault per 2 MiB instead of one per 4 KiB.
* `BufferPool`: reuses buffers that the application explicitly releases, so
  steady-state traffic writes into memory that is already mapped and warm.
* `RecyclingAllocator`: like `uninitialized_allocator`, but takes a large
  buffer back by itself once nothing references it any more, and hands it
  out again (needs numpy).  For applications that cannot say when a frame is
  done with, such as dask (the default of the comm layers).

Why it matters: copying into freshly allocated memory is several times
slower than into memory already touched, and a fresh buffer per large frame
costs a large share of the throughput (figures: the performance page,
"Figures behind the code").  The cost is the kernel's page faults and page
zeroing on first touch, which no user-space trick removes; huge pages make it cheaper and pooling
avoids it.  Allocating and filling 64 MiB buffers that stay alive (as received
frames do), same machine: ``bytearray`` ~2.5 GB/s, private ``mmap`` ~2.2 GB/s,
private ``mmap`` + ``MADV_HUGEPAGE`` ~7 GB/s, ``numpy.empty`` ~8 GB/s (noisy,
shared cores; rerun with ``benchmarks/micro/bench_allocators.py``).

This module does no I/O and imports neither Tornado nor ``socket``; numpy is
imported on first use of `uninitialized_allocator`, if installed.

.. versionadded:: 0.1
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import operator
import threading
import weakref
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:  # pragma: no cover
    import numpy
    import numpy.typing

__all__ = [
    "DEFAULT_MAX_POOLED_NBYTES",
    "DEFAULT_MIN_POOLED_NBYTES",
    "DEFAULT_MIN_SIZE_CLASS",
    "HUGEPAGE_MIN_NBYTES",
    "RECYCLE_GRANULE_NBYTES",
    "BufferPool",
    "RecyclingAllocator",
    "recycling_allocator",
    "bytearray_allocator",
    "uninitialized_allocator",
]

#: Buffers of at least this many bytes are backed by memory advised for
#: transparent huge pages.  4 MiB is numpy's own threshold: its allocator calls
#: ``madvise(MADV_HUGEPAGE)`` for data of ``size >= (1u << 22)`` bytes on Linux
#: (``numpy/_core/src/multiarray/alloc.c``, ``indicate_hugepages``); an x86-64 or
#: aarch64 huge page is 2 MiB, so smaller buffers gain little.
HUGEPAGE_MIN_NBYTES: Final = 4 << 20

#: Default bound on the bytes a `BufferPool` keeps for reuse: 256 MiB.  An
#: arbitrary but modest budget: a few dozen large frames or thousands of small
#: ones; raise it for workloads with larger frames.
DEFAULT_MAX_POOLED_NBYTES: Final = 256 << 20

#: A `RecyclingAllocator` rounds its buffers up to a multiple of this: 2 MiB,
#: one transparent huge page on x86-64 and aarch64.
RECYCLE_GRANULE_NBYTES: Final = 2 << 20

#: Default smallest size class of a `BufferPool`: 4 KiB, one base page on
#: x86-64 and most aarch64 kernels; smaller requests share it.
DEFAULT_MIN_SIZE_CLASS: Final = 4096

#: Default size under which a `BufferPool` request is not pooled: 16 KiB.
#: A fresh ``bytearray`` that small costs less than a pool round trip (a
#: small ``malloc`` reuses heap memory that is already mapped, and the
#: memset is a fraction of a microsecond), and 16 KiB is also where a frame
#: starts to be received straight into its buffer
#: (``iostream.DIRECT_READ_MIN_NBYTES``).
DEFAULT_MIN_POOLED_NBYTES: Final = 16 * 1024

# ``madvise`` advice for transparent huge pages: Linux only (Python >= 3.8).
_MADV_HUGEPAGE: Final = getattr(mmap, "MADV_HUGEPAGE", None)

# A *private* anonymous mapping.  ``mmap.mmap(-1, n)`` alone is MAP_SHARED,
# i.e. shmem, which only gets huge pages if
# /sys/kernel/mm/transparent_hugepage/shmem_enabled allows it ("never" by
# default): verified on the development machine, where MADV_HUGEPAGE on a
# shared mapping gave no AnonHugePages and on a private one did.
_MMAP_PRIVATE_FLAGS: Final = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)

_NOT_LOADED: Final[Any] = object()
# numpy, None if not installed, or _NOT_LOADED until the first call
_numpy: Any = _NOT_LOADED


def _get_numpy() -> Any:
    global _numpy
    if _numpy is _NOT_LOADED:
        try:
            import numpy
        except ImportError:
            _numpy = None
        else:
            _numpy = numpy
    return _numpy


def _check_nbytes(nbytes: int) -> int:
    nbytes = operator.index(nbytes)
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, not {nbytes}")
    return nbytes


def bytearray_allocator(nbytes: int) -> bytearray:
    """Return a zero-filled ``bytearray`` of ``nbytes`` bytes.

    The `tornado_readinto.wire.framing.FrameReader` default.  Cost: one allocation
    and a memset of ``nbytes`` (on fresh memory, that memset is also where the
    page faults are taken), before any data arrives.

    :raises ValueError: if ``nbytes`` is negative.

    .. versionadded:: 0.1
    """
    return bytearray(_check_nbytes(nbytes))


def uninitialized_allocator(
    nbytes: int,
) -> numpy.typing.NDArray[numpy.uint8] | mmap.mmap | bytearray:
    """Return a writable buffer of ``nbytes`` bytes without zero-filling it.

    * With numpy installed: ``numpy.empty(nbytes, dtype=numpy.uint8)``.  On
      Linux numpy itself advises transparent huge pages for arrays of 4 MiB or
      more (``madvise(MADV_HUGEPAGE)``, unless disabled with
      ``NUMPY_MADVISE_HUGEPAGE=0``): verified on the development machine,
      where a 64 MiB ``numpy.empty`` array was 97% ``AnonHugePages`` once
      written.
    * Without numpy, on Linux, for ``nbytes >= HUGEPAGE_MIN_NBYTES``: a private
      anonymous ``mmap.mmap`` advised with ``MADV_HUGEPAGE`` (zeroed lazily by
      the kernel, a 2 MiB page at a time, as it is first written).
    * Otherwise a ``bytearray`` (zero-filled: below 4 MiB, or without huge
      pages, an ``mmap`` measured no faster than ``bytearray``).

    Cost: one allocation, no memset in user space.  The old contents of
    recycled memory are visible until overwritten; the frame reader
    overwrites every byte before handing a frame out.

    :raises ValueError: if ``nbytes`` is negative.

    .. versionadded:: 0.1
    """
    nbytes = _check_nbytes(nbytes)
    numpy = _get_numpy()
    if numpy is not None:
        return numpy.empty(nbytes, dtype=numpy.uint8)  # type: ignore[no-any-return]
    if nbytes >= HUGEPAGE_MIN_NBYTES and _MADV_HUGEPAGE is not None:
        return _hugepage_mmap(nbytes)
    return bytearray(nbytes)


def _hugepage_mmap(nbytes: int) -> mmap.mmap:
    """A private anonymous mapping of ``nbytes``, advised for transparent huge
    pages where the kernel has them (zeroed lazily by the kernel)."""
    buf = mmap.mmap(-1, nbytes, flags=_MMAP_PRIVATE_FLAGS)
    if _MADV_HUGEPAGE is not None:
        with contextlib.suppress(OSError):  # e.g. EINVAL: a kernel built without THP; small pages will do
            buf.madvise(_MADV_HUGEPAGE)
    return buf


def _address_of(buf: Any) -> int:
    """The address of the first byte of a writable, C-contiguous, non-empty buffer."""
    return ctypes.addressof(ctypes.c_char.from_buffer(buf))


class _Slot:
    """A backing buffer handed out by a `BufferPool`."""

    __slots__ = ("address", "backing", "capacity", "pooled")

    def __init__(self, backing: Any, capacity: int, pooled: bool) -> None:
        self.backing = backing
        self.capacity = capacity  # bytes of the backing buffer
        self.pooled = pooled  # False: too large for the pool, dropped on release
        self.address = -1  # computed on first need (see BufferPool._find)


class BufferPool:
    """An allocator that reuses buffers the application releases.

    Calling the pool returns a writable ``memoryview`` of exactly ``nbytes``
    bytes over a backing buffer whose size is ``nbytes`` rounded up to a power
    of two (at least ``min_size_class``): a *size class*.  `release` gives the
    buffer back, and the next request of the same size class reuses it, so
    steady traffic writes into memory that is already mapped.  New backing
    buffers come from `uninitialized_allocator`; reused ones hold the bytes of
    their previous use until overwritten.

    Use it as a `~tornado_readinto.wire.framing.FrameReader` allocator, and release
    each frame once you are done with it::

        pool = BufferPool()
        stream = FramedStream(raw_stream, allocator=pool)
        frames = await stream.read_frames()
        ...
        pool.release_all(frames)

    or, for a buffer of your own, ``with pool.borrow(nbytes) as buf: ...``.

    Requests under ``min_pooled_nbytes`` (16 KiB by default) get a fresh
    ``bytearray`` that the pool does not track, and releasing such a small
    buffer is a no-op: for small frames a pool round trip costs more than the
    allocation it saves.

    The pool keeps at most ``max_pooled_nbytes`` bytes of released buffers;
    buffers released over that bound are dropped (freed when the last view of
    them goes).  Requests larger than the bound are served at their exact
    size, without rounding, and never pooled.  Rounding up to a power of two
    can double the *virtual* size of a large buffer; pages never written are
    not resident.

    The pool cannot tell whether the application still uses a buffer it
    released: as with ``free()``, reading or writing a view after releasing it
    sees or corrupts the next user's data.  Releasing a stale view of a
    buffer that was since handed out again releases the new owner's buffer.

    Thread-safe: one lock guards the free lists and counters (held for a few
    dict/list operations; allocation happens outside it), so frames can be
    released from worker threads.

    :arg max_pooled_nbytes: the most bytes of released buffers to keep.
    :arg min_size_class: the smallest size class, a power of two.
    :arg min_pooled_nbytes: requests under this many bytes are not pooled
        (0: pool every non-empty request).
    :raises ValueError: for a negative bound, or a ``min_size_class`` that is
        not a positive power of two.

    .. versionadded:: 0.1
    """

    def __init__(
        self,
        *,
        max_pooled_nbytes: int = DEFAULT_MAX_POOLED_NBYTES,
        min_size_class: int = DEFAULT_MIN_SIZE_CLASS,
        min_pooled_nbytes: int = DEFAULT_MIN_POOLED_NBYTES,
    ) -> None:
        max_pooled_nbytes = operator.index(max_pooled_nbytes)
        min_size_class = operator.index(min_size_class)
        min_pooled_nbytes = operator.index(min_pooled_nbytes)
        if max_pooled_nbytes < 0:
            raise ValueError(f"max_pooled_nbytes must be >= 0, not {max_pooled_nbytes}")
        if min_pooled_nbytes < 0:
            raise ValueError(f"min_pooled_nbytes must be >= 0, not {min_pooled_nbytes}")
        if min_size_class < 1 or min_size_class & (min_size_class - 1):
            raise ValueError(f"min_size_class must be a positive power of two, not {min_size_class}")
        self._max_pooled_nbytes = max_pooled_nbytes
        self._min_size_class = min_size_class
        self._min_pooled_nbytes = min_pooled_nbytes
        self._lock = threading.Lock()
        # size class -> released backing buffers (LIFO: the most recently
        # used, likeliest still in cache, goes out first)
        self._free: dict[int, list[Any]] = {}
        # id(backing) of every buffer in self._free (for error messages)
        self._free_ids: set[int] = set()
        # id(backing) -> slot, for every buffer handed out and not released
        self._outstanding: dict[int, _Slot] = {}
        self._nbytes_pooled = 0
        self._nbytes_outstanding = 0
        self._hits = 0
        self._misses = 0

    # -- statistics -----------------------------------------------------------

    @property
    def max_pooled_nbytes(self) -> int:
        """The most bytes of released buffers the pool keeps."""
        return self._max_pooled_nbytes

    @property
    def min_size_class(self) -> int:
        """The smallest size class."""
        return self._min_size_class

    @property
    def min_pooled_nbytes(self) -> int:
        """Requests under this many bytes get an untracked ``bytearray``."""
        return self._min_pooled_nbytes

    @property
    def nbytes_pooled(self) -> int:
        """Bytes of released buffers kept for reuse (whole size classes)."""
        return self._nbytes_pooled

    @property
    def nbytes_outstanding(self) -> int:
        """Bytes of backing buffers handed out and not yet released."""
        return self._nbytes_outstanding

    @property
    def nbuffers_outstanding(self) -> int:
        """Buffers handed out and not yet released."""
        return len(self._outstanding)

    @property
    def hits(self) -> int:
        """Requests served with a released buffer."""
        return self._hits

    @property
    def misses(self) -> int:
        """Requests that allocated a new buffer (zero-byte requests excluded)."""
        return self._misses

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} pooled={self._nbytes_pooled}/{self._max_pooled_nbytes} "
            f"outstanding={len(self._outstanding)} hits={self._hits} misses={self._misses}>"
        )

    # -- allocation -----------------------------------------------------------

    def size_class(self, nbytes: int) -> int:
        """The backing size of a request of ``nbytes``: the next power of two,
        at least ``min_size_class``."""
        return max(self._min_size_class, 1 << (_check_nbytes(nbytes) - 1).bit_length())

    def __call__(self, nbytes: int) -> memoryview:
        """Return a writable ``memoryview`` of exactly ``nbytes`` bytes.

        A request under ``min_pooled_nbytes`` (a zero-byte one included)
        returns a view of a fresh ``bytearray`` that is not tracked (releasing
        it is a no-op).

        Cost: on a hit, a few dict/list operations and a memoryview; on a miss,
        one `uninitialized_allocator` call of the size class; under
        ``min_pooled_nbytes``, one ``bytearray``.

        :raises ValueError: if ``nbytes`` is negative.
        """
        nbytes = _check_nbytes(nbytes)
        if nbytes < self._min_pooled_nbytes or nbytes == 0:
            return memoryview(bytearray(nbytes))
        capacity = self.size_class(nbytes)
        pooled = capacity <= self._max_pooled_nbytes
        if not pooled:
            capacity = nbytes
        backing: Any = None
        with self._lock:
            if pooled:
                free = self._free.get(capacity)
                if free:
                    backing = free.pop()
                    self._free_ids.discard(id(backing))
                    self._nbytes_pooled -= capacity
                    self._hits += 1
            if backing is None:
                self._misses += 1
        if backing is None:
            backing = uninitialized_allocator(capacity)
        view = memoryview(backing)[:nbytes]
        with self._lock:
            self._outstanding[id(backing)] = _Slot(backing, capacity, pooled)
            self._nbytes_outstanding += capacity
        return view

    @contextlib.contextmanager
    def borrow(self, nbytes: int) -> Iterator[memoryview]:
        """Context manager form: ``with pool.borrow(nbytes) as buf: ...``
        releases ``buf`` on exit (do not release it yourself).

        Cost: as a call plus a `release`.
        """
        view = self(nbytes)
        obj = view.obj
        try:
            yield view
        finally:
            if nbytes >= self._min_pooled_nbytes and nbytes:  # small views are not tracked
                self._release_backing(obj, view)

    # -- release --------------------------------------------------------------

    def release(self, buf: Any) -> None:
        """Give a buffer back to the pool for reuse.

        ``buf`` is a view the pool handed out, or any buffer over the same
        memory: ``memoryview`` slices and casts of it, or the frames a
        `~tornado_readinto.wire.framing.FrameReader` made of it, or a writable
        numpy array over it.  Releasing any part releases the whole buffer.
        Zero-length buffers, and buffers under ``min_pooled_nbytes`` that are
        not part of a pooled buffer, are accepted and ignored: the pool does
        not track them (a reader's empty frames do not come from the pool).

        Cost: O(1) for memoryviews of the handed-out buffer; other buffers are
        located by address (ctypes) among the outstanding ones, O(outstanding).

        :raises ValueError: if ``buf`` was already released, or does not come
            from this pool, or is a read-only view that is not a memoryview
            of the pool's buffer.
        """
        view = buf if type(buf) is memoryview else memoryview(buf)
        nbytes = view.nbytes
        if nbytes == 0:
            return
        if nbytes < self._min_pooled_nbytes and id(view.obj) not in self._outstanding:
            return  # a small buffer the pool never tracked (or a foreign one)
        self._release_backing(view.obj, view)

    def release_all(self, bufs: Iterable[Any]) -> None:
        """`release` every buffer of ``bufs``, e.g. the frames of a message.

        Every buffer is attempted; if some could not be released, a
        ``ValueError`` naming how many is raised at the end (from the first
        error).
        """
        first_error: ValueError | None = None
        nerrors = 0
        for buf in bufs:
            try:
                self.release(buf)
            except ValueError as exc:
                nerrors += 1
                if first_error is None:
                    first_error = exc
        if first_error is not None:
            raise ValueError(
                f"{nerrors} buffer(s) could not be released; first: {first_error}"
            ) from first_error

    def clear(self) -> None:
        """Drop every released buffer the pool keeps (outstanding buffers
        stay tracked).  Cost: O(pooled buffers); memory is freed once the
        last view of each buffer goes."""
        with self._lock:
            self._free.clear()
            self._free_ids.clear()
            self._nbytes_pooled = 0

    def _release_backing(self, obj: Any, view: memoryview) -> None:
        with self._lock:
            slot = self._outstanding.pop(id(obj), None)
        if slot is None:
            slot = self._find(view)
        with self._lock:
            self._nbytes_outstanding -= slot.capacity
            if slot.pooled and self._nbytes_pooled + slot.capacity <= self._max_pooled_nbytes:
                self._free.setdefault(slot.capacity, []).append(slot.backing)
                self._free_ids.add(id(slot.backing))
                self._nbytes_pooled += slot.capacity

    def _find(self, view: memoryview) -> _Slot:
        """Pop the outstanding slot whose memory holds ``view`` (slow path)."""
        if id(view.obj) in self._free_ids:
            raise ValueError("buffer was already released to this pool")
        try:
            address = _address_of(view)
        except (TypeError, ValueError) as exc:
            # ctypes needs a writable, C-contiguous buffer
            raise ValueError(
                f"buffer was not handed out by this pool, or cannot be located ({exc})"
            ) from None
        with self._lock:
            for key, slot in self._outstanding.items():
                if slot.address < 0:
                    slot.address = _address_of(slot.backing)
                if slot.address <= address < slot.address + slot.capacity:
                    del self._outstanding[key]
                    return slot
            for backings in self._free.values():
                for backing in backings:
                    start = _address_of(backing)
                    if start <= address < start + memoryview(backing).nbytes:
                        raise ValueError("buffer was already released to this pool")
        raise ValueError("buffer was not handed out by this pool")


class RecyclingAllocator:
    """An allocator that takes large buffers back by itself once nothing
    references them any more, and hands them out again.

    Fresh memory is expensive to write the first time: the kernel zeroes
    every page on its first touch (a 100 MiB echo is markedly slower through
    a fresh buffer per message: see the performance page).  glibc's ``free``
    returns allocations this large to the kernel at once, so each new large
    frame pays the zeroing again.  This allocator
    keeps them instead, up to ``max_retained_nbytes``.

    Requests of at least ``min_nbytes`` get a numpy ``uint8`` array over a
    private anonymous mapping (advised for transparent huge pages), its size
    rounded up to `RECYCLE_GRANULE_NBYTES`.  A finalizer on the array puts the
    mapping back when the array is garbage: numpy's views, ``memoryview``
    objects and arrays made over them all keep the array alive, so nothing
    that can still reach the memory is left when it is reused.  A released
    buffer is reused for a request of at most its size and at least half its
    size (best fit).  Smaller requests, and all requests without numpy, go
    to `uninitialized_allocator` and are not recycled.

    Only code that keeps a raw address without a reference (a C extension
    holding a pointer past the object's life) could see the memory reused;
    that would be a use-after-free with any allocator.

    Thread-safe: buffers may die in any thread (dask deserializes large
    messages in a thread pool).

    :arg min_nbytes: the smallest request that is recycled (default
        `HUGEPAGE_MIN_NBYTES`).
    :arg max_retained_nbytes: the most bytes of unreferenced buffers kept
        for reuse (default `DEFAULT_MAX_POOLED_NBYTES`); more are freed.
    :raises ValueError: for a negative argument.

    .. versionadded:: 0.1
    """

    def __init__(
        self, *, min_nbytes: int = HUGEPAGE_MIN_NBYTES, max_retained_nbytes: int = DEFAULT_MAX_POOLED_NBYTES
    ) -> None:
        self._min_nbytes = operator.index(min_nbytes)
        self._max_retained_nbytes = operator.index(max_retained_nbytes)
        if self._min_nbytes < 0 or self._max_retained_nbytes < 0:
            raise ValueError(
                f"min_nbytes and max_retained_nbytes must be >= 0, not {min_nbytes} and {max_retained_nbytes}"
            )
        # Reentrant: a cyclic garbage collection can run a finalizer (and so
        # _take_back) at any allocation, including one made under the lock.
        self._lock = threading.RLock()
        self._free: list[mmap.mmap] = []  # unreferenced mappings, kept for reuse
        self._nbytes_retained = 0
        self._hits = 0
        self._misses = 0

    @property
    def nbytes_retained(self) -> int:
        """Bytes of unreferenced buffers kept for reuse."""
        return self._nbytes_retained

    @property
    def hits(self) -> int:
        """Recycled requests served with a kept buffer."""
        return self._hits

    @property
    def misses(self) -> int:
        """Recycled requests that mapped new memory."""
        return self._misses

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} retained={self._nbytes_retained}/{self._max_retained_nbytes} "
            f"hits={self._hits} misses={self._misses}>"
        )

    def __call__(self, nbytes: int) -> Any:
        """Return a writable buffer of exactly ``nbytes`` bytes, with the old
        contents of recycled memory until overwritten.

        Cost, from ``min_nbytes`` up: a scan of the kept buffers (at most
        ``max_retained_nbytes / min_nbytes`` of them), a numpy array and a
        ``weakref.finalize``; on a miss, one ``mmap`` and one ``madvise``.
        Below it: one `uninitialized_allocator` call.

        :raises ValueError: if ``nbytes`` is negative.
        """
        nbytes = _check_nbytes(nbytes)
        numpy = _get_numpy()
        if nbytes < self._min_nbytes or nbytes == 0 or numpy is None:
            return uninitialized_allocator(nbytes)
        backing = None
        with self._lock:
            fits = [m for m in self._free if nbytes <= len(m) <= 2 * nbytes]
            if fits:
                backing = min(fits, key=len)
                self._free.remove(backing)
                self._nbytes_retained -= len(backing)
                self._hits += 1
            else:
                self._misses += 1
        if backing is None:
            backing = _hugepage_mmap(-(-nbytes // RECYCLE_GRANULE_NBYTES) * RECYCLE_GRANULE_NBYTES)
        # The array's base is the mmap, not an array, so numpy makes every view
        # of it point at it: it lives as long as anything reaches the memory.
        array = numpy.frombuffer(backing, dtype=numpy.uint8, count=nbytes)
        weakref.finalize(array, self._take_back, backing).atexit = False
        return array

    def _take_back(self, backing: mmap.mmap) -> None:
        with self._lock:
            if self._nbytes_retained + len(backing) <= self._max_retained_nbytes:
                self._free.append(backing)
                self._nbytes_retained += len(backing)

    def clear(self) -> None:
        """Free every kept buffer (buffers in use are not affected)."""
        with self._lock:
            self._free.clear()
            self._nbytes_retained = 0


#: The process-wide `RecyclingAllocator` that `tornado_readinto.channel.comm` and the
#: dask backend receive frames with by default.
recycling_allocator: Final = RecyclingAllocator()
