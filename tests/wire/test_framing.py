"""Tests of the pure framing codec: no event loop, no sockets.

Every decoding case runs through each way a stream can drive the reader:
`feed` of the whole stream, `feed` one byte at a time, ``recv_into`` style
(`get_buffer` / `buffer_updated`) and ``recvmsg_into`` style (`get_buffers`),
and separately with the bytes of a next message following it.
"""

from __future__ import annotations

import pickle
import struct
import subprocess
import sys
import textwrap
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from distributed.protocol.utils import pack_frames, unpack_frames
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tornado_readinto.errors import FrameTooLargeError, FramingError, ReadIntoError
from tornado_readinto.wire.framing import (
    DEFAULT_MAX_FRAME_NBYTES,
    DEFAULT_MAX_FRAMES,
    DEFAULT_MAX_MESSAGE_NBYTES,
    NEED_DATA,
    FrameReader,
    frames_nbytes,
    message_header,
    pack_header,
)

from ..conftest import TrackingAllocator

Frames = list[bytes]


def encode(frames: Frames) -> bytes:
    return pack_header(frames_nbytes(frames)) + b"".join(frames)


def take_message(reader: FrameReader) -> Frames | None:
    msg = reader.next_message()
    if msg is NEED_DATA:
        return None
    for frame in msg:
        assert isinstance(frame, memoryview)
        assert frame.format == "B" and frame.ndim == 1 and not frame.readonly
    return [bytes(frame) for frame in msg]


# -- drivers: each decodes a whole stream, in chunks of at most `chunk` bytes --


def drive_feed(reader: FrameReader, data: bytes, chunk: int) -> list[Frames]:
    """Feed `data` in chunks of `chunk` bytes, re-feeding what a message boundary left."""
    messages = []
    view = memoryview(data)
    start = 0
    while start < len(data):
        piece = view[start : start + chunk]
        pos = 0
        while pos < len(piece):
            pos += reader.feed(piece[pos:])
            msg = take_message(reader)
            if msg is not None:
                messages.append(msg)
        start += chunk
    return messages


def drive_recv_into(reader: FrameReader, data: bytes, chunk: int) -> list[Frames]:
    """Like a recv_into loop on a socket that returns at most `chunk` bytes."""
    messages = []
    pos = 0
    while pos < len(data):
        buf = reader.get_buffer()
        assert buf.nbytes > 0
        nbytes = min(buf.nbytes, chunk, len(data) - pos)
        buf[:nbytes] = data[pos : pos + nbytes]
        pos += nbytes
        reader.buffer_updated(nbytes)
        msg = take_message(reader)
        if msg is not None:
            messages.append(msg)
    return messages


def drive_recvmsg_into(reader: FrameReader, data: bytes, chunk: int, max_buffers: int = 4) -> list[Frames]:
    """Like a recvmsg_into loop that fills the buffers in order, `chunk` bytes at most."""
    messages = []
    pos = 0
    while pos < len(data):
        bufs = reader.get_buffers(max_buffers)
        assert 1 <= len(bufs) <= max_buffers
        budget = min(chunk, len(data) - pos)
        total = 0
        for buf in bufs:
            nbytes = min(buf.nbytes, budget - total)
            buf[:nbytes] = data[pos : pos + nbytes]
            pos += nbytes
            total += nbytes
        reader.buffer_updated(total)
        msg = take_message(reader)
        if msg is not None:
            messages.append(msg)
    return messages


DRIVERS: dict[str, Callable[[FrameReader, bytes], list[Frames]]] = {
    "whole": lambda r, d: drive_feed(r, d, max(len(d), 1)),
    "bytewise": lambda r, d: drive_feed(r, d, 1),
    "recv_into": lambda r, d: drive_recv_into(r, d, 1 << 20),
    "recv_into_small": lambda r, d: drive_recv_into(r, d, 3),
    "recvmsg_into": lambda r, d: drive_recvmsg_into(r, d, 1 << 20),
    "recvmsg_into_small": lambda r, d: drive_recvmsg_into(r, d, 5, max_buffers=2),
}

CASES: dict[str, Frames] = {
    "no_frames": [],
    "one_empty_frame": [b""],
    "two_empty_frames": [b"", b""],
    "one_byte": [b"x"],
    "small": [b"hello", b"world"],
    "empty_in_middle": [b"hello", b"", b"world"],
    "empty_at_ends": [b"", b"abc", b""],
    "large_frame": [bytes(range(256)) * 300],
    "many_frames": [bytes([i]) * (i % 5) for i in range(70)],  # > 64: own lengths buffer
    "header_like_payload": [struct.pack("<QQ", 1, 2**63), b"\xff" * 16],
}


@pytest.fixture(params=sorted(DRIVERS))
def driver(request: pytest.FixtureRequest) -> Callable[[FrameReader, bytes], list[Frames]]:
    return DRIVERS[request.param]


@pytest.mark.parametrize("case", sorted(CASES))
def test_reader_decodes_case(driver: Callable[[FrameReader, bytes], list[Frames]], case: str) -> None:
    frames = CASES[case]
    reader = FrameReader()
    assert driver(reader, encode(frames)) == [frames]
    assert not reader.in_message
    assert reader.next_message() is NEED_DATA


@pytest.mark.parametrize("case", sorted(CASES))
def test_reader_decodes_consecutive_messages(
    driver: Callable[[FrameReader, bytes], list[Frames]], case: str
) -> None:
    frames = CASES[case]
    other = [b"next", b""]
    reader = FrameReader()
    stream = encode(frames) + encode(other) + encode(frames)
    assert driver(reader, stream) == [frames, other, frames]


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("trailing", [b"\x02", encode([b"nxt", b"zz"]), encode([])])
def test_reader_feed_stops_at_message_boundary(case: str, trailing: bytes) -> None:
    frames = CASES[case]
    message = encode(frames)
    reader = FrameReader()
    # whole: one call holding the message and the start of the next
    assert reader.feed(message + trailing) == len(message)
    assert reader.feed(trailing) == 0  # a complete message is waiting: consume nothing
    assert take_message(reader) == frames
    # bytewise, with the next message's bytes after the last byte
    for i in range(len(message) - 1):
        assert reader.feed(message[i : i + 1]) == 1
        assert reader.next_message() is NEED_DATA
    assert reader.feed(message[-1:] + trailing) == 1
    assert take_message(reader) == frames
    # the trailing bytes then start the next message
    assert reader.feed(trailing) == len(trailing)
    assert reader.in_message


# -- interop with dask.distributed ----------------------------------------------


@pytest.mark.parametrize("case", sorted(CASES))
def test_pack_header_matches_distributed_pack_frames(case: str) -> None:
    frames = CASES[case]
    assert pack_header(frames_nbytes(frames)) + b"".join(frames) == pack_frames(frames)


@pytest.mark.parametrize("case", sorted(CASES))
def test_reader_decodes_distributed_pack_frames(
    driver: Callable[[FrameReader, bytes], list[Frames]], case: str
) -> None:
    frames = CASES[case]
    assert driver(FrameReader(), pack_frames(frames)) == [frames]


@pytest.mark.parametrize("case", sorted(CASES))
def test_distributed_unpack_frames_decodes_ours(case: str) -> None:
    frames = CASES[case]
    assert [bytes(f) for f in unpack_frames(encode(frames))] == frames


def test_pack_header_matches_distributed_for_numpy_frames() -> None:
    frames: list[Any] = [np.arange(10, dtype=np.float64), np.zeros((3, 4), dtype=np.int32), b"x"]
    assert frames_nbytes(frames) == [80, 48, 1]
    assert pack_header(frames_nbytes(frames)) + b"".join(memoryview(f).cast("B") for f in frames) == pack_frames(
        [memoryview(f).cast("B") for f in frames]
    )


def _frame_kinds(payload: bytes) -> list[Any]:
    """The same bytes as every kind of frame ``message_header`` sizes."""
    doubled = np.frombuffer(payload * 2, dtype=np.uint8)
    return [
        payload,
        bytearray(payload),
        memoryview(payload),
        memoryview(bytearray(payload * 8)).cast("d") if payload else memoryview(b""),  # typed: 8x the bytes
        doubled[::2],  # a non-contiguous numpy array: memoryview(frame).nbytes sizes it
        np.frombuffer(payload * 4, dtype=np.uint8).view(np.int32) if payload else np.zeros(0, np.int32),
    ]


@settings(max_examples=200, deadline=None)
@given(payloads=st.lists(st.binary(max_size=64), max_size=12), kinds=st.lists(st.integers(0, 5), max_size=12))
def test_message_header_is_the_header_and_wire_size_of_any_frames(payloads: list[bytes], kinds: list[int]) -> None:
    """Against an oracle of its own (struct, each size from memoryview(frame).nbytes),
    for bytes, bytearray, memoryviews (typed too) and numpy arrays (contiguous
    or not): the compiled build writes the header in C, the pure one packs it."""
    frames = [_frame_kinds(p)[kinds[i] if i < len(kinds) else 0] for i, p in enumerate(payloads)]
    sizes = [memoryview(f).nbytes for f in frames]
    header, wire_nbytes = message_header(frames)
    assert type(header) is bytes
    assert header == struct.pack(f"<{len(frames) + 1}Q", len(frames), *sizes)
    assert wire_nbytes == len(header) + sum(sizes)
    assert message_header(tuple(frames)) == (header, wire_nbytes)


def test_message_header_of_no_frames_is_a_zero_count() -> None:
    assert message_header([]) == (bytes(8), 8)


class _LyingLength(list):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return super().__len__() + 1


class _ShortLength(list):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return super().__len__() - 1


@pytest.mark.parametrize(
    ("frames", "error", "match"),
    [
        ([b"a", 5], TypeError, "bytes-like object"),
        (["text"], TypeError, "bytes-like object"),
        (iter([b"a"]), TypeError, "len"),
        (_LyingLength([b"a", b"b"]), ValueError, "changed size"),
        (_ShortLength([b"a", b"b"]), ValueError, "changed size"),
    ],
    ids=["int", "str", "iterator", "length-over", "length-under"],
)
def test_message_header_rejects_what_is_not_a_sequence_of_buffers(frames: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        message_header(frames)


def test_message_header_rejects_a_released_memoryview() -> None:
    view = memoryview(b"abc")
    view.release()
    with pytest.raises(ValueError, match="released"):
        message_header([b"x", view])


# -- properties ----------------------------------------------------------------

frames_strategy = st.lists(st.binary(max_size=40), max_size=8)


def split(data: bytes, sizes: list[int]) -> list[bytes]:
    """`data` cut into chunks of the given sizes (cycled), the last one taking the rest."""
    chunks = []
    pos = 0
    i = 0
    while pos < len(data):
        size = sizes[i % len(sizes)] if sizes else len(data)
        chunks.append(data[pos : pos + size])
        pos += size
        i += 1
    return chunks


@settings(max_examples=500, deadline=None)
@given(
    messages=st.lists(frames_strategy, min_size=1, max_size=4),
    sizes=st.lists(st.integers(1, 30), max_size=10),
    how=st.sampled_from(["feed", "recv_into", "recvmsg_into"]),
)
def test_reader_round_trip_any_frames_any_chunking(messages: list[Frames], sizes: list[int], how: str) -> None:
    stream = b"".join(encode(frames) for frames in messages)
    reader = FrameReader()
    decoded: list[Frames] = []
    if how == "feed":
        for chunk in split(stream, sizes):
            pos = 0
            while pos < len(chunk):
                pos += reader.feed(chunk[pos:])
                msg = take_message(reader)
                if msg is not None:
                    decoded.append(msg)
    else:
        # a socket that returns the chunks in turn, short reads included
        pos = 0
        for i, size in enumerate(len(c) for c in split(stream, sizes)):
            remaining = size
            while remaining:
                if how == "recv_into":
                    bufs = [reader.get_buffer()]
                else:
                    bufs = reader.get_buffers(1 + i % 3)
                total = 0
                for buf in bufs:
                    nbytes = min(buf.nbytes, remaining - total)
                    buf[:nbytes] = stream[pos : pos + nbytes]
                    pos += nbytes
                    total += nbytes
                reader.buffer_updated(total)
                remaining -= total
                msg = take_message(reader)
                if msg is not None:
                    decoded.append(msg)
    assert decoded == messages
    assert not reader.in_message


# A header-shaped prefix makes the fuzzer reach the frame stages often; with
# small limits nothing it finds can allocate much.
fuzz_bytes = st.one_of(
    st.binary(max_size=120),
    st.builds(
        lambda n, lengths, tail: struct.pack(f"<Q{len(lengths)}Q", n, *lengths) + tail,
        st.integers(0, 12),
        st.lists(st.integers(0, 300), max_size=12),
        st.binary(max_size=300),
    ),
)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=fuzz_bytes, sizes=st.lists(st.integers(1, 40), max_size=6), recv_into=st.booleans())
def test_reader_fuzz_only_messages_need_data_or_framing_error(data: bytes, sizes: list[int], recv_into: bool) -> None:
    reader = FrameReader(max_frames=10, max_frame_nbytes=200, max_message_nbytes=500)
    try:
        for chunk in split(data, sizes):
            pos = 0
            while pos < len(chunk):
                if recv_into:
                    buf = reader.get_buffer()
                    nbytes = min(buf.nbytes, len(chunk) - pos)
                    buf[:nbytes] = chunk[pos : pos + nbytes]
                    reader.buffer_updated(nbytes)
                    pos += nbytes
                else:
                    pos += reader.feed(chunk[pos:])
                msg = reader.next_message()
                assert msg is NEED_DATA or isinstance(msg, list)
    except FramingError:
        with pytest.raises(FramingError):
            reader.feed(b"\0")


def _outcome(reader: FrameReader, data: bytes, step: int) -> object:
    """The messages ``reader`` decodes from ``data`` fed ``step`` bytes at a
    time, or the limit error it raised (its field and value)."""
    try:
        return drive_feed(reader, data, step)
    except FrameTooLargeError as exc:
        return ("refused", exc.args[0])


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 24), min_size=1, max_size=70),
    slack=st.tuples(st.integers(-2, 1), st.integers(-2, 1), st.integers(-2, 1)),
)
def test_a_whole_message_in_one_feed_decodes_as_byte_by_byte(sizes: list[int], slack: tuple[int, int, int]) -> None:
    """The short path of a whole message in one buffer (up to 64 frames: its
    header parsed in C in the compiled build) gives what the general path
    gives byte by byte, the limits at, under and over the message's values."""
    frames = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    data = encode(frames)
    limits = {
        "max_frames": max(0, len(sizes) + slack[0]),
        "max_frame_nbytes": max(0, max(sizes) + slack[1]),
        "max_message_nbytes": max(0, sum(sizes) + slack[2]),
    }
    whole = _outcome(FrameReader(**limits), data, len(data))
    assert whole == _outcome(FrameReader(**limits), data, 1)
    if all(s >= 0 for s in slack):
        assert whole == [frames]


# -- hostile headers: refused before any allocation ---------------------------


HOSTILE = {
    # name: (header bytes, reader kwargs, field, value, limit)
    "nframes_2_40": (struct.pack("<Q", 2**40), {}, "max_frames", 2**40, DEFAULT_MAX_FRAMES),
    "nframes_max_u64": (struct.pack("<Q", 2**64 - 1), {}, "max_frames", 2**64 - 1, DEFAULT_MAX_FRAMES),
    "length_2_63": (pack_header([2**63]), {}, "max_frame_nbytes", 2**63, DEFAULT_MAX_FRAME_NBYTES),
    "lengths_sum_over_message_limit": (
        pack_header([10, 40 << 30, 40 << 30]),
        {},
        "max_message_nbytes",
        (80 << 30) + 10,
        DEFAULT_MAX_MESSAGE_NBYTES,
    ),
    "frame_over_configured_limit": (
        pack_header([100, 101, 5]),
        {"max_frame_nbytes": 100},
        "max_frame_nbytes",
        101,
        100,
    ),
    "message_over_configured_limit": (
        pack_header([60, 60]),
        {"max_message_nbytes": 100},
        "max_message_nbytes",
        120,
        100,
    ),
    "nframes_over_configured_limit": (pack_header([1, 2, 3]), {"max_frames": 2}, "max_frames", 3, 2),
    "nframes_over_zero_limit": (pack_header([0]), {"max_frames": 0}, "max_frames", 1, 0),
}


def feed_hostile(reader: FrameReader, data: bytes, how: str, peak: list[int]) -> None:
    """Feed ``data`` to ``reader`` whole, a byte at a time or through
    ``recv_into``, tracing allocations: ``peak[0]`` gets the peak traced
    bytes, also when feeding raises (as hostile data should)."""
    tracemalloc.start()
    try:
        if how == "whole":
            reader.feed(data)
        elif how == "bytewise":
            for i in range(len(data)):
                reader.feed(data[i : i + 1])
        else:
            drive_recv_into(reader, data, 1 << 20)
    finally:
        peak[0] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()


@pytest.mark.parametrize("how", ["whole", "bytewise", "recv_into"])
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_reader_hostile_header_raises_before_allocating(case: str, how: str) -> None:
    header, kwargs, field, value, limit = HOSTILE[case]
    data = header + b"\0" * 64  # some payload bytes follow
    allocator = TrackingAllocator()
    reader = FrameReader(allocator, **kwargs)
    peak = [-1]
    with pytest.raises(FrameTooLargeError) as excinfo:
        feed_hostile(reader, data, how, peak)
    assert 0 <= peak[0] < 1 << 20
    assert allocator.calls == []
    error = excinfo.value
    assert (error.field, error.value, error.limit) == (field, value, limit)
    assert isinstance(error, FramingError) and isinstance(error, ValueError) and isinstance(error, ReadIntoError)
    assert field in str(error) and str(value) in str(error) and str(limit) in str(error)


def test_reader_limit_equal_to_value_is_allowed() -> None:
    reader = FrameReader(max_frames=2, max_frame_nbytes=3, max_message_nbytes=5)
    assert drive_feed(reader, encode([b"abc", b"de"]), 100) == [[b"abc", b"de"]]


def test_reader_poisoned_after_framing_error() -> None:
    reader = FrameReader(max_frames=1)
    with pytest.raises(FrameTooLargeError):
        reader.feed(pack_header([1, 2]))
    good = encode([b"ok"])
    for call in (
        lambda: reader.feed(good),
        reader.get_buffer,
        lambda: reader.get_buffers(2),
        lambda: reader.buffer_updated(0),
        reader.next_message,
    ):
        with pytest.raises(FramingError, match="earlier error.*max_frames"):
            call()
    assert reader.describe_progress() == "failed message"


# -- the BufferedProtocol-shaped interface ----------------------------------


def test_get_buffer_exact_sizes_per_stage() -> None:
    frames = [b"abcd", b"", b"efghij"]
    data = encode(frames)
    reader = FrameReader()
    assert reader.get_buffer().nbytes == 8  # frame count
    reader.feed(data[:3])
    assert reader.get_buffer().nbytes == 5
    reader.feed(data[3:8])
    assert reader.get_buffer().nbytes == 3 * 8  # frame lengths
    reader.feed(data[8:20])
    assert reader.get_buffer().nbytes == 12
    reader.feed(data[20:32])
    assert reader.get_buffer().nbytes == 4  # frame 0
    reader.feed(data[32:35])
    assert reader.get_buffer().nbytes == 1
    reader.feed(data[35:36])
    assert reader.get_buffer().nbytes == 6  # frame 2: the empty frame 1 is skipped
    assert reader.frame_index == 2
    reader.feed(data[36:])
    assert take_message(reader) == frames


def test_get_buffer_views_are_writable_and_land_in_frames() -> None:
    reader = FrameReader()
    reader.feed(pack_header([3]))
    view = reader.get_buffer()
    assert not view.readonly and view.format == "B"
    view[:] = b"xyz"
    reader.buffer_updated(3)
    assert take_message(reader) == [b"xyz"]


def test_get_buffer_complete_message_raises() -> None:
    reader = FrameReader()
    assert reader.feed(encode([b"a"])) == len(encode([b"a"]))
    with pytest.raises(RuntimeError, match="next_message"):
        reader.get_buffer()
    with pytest.raises(RuntimeError, match="next_message"):
        reader.get_buffers(4)
    assert reader.feed(b"more") == 0
    assert take_message(reader) == [b"a"]
    assert reader.get_buffer().nbytes == 8


def test_get_buffers_spans_following_frames_and_skips_empty() -> None:
    frames = [b"aaaa", b"", b"bb", b"ccc", b"d"]
    reader = FrameReader()
    reader.feed(encode(frames)[: 8 + 5 * 8 + 1])  # header and one byte of frame 0
    bufs = reader.get_buffers(3)
    assert [b.nbytes for b in bufs] == [3, 2, 3]
    assert [b.nbytes for b in reader.get_buffers(100)] == [3, 2, 3, 1]
    assert [b.nbytes for b in reader.get_buffers(1)] == [3]
    bufs = reader.get_buffers(2)
    bufs[0][:] = b"aaa"
    bufs[1][:1] = b"b"
    reader.buffer_updated(4)  # ends inside frame 2
    assert reader.frame_index == 2
    assert [b.nbytes for b in reader.get_buffers(8)] == [1, 3, 1]
    reader.feed(b"bcccd")
    assert take_message(reader) == frames


def test_get_buffers_in_header_stages_is_get_buffer() -> None:
    reader = FrameReader()
    assert [b.nbytes for b in reader.get_buffers(5)] == [8]
    reader.feed(pack_header([1, 2])[:10])
    assert [b.nbytes for b in reader.get_buffers(5)] == [14]
    with pytest.raises(ValueError, match="max_buffers"):
        reader.get_buffers(0)


def test_get_buffers_never_reaches_into_next_message() -> None:
    reader = FrameReader()
    reader.feed(pack_header([2, 3]))
    bufs = reader.get_buffers(10)
    assert sum(b.nbytes for b in bufs) == 5
    with pytest.raises(ValueError, match="handed out 5 bytes"):
        reader.buffer_updated(6)


def test_buffer_updated_rejects_nonsense() -> None:
    reader = FrameReader()
    with pytest.raises(ValueError, match="handed out 0 bytes"):
        reader.buffer_updated(1)  # nothing handed out yet
    view = reader.get_buffer()
    with pytest.raises(ValueError, match="negative"):
        reader.buffer_updated(-1)
    with pytest.raises(ValueError, match="buffer_updated\\(9\\)"):
        reader.buffer_updated(9)
    with pytest.raises(TypeError):
        reader.buffer_updated(1.5)  # type: ignore[arg-type]
    view[:4] = b"\x01\0\0\0"
    reader.buffer_updated(4)
    with pytest.raises(ValueError):
        reader.buffer_updated(4)  # each view is reported once
    reader.buffer_updated(0)
    # the invalid calls did not poison the reader
    reader.feed(b"\0\0\0\0" + pack_header([2])[8:] + b"ok")
    assert take_message(reader) == [b"ok"]


def test_feed_invalidates_handed_out_views() -> None:
    reader = FrameReader()
    reader.get_buffer()
    reader.feed(b"\1")
    with pytest.raises(ValueError):
        reader.buffer_updated(1)


def test_feed_accepts_any_contiguous_bytes_like() -> None:
    data = encode([b"abcdefgh", b"12345678"])
    for source in (data, bytearray(data), memoryview(data), np.frombuffer(data, dtype=np.float64)):
        reader = FrameReader()
        assert reader.feed(source) == len(data)
        assert take_message(reader) == [b"abcdefgh", b"12345678"]


def test_next_message_zero_frames_is_empty_list_not_need_data() -> None:
    reader = FrameReader()
    assert reader.next_message() is NEED_DATA
    reader.feed(pack_header([]))
    msg = reader.next_message()
    assert msg == [] and msg is not NEED_DATA


def test_need_data_sentinel_repr_and_pickle() -> None:
    assert repr(NEED_DATA) == "NEED_DATA"
    assert pickle.loads(pickle.dumps(NEED_DATA)) is NEED_DATA


# -- introspection -------------------------------------------------------------


def test_reader_progress_introspection() -> None:
    data = encode([b"abc", b"defgh"])
    reader = FrameReader()
    assert (reader.in_message, reader.expected_nbytes, reader.received_nbytes) == (False, 8, 0)
    assert reader.describe_progress() == "no message"
    assert reader.nframes is None
    reader.feed(data[:5])
    assert (reader.in_message, reader.expected_nbytes, reader.received_nbytes) == (True, 8, 5)
    assert reader.describe_progress() == "frame count"
    reader.feed(data[5:10])
    assert (reader.expected_nbytes, reader.received_nbytes, reader.nframes) == (24, 10, 2)
    assert reader.describe_progress() == "frame lengths"
    reader.feed(data[10:28])
    assert (reader.expected_nbytes, reader.received_nbytes) == (32, 28)
    assert (reader.frame_index, reader.describe_progress()) == (1, "frame 1 of 2")
    assert "frame 1 of 2, 28 of 32 bytes" in repr(reader)
    reader.feed(data[28:])
    assert reader.describe_progress() == "complete message"
    assert reader.frame_index == 2 and reader.in_message
    reader.next_message()
    assert (reader.in_message, reader.expected_nbytes, reader.received_nbytes) == (False, 8, 0)


def test_reader_received_nbytes_counts_buffer_updated() -> None:
    reader = FrameReader()
    drive_recvmsg_into(reader, encode([b"abc", b"defgh"])[:30], 100)
    assert (reader.received_nbytes, reader.expected_nbytes) == (30, 32)


# -- allocator contract -----------------------------------------------------


def test_reader_calls_allocator_once_per_nonempty_frame_in_order() -> None:
    allocator = TrackingAllocator()
    reader = FrameReader(allocator)
    frames = [b"abc", b"", b"de", b"", b"f"]
    msgs = drive_feed(reader, encode(frames), 4)
    assert msgs == [frames]
    assert allocator.calls == [3, 2, 1]


def test_reader_allocates_frames_lazily() -> None:
    allocator = TrackingAllocator()
    reader = FrameReader(allocator)
    reader.feed(pack_header([5, 6, 7]) + b"ab")
    assert allocator.calls == [5]


def test_reader_frames_are_separate_buffers() -> None:
    buffers: list[bytearray] = []

    def allocator(nbytes: int) -> bytearray:
        buffers.append(bytearray(nbytes))
        return buffers[-1]

    reader = FrameReader(allocator)
    reader.feed(encode([b"ab", b"cd"]))
    msg = reader.next_message()
    assert msg is not NEED_DATA
    assert [frame.obj for frame in msg] == buffers
    assert msg[0].obj is not msg[1].obj


def test_reader_frames_are_views_of_their_own_over_the_allocators_buffers() -> None:
    """In both builds a frame is a view of its own over the allocator's
    buffer, never the allocator's memoryview itself (even one that only the
    reader holds): releasing the frame leaves the allocator's view usable;
    one that does not fit is cut to size."""
    fresh_ids: list[int] = []

    def fresh(nbytes: int) -> memoryview:
        view = memoryview(bytearray(nbytes + len(fresh_ids)))  # the second is one byte too large
        fresh_ids.append(id(view))  # (no reference kept)
        return view

    reader = FrameReader(fresh)
    reader.feed(encode([b"ab", b"cd"]))
    msg = reader.next_message()
    assert msg is not NEED_DATA
    assert bytes(msg[0]) == b"ab" and bytes(msg[1]) == b"cd"
    assert id(msg[0]) != fresh_ids[0] and id(msg[1]) != fresh_ids[1]  # (both were alive together)

    kept: list[memoryview] = []

    def keeping(nbytes: int) -> memoryview:
        kept.append(memoryview(bytearray(nbytes)))
        return kept[-1]

    reader = FrameReader(keeping)
    reader.feed(encode([b"ab"]))
    msg = reader.next_message()
    assert msg is not NEED_DATA
    assert msg[0] is not kept[0] and msg[0].obj is kept[0].obj
    msg[0].release()
    assert bytes(kept[0]) == b"ab"  # the allocator's view still works


def test_reader_accepts_typed_and_oversized_buffers() -> None:
    reader = FrameReader(lambda n: np.empty((n + 15) // 8, dtype=np.float64))
    reader.feed(encode([b"0123456789", b"x"]))
    msg = reader.next_message()
    assert msg is not NEED_DATA
    assert [(f.format, f.nbytes) for f in msg] == [("B", 10), ("B", 1)]
    assert bytes(msg[0]) == b"0123456789"


def test_reader_accepts_mmap_buffers() -> None:
    import mmap

    reader = FrameReader(lambda n: mmap.mmap(-1, n))
    assert drive_recv_into(reader, encode([b"abc"]), 100) == [[b"abc"]]


@pytest.mark.parametrize(
    ("allocator", "match"),
    [
        (lambda n: bytearray(n - 1), "returned 2 bytes for frame 0 of 3 bytes"),
        (lambda n: bytes(n), "read-only"),
        (lambda n: np.empty(2 * n, dtype=np.uint8)[::2], "non-contiguous"),
    ],
)
def test_reader_rejects_bad_allocator_buffers_and_poisons(allocator: Any, match: str) -> None:
    reader = FrameReader(allocator)
    with pytest.raises(ValueError, match=match):
        reader.feed(encode([b"abc"]))
    with pytest.raises(FramingError, match="earlier error"):
        reader.feed(b"")


def test_reader_allocator_exception_propagates_and_poisons() -> None:
    def allocator(nbytes: int) -> bytearray:
        raise MemoryError("no memory for you")

    reader = FrameReader(allocator)
    with pytest.raises(MemoryError):
        reader.feed(encode([b"abc"]))
    with pytest.raises(FramingError, match="MemoryError: no memory for you"):
        reader.get_buffer()


@pytest.mark.parametrize("style", ["feed", "recv"])
def test_reader_hands_wire_sizes_beyond_c_sizes_to_the_allocator(style: str) -> None:
    """With limits above what a C size holds, a u64 length from the wire goes
    to the allocator as the int it is, in both builds (the compiled reader
    keeps wire values as Python ints until they have passed the limits)."""
    asked: list[int] = []

    def allocator(nbytes: int) -> bytearray:
        asked.append(nbytes)
        raise MemoryError(f"no {nbytes} bytes")

    huge = 2**70
    reader = FrameReader(allocator, max_frames=huge, max_frame_nbytes=huge, max_message_nbytes=huge)
    header = struct.pack("<QQQ", 2, 2**64 - 1, 2**64 - 1)
    with pytest.raises(MemoryError):
        if style == "feed":
            reader.feed(header + b"x")
        else:
            while True:
                view = reader.get_buffer()
                n = min(len(view), len(header))
                view[:n] = header[:n]
                header = header[n:]
                reader.buffer_updated(n)
    assert asked == [2**64 - 1]
    assert reader.expected_nbytes == 24 + 2 * (2**64 - 1)
    with pytest.raises(FramingError, match="earlier error"):
        reader.next_message()


def test_reader_subclass_overrides_are_called_by_the_reader_itself() -> None:
    """A subclass's override of a method is what the reader's own calls run
    (the compiled reader's C calls dispatch to Python overrides)."""
    calls: list[str] = []

    class Recording(FrameReader):
        def get_buffer(self) -> memoryview:
            calls.append("get_buffer")
            return super().get_buffer()

    reader = Recording()
    [view] = reader.get_buffers(4)  # asks get_buffer() while in the header
    assert calls == ["get_buffer"] and len(view) == 8
    reader.extra = "a subclass has a __dict__"  # type: ignore[attr-defined]


def test_reader_takes_no_new_attributes_and_is_weakly_referable() -> None:
    """The same in both builds: ``__slots__`` (pure), the extension type
    (compiled)."""
    import weakref

    reader = FrameReader()
    with pytest.raises(AttributeError):
        reader.anything = 1  # type: ignore[attr-defined]
    assert weakref.ref(reader)() is reader


# -- constructor and pack_header validation -------------------------------


@pytest.mark.parametrize("name", ["max_frames", "max_frame_nbytes", "max_message_nbytes"])
def test_reader_rejects_bad_limits(name: str) -> None:
    for bad, error in ((-1, ValueError), (1.0, TypeError), (True, TypeError)):
        kwargs: dict[str, Any] = {name: bad}
        with pytest.raises(error, match=name):
            FrameReader(**kwargs)


def test_reader_rejects_non_callable_allocator() -> None:
    with pytest.raises(TypeError, match="callable"):
        FrameReader(bytearray(10))  # type: ignore[arg-type]


def test_reader_default_limits() -> None:
    reader = FrameReader()
    assert (reader.max_frames, reader.max_frame_nbytes, reader.max_message_nbytes) == (
        1 << 20,
        64 << 30,
        64 << 30,
    )


def test_pack_header_layout() -> None:
    assert pack_header([]) == b"\0" * 8
    assert pack_header([1, 2**64 - 1]) == struct.pack("<QQQ", 2, 1, 2**64 - 1)
    assert pack_header(range(1000)) == struct.pack("<1001Q", 1000, *range(1000))


@pytest.mark.parametrize("bad", [[-1], [2**64], [1, -5]])
def test_pack_header_rejects_out_of_range_sizes(bad: list[int]) -> None:
    with pytest.raises(ValueError, match="2\\*\\*64"):
        pack_header(bad)


def test_frames_nbytes_counts_bytes_not_items() -> None:
    frames = [b"ab", bytearray(3), memoryview(b"abcd")[1:], np.zeros(5, dtype=np.float64), memoryview(b"")]
    assert frames_nbytes(frames) == [2, 3, 3, 40, 0]


# -- purity ---------------------------------------------------------------------


def test_framing_and_allocators_import_without_tornado_or_socket() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["tornado"] = None
        sys.modules["socket"] = None
        import tornado_readinto.wire.framing as framing
        import tornado_readinto.wire.allocators as allocators
        assert not any(m.startswith("tornado.") for m in sys.modules), sorted(sys.modules)
        reader = framing.FrameReader(allocators.BufferPool(min_pooled_nbytes=0))
        reader.feed(framing.pack_header([2]) + b"ok")
        assert bytes(reader.next_message()[0]) == b"ok"
        assert len(allocators.uninitialized_allocator(10)) == 10
        print("pure")
        """
    )
    result = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "pure"
