"""Micro-benchmarks of the frame allocators: allocate a buffer and write it once.

Writing every byte is part of each benchmark: it is what a received frame
costs, and it is where fresh memory pays its page faults.

Run: ``pytest benchmarks/micro/bench_allocators.py --benchmark-group-by=group,param:nbytes``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from tornado_readinto.wire.allocators import (
    BufferPool,
    bytearray_allocator,
    uninitialized_allocator,
)

NBYTES = [1 << 10, 1 << 20, 64 << 20]  # 1 KiB, 1 MiB, 64 MiB


@pytest.fixture(params=NBYTES, ids=["1KiB", "1MiB", "64MiB"])
def nbytes(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.fixture(scope="module")
def pool() -> BufferPool:
    # big enough to keep one 64 MiB buffer (a 128 MiB size class) for reuse
    return BufferPool(max_pooled_nbytes=256 << 20)


def _fill(allocate: Callable[[int], Any], payload: memoryview, release: Callable[[Any], None] | None) -> None:
    buf = allocate(payload.nbytes)
    memoryview(buf)[:] = payload
    if release is not None:
        release(buf)


@pytest.mark.benchmark(group="allocate-and-fill")
@pytest.mark.parametrize("impl", ["bytearray", "uninitialized", "pool"])
def test_bench_allocate_and_fill(benchmark: BenchmarkFixture, nbytes: int, impl: str, pool: BufferPool) -> None:
    """Benchmark allocating one frame buffer and copying a payload into it."""
    payload = memoryview(bytes(nbytes))
    benchmark.extra_info["nbytes"] = nbytes
    if impl == "bytearray":
        benchmark(_fill, bytearray_allocator, payload, None)
    elif impl == "uninitialized":
        benchmark(_fill, uninitialized_allocator, payload, None)
    else:
        pool.release(pool(nbytes))  # warm: measure the steady state (a hit)
        hits = pool.hits
        benchmark(_fill, pool, payload, pool.release)
        # small requests are not pooled: a fresh bytearray is cheaper
        assert pool.hits > hits or nbytes < pool.min_pooled_nbytes


@pytest.mark.benchmark(group="allocate-only")
@pytest.mark.parametrize("impl", ["bytearray", "uninitialized", "pool"])
def test_bench_allocate_only(benchmark: BenchmarkFixture, nbytes: int, impl: str, pool: BufferPool) -> None:
    """Benchmark allocating (and for the pool, releasing) one buffer without writing it."""
    benchmark.extra_info["nbytes"] = nbytes
    if impl == "bytearray":
        benchmark(bytearray_allocator, nbytes)
    elif impl == "uninitialized":
        benchmark(uninitialized_allocator, nbytes)
    else:
        pool.release(pool(nbytes))  # warm: measure the steady state (a hit)
        benchmark(lambda: pool.release(pool(nbytes)))
