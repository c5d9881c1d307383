"""Micro-benchmarks of the pure framing codec (no I/O).

Run: ``pytest benchmarks/micro/bench_framing.py --benchmark-group-by=group,param:nbytes``.
"""

from __future__ import annotations

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from tornado_readinto.wire.framing import NEED_DATA, FrameReader, frames_nbytes, pack_header

#: messages parsed per benchmark round, so per-call overhead is amortized
MESSAGES_PER_ROUND = 1000


@pytest.fixture(params=[1, 8, 1000], ids=lambda n: f"nframes={n}")
def nframes(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.mark.benchmark(group="pack-header")
def test_bench_pack_header(benchmark: BenchmarkFixture, nframes: int) -> None:
    """Benchmark one header pack of 1, 8 or 1000 frames of 100 bytes."""
    sizes = [100] * nframes
    benchmark.extra_info["nbytes"] = 8 * (nframes + 1)
    header = benchmark(pack_header, sizes)
    assert len(header) == 8 * (nframes + 1)


@pytest.mark.benchmark(group="pack-header")
def test_bench_pack_header_with_frames_nbytes(benchmark: BenchmarkFixture, nframes: int) -> None:
    """Benchmark frames_nbytes + pack_header for 1, 8 or 1000 frames of 100 bytes."""
    frames = [b"x" * 100] * nframes
    benchmark.extra_info["nbytes"] = 8 * (nframes + 1)
    header = benchmark(lambda: pack_header(frames_nbytes(frames)))
    assert len(header) == 8 * (nframes + 1)


def _stream_of_messages(frames: list[bytes], nmessages: int) -> bytes:
    return (pack_header(frames_nbytes(frames)) + b"".join(frames)) * nmessages


def _parse_all(reader: FrameReader, stream: memoryview) -> int:
    """Parse every message of `stream` with feed(); return the message count."""
    pos = 0
    count = 0
    end = len(stream)
    while pos < end:
        pos += reader.feed(stream[pos:])
        if reader.next_message() is not NEED_DATA:
            count += 1
    return count


@pytest.mark.benchmark(group="feed-small-messages")
@pytest.mark.parametrize(
    ("msg_nframes", "frame_nbytes"),
    [(1, 100), (2, 100), (4, 1024)],
    ids=["1x100B", "2x100B", "4x1KiB"],
)
def test_bench_feed_small_messages(benchmark: BenchmarkFixture, msg_nframes: int, frame_nbytes: int) -> None:
    """Benchmark FrameReader.feed parsing 1000 small messages from one read-ahead buffer."""
    frames = [(b"\x5a" * frame_nbytes)] * msg_nframes
    stream = memoryview(_stream_of_messages(frames, MESSAGES_PER_ROUND))
    benchmark.extra_info["nbytes"] = len(stream)
    benchmark.extra_info["messages"] = MESSAGES_PER_ROUND
    reader = FrameReader()
    count = benchmark(_parse_all, reader, stream)
    assert count == MESSAGES_PER_ROUND


@pytest.mark.benchmark(group="feed-small-messages")
def test_bench_feed_small_messages_bytewise_header(benchmark: BenchmarkFixture) -> None:
    """Benchmark FrameReader.feed of 100 one-frame messages fed 7 bytes at a time (split headers)."""
    frames = [b"\x5a" * 100]
    nmessages = 100
    stream = memoryview(_stream_of_messages(frames, nmessages))
    benchmark.extra_info["nbytes"] = len(stream)

    def parse() -> int:
        reader = FrameReader()
        count = 0
        for start in range(0, len(stream), 7):
            chunk = stream[start : start + 7]
            pos = 0
            while pos < len(chunk):
                pos += reader.feed(chunk[pos:])
                if reader.next_message() is not NEED_DATA:
                    count += 1
        return count

    assert benchmark(parse) == nmessages
