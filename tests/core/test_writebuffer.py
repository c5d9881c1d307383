"""Tests of tornado_readinto.core.writebuffer: no event loop, no sockets."""

from __future__ import annotations

import array
import mmap
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from tornado.test import iostream_test as upstream

from tornado_readinto.core import writebuffer
from tornado_readinto.core.writebuffer import ChunkedWriteBuffer

try:
    import numpy
except ImportError:  # pragma: no cover - numpy is in the test extra
    numpy = None  # type: ignore[assignment]


def assert_resizable(obj: bytearray) -> None:
    """Fail (BufferError) if any view of ``obj`` is still alive."""
    obj += b"!"
    del obj[-1:]


def assert_not_resizable(obj: bytearray) -> None:
    with pytest.raises(BufferError):
        obj += b"!"


def drain_bytes(buf: ChunkedWriteBuffer) -> bytes:
    """Everything queued in ``buf``, without consuming it."""
    views = buf.peek_buffers(len(buf) + 1, len(buf) + 1) if buf else []
    try:
        return b"".join(v.tobytes() for v in views)
    finally:
        for v in views:
            v.release()


def check_internal_invariants(buf: ChunkedWriteBuffer) -> None:
    """The invariants stated in the module's Strategy comment."""
    segments = list(buf._buffers)
    assert all(len(s) > 0 for s in segments)
    for s in segments:
        assert type(s) is bytearray or (type(s) is memoryview and s.format == "B" and s.ndim == 1)
    if segments:
        assert 0 <= buf._first_pos < len(segments[0])
    else:
        assert buf._first_pos == 0
    assert len(buf) == sum(len(s) for s in segments) - buf._first_pos
    assert buf.nbuffers == len(segments)


# ---------------------------------------------------------------------------
# Tornado's own _StreamBuffer suite, run against ChunkedWriteBuffer


class TestChunkedWriteBufferUpstream(upstream.TestStreamBuffer):
    def make_streambuffer(self, large_buf_threshold: int = 10) -> ChunkedWriteBuffer:  # type: ignore[override]
        # Tornado's "internal algorithm" checks count segments assuming that
        # a chunk stops growing at the threshold, as _StreamBuffer's do, so
        # the chunk cap is set to the threshold here.
        return ChunkedWriteBuffer(
            large_buf_threshold=large_buf_threshold, chunk_nbytes=large_buf_threshold
        )


# ---------------------------------------------------------------------------
# Model-based test: ChunkedWriteBuffer against a plain bytes object


def _as_kind(raw: bytes, kind: str, rows: int) -> Any:
    """``raw`` as a buffer object of the given kind (same bytes)."""
    if kind == "bytes":
        return raw
    if kind == "bytearray":
        return bytearray(raw)
    if kind == "memoryview":
        return memoryview(raw)
    if kind == "d":
        return memoryview(bytearray(raw)).cast("d")
    if kind == "I":
        return memoryview(raw).cast("I")
    if kind.startswith("2d") and not raw:
        return memoryview(raw)  # a cast cannot make a 2-D view with no items
    if kind == "2d-B":
        return memoryview(raw).cast("B", [rows, len(raw) // rows])
    if kind == "2d-d":
        return memoryview(bytearray(raw)).cast("d", [rows, len(raw) // (8 * rows)])
    if kind == "array":
        return array.array("I", raw)
    if kind == "numpy":
        assert numpy is not None
        return numpy.frombuffer(raw, dtype=numpy.uint16).reshape(rows, -1)
    raise AssertionError(kind)


# kind -> bytes per item (the payload size must be a multiple of it)
_KIND_ITEMSIZE = {
    "bytes": 1,
    "bytearray": 1,
    "memoryview": 1,
    "d": 8,
    "I": 4,
    "2d-B": 1,
    "2d-d": 8,
    "array": 4,
}
if numpy is not None:
    _KIND_ITEMSIZE["numpy"] = 2


class WriteBufferMachine(RuleBasedStateMachine):
    buf: ChunkedWriteBuffer
    model: bytes

    def __init__(self) -> None:
        super().__init__()
        self.inputs: list[Any] = []

    @initialize(threshold=st.integers(0, 48), chunk_nbytes=st.integers(1, 64))
    def make_buffer(self, threshold: int, chunk_nbytes: int) -> None:
        self.buf = ChunkedWriteBuffer(threshold, chunk_nbytes)
        self.threshold = threshold
        self.model = b""

    @rule(data=st.data())
    def append(self, data: st.DataObject) -> None:
        kind = data.draw(st.sampled_from(sorted(_KIND_ITEMSIZE)), label="kind")
        itemsize = _KIND_ITEMSIZE[kind]
        rows = data.draw(st.integers(1, 3), label="rows") if kind.startswith("2d") or kind == "numpy" else 1
        unit = itemsize * rows
        max_units = (3 * self.threshold + 8) // unit
        raw = data.draw(
            st.integers(0, max_units).flatmap(
                lambda n: st.binary(min_size=n * unit, max_size=n * unit)
            ),
            label="raw",
        )
        obj = _as_kind(raw, kind, rows)
        self.buf.append(obj)
        self.inputs.append(obj)
        self.model += raw

    @rule(data=st.data())
    def append_while_peeked(self, data: st.DataObject) -> None:
        """Break the contract (a live view during append): still correct."""
        raw = data.draw(st.binary(max_size=self.threshold + 1), label="raw")
        if not self.model:
            self.buf.append(raw)
            self.model += raw
            return
        with self.buf.peek(len(self.model)) as view:
            before = view.tobytes()
            self.buf.append(raw)
            assert view.tobytes() == before
        self.model += raw

    @rule(size=st.integers(1, 200))
    def peek(self, size: int) -> None:
        with self.buf.peek(size) as view:
            got = view.tobytes()
            assert view.format == "B"
        assert len(got) <= size
        assert bool(got) == bool(self.model)
        assert self.model.startswith(got)

    @rule(max_buffers=st.integers(1, 6), max_nbytes=st.integers(1, 200))
    def peek_buffers(self, max_buffers: int, max_nbytes: int) -> None:
        views = self.buf.peek_buffers(max_buffers, max_nbytes)
        try:
            assert len(views) <= max_buffers
            assert all(v.nbytes > 0 and v.format == "B" for v in views)
            got = b"".join(v.tobytes() for v in views)
        finally:
            for v in views:
                v.release()
        assert len(got) <= max_nbytes
        assert self.model.startswith(got)
        assert bool(views) == bool(self.model)
        if len(views) < max_buffers:
            # Not cut by the buffer count: as much as allowed was returned.
            assert len(got) == min(max_nbytes, len(self.model))

    @precondition(lambda self: len(self.model) > 0)
    @rule(data=st.data())
    def advance(self, data: st.DataObject) -> None:
        n = data.draw(st.integers(1, len(self.model)), label="n")
        self.buf.advance(n)
        self.model = self.model[n:]

    @rule(extra=st.integers(1, 5))
    def advance_too_far(self, extra: int) -> None:
        with pytest.raises(ValueError):
            self.buf.advance(len(self.model) + extra)

    @rule()
    def clear(self) -> None:
        self.buf.clear()
        self.model = b""

    @rule(threshold=st.integers(0, 48))
    def change_threshold(self, threshold: int) -> None:
        self.buf._large_buf_threshold = threshold
        self.threshold = threshold

    @invariant()
    def matches_model(self) -> None:
        if not hasattr(self, "buf"):
            return
        assert len(self.buf) == len(self.model)
        assert bool(self.buf) == bool(self.model)
        check_internal_invariants(self.buf)
        assert drain_bytes(self.buf) == self.model

    def teardown(self) -> None:
        if not hasattr(self, "buf"):
            return
        if self.model:
            self.buf.advance(len(self.model))
        assert self.buf.nbuffers == 0
        # No view of any caller object may be left.
        for obj in self.inputs:
            if isinstance(obj, bytearray):
                assert_resizable(obj)
            elif isinstance(obj, array.array):
                obj.append(0)


TestChunkedWriteBufferModel = WriteBufferMachine.TestCase
TestChunkedWriteBufferModel.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None
)


# ---------------------------------------------------------------------------
# append


def test_append_large_bytearray_held_by_reference() -> None:
    buf = ChunkedWriteBuffer(large_buf_threshold=16)
    data = bytearray(b"a" * 64)
    buf.append(data)
    data[:4] = b"ZZZZ"  # same size: allowed while exported
    with buf.peek(8) as view:
        assert view.tobytes() == b"ZZZZaaaa"
    [view] = buf.peek_buffers(4, 1000)
    with view:
        assert view.tobytes() == bytes(data)


def test_append_large_numpy_array_zero_copy() -> None:
    np = pytest.importorskip("numpy")
    arr = np.arange(3000, dtype=np.float64).reshape(30, 100)
    buf = ChunkedWriteBuffer(large_buf_threshold=1024)
    buf.append(arr)
    assert len(buf) == arr.nbytes
    views = buf.peek_buffers(8, arr.nbytes)
    try:
        assert [v.nbytes for v in views] == [arr.nbytes]
        seen = np.frombuffer(views[0], dtype=np.uint8)
        assert seen.__array_interface__["data"][0] == arr.__array_interface__["data"][0]
        del seen
    finally:
        for v in views:
            v.release()


def test_append_small_is_copied() -> None:
    buf = ChunkedWriteBuffer(large_buf_threshold=16)
    data = bytearray(b"abcd")
    buf.append(data)
    assert_resizable(data)  # no view of it is kept
    data[:] = b"wxyz"
    assert drain_bytes(buf) == b"abcd"


def test_append_small_coalesces_into_one_chunk() -> None:
    buf = ChunkedWriteBuffer()
    for i in range(1000):
        buf.append(bytes([i % 256]) * 8)
    assert buf.nbuffers == 1
    assert len(buf) == 8000
    assert drain_bytes(buf) == b"".join(bytes([i % 256]) * 8 for i in range(1000))


def test_append_chunk_cap_starts_new_chunk() -> None:
    buf = ChunkedWriteBuffer(large_buf_threshold=100, chunk_nbytes=64)
    for _ in range(16):
        buf.append(b"x" * 10)
    # chunks of 70, 70, 20 bytes: each overshoots the cap by less than one piece
    assert [len(s) for s in buf._buffers] == [70, 70, 20]


def test_append_small_after_large_starts_new_chunk() -> None:
    buf = ChunkedWriteBuffer(large_buf_threshold=4)
    buf.append(b"ab")
    buf.append(b"LARGEDATA")
    buf.append(b"cd")
    buf.append(b"ef")
    assert buf.nbuffers == 3
    assert drain_bytes(buf) == b"abLARGEDATAcdef"


@pytest.mark.parametrize("nitems", [2, 200])
def test_append_typed_memoryview_sized_by_nbytes(nitems: int) -> None:
    buf = ChunkedWriteBuffer(large_buf_threshold=64)
    raw = bytes(range(256)) * (nitems * 8 // 256 + 1)
    raw = raw[: nitems * 8]
    view = memoryview(bytearray(raw)).cast("d")
    assert len(view) == nitems
    buf.append(view)
    assert len(buf) == nitems * 8
    assert drain_bytes(buf) == raw
    buf.advance(nitems * 8)
    assert len(buf) == 0


def test_append_2d_memoryview_flattened() -> None:
    raw = bytes(range(240))
    buf = ChunkedWriteBuffer(large_buf_threshold=16)
    buf.append(memoryview(raw).cast("I", [6, 10]))
    buf.append(memoryview(raw[:12]).cast("B", [3, 4]))
    assert len(buf) == 252
    with buf.peek(1000) as view:
        assert view.ndim == 1 and view.format == "B" and view.nbytes == 240
    assert drain_bytes(buf) == raw + raw[:12]


def test_append_mmap_released_after_advance() -> None:
    mm = mmap.mmap(-1, 4096)
    mm[:5] = b"hello"
    buf = ChunkedWriteBuffer(large_buf_threshold=1024)
    buf.append(mm)
    with pytest.raises(BufferError):
        mm.close()
    buf.advance(4096)
    mm.close()


def test_append_caller_may_release_own_memoryview() -> None:
    data = bytearray(b"q" * 100)
    caller_view = memoryview(data)
    buf = ChunkedWriteBuffer(large_buf_threshold=10)
    buf.append(caller_view)
    caller_view.release()
    assert drain_bytes(buf) == b"q" * 100
    assert_not_resizable(data)
    buf.advance(100)
    assert_resizable(data)


def test_append_non_contiguous_raises_value_error() -> None:
    strided = memoryview(bytearray(b"0123456789" * 10))[::2]
    for threshold in (0, 1000):
        buf = ChunkedWriteBuffer(large_buf_threshold=threshold)
        with pytest.raises(ValueError, match="non-contiguous"):
            buf.append(strided)
        assert len(buf) == 0 and buf.nbuffers == 0


def test_append_non_buffer_raises_type_error() -> None:
    buf = ChunkedWriteBuffer()
    # bytearray(5) would be five zero bytes: make sure ints are refused.
    for bad in (5, "text", None):
        with pytest.raises(TypeError):
            buf.append(bad)  # type: ignore[arg-type]
    assert len(buf) == 0


@pytest.mark.parametrize(
    "empty",
    [b"", bytearray(), memoryview(b""), memoryview(b"").cast("d"), array.array("d")],
    ids=["bytes", "bytearray", "memoryview", "memoryview-d", "array"],
)
def test_append_empty_is_noop(empty: Any) -> None:
    for threshold in (0, 10):
        buf = ChunkedWriteBuffer(large_buf_threshold=threshold)
        buf.append(empty)
        assert len(buf) == 0 and not buf and buf.nbuffers == 0


def test_append_with_live_chunk_view_starts_new_chunk() -> None:
    buf = ChunkedWriteBuffer(large_buf_threshold=16)
    buf.append(b"abc")
    with buf.peek(3) as view:
        buf.append(b"def")  # the first chunk cannot be resized now
        assert view.tobytes() == b"abc"
    assert buf.nbuffers == 2
    buf.append(b"ghi")  # view released: coalesces again
    assert buf.nbuffers == 2
    assert drain_bytes(buf) == b"abcdefghi"


def test_append_reads_threshold_attribute_each_time() -> None:
    buf = ChunkedWriteBuffer()
    buf._large_buf_threshold = 10
    data = bytearray(b"x" * 11)
    buf.append(data)
    assert_not_resizable(data)  # held by reference: the new threshold was used
    buf._large_buf_threshold = 100
    data2 = bytearray(b"y" * 11)
    buf.append(data2)
    assert_resizable(data2)  # copied
    assert buf.nbuffers == 2


def test_constructor_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        ChunkedWriteBuffer(large_buf_threshold=-1)
    with pytest.raises(ValueError):
        ChunkedWriteBuffer(chunk_nbytes=0)


def test_constructor_takes_ints_only_and_caps_them() -> None:
    """Both builds alike: the compiled one stores the sizes as C fields."""
    for bad in (1.5, "8", None):
        with pytest.raises(TypeError, match="must be an int"):
            ChunkedWriteBuffer(large_buf_threshold=bad)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="must be an int"):
            ChunkedWriteBuffer(chunk_nbytes=bad)  # type: ignore[arg-type]
    buf = ChunkedWriteBuffer(large_buf_threshold=2**70, chunk_nbytes=2**64)
    assert buf._large_buf_threshold == buf._chunk_nbytes == sys.maxsize
    data = bytearray(b"x" * 100_000)
    buf.append(data)
    assert_resizable(data)  # copied: no piece is over the threshold
    numpy_int = pytest.importorskip("numpy").int64(16)
    assert ChunkedWriteBuffer(large_buf_threshold=numpy_int)._large_buf_threshold == 16


def test_sizes_beyond_the_queue_are_no_error() -> None:
    """Huge (but valid) sizes are taken as the pure build takes them, never
    an OverflowError from a C size."""
    buf = ChunkedWriteBuffer(large_buf_threshold=4)
    buf.append(b"ab")
    buf.append(b"cdefghij")
    with buf.peek(2**70) as view:
        assert view.tobytes() == b"ab"
    views = buf.peek_buffers(2**70, 2**70)
    assert [v.tobytes() for v in views] == [b"ab", b"cdefghij"]
    for v in views:
        v.release()
    with pytest.raises(ValueError, match="cannot advance by"):
        buf.advance(2**70)
    assert len(buf) == 10


def test_instances_take_no_new_attributes() -> None:
    """``__slots__`` (pure) and the extension type (compiled) alike."""
    buf = ChunkedWriteBuffer()
    with pytest.raises(AttributeError):
        buf.anything = 1  # type: ignore[attr-defined]

    class Sub(ChunkedWriteBuffer):
        pass

    sub = Sub(4)
    sub.anything = 1  # a subclass has a __dict__, in both builds
    sub.append(b"abcdef")
    assert drain_bytes(sub) == b"abcdef" and repr(sub).startswith("<Sub nbytes=6 ")


def test_defaults_are_documented_values() -> None:
    buf = ChunkedWriteBuffer()
    assert buf._large_buf_threshold == writebuffer.DEFAULT_LARGE_BUF_THRESHOLD
    assert buf._chunk_nbytes == writebuffer.DEFAULT_CHUNK_NBYTES
    assert 0 < writebuffer.DEFAULT_LARGE_BUF_THRESHOLD < writebuffer.DEFAULT_CHUNK_NBYTES


# ---------------------------------------------------------------------------
# peek / peek_buffers


def test_peek_empty_buffer_returns_empty_view() -> None:
    buf = ChunkedWriteBuffer()
    with buf.peek(10) as view:
        assert len(view) == 0
    assert buf.peek_buffers(4, 10) == []


def test_peek_invalid_size_raises_value_error() -> None:
    buf = ChunkedWriteBuffer()
    buf.append(b"abc")
    for size in (0, -1):
        with pytest.raises(ValueError):
            buf.peek(size)


def test_peek_buffers_invalid_limits_raise_value_error() -> None:
    buf = ChunkedWriteBuffer()
    buf.append(b"abc")
    with pytest.raises(ValueError):
        buf.peek_buffers(0, 10)
    with pytest.raises(ValueError):
        buf.peek_buffers(1, 0)


def test_peek_buffers_respects_limits() -> None:
    buf = ChunkedWriteBuffer(large_buf_threshold=4)
    buf.append(b"hdr")
    buf.append(b"A" * 10)
    buf.append(b"B" * 10)
    buf.append(b"tail")
    buf.advance(1)

    def peeked(max_buffers: int, max_nbytes: int) -> list[bytes]:
        views = buf.peek_buffers(max_buffers, max_nbytes)
        out = [v.tobytes() for v in views]
        for v in views:
            v.release()
        return out

    assert peeked(10, 1000) == [b"dr", b"A" * 10, b"B" * 10, b"tail"]
    assert peeked(2, 1000) == [b"dr", b"A" * 10]
    assert peeked(10, 7) == [b"dr", b"AAAAA"]
    assert peeked(10, 2) == [b"dr"]
    assert peeked(10, 1) == [b"d"]
    assert peeked(3, 25) == [b"dr", b"A" * 10, b"B" * 10]


def test_peek_buffers_release_leaves_buffer_usable() -> None:
    data = bytearray(b"L" * 50)
    buf = ChunkedWriteBuffer(large_buf_threshold=10)
    buf.append(b"s")
    buf.append(data)
    for v in buf.peek_buffers(4, 100):
        v.release()
    # Our own views are intact: data is still pinned and readable.
    assert_not_resizable(data)
    assert drain_bytes(buf) == b"s" + b"L" * 50


# ---------------------------------------------------------------------------
# advance / clear


def test_advance_releases_large_bytearray_once_consumed() -> None:
    first = bytearray(b"a" * 20)
    second = bytearray(b"b" * 20)
    buf = ChunkedWriteBuffer(large_buf_threshold=10)
    buf.append(first)
    buf.append(b"small")
    buf.append(second)
    buf.advance(19)
    assert_not_resizable(first)
    buf.advance(1)
    first.extend(b"x")  # must not raise BufferError
    assert_not_resizable(second)
    buf.advance(5 + 19)
    assert_not_resizable(second)
    buf.advance(1)
    second.extend(b"x")
    assert len(buf) == 0 and buf.nbuffers == 0


def test_advance_across_many_segments() -> None:
    buf = ChunkedWriteBuffer(large_buf_threshold=3, chunk_nbytes=3)
    pieces = [bytes([65 + i]) * (1 + i % 6) for i in range(40)]
    for p in pieces:
        buf.append(p)
    whole = b"".join(pieces)
    buf.advance(len(whole) - 3)
    assert drain_bytes(buf) == whole[-3:]
    check_internal_invariants(buf)


def test_advance_releases_view_even_if_still_referenced() -> None:
    # On CPython, dropping the last reference releases a view anyway; hold
    # one (as PyPy's GC effectively does) to check the explicit release().
    data = bytearray(b"d" * 32)
    buf = ChunkedWriteBuffer(large_buf_threshold=10)
    buf.append(data)
    ours = buf._buffers[0]
    assert isinstance(ours, memoryview)
    buf.advance(32)
    assert_resizable(data)
    with pytest.raises(ValueError, match="released"):
        ours.tobytes()


def test_clear_releases_view_even_if_still_referenced() -> None:
    data = bytearray(b"d" * 32)
    buf = ChunkedWriteBuffer(large_buf_threshold=10)
    buf.append(data)
    ours = buf._buffers[0]
    assert isinstance(ours, memoryview)
    buf.clear()
    assert_resizable(data)
    with pytest.raises(ValueError, match="released"):
        ours.tobytes()


@pytest.mark.parametrize("nbytes", [0, -1, 11])
def test_advance_invalid_raises_value_error(nbytes: int) -> None:
    buf = ChunkedWriteBuffer(large_buf_threshold=4)
    buf.append(b"0123456789")
    with pytest.raises(ValueError):
        buf.advance(nbytes)
    assert drain_bytes(buf) == b"0123456789"  # unchanged


def test_advance_empty_buffer_raises_value_error() -> None:
    with pytest.raises(ValueError):
        ChunkedWriteBuffer().advance(1)


def test_advance_with_live_chunk_view_is_safe() -> None:
    buf = ChunkedWriteBuffer()
    buf.append(b"0123456789")
    with buf.peek(10) as view:
        buf.advance(4)  # keeps an offset, never resizes the chunk
        assert view.tobytes() == b"0123456789"
    assert drain_bytes(buf) == b"456789"


def test_clear_releases_views() -> None:
    large = bytearray(b"x" * 100)
    mm = mmap.mmap(-1, 4096)
    buf = ChunkedWriteBuffer(large_buf_threshold=10)
    buf.append(b"abc")
    buf.append(large)
    buf.append(mm)
    buf.advance(5)
    assert_not_resizable(large)
    buf.clear()
    assert_resizable(large)
    mm.close()
    assert len(buf) == 0 and not buf and buf.nbuffers == 0
    buf.append(b"again")
    assert drain_bytes(buf) == b"again"


# ---------------------------------------------------------------------------
# purity


def test_writebuffer_imports_without_tornado_or_socket() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["tornado"] = None
        sys.modules["socket"] = None
        import tornado_readinto.core.writebuffer as wb
        buf = wb.ChunkedWriteBuffer(4)
        buf.append(b"ab")
        buf.append(b"cdefgh")
        assert len(buf) == 8, len(buf)
        bad = sorted(m for m in sys.modules if m.startswith("tornado.") or m == "_socket")
        assert not bad, bad
        print("ok")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
