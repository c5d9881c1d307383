"""Micro-benchmarks: Tornado's ``_StreamBuffer`` against ``ChunkedWriteBuffer``.

Each benchmark appends one write pattern and then drains the buffer the way
the stream does: stock Tornado with ``peek`` (one ``send`` per call),
``ChunkedWriteBuffer`` with ``peek_buffers`` (one ``sendmsg`` per call).  No
socket is involved; "sending" is releasing the views and calling
``advance``.

Run with ``pytest benchmarks/micro/bench_writebuffer.py
--benchmark-group-by=group``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from tornado.iostream import _StreamBuffer

from tornado_readinto.core.writebuffer import ChunkedWriteBuffer

if TYPE_CHECKING:
    from collections.abc import Callable

    from pytest_benchmark.fixture import BenchmarkFixture

    AnyBuffer = _StreamBuffer | ChunkedWriteBuffer

IMPLS = ["stock", "chunked"]

# Bytes one simulated send()/sendmsg() takes: 64 KiB, Tornado's default
# read_chunk_size and the Linux loopback MTU, a typical amount a non-blocking
# send accepts at once.
SEND_NBYTES = 64 * 1024

# Buffers per sendmsg: Linux's IOV_MAX (os.sysconf("SC_IOV_MAX") == 1024).
IOV_MAX = 1024

KIB = 1024
MIB = 1024 * 1024

# The write patterns (built once; appending them copies or references them).
SMALL_PIECES = [b"s" * 100] * 1000  # 1000 x 100 B: chatty small messages
LARGE_PIECES = [b"L" * MIB] * 100  # 100 x 1 MiB: bulk frames
# 10 framed messages: an 8 B header, 8 frames of 1 KiB, one frame of 1 MiB
MIXED_PIECES = ([b"h" * 8] + [b"k" * KIB] * 8 + [b"M" * MIB]) * 10


def drain_stock(buf: AnyBuffer) -> int:
    """Empty ``buf`` with ``peek``/``advance``, as stock ``_handle_write``
    does; return the number of "send" calls."""
    calls = 0
    while len(buf):
        with buf.peek(SEND_NBYTES) as view:
            nbytes = len(view)
        buf.advance(nbytes)
        calls += 1
    return calls


def drain_chunked(buf: AnyBuffer) -> int:
    """Empty ``buf`` with ``peek_buffers``/``advance``, as a ``sendmsg``
    gather write does; return the number of "sendmsg" calls."""
    assert isinstance(buf, ChunkedWriteBuffer)
    calls = 0
    while buf:
        views = buf.peek_buffers(IOV_MAX, SEND_NBYTES)
        nbytes = 0
        for view in views:
            nbytes += view.nbytes
            view.release()
        buf.advance(nbytes)
        calls += 1
    return calls


def make_buffer(impl: str) -> tuple[Callable[[], AnyBuffer], Callable[[AnyBuffer], int]]:
    """The buffer factory and the matching drain function for ``impl``."""
    if impl == "stock":
        return _StreamBuffer, drain_stock
    return ChunkedWriteBuffer, drain_chunked


def append_then_drain(impl: str, pieces: list[bytes]) -> int:
    factory, drain = make_buffer(impl)
    buf = factory()
    for piece in pieces:
        buf.append(piece)
    calls = drain(buf)
    assert len(buf) == 0
    return calls


def run_pattern(benchmark: BenchmarkFixture, impl: str, pieces: list[bytes]) -> None:
    benchmark.extra_info["nbytes"] = sum(len(p) for p in pieces)
    benchmark.extra_info["npieces"] = len(pieces)
    calls = benchmark(append_then_drain, impl, pieces)
    benchmark.extra_info["send_calls"] = calls
    assert calls >= 1


@pytest.mark.benchmark(group="writebuffer-small")
@pytest.mark.parametrize("impl", IMPLS)
def test_bench_writebuffer_small(benchmark: BenchmarkFixture, impl: str) -> None:
    """Benchmark 1000 appends of 100 B, then a drain in 64 KiB sends."""
    run_pattern(benchmark, impl, SMALL_PIECES)


@pytest.mark.benchmark(group="writebuffer-large")
@pytest.mark.parametrize("impl", IMPLS)
def test_bench_writebuffer_large(benchmark: BenchmarkFixture, impl: str) -> None:
    """Benchmark 100 appends of 1 MiB, then a drain in 64 KiB sends."""
    run_pattern(benchmark, impl, LARGE_PIECES)


@pytest.mark.benchmark(group="writebuffer-mixed")
@pytest.mark.parametrize("impl", IMPLS)
def test_bench_writebuffer_mixed(benchmark: BenchmarkFixture, impl: str) -> None:
    """Benchmark 10 messages of 8 B header + 8 x 1 KiB + 1 MiB, then a drain."""
    run_pattern(benchmark, impl, MIXED_PIECES)
