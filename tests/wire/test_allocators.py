"""Tests of tornado_readinto.wire.allocators: no event loop, no sockets."""

from __future__ import annotations

import ctypes
import mmap
import sys
import threading
from typing import Any

import numpy as np
import pytest

from tornado_readinto.wire import allocators
from tornado_readinto.wire.allocators import (
    DEFAULT_MAX_POOLED_NBYTES,
    DEFAULT_MIN_SIZE_CLASS,
    HUGEPAGE_MIN_NBYTES,
    RECYCLE_GRANULE_NBYTES,
    BufferPool,
    RecyclingAllocator,
    bytearray_allocator,
    uninitialized_allocator,
)
from tornado_readinto.wire.framing import NEED_DATA, FrameReader, pack_header


def address(buf: Any) -> int:
    """Address of the first byte of a writable buffer."""
    return ctypes.addressof(ctypes.c_char.from_buffer(buf))


def np_address(buf: Any) -> int:
    return int(np.frombuffer(buf, dtype=np.uint8).__array_interface__["data"][0])


@pytest.fixture
def no_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make uninitialized_allocator behave as if numpy were not installed."""
    monkeypatch.setattr(allocators, "_numpy", None)


# -- bytearray_allocator ---------------------------------------------------


@pytest.mark.parametrize("nbytes", [0, 1, 4096, 1 << 20])
def test_bytearray_allocator_zero_filled(nbytes: int) -> None:
    buf = bytearray_allocator(nbytes)
    assert type(buf) is bytearray and len(buf) == nbytes
    assert buf.count(0) == nbytes


def test_bytearray_allocator_rejects_negative() -> None:
    with pytest.raises(ValueError, match="nbytes"):
        bytearray_allocator(-1)


# -- uninitialized_allocator ------------------------------------------------


@pytest.mark.parametrize("nbytes", [0, 1, 4096, HUGEPAGE_MIN_NBYTES + 1])
def test_uninitialized_allocator_numpy_empty(nbytes: int) -> None:
    buf: Any = uninitialized_allocator(nbytes)
    view = memoryview(buf)
    assert isinstance(buf, np.ndarray)  # numpy.empty: no memset
    assert buf.dtype == np.uint8 and buf.shape == (nbytes,)
    assert not view.readonly and view.c_contiguous and view.nbytes == nbytes
    view[:] = b"\xab" * nbytes
    assert bytes(view[-1:]) == (b"\xab" if nbytes else b"")


@pytest.mark.skipif(not hasattr(mmap, "MADV_HUGEPAGE"), reason="no transparent huge pages")
def test_uninitialized_allocator_without_numpy_large_is_private_mmap(no_numpy: None) -> None:
    buf = uninitialized_allocator(HUGEPAGE_MIN_NBYTES)
    assert isinstance(buf, mmap.mmap) and len(buf) == HUGEPAGE_MIN_NBYTES
    memoryview(buf)[-3:] = b"end"  # writable
    assert buf[-3:] == b"end"
    if sys.platform.startswith("linux"):
        # MAP_PRIVATE, advised for huge pages: the kernel lists the mapping
        # without the "sh" (shared) flag and with "hg" (MADV_HUGEPAGE).
        flags = _vm_flags(address(buf))
        assert "hg" in flags and "sh" not in flags


def _vm_flags(addr: int) -> list[str]:
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split(" ", 1)[0]
            if "-" in head and ":" not in head:
                start, end = (int(x, 16) for x in head.split("-"))
                inside = start <= addr < end
            elif inside and line.startswith("VmFlags:"):
                return line.split()[1:]
    raise AssertionError("mapping not found")


def test_uninitialized_allocator_without_numpy_small_is_bytearray(no_numpy: None) -> None:
    buf = uninitialized_allocator(HUGEPAGE_MIN_NBYTES - 1)
    assert type(buf) is bytearray and len(buf) == HUGEPAGE_MIN_NBYTES - 1
    assert type(uninitialized_allocator(0)) is bytearray


def test_uninitialized_allocator_rejects_negative() -> None:
    with pytest.raises(ValueError, match="nbytes"):
        uninitialized_allocator(-1)


@pytest.mark.parametrize("allocator", [bytearray_allocator, uninitialized_allocator, BufferPool(min_pooled_nbytes=0)])
def test_allocators_work_with_frame_reader(allocator: Any) -> None:
    reader = FrameReader(allocator)
    reader.feed(pack_header([3, 0, 5]) + b"abc" + b"defgh")
    msg = reader.next_message()
    assert msg is not NEED_DATA
    assert [bytes(f) for f in msg] == [b"abc", b"", b"defgh"]


# -- BufferPool ------------------------------------------------------------


def test_buffer_pool_returns_exact_writable_views() -> None:
    pool = BufferPool(min_pooled_nbytes=0)
    for nbytes in (1, 100, 4096, 4097, 1 << 20):
        view = pool(nbytes)
        assert isinstance(view, memoryview)
        assert view.nbytes == nbytes and view.format == "B" and not view.readonly
        view[:] = b"\x01" * nbytes


def test_buffer_pool_size_classes() -> None:
    pool = BufferPool(min_pooled_nbytes=0, min_size_class=1024)
    assert [pool.size_class(n) for n in (0, 1, 1024, 1025, 3000, 1 << 20, (1 << 20) + 1)] == [
        1024,
        1024,
        1024,
        2048,
        4096,
        1 << 20,
        2 << 20,
    ]
    view = pool(1500)
    backing: Any = view.obj
    assert memoryview(backing).nbytes == 2048
    assert pool.nbytes_outstanding == 2048


def test_buffer_pool_reuses_same_memory() -> None:
    pool = BufferPool(min_pooled_nbytes=0)
    first = pool(1000)
    addr = np_address(first)
    pool.release(first)
    assert pool.nbytes_pooled == DEFAULT_MIN_SIZE_CLASS
    second = pool(4000)  # same size class
    assert np_address(second) == addr
    assert (pool.hits, pool.misses) == (1, 1)
    assert pool.nbytes_pooled == 0


def test_buffer_pool_different_size_classes_do_not_mix() -> None:
    pool = BufferPool(min_pooled_nbytes=0)
    small = pool(100)
    pool.release(small)
    big = pool(DEFAULT_MIN_SIZE_CLASS + 1)
    assert (pool.hits, pool.misses) == (0, 2)
    assert pool.nbytes_pooled == DEFAULT_MIN_SIZE_CLASS
    pool.release(big)
    assert pool.nbytes_pooled == 3 * DEFAULT_MIN_SIZE_CLASS


def test_buffer_pool_reuse_is_lifo() -> None:
    pool = BufferPool(min_pooled_nbytes=0)
    a, b = pool(10), pool(10)
    pool.release(a)
    pool.release(b)
    assert address(pool(10)) == address(b)
    assert address(pool(10)) == address(a)


def test_buffer_pool_release_derived_views() -> None:
    pool = BufferPool(min_pooled_nbytes=0)
    handed = [pool(100) for _ in range(4)]
    pool.release(handed[0][10:20])  # a slice
    pool.release(handed[1][:96].cast("d"))  # a typed cast
    pool.release(np.frombuffer(handed[2], dtype=np.uint8)[50:])  # a numpy array over it (slow path)
    reader_frame = memoryview(handed[3]).cast("B")[:100]  # what FrameReader makes of it
    pool.release(reader_frame)
    assert pool.nbuffers_outstanding == 0 and pool.nbytes_outstanding == 0
    assert pool.nbytes_pooled == 4 * DEFAULT_MIN_SIZE_CLASS


def test_buffer_pool_double_release_raises() -> None:
    pool = BufferPool(min_pooled_nbytes=0)
    view = pool(100)
    pool.release(view)
    with pytest.raises(ValueError, match="already released"):
        pool.release(view)
    with pytest.raises(ValueError, match="already released"):
        pool.release(np.frombuffer(view, dtype=np.uint8))  # located by address
    assert pool.nbytes_pooled == DEFAULT_MIN_SIZE_CLASS


@pytest.mark.parametrize("foreign", [bytearray(10), np.zeros(10, np.uint8), memoryview(bytearray(5))])
def test_buffer_pool_foreign_buffer_raises(foreign: Any) -> None:
    pool = BufferPool(min_pooled_nbytes=0)
    pool(10)
    with pytest.raises(ValueError, match="not handed out by this pool"):
        pool.release(foreign)
    assert pool.nbuffers_outstanding == 1


def test_buffer_pool_foreign_read_only_buffer_raises() -> None:
    with pytest.raises(ValueError, match="not handed out by this pool"):
        BufferPool(min_pooled_nbytes=0).release(b"abc")


def test_buffer_pool_buffer_from_other_pool_raises() -> None:
    view = BufferPool(min_pooled_nbytes=0)(10)
    with pytest.raises(ValueError, match="not handed out"):
        BufferPool(min_pooled_nbytes=0).release(view)


def test_buffer_pool_zero_bytes() -> None:
    pool = BufferPool(min_pooled_nbytes=0)
    view = pool(0)
    assert view.nbytes == 0 and not view.readonly
    pool.release(view)
    pool.release(b"")  # any zero-length buffer: a no-op
    pool.release(view)
    assert (pool.hits, pool.misses, pool.nbuffers_outstanding, pool.nbytes_pooled) == (0, 0, 0, 0)
    with pool.borrow(0) as buf:
        assert buf.nbytes == 0


def test_buffer_pool_bound_drops_excess() -> None:
    pool = BufferPool(min_pooled_nbytes=0, max_pooled_nbytes=3 * 4096, min_size_class=4096)
    views = [pool(4096) for _ in range(5)]
    pool.release_all(views)
    assert pool.nbytes_pooled == 3 * 4096
    assert pool.nbuffers_outstanding == 0
    for _ in range(5):
        pool(10)
    assert (pool.hits, pool.misses) == (3, 7)


def test_buffer_pool_request_over_bound_is_exact_and_not_pooled() -> None:
    pool = BufferPool(min_pooled_nbytes=0, max_pooled_nbytes=8192)
    view = pool(10_000)
    assert pool.nbytes_outstanding == 10_000  # not rounded up to 16 KiB
    pool.release(view)
    assert pool.nbytes_pooled == 0 and pool.nbuffers_outstanding == 0


def test_buffer_pool_zero_bound_pools_nothing() -> None:
    pool = BufferPool(min_pooled_nbytes=0, max_pooled_nbytes=0)
    pool.release(pool(1))
    assert pool.nbytes_pooled == 0


def test_buffer_pool_release_all_reports_failures_after_releasing_the_rest() -> None:
    pool = BufferPool(min_pooled_nbytes=0)
    good = [pool(10), pool(20)]
    with pytest.raises(ValueError, match="1 buffer"):
        pool.release_all([good[0], bytearray(3), good[1]])
    assert pool.nbuffers_outstanding == 0


def test_buffer_pool_release_all_accepts_reader_frames() -> None:
    pool = BufferPool(min_pooled_nbytes=0)
    reader = FrameReader(pool)
    reader.feed(pack_header([3, 0, 70_000]) + b"abc" + b"\x07" * 70_000)
    frames = reader.next_message()
    assert frames is not NEED_DATA
    assert pool.nbuffers_outstanding == 2  # the empty frame is not from the pool
    pool.release_all(frames)
    assert pool.nbuffers_outstanding == 0
    assert pool.nbytes_pooled == DEFAULT_MIN_SIZE_CLASS + (128 << 10)


def test_buffer_pool_borrow_context_manager() -> None:
    pool = BufferPool(min_pooled_nbytes=0)
    with pool.borrow(100) as buf:
        assert buf.nbytes == 100
        buf[:] = b"z" * 100
        assert pool.nbuffers_outstanding == 1
    assert pool.nbuffers_outstanding == 0 and pool.nbytes_pooled == DEFAULT_MIN_SIZE_CLASS
    with pytest.raises(KeyError), pool.borrow(100):
        raise KeyError("boom")
    assert pool.nbuffers_outstanding == 0 and pool.hits == 1


def test_buffer_pool_clear() -> None:
    pool = BufferPool(min_pooled_nbytes=0)
    kept = pool(10)
    pool.release(pool(10))
    pool.clear()
    assert pool.nbytes_pooled == 0
    pool.release(kept)
    assert pool.nbytes_pooled == DEFAULT_MIN_SIZE_CLASS


def test_buffer_pool_defaults_and_validation() -> None:
    pool = BufferPool(min_pooled_nbytes=0)
    assert (pool.max_pooled_nbytes, pool.min_size_class) == (DEFAULT_MAX_POOLED_NBYTES, DEFAULT_MIN_SIZE_CLASS)
    assert (DEFAULT_MAX_POOLED_NBYTES, DEFAULT_MIN_SIZE_CLASS) == (256 << 20, 4096)
    with pytest.raises(ValueError, match="max_pooled_nbytes"):
        BufferPool(min_pooled_nbytes=0, max_pooled_nbytes=-1)
    for bad in (0, -4, 3000):
        with pytest.raises(ValueError, match="min_size_class"):
            BufferPool(min_pooled_nbytes=0, min_size_class=bad)
    with pytest.raises(ValueError, match="nbytes"):
        pool(-1)
    assert "hits=0" in repr(pool)


def test_buffer_pool_without_numpy_uses_bytearray_backing(no_numpy: None) -> None:
    pool = BufferPool(min_pooled_nbytes=0)
    view = pool(100)
    assert type(view.obj) is bytearray
    addr = address(view)
    pool.release(view[1:])
    assert address(pool(100)) == addr


def test_buffer_pool_concurrent_release() -> None:
    pool = BufferPool(min_pooled_nbytes=0)
    views = [pool(64) for _ in range(400)]
    chunks = [views[i::4] for i in range(4)]
    threads = [threading.Thread(target=pool.release_all, args=(chunk,)) for chunk in chunks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert pool.nbuffers_outstanding == 0
    assert pool.nbytes_pooled == 400 * DEFAULT_MIN_SIZE_CLASS


# -- RecyclingAllocator ------------------------------------------------------------


def test_recycling_takes_a_buffer_back_only_when_nothing_reaches_it() -> None:
    """Views, memoryviews and arrays made over the buffer (as dask's numpy
    deserialization makes them) keep it from reuse; once all are gone, the
    next request of a fitting size gets the same memory back."""
    recycler = RecyclingAllocator()
    nbytes = 5 << 20
    buf = recycler(nbytes)
    assert len(buf) == nbytes and buf.flags.writeable
    first = np_address(buf)
    keepers = [
        memoryview(buf)[10:],
        buf[100:],
        np.ndarray((10,), dtype=np.float64, buffer=memoryview(buf).cast("B")),
    ]
    del buf
    in_use = recycler(nbytes)  # the first buffer is still reachable: new memory
    assert np_address(in_use) != first
    while keepers:
        assert recycler.nbytes_retained == 0
        keepers.pop()
    assert recycler.nbytes_retained == 3 * RECYCLE_GRANULE_NBYTES  # 5 MiB, rounded up
    again = recycler(nbytes)
    assert np_address(again) == first
    assert (recycler.hits, recycler.misses) == (1, 2)


def test_recycling_best_fit_size_bounds_and_retention_cap() -> None:
    recycler = RecyclingAllocator(max_retained_nbytes=40 << 20)
    small, large = recycler(5 << 20), recycler(30 << 20)
    small_at, large_at = np_address(small), np_address(large)
    del small, large
    assert recycler.nbytes_retained == (6 << 20) + (30 << 20)
    big = recycler(20 << 20)  # 6 MiB is too small, 30 MiB within 2x: reused
    assert np_address(big) == large_at and len(big) == 20 << 20
    tiny = recycler(4 << 20)  # best fit: the 6 MiB one
    assert np_address(tiny) == small_at
    huge = recycler(64 << 20)  # nothing kept is large enough
    del big, tiny, huge  # 30 + 6 MiB are kept, then 64 MiB is over the cap: freed
    assert recycler.nbytes_retained == (36 << 20)
    recycler.clear()
    assert recycler.nbytes_retained == 0
    assert "retained=0/41943040" in repr(recycler)


def test_recycling_small_requests_and_no_numpy_are_not_recycled(no_numpy: None) -> None:
    recycler = RecyclingAllocator()
    buf = recycler(HUGEPAGE_MIN_NBYTES)
    assert isinstance(buf, mmap.mmap)  # uninitialized_allocator without numpy
    del buf
    assert recycler.misses == 0 and recycler.nbytes_retained == 0


def test_recycling_below_min_nbytes_goes_to_uninitialized_allocator() -> None:
    recycler = RecyclingAllocator(min_nbytes=1 << 20)
    for nbytes in (0, 100, (1 << 20) - 1):
        buf = recycler(nbytes)
        assert isinstance(buf, np.ndarray) and len(buf) == nbytes and buf.base is None
    assert recycler.misses == 0
    with pytest.raises(ValueError, match="min_nbytes"):
        RecyclingAllocator(min_nbytes=-1)
    with pytest.raises(ValueError):
        recycler(-1)


def test_recycling_takes_back_buffers_dropped_in_other_threads() -> None:
    recycler = RecyclingAllocator()
    bufs = [recycler(4 << 20) for _ in range(8)]
    threads = [threading.Thread(target=bufs.pop) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert recycler.nbytes_retained == 8 * (4 << 20)
    assert len({np_address(recycler(4 << 20)) for _ in range(3)}) == 3


def test_recycling_allocator_frames_of_a_frame_reader() -> None:
    """Frames received through a FrameReader are views of the recycled
    array: dropping the frames of one message recycles its buffer for the
    next, and the data is intact."""
    recycler = RecyclingAllocator()
    reader = FrameReader(recycler)
    nbytes = 6 << 20
    addresses = []
    for fill in (b"a", b"b", b"c"):
        payload = fill * nbytes
        data = pack_header([nbytes]) + payload
        assert reader.feed(data) == len(data)
        frames = reader.next_message()
        assert frames is not NEED_DATA and bytes(frames[0]) == payload
        addresses.append(np_address(frames[0]))
        del frames
    assert addresses[0] == addresses[1] == addresses[2]
    assert recycler.hits == 2 and recycler.misses == 1


def test_recycling_buffer_dying_under_the_allocators_own_lock_does_not_deadlock() -> None:
    """The cyclic garbage collector can free a buffer (running its finalizer)
    at any allocation, including one the allocator makes while it holds its
    lock: taking the buffer back must not wait for that lock."""
    recycler = RecyclingAllocator()
    buf = recycler(4 << 20)

    def drop_under_lock() -> None:
        nonlocal buf
        with recycler._lock:
            del buf  # the finalizer runs here, in the thread holding the lock

    thread = threading.Thread(target=drop_under_lock, daemon=True)
    thread.start()
    thread.join(5)
    assert not thread.is_alive(), "deadlocked"
    assert recycler.nbytes_retained == 4 << 20


def test_buffer_pool_serves_small_requests_with_untracked_bytearrays():
    """Under min_pooled_nbytes (16 KiB by default) a pool round trip costs
    more than it saves: a fresh bytearray, not tracked, released as a no-op."""
    pool = BufferPool()
    assert pool.min_pooled_nbytes == 16 * 1024
    small = pool(1024)
    assert type(small.obj) is bytearray and small.nbytes == 1024
    assert (pool.nbuffers_outstanding, pool.hits, pool.misses) == (0, 0, 0)
    pool.release(small)  # no-op
    pool.release_all([small, pool(0)])
    big = pool(64 * 1024)
    assert (pool.nbuffers_outstanding, pool.misses) == (1, 1)
    pool.release(big[:10])  # a small part of a pooled buffer releases all of it
    assert pool.nbuffers_outstanding == 0 and pool.nbytes_pooled == 64 * 1024
    assert pool(40 * 1024).obj is big.obj and pool.hits == 1
    with pool.borrow(100) as buf:
        assert type(buf.obj) is bytearray
    with pytest.raises(ValueError, match="min_pooled_nbytes"):
        BufferPool(min_pooled_nbytes=-1)
