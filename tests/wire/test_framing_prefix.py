"""distributed's ``tcp://`` byte stream in the pure codec: the ``P`` field in
front of each message (`prefixed_message_header`, ``FrameReader(nosplit_prefix=True)``).

No event loop, no sockets: the headers are compared with the bytes that
``distributed/comm/tcp.py`` itself builds (``_add_frames_header``), stock's
own reader logic (``unpack_frames(partial=True)``) decodes ours, and hostile
P fields are refused before any allocation.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
from distributed.comm.tcp import _add_frames_header
from distributed.protocol.utils import unpack_frames
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tornado_readinto.errors import FramingError
from tornado_readinto.wire.framing import (
    NEED_DATA,
    FrameReader,
    frames_nbytes,
    nosplit_nbytes,
    prefixed_message_header,
)

from ..conftest import TrackingAllocator
from .test_framing import CASES, DRIVERS, Frames, feed_hostile, take_message


def encode(frames: list[Any]) -> bytes:
    header, wire_nbytes = prefixed_message_header(frames)
    data = header + b"".join(bytes(memoryview(f).cast("B")) for f in frames)
    assert len(data) == wire_nbytes
    return data


def stock_wire(frames: list[Any]) -> bytes:
    """The bytes distributed's ``TCP.write`` puts on the wire for ``frames``."""
    out, _, total = _add_frames_header(list(frames))
    data = b"".join(bytes(memoryview(f).cast("B")) for f in out)
    assert len(data) == total
    return data


def stock_read(data: bytes) -> list[bytes]:
    """distributed's ``TCP.read`` over ``data``: P bytes into one buffer,
    then one buffer per remaining frame."""
    (prefix,) = struct.unpack_from("Q", data)
    pos = 8 + prefix
    frames, missing = unpack_frames(data[8:pos], partial=True)
    out = [bytes(f) for f in frames]
    for nbytes in missing:
        out.append(data[pos : pos + nbytes])
        pos += nbytes
    assert pos == len(data)
    return out


# -- the header is tcp.py's, byte for byte -------------------------------------


def _kinds(payload: bytes, kind: int, shared: dict[str, Any]) -> list[Any]:
    """A frame (or two shards of one buffer) of the kinds tcp.py tells apart."""
    if kind == 0:
        return [payload]  # bytes: msgpack header, pickle bytes, compressed
    if kind == 1:
        return [bytearray(payload)]  # an uncompressed buffer
    if kind == 2:
        return [memoryview(payload)]  # a view of bytes: counted as bytes
    if kind == 3:
        return [np.frombuffer(bytearray(payload) or bytearray(1), dtype="u1")[: len(payload)]]
    if kind == 4:  # two shards of one buffer (to_frames' frame_split_size)
        view = memoryview(bytearray(payload * 2))
        return [view[: len(payload)], view[len(payload) :]]
    view = shared.setdefault("view", memoryview(bytearray(payload + b"xyz")))
    return [view[:1], view[1:]]  # shards of a buffer shared with an earlier frame


@pytest.mark.parametrize("case", sorted(CASES))
def test_prefixed_header_is_tcp_py_wire_for_bytes_frames(case: str) -> None:
    assert encode(CASES[case]) == stock_wire(CASES[case])


@settings(max_examples=300, deadline=None)
@given(
    items=st.lists(
        st.tuples(st.sampled_from([0, 1, 10, 100, 2047, 2049, 5000, 70000]), st.integers(0, 5)),
        max_size=8,
    )
)
def test_prefixed_header_is_tcp_py_wire_for_any_frame_kinds(items: list[tuple[int, int]]) -> None:
    shared: dict[str, Any] = {}
    frames: list[Any] = []
    for nbytes, kind in items:
        frames.extend(_kinds(bytes([nbytes % 251]) * nbytes, kind, shared))
    assert encode(frames) == stock_wire(frames)
    assert stock_read(encode(frames)) == [bytes(memoryview(f).cast("B")) for f in frames]


def test_nosplit_nbytes_follows_tcp_py_rules() -> None:
    big = bytearray(10_000)
    other = bytearray(10_000)
    assert nosplit_nbytes([b"h" * 100, big], [100, 10_000]) == 10_100
    assert nosplit_nbytes([b"h" * 100, big, other], [100, 10_000, 10_000]) == 10_100
    # more than max(2048, 5 %) of pickled bytes before the first buffer: not joined
    assert nosplit_nbytes([b"h" * 3000, big], [3000, 10_000]) == 3000
    view = memoryview(big)
    assert nosplit_nbytes([b"h", view[:10], view[10:], b"t"], [1, 10, 9990, 1]) == 10_002
    assert nosplit_nbytes([], []) == 0


# -- reading: our reader and stock's ----------------------------------------------


@pytest.mark.parametrize("driver", sorted(DRIVERS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_prefix_reader_decodes_case(driver: str, case: str) -> None:
    frames = CASES[case]
    data = encode(frames) + encode([b"next", b""])
    assert DRIVERS[driver](FrameReader(nosplit_prefix=True), data) == [frames, [b"next", b""]]


@pytest.mark.parametrize("case", sorted(CASES))
def test_prefix_reader_decodes_stock_wire_and_stock_decodes_ours(case: str) -> None:
    frames = CASES[case]
    reader = FrameReader(nosplit_prefix=True)
    assert DRIVERS["whole"](reader, stock_wire(frames)) == [frames]
    assert stock_read(encode(frames)) == frames


def test_prefix_reader_frames_land_in_own_buffers() -> None:
    allocator = TrackingAllocator()
    frames = [b"h" * 10, b"a" * 100, b"", b"b" * 7]
    reader = FrameReader(allocator, nosplit_prefix=True)
    assert DRIVERS["bytewise"](reader, encode(frames)) == [frames]
    assert allocator.calls == [10, 100, 7]


def _split(data: bytes, sizes: list[int]) -> list[bytes]:
    out, pos, index = [], 0, 0
    while pos < len(data):
        step = sizes[index % len(sizes)] if sizes else len(data)
        out.append(data[pos : pos + step])
        pos += step
        index += 1
    return out


@settings(max_examples=300, deadline=None)
@given(
    messages=st.lists(st.lists(st.binary(max_size=40), max_size=6), min_size=1, max_size=4),
    sizes=st.lists(st.integers(1, 30), max_size=5),
)
def test_prefix_reader_round_trip_any_chunking(messages: list[Frames], sizes: list[int]) -> None:
    data = b"".join(encode(m) for m in messages)
    got: list[Frames] = []
    reader = FrameReader(nosplit_prefix=True)
    for piece in _split(data, sizes):
        view = memoryview(piece)
        pos = 0
        while pos < len(view):
            pos += reader.feed(view[pos:])
            msg = take_message(reader)
            if msg is not None:
                got.append(msg)
    assert got == messages


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=200), step=st.integers(1, 40))
def test_prefix_reader_fuzz_only_messages_need_data_or_framing_error(data: bytes, step: int) -> None:
    reader = FrameReader(max_frames=16, max_message_nbytes=1 << 16, nosplit_prefix=True)
    try:
        for start in range(0, len(data), step):
            piece = memoryview(data[start : start + step])
            pos = 0
            while pos < len(piece):
                pos += reader.feed(piece[pos:])
                msg = reader.next_message()
                assert msg is NEED_DATA or isinstance(msg, list)
    except FramingError:
        pass


# -- hostile P: a clear error before any allocation --------------------------------


def _prelude(prefix: int, lengths: list[int]) -> bytes:
    return struct.pack(f"<{len(lengths) + 2}Q", prefix, len(lengths), *lengths)


HOSTILE_PREFIX = {
    # P below the prelude
    "below_prelude": _prelude(16, [10, 20]),
    "zero": _prelude(0, [10]),
    # P inside a frame: a stock reader asserts
    "mid_frame": _prelude(24 + 5, [10, 20]),
    # P past the message: a stock reader allocates it, then waits for bytes
    "past_message": _prelude(24 + 31, [10, 20]),
    "huge": _prelude(2**64 - 1, [10, 20]),
    "huge_frameless": _prelude(2**63, []),
    "frameless_not_8": _prelude(16, []),
}


@pytest.mark.parametrize("how", ["whole", "bytewise", "recv_into"])
@pytest.mark.parametrize("case", sorted(HOSTILE_PREFIX))
def test_prefix_reader_hostile_prefix_raises_before_allocating(case: str, how: str) -> None:
    data = HOSTILE_PREFIX[case] + b"\0" * 64
    allocator = TrackingAllocator()
    reader = FrameReader(allocator, nosplit_prefix=True)
    peak = [-1]
    with pytest.raises(FramingError, match=r"bad message prefix: P=\d+ is not the \d+-byte prelude") as info:
        feed_hostile(reader, data, how, peak)
    assert 0 <= peak[0] < 1 << 20
    assert allocator.calls == []
    assert isinstance(info.value, ValueError)
    with pytest.raises(FramingError, match="unusable after an earlier error"):
        reader.feed(b"\0")


def test_prefix_reader_accepts_every_frame_boundary() -> None:
    lengths = [10, 0, 20]
    payload = b"a" * 10 + b"b" * 20
    for prefix in (32, 42, 62):  # 42 is also the boundary after the empty frame
        frames = DRIVERS["whole"](FrameReader(nosplit_prefix=True), _prelude(prefix, lengths) + payload)
        assert frames == [[b"a" * 10, b"", b"b" * 20]]


def test_plain_reader_is_unchanged_by_the_option() -> None:
    reader = FrameReader()
    assert reader.expected_nbytes == 8
    assert FrameReader(nosplit_prefix=True).expected_nbytes == 16
    frames = [b"x", b"yz"]
    assert frames_nbytes(frames) == [1, 2]
