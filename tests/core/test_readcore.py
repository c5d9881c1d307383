"""Tests of the pure read core (`tornado_readinto.core._readcore.ReadCore`): no event
loop, no socket.

Every read mode runs from scripts of reads against a byte stream that an
in-memory engine delivers in chunks: split at every byte position, one byte at
a time, at many random positions (fixed seeds), and cut short at every
position (EOF).  A plain model computes what each read must return from the
whole stream; the engine also checks, at every receive, where the core asked
the bytes to land (straight into a ``read_into`` buffer or a reader's frame
while enough is missing, else the read-ahead buffer).
"""

from __future__ import annotations

import ast
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tornado.iostream import StreamBufferFullError, StreamClosedError, UnsatisfiableReadError

from tornado_readinto.core import _readcore
from tornado_readinto.core._readcore import DIRECT_READ_MIN_NBYTES, PENDING, ReadCore
from tornado_readinto.diagnostics.testing import buffer_address
from tornado_readinto.errors import BufferBusyError, FrameTooLargeError, FramingError, IncompleteReadError
from tornado_readinto.wire.framing import FrameReader, frames_nbytes, pack_header

from .._builds import source_path

#: Fill byte of read_into buffers; no test stream contains it, so a byte
#: written past what a read reports shows up.
GUARD = 0xFF
GUARD_NBYTES = 8


# -- the reads of a script -----------------------------------------------------


@dataclass
class Into:
    nbytes: int
    partial: bool = False


@dataclass
class Bytes:
    nbytes: int
    partial: bool = False


@dataclass
class Until:
    delimiter: bytes
    max_bytes: int | None = None


@dataclass
class Regex:
    pattern: bytes
    max_bytes: int | None = None


@dataclass
class Close:
    pass


@dataclass
class Message:
    max_frames: int = 1 << 20


#: The limits of every test reader (a random stream must not make it
#: allocate much).
MAX_FRAME_NBYTES = 1 << 20
MAX_MESSAGE_NBYTES = 1 << 20


Op = Into | Bytes | Until | Regex | Close | Message

#: What a read came to: ("ok", bytes or frames) or ("error", type, real
#: error type, expected, received) (the counts of an IncompleteReadError).
Outcome = tuple


def frames_message(frames: Sequence[bytes]) -> bytes:
    return pack_header(frames_nbytes(frames)) + b"".join(frames)


# -- the model: what each read returns, from the whole stream ------------------


def error(exc_type: type, real: type | None = None, expected: int = -1, received: int = -1) -> Outcome:
    return ("error", exc_type, real, expected, received)


def model_message(rest: bytes, max_frames: int) -> tuple[Outcome, int]:
    """The outcome of reading one framed message from ``rest``, and its size."""
    if not rest:
        return error(StreamClosedError), 0
    if len(rest) < 8:
        return error(IncompleteReadError, None, 8, len(rest)), 0
    nframes = int.from_bytes(rest[:8], "little")
    if nframes > max_frames:
        return error(FrameTooLargeError), 0
    header = 8 + 8 * nframes
    if len(rest) < header:
        return error(IncompleteReadError, None, header, len(rest)), 0
    lengths = [int.from_bytes(rest[8 + 8 * i : 16 + 8 * i], "little") for i in range(nframes)]
    if max(lengths, default=0) > MAX_FRAME_NBYTES or sum(lengths) > MAX_MESSAGE_NBYTES:
        return error(FrameTooLargeError), 0
    total = header + sum(lengths)
    if len(rest) < total:
        return error(IncompleteReadError, None, total, len(rest)), 0
    frames, pos = [], header
    for nbytes in lengths:
        frames.append(rest[pos : pos + nbytes])
        pos += nbytes
    return ("ok", frames), total


def check_outcomes(script: Sequence[Op], data: bytes, outcomes: list[Outcome]) -> None:
    """Assert that ``outcomes`` are what ``script`` must give on ``data``:
    identical for every read but the partial ones, which must return a
    non-empty prefix (then the next read continues after it)."""
    pos = 0
    for index, op in enumerate(script):
        assert index < len(outcomes), f"read {index} ({op}) never completed"
        got = outcomes[index]
        rest = data[pos:]
        expected: Outcome
        if isinstance(op, (Into, Bytes)):
            if op.nbytes == 0:
                expected = ("ok", b"")
            elif not rest or (len(rest) < op.nbytes and not op.partial):
                expected = error(IncompleteReadError, None, op.nbytes, len(rest))
            elif op.partial:
                assert got[0] == "ok", (index, op, got)
                assert 0 < len(got[1]) <= op.nbytes and rest.startswith(got[1]), (index, op, got)
                expected = got
            else:
                expected = ("ok", rest[: op.nbytes])
        elif isinstance(op, (Until, Regex)):
            if isinstance(op, Until):
                loc = rest.find(op.delimiter)
                end = -1 if loc == -1 else loc + len(op.delimiter)
            else:
                match = re.search(op.pattern, rest)
                end = -1 if match is None else match.end()
            if end != -1 and (op.max_bytes is None or end <= op.max_bytes):
                expected = ("ok", rest[:end])
            elif op.max_bytes is not None and (end != -1 or len(rest) > op.max_bytes):
                expected = error(StreamClosedError, UnsatisfiableReadError)
            else:
                expected = error(StreamClosedError)
        elif isinstance(op, Close):
            expected = ("ok", rest)
        else:
            expected, _ = model_message(rest, op.max_frames)
        assert got == expected, (index, op, pos)
        if expected[0] == "error":
            assert len(outcomes) == index + 1, "reads went on after an error"
            return
        if isinstance(op, Message):
            pos += model_message(rest, op.max_frames)[1]
        else:
            pos += len(got[1])
    assert len(outcomes) == len(script)


# -- the engine: delivers chunks to a core, checking where bytes land ----------


class SpyReader:
    """A FrameReader that remembers the last view it handed out."""

    def __init__(self, max_frames: int) -> None:
        self.reader = FrameReader(
            max_frames=max_frames, max_frame_nbytes=MAX_FRAME_NBYTES, max_message_nbytes=MAX_MESSAGE_NBYTES
        )
        self.handed: memoryview | None = None
        self.handed_nbytes = 0

    @property
    def in_message(self) -> bool:
        return self.reader.in_message

    @property
    def expected_nbytes(self) -> int:
        return self.reader.expected_nbytes

    @property
    def received_nbytes(self) -> int:
        return self.reader.received_nbytes

    def describe_progress(self) -> str:
        return self.reader.describe_progress()

    def get_buffer(self) -> memoryview:
        self.handed = view = self.reader.get_buffer()
        self.handed_nbytes = len(view)
        return view

    def buffer_updated(self, nbytes: int) -> None:
        self.reader.buffer_updated(nbytes)

    def feed(self, data: Any) -> int:
        return self.reader.feed(data)

    def next_message(self) -> Any:
        return self.reader.next_message()


@dataclass
class Engine:
    """Feeds a core the way a receive engine does: each chunk is what the
    "kernel" has at one readable event; a receive takes as much of it as the
    view the core hands out can hold."""

    core: ReadCore
    chunks: list[bytes]
    #: Receive once before each read, while no read is pending (the selector
    #: engine keeps reading ahead while it has room).
    idle_reads: bool = False
    #: (direct?, nbytes) per receive.
    receives: list[tuple[bool, int]] = field(default_factory=list)
    get_buffer_calls: int = 0
    #: Receives per receive loop: all but a loop's last say ``more=True``,
    #: and the loop ends with ``search()``, as the selector engine does.
    loop_len: int = 1
    #: Before every receive, empty the pool of the core's storage size and
    #: put one new buffer in it, full of a byte no stream has: storage given
    #: back and taken again between any two receives is never the same
    #: buffer, and stale bytes would show.
    swap_storage: bool = False

    def __post_init__(self) -> None:
        self.chunks = [chunk for chunk in self.chunks if chunk]
        self.chunks.reverse()  # popped from the end

    def receive(self, op: Op | None = None, target: bytearray | None = None, spy: SpyReader | None = None) -> Any:
        """One receive (the input must not be exhausted); returns what
        buffer_updated returned."""
        core = self.core
        filled = core._filled  # of the pending read_into (0 for other reads)
        if self.swap_storage:
            pool = _readcore.read_ahead_pool(core.read_chunk_size)
            pool.clear()
            poisoned = bytearray([POISON]) * core.read_chunk_size
            pool._free.append(memoryview(poisoned))
            held = core._ra
        view = core.get_buffer()
        self.get_buffer_calls += 1
        direct = False
        if isinstance(op, Into):
            assert target is not None
            missing = op.nbytes - filled
            if missing >= core.direct_min_nbytes:
                # In place: exactly the missing tail of the caller's buffer.
                assert buffer_address(view) == buffer_address(target) + filled
                assert len(view) == missing
                direct = True
            else:
                assert view.obj is not target
        elif isinstance(op, Message):
            assert spy is not None and spy.handed is not None
            if spy.handed_nbytes >= core.direct_min_nbytes:
                assert view is spy.handed  # the frame's (or header's) own buffer
                direct = True
            else:
                assert view.obj is core._ra
        elif op is None:
            if not len(view):
                return PENDING  # read-ahead full: the engine receives nothing
        if not direct:
            assert view.obj is core._ra
            if self.swap_storage and held is None and len(core._ra) == core.read_chunk_size:
                assert core._ra is poisoned  # storage taken from the pool again
        chunk = self.chunks.pop()
        nbytes = min(len(view), len(chunk))
        view[:nbytes] = chunk[:nbytes]
        if nbytes < len(chunk):
            self.chunks.append(chunk[nbytes:])
        if direct and isinstance(op, Into):
            assert target is not None
            assert target[filled : filled + nbytes] == chunk[:nbytes]
        del view  # valid until the next call on the core
        self.receives.append((direct, nbytes))
        if self.loop_len == 1:
            result = core.buffer_updated(nbytes)
        else:
            more = len(self.receives) % self.loop_len != 0 and bool(self.chunks)
            result = core.buffer_updated(nbytes, more=more)
            if result is PENDING and not more:
                result = core.search()  # the loop ended
        check_storage(core)
        return result


#: A byte that no test stream contains (nor GUARD): the fill of storage
#: swapped in between receives.
POISON = 0xEE


def check_storage(core: ReadCore) -> None:
    """Receive storage is held only while bytes are read ahead."""
    if not core.buffered_nbytes:
        assert core._ra is None and core.storage_nbytes == 0
    else:
        assert core.storage_nbytes >= core.buffered_nbytes


def start(core: ReadCore, op: Op) -> tuple[Any, Any, Any]:
    """Start ``op``; return (result or PENDING, target buffer, spy reader)."""
    if isinstance(op, Into):
        target = bytearray([GUARD]) * (op.nbytes + GUARD_NBYTES)
        return core.read_into(memoryview(target)[: op.nbytes], op.partial), target, None
    if isinstance(op, Bytes):
        return core.read_bytes(op.nbytes, op.partial), None, None
    if isinstance(op, Until):
        return core.read_until(op.delimiter, op.max_bytes), None, None
    if isinstance(op, Regex):
        return core.read_until_regex(re.compile(op.pattern), op.max_bytes), None, None
    if isinstance(op, Close):
        return core.read_until_close(), None, None
    spy = SpyReader(op.max_frames)
    return core.read_message(spy), None, spy


def result_outcome(op: Op, result: Any, target: bytearray | None) -> Outcome:
    if isinstance(op, Into):
        assert target is not None and isinstance(result, int)
        # Nothing written past what the read reports.
        assert all(byte == GUARD for byte in target[result:])
        return ("ok", bytes(target[:result]))
    if isinstance(op, Message):
        for frame in result:
            assert isinstance(frame, memoryview) and not frame.readonly
        return ("ok", [bytes(frame) for frame in result])
    assert type(result) is bytes
    return ("ok", result)


def error_outcome(exc: BaseException | None) -> Outcome:
    assert exc is not None
    real = getattr(exc, "real_error", None)
    if isinstance(exc, IncompleteReadError):
        return error(type(exc), type(real) if real else None, exc.expected, exc.received)
    return error(type(exc), type(real) if real else None)


def run(
    script: Sequence[Op],
    chunks: list[bytes],
    *,
    idle_reads: bool = False,
    loop_len: int = 1,
    swap_storage: bool = False,
    **core_kw: Any,
) -> list[Outcome]:
    """Run ``script`` against a stream delivered as ``chunks`` (``loop_len``
    receives per engine loop); on an error, close as a stream would
    (eof_received, then connection_lost) and stop."""
    core = ReadCore(**core_kw)
    engine = Engine(core, chunks, idle_reads, loop_len=loop_len, swap_storage=swap_storage)
    outcomes: list[Outcome] = []
    for op in script:
        if idle_reads and engine.chunks and not core.eof:
            engine.receive()
        target = spy = None
        try:
            result, target, spy = start(core, op)
            check_storage(core)
            while result is PENDING:
                if engine.chunks:
                    result = engine.receive(op, target, spy)
                    if isinstance(op, (Into, Bytes)) and op.partial and engine.receives[-1][1]:
                        assert result is not PENDING  # a partial read completes with any byte
                    continue
                if not core.eof:
                    result = core.eof_received()
                if result is PENDING:
                    outcomes.append(error_outcome(core.connection_lost(None)))
                    check_idle(core)
                    return outcomes
        except (StreamBufferFullError, UnsatisfiableReadError, FramingError) as exc:
            # The stream closes for this error (a read that the bytes read
            # ahead satisfy still completes, as in Tornado's close()).
            result = core.eof_received(clean=False)
            if result is not PENDING:
                outcomes.append(result_outcome(op, result, target))
            else:
                outcomes.append(error_outcome(core.connection_lost(exc)))
            check_idle(core)
            return outcomes
        assert not core.reading
        outcomes.append(result_outcome(op, result, target))
    return outcomes


def check_idle(core: ReadCore) -> None:
    """After the stream ended: no read pending, nothing lent out, no storage
    held but for bytes still read ahead."""
    assert not core.reading and core._lent is None and core._target is None
    check_storage(core)


# -- scenarios -------------------------------------------------------------------

#: Small sizes, so that every path (direct receives, read-ahead growth,
#: compaction, shrinking) is taken by streams of a few hundred bytes.
SMALL: dict[str, Any] = {"read_chunk_size": 16, "direct_min_nbytes": 8}

TEXT = bytes(range(32, 127))  # no GUARD byte in any stream
MSG_A = frames_message([b"abc", TEXT[:30], b"", b"yyyyy"])
MSG_B = frames_message([])
MSG_C = frames_message([TEXT[10:50]])
MSG_D = frames_message([b"q"])

SCENARIOS: dict[str, tuple[list[Op], bytes]] = {
    "read_bytes": (
        [Bytes(5), Bytes(0), Bytes(1), Bytes(20), Bytes(7, partial=True), Bytes(40), Bytes(3, partial=True), Bytes(9)],
        TEXT[:90],
    ),
    "read_into": (
        [
            Into(3),
            Into(0),
            Into(20),
            Into(9),
            Into(5, partial=True),
            Into(40),
            Into(30, partial=True),
            Into(7),
            Into(8),
        ],
        TEXT[::-1][:94],
    ),
    "read_until": (
        [Until(b"\r\n"), Until(b"\n"), Until(b"--end--"), Until(b"x"), Until(b"\r\n"), Bytes(2)],
        b"GET / HTTP/1.1\r\nHost: a\n" + TEXT[:40] + b"-" + b"-end--" + b"\r\n\r\n" + b"...x" + b"line\r\nzz",
    ),
    "read_until_max_bytes": (
        [Until(b"\r\n", max_bytes=10), Until(b"\r\n", max_bytes=12), Until(b"\r\n", max_bytes=8)],
        b"short\r\n" + b"exactly.12\r\n" + b"this line is too long\r\n",
    ),
    "read_until_regex": (
        [Regex(rb"\r?\n\r?\n"), Regex(rb"END\d"), Regex(rb"[a-c]{3}", max_bytes=20), Bytes(1)],
        b"Header: 1\r\nOther: 2\r\n\r\n" + TEXT[:30] + b"END7" + b"..abc" + b"!",
    ),
    "read_until_regex_max_bytes": (
        [Regex(rb"END\d", max_bytes=10), Regex(rb"END\d", max_bytes=10)],
        b"12345END0" + TEXT[:20] + b"END1",
    ),
    "read_until_close": (
        [Bytes(3), Until(b"\n"), Close()],
        b"abcline\n" + TEXT,
    ),
    "read_message": (
        [Message(), Message(), Message(), Message(), Bytes(4)],
        MSG_A + MSG_B + MSG_C + MSG_D + b"tail",
    ),
    "mixed": (
        [Bytes(2), Into(30), Message(), Until(b"\r\n"), Regex(rb"#\d+#"), Into(3, partial=True), Message(), Close()],
        b"hi" + TEXT[:30] + MSG_A + b"a line\r\n" + b"xx#42#" + b"abc" + MSG_C + TEXT[:25],
    ),
}


def all_2_splits(data: bytes) -> Iterable[list[bytes]]:
    for i in range(len(data) + 1):
        yield [data[:i], data[i:]]


def random_splits(data: bytes, seed: int, count: int) -> Iterable[list[bytes]]:
    rng = random.Random(seed)
    for _ in range(count):
        cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(1, 12))))
        yield [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]


@pytest.mark.parametrize("swap_storage", [False, True], ids=["pooled-storage", "storage-swapped"])
@pytest.mark.parametrize("idle_reads", [False, True], ids=["no-idle-reads", "idle-reads"])
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_readcore_every_2_split(name: str, idle_reads: bool, swap_storage: bool) -> None:
    script, data = SCENARIOS[name]
    kw = dict(idle_reads=idle_reads, swap_storage=swap_storage, **SMALL)
    whole = run(script, [data], **kw)
    check_outcomes(script, data, whole)
    for chunks in all_2_splits(data):
        outcomes = run(script, chunks, **kw)
        check_outcomes(script, data, outcomes)


@pytest.mark.parametrize("loop_len", [1, 3], ids=["one-receive-per-loop", "three-per-loop"])
@pytest.mark.parametrize("idle_reads", [False, True], ids=["no-idle-reads", "idle-reads"])
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_readcore_one_byte_and_random_splits(name: str, idle_reads: bool, loop_len: int) -> None:
    script, data = SCENARIOS[name]
    for swap_storage in (False, True):
        kw = dict(idle_reads=idle_reads, loop_len=loop_len, swap_storage=swap_storage, **SMALL)
        check_outcomes(script, data, run(script, [data[i : i + 1] for i in range(len(data))], **kw))
        for chunks in random_splits(data, seed=sorted(SCENARIOS).index(name), count=300):
            check_outcomes(script, data, run(script, chunks, **kw))


class CountingPattern:
    """A compiled pattern that counts its searches (the core only calls
    ``search``)."""

    def __init__(self, pattern: bytes) -> None:
        self._regex = re.compile(pattern)
        self.searches = 0
        self.pattern = pattern

    def search(self, data: Any) -> Any:
        self.searches += 1
        return self._regex.search(data)


def test_readcore_regex_searches_once_per_doubling_within_a_receive_loop() -> None:
    """64 pieces of 1 KiB in one receive loop (``more=True``) before the
    match: the regex searches only when the bytes read ahead have doubled
    since the last search (log2(64) + 1 of them), and ``search()`` at the
    loop's end runs the one put off; one receive per loop searches every
    time, as it must."""
    body = b"x" * 64 * 1024 + b"\r\n\r\nrest"
    pieces = [body[i : i + 1024] for i in range(0, len(body), 1024)]
    for loop_len, most in ((len(pieces), 9), (1, len(pieces))):
        core = ReadCore(read_chunk_size=256 * 1024)
        pattern = CountingPattern(rb"\r?\n\r?\n")
        engine = Engine(core, list(pieces), loop_len=loop_len)
        result = core.read_until_regex(pattern)  # type: ignore[arg-type]
        while result is PENDING:
            result = engine.receive(Regex(pattern.pattern))
        assert result == body[: -len(b"rest")]
        assert pattern.searches <= most, (loop_len, pattern.searches)
    assert core.read_bytes(4) == b"rest"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_readcore_eof_at_every_position(name: str) -> None:
    script, data = SCENARIOS[name]
    rng = random.Random(7)
    for end in range(len(data) + 1):
        cut = data[:end]
        check_outcomes(script, cut, run(script, [cut], **SMALL))
        check_outcomes(script, cut, run(script, [cut[i : i + 1] for i in range(end)], **SMALL))
        if end > 2:
            (chunks,) = random_splits(cut, seed=rng.randrange(1 << 30), count=1)
            check_outcomes(script, cut, run(script, chunks, idle_reads=True, **SMALL))


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_readcore_default_sizes(name: str) -> None:
    """The same scripts with the stream's default sizes (everything through
    the read-ahead buffer: no read misses 16 KiB)."""
    script, data = SCENARIOS[name]
    for chunks in [[data], *random_splits(data, seed=3, count=50)]:
        check_outcomes(script, data, run(script, chunks))


op_strategy = st.one_of(
    st.builds(Into, st.integers(0, 60), st.booleans()),
    st.builds(Bytes, st.integers(0, 60), st.booleans()),
    st.builds(Until, st.sampled_from([b"\n", b"\r\n", b"ab", b"zzz"]), st.none() | st.integers(0, 40)),
    st.builds(Regex, st.sampled_from([rb"\r?\n", rb"a[bc]", rb"\d\d"]), st.none() | st.integers(0, 40)),
    st.builds(Message),
    st.just(Close()),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    script=st.lists(op_strategy, min_size=1, max_size=8),
    pieces=st.lists(
        st.one_of(
            st.binary(min_size=0, max_size=40).map(lambda b: bytes(x % 255 for x in b)),
            st.sampled_from([b"\n", b"\r\n", b"ab", b"zzz", b"12", MSG_A, MSG_B, MSG_C]),
        ),
        max_size=10,
    ),
    cuts=st.lists(st.integers(1, 50), max_size=30),
    idle_reads=st.booleans(),
    sizes=st.sampled_from([SMALL, {"read_chunk_size": 4, "direct_min_nbytes": 1}, {}]),
)
def test_readcore_any_script_any_chunking(
    script: list[Op], pieces: list[bytes], cuts: list[int], idle_reads: bool, sizes: dict[str, Any]
) -> None:
    data = b"".join(pieces)
    chunks, pos = [], 0
    for cut in cuts:
        chunks.append(data[pos : pos + cut])
        pos += cut
    chunks.append(data[pos:])
    # A random stream may hold a hostile frame count: keep it cheap.
    script = [Message(max_frames=64) if isinstance(op, Message) else op for op in script]
    check_outcomes(script, data, run(script, chunks, idle_reads=idle_reads, **sizes))


# -- default sizes: large reads land in place ----------------------------------


@pytest.mark.parametrize("nbytes", [DIRECT_READ_MIN_NBYTES, 100_000, 1 << 20])
def test_readcore_large_read_into_lands_in_caller_buffer(nbytes: int) -> None:
    """With the default sizes, a large read_into receives in place, for exactly
    the missing bytes while DIRECT_READ_MIN_NBYTES or more are missing (the
    engine checks addresses at every receive); only the bytes that were read
    ahead before the read, and a last remainder under the threshold, pass
    through the read-ahead buffer."""
    rng = random.Random(nbytes)
    payload = bytes(rng.randrange(255) for _ in range(256)) * (nbytes // 256 + 1)
    payload = payload[:nbytes]
    data = b"head" + payload + b"next"
    for cut_count in (0, 3, 40):
        cuts = sorted(rng.sample(range(1, len(data)), cut_count))
        chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]
        core = ReadCore()
        engine = Engine(core, chunks)
        result = core.read_bytes(4)
        while result is PENDING:
            result = engine.receive(Bytes(4))
        assert result == b"head"
        copied = min(core.buffered_nbytes, nbytes)
        target = bytearray([GUARD]) * (nbytes + GUARD_NBYTES)
        engine.receives.clear()
        result = core.read_into(memoryview(target)[:nbytes])
        while result is PENDING:
            result = engine.receive(Into(nbytes), target)
        assert result == nbytes and target[:nbytes] == payload and target[nbytes:] == bytes([GUARD]) * GUARD_NBYTES
        direct = sum(n for is_direct, n in engine.receives if is_direct)
        via_read_ahead = nbytes - copied - direct
        assert 0 <= via_read_ahead < DIRECT_READ_MIN_NBYTES
        if cut_count == 40 and nbytes > 2 * DIRECT_READ_MIN_NBYTES:
            assert direct  # enough arrived after the read started
        result = core.read_bytes(4)
        while result is PENDING:
            result = engine.receive(Bytes(4))
        assert result == b"next"


def test_readcore_large_frame_lands_in_frame_buffer() -> None:
    """read_message: a frame missing DIRECT_READ_MIN_NBYTES or more is
    received into the reader's own buffer (the engine checks every view)."""
    frame = bytes(range(255)) * 400  # ~100 KB
    data = frames_message([b"small", frame, b"x"]) + frames_message([b"tail"])
    for cuts in ([], [20, 5000, 70000], list(range(1000, len(data), 9000))):
        chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]
        outcomes = run([Message(), Message()], chunks)
        assert outcomes == [("ok", [b"small", frame, b"x"]), ("ok", [b"tail"])]


# -- read-ahead: bytes already there complete a read at once --------------------


def test_readcore_buffered_reads_complete_without_get_buffer() -> None:
    """Every mode completes at once, with no receive, from bytes read ahead."""
    data = b"line one\r\n" + b"12345" + frames_message([b"ab", b"", b"c"]) + frames_message([]) + b"rest"
    core = ReadCore()
    engine = Engine(core, [data])
    assert core.read_bytes(1) is PENDING
    assert engine.receive(Bytes(1)) == b"l"  # one receive brought everything
    assert core.buffered_nbytes == len(data) - 1
    assert core.read_until(b"\r\n") == b"ine one\r\n"
    target = bytearray(3)
    assert core.read_into(memoryview(target)) == 3 and target == b"123"
    assert core.read_bytes(10, partial=True) == b"45" + data[15:23]
    core.replace_buffered(data[15:])  # hand bytes back, as Tornado code may
    assert [bytes(f) for f in core.read_message(FrameReader())] == [b"ab", b"", b"c"]
    assert core.read_message(FrameReader()) == []
    assert core.read_until_regex(re.compile(rb"e.t")) == b"rest"
    assert core.read_bytes(0) == b"" and core.read_into(memoryview(bytearray())) == 0
    assert engine.get_buffer_calls == 1 and not core.reading


def test_readcore_read_until_close_after_eof_completes_at_once() -> None:
    core = ReadCore()
    core.replace_buffered(b"left")
    assert core.eof_received() is PENDING  # nothing pending
    assert core.read_until_close() == b"left"
    assert core.read_until_close() == b""


# -- the read-ahead storage: held only while bytes are read ahead; pooled -------


def test_readcore_read_ahead_is_taken_lazily_given_back_when_drained_and_reused() -> None:
    core = ReadCore(read_chunk_size=1024)
    assert core._ra is None and core.storage_nbytes == 0
    target = bytearray(10)
    assert core.read_into(memoryview(target)) is PENDING
    assert core._ra is None  # nothing received yet
    engine = Engine(core, [b"0123456789" * 50])
    assert engine.receive(Into(10), target) == 10
    ra = core._ra
    assert ra is not None and len(ra) == 1024 and core.storage_nbytes == 1024
    for _ in range(48):
        assert core.read_bytes(10) == b"0123456789"
    assert core._ra is ra  # held while bytes are read ahead
    assert core.read_bytes(10) == b"0123456789"
    assert core.buffered_nbytes == 0
    assert core._ra is None and core.storage_nbytes == 0  # drained: given back
    assert _readcore.read_ahead_pool(1024)._free[-1].obj is ra
    engine.chunks = [b"abc"]
    assert core.read_bytes(3) is PENDING
    view = core.get_buffer()
    assert core._ra is ra  # taken again: the same buffer
    view[:3] = b"abc"
    del view
    assert core.buffer_updated(3) == b"abc"
    assert core._ra is None


def test_readcore_read_ahead_grows_for_big_read_bytes_and_shrinks_back() -> None:
    core = ReadCore(read_chunk_size=64)
    big = TEXT * 100
    engine = Engine(core, [big])
    assert core.read_bytes(len(big)) is PENDING
    assert len(core.get_buffer()) == len(big)  # room for the whole read at once
    assert engine.receive(Bytes(len(big))) == big
    assert core._ra is None  # grown for one read, given back once drained
    assert all(len(view) == 64 for view in _readcore.read_ahead_pool(64)._free)  # (freed, not pooled)
    engine.chunks = [b"abc"]
    assert core.read_bytes(3) is PENDING
    view = core.get_buffer()
    assert core._ra is not None and len(core._ra) == 64
    view[:3] = b"abc"
    del view
    assert core.buffer_updated(3) == b"abc"


def test_readcore_read_ahead_grows_for_long_line() -> None:
    core = ReadCore(read_chunk_size=16)
    line = TEXT * 10 + b"\n"
    engine = Engine(core, [line[i : i + 7] for i in range(0, len(line), 7)])
    result = core.read_until(b"\n")
    while result is PENDING:
        result = engine.receive(Until(b"\n"))
    assert result == line
    assert core._ra is None  # 4x the chunk size or more: given back


def test_readcore_read_until_search_resumes() -> None:
    """A line arriving in pieces is searched once: each search starts where
    the last one stopped (less the delimiter's length, for one straddling
    two pieces)."""
    core = ReadCore(read_chunk_size=16)
    pieces = [b"abc", b"def\r", b"\nrest"]
    engine = Engine(core, list(pieces))
    assert core.read_until(b"\r\n") is PENDING
    assert engine.receive(Until(b"\r\n")) is PENDING
    assert core._scanned == 3
    assert engine.receive(Until(b"\r\n")) is PENDING
    assert core._scanned == 7
    assert engine.receive(Until(b"\r\n")) == b"abcdef\r\n"
    assert core._scanned == 0
    assert core.read_bytes(4) == b"rest"


# -- limits ----------------------------------------------------------------------


def overflow(script: list[Op], data: bytes, **core_kw: Any) -> Outcome:
    outcomes = run(script, [data[i : i + 5] for i in range(0, len(data), 5)], **core_kw)
    return outcomes[-1]


def test_readcore_max_buffer_size_read_bytes() -> None:
    # More than max_buffer_size for one read_bytes: StreamBufferFullError, and
    # the read fails with an IncompleteReadError carrying it.
    outcome = overflow([Bytes(200)], TEXT * 3, read_chunk_size=16, max_buffer_size=100)
    assert outcome[:4] == ("error", IncompleteReadError, StreamBufferFullError, 200)
    assert 100 < outcome[4] <= 100 + 16  # caught within one read chunk
    assert overflow([Bytes(100)], TEXT * 3, read_chunk_size=16, max_buffer_size=100) == ("ok", (TEXT * 3)[:100])


def test_readcore_max_buffer_size_read_until_and_close() -> None:
    outcome = overflow([Until(b"\n")], TEXT * 3, read_chunk_size=16, max_buffer_size=100)
    assert outcome == error(StreamClosedError, StreamBufferFullError)
    outcome = overflow([Close()], TEXT * 3, read_chunk_size=16, max_buffer_size=100)
    assert outcome == error(StreamClosedError, StreamBufferFullError)
    # Up to the limit: fine; one byte more is too many.
    assert overflow([Close()], TEXT[:90], read_chunk_size=16, max_buffer_size=90) == ("ok", TEXT[:90])
    outcome = overflow([Close()], TEXT[:91], read_chunk_size=16, max_buffer_size=90)
    assert outcome == error(StreamClosedError, StreamBufferFullError)


def test_readcore_read_into_is_not_counted_against_max_buffer_size() -> None:
    data = TEXT * 20  # 1900 bytes
    configs: list[dict[str, Any]] = [
        {"read_chunk_size": 16, "max_buffer_size": 32, "direct_min_nbytes": 8},
        {"read_chunk_size": 32, "max_buffer_size": 64},
    ]
    for sizes in configs:
        outcomes = run([Into(len(data))], [data[i : i + 100] for i in range(0, len(data), 100)], **sizes)
        assert outcomes == [("ok", data)]


def test_readcore_unsatisfiable_read_until_at_start() -> None:
    core = ReadCore()
    core.replace_buffered(b"0123456789")
    with pytest.raises(UnsatisfiableReadError, match="not found within 5 bytes"):
        core.read_until(b"\n", max_bytes=5)
    assert core.reading  # the read stays pending until the stream closes
    exc = core.connection_lost(UnsatisfiableReadError("x"))
    assert type(exc) is StreamClosedError and isinstance(exc.real_error, UnsatisfiableReadError)


# -- EOF and errors ------------------------------------------------------------------


def test_readcore_eof_read_until_close_clean_or_error() -> None:
    core = ReadCore()
    engine = Engine(core, [b"some bytes"])
    assert core.read_until_close() is PENDING
    assert engine.receive(Close()) is PENDING
    assert core.eof_received() == b"some bytes"

    core = ReadCore()
    engine = Engine(core, [b"some bytes"])
    assert core.read_until_close() is PENDING
    assert engine.receive(Close()) is PENDING
    assert core.eof_received(clean=False) is PENDING  # an error: no truncated result
    error = OSError("boom")
    exc = core.connection_lost(error)
    assert type(exc) is StreamClosedError and exc.real_error is error


def test_readcore_incomplete_read_counts_and_real_error() -> None:
    core = ReadCore(read_chunk_size=16, direct_min_nbytes=8)
    target = bytearray(100)
    assert core.read_into(memoryview(target)) is PENDING
    engine = Engine(core, [TEXT[:30]])
    assert engine.receive(Into(100), target) is PENDING
    reset = ConnectionResetError()
    assert core.eof_received() is PENDING
    exc = core.connection_lost(reset)
    assert isinstance(exc, IncompleteReadError) and isinstance(exc, StreamClosedError)
    assert (exc.expected, exc.received, exc.real_error) == (100, 30, reset)
    assert target[:30] == TEXT[:30]
    # The target was released: the caller may resize it.
    target.extend(b"more")
    assert core._ra is None  # nothing left read ahead: given back


def test_readcore_message_errors() -> None:
    # The reader rejects a header: the error itself fails the read.
    core = ReadCore()
    engine = Engine(core, [frames_message([b"a", b"b", b"c"])])
    spy = SpyReader(max_frames=2)
    assert core.read_message(spy) is PENDING
    with pytest.raises(FrameTooLargeError) as info:
        engine.receive(Message(max_frames=2), spy=spy)
    assert core.connection_lost(info.value) is info.value
    # Between messages: a plain StreamClosedError.
    core = ReadCore()
    assert core.read_message(FrameReader()) is PENDING
    exc = core.connection_lost(None)
    assert type(exc) is StreamClosedError
    # Mid-message: IncompleteReadError with the reader's progress.
    core = ReadCore()
    engine = Engine(core, [frames_message([b"abcdef"])[:-2]])
    spy = SpyReader(max_frames=4)
    assert core.read_message(spy) is PENDING
    assert engine.receive(Message(), spy=spy) is PENDING
    exc = core.connection_lost(None)
    assert isinstance(exc, IncompleteReadError)
    assert (exc.expected, exc.received, exc.what) == (22, 20, "frame 0 of 1")


def test_readcore_message_reader_of_any_kind() -> None:
    """read_message drives any MessageReader: a FrameReader subclass's
    overrides run (the compiled core calls a FrameReader in C, which
    dispatches to them), and another reader's results come back as they are."""

    class Counting(FrameReader):
        def feed(self, data: Any) -> int:
            self.fed += 1  # type: ignore[attr-defined]
            return super().feed(data)

    core = ReadCore()
    core.replace_buffered(frames_message([b"ab"]) + b"xy")
    reader = Counting()
    reader.fed = 0  # type: ignore[attr-defined]
    assert [bytes(f) for f in core.read_message(reader)] == [b"ab"]
    assert reader.fed == 1  # type: ignore[attr-defined]

    class OneByte:
        """A MessageReader (not a FrameReader) whose messages are one byte."""

        in_message = False
        expected_nbytes = 1
        received_nbytes = 0
        byte = b""

        def describe_progress(self) -> str:
            return "a byte"

        def get_buffer(self) -> memoryview:
            return memoryview(bytearray(1))

        def buffer_updated(self, nbytes: int) -> None:
            pass

        def feed(self, data: Any) -> int:
            self.byte = bytes(data[:1])
            return 1

        def next_message(self) -> Any:
            return ("message", self.byte)

    assert core.read_message(OneByte()) == ("message", b"x")
    assert core.peek_buffered() == b"y"


def test_readcore_message_error_in_buffered_bytes_at_start() -> None:
    core = ReadCore()
    core.replace_buffered(frames_message([b"a", b"b", b"c"]))
    with pytest.raises(FrameTooLargeError) as info:
        core.read_message(FrameReader(max_frames=2))
    assert core.reading
    assert core.connection_lost(info.value) is info.value


def test_readcore_one_read_at_a_time() -> None:
    core = ReadCore()
    assert core.read_bytes(3) is PENDING
    for start_read in (
        lambda: core.read_bytes(1),
        lambda: core.read_into(memoryview(bytearray(1))),
        lambda: core.read_until(b"\n"),
        lambda: core.read_until_regex(re.compile(b"x")),
        lambda: core.read_until_close(),
        lambda: core.read_message(FrameReader()),
        lambda: core.replace_buffered(b"x"),
    ):
        with pytest.raises(BufferBusyError):
            start_read()
    with pytest.raises(ValueError):
        ReadCore().read_bytes(-1)


def test_readcore_buffer_updated_needs_a_buffer() -> None:
    core = ReadCore()
    assert core.read_bytes(3) is PENDING
    with pytest.raises(ValueError, match="handed out 0 bytes"):
        core.buffer_updated(1)
    view = core.get_buffer()
    with pytest.raises(ValueError, match="handed out"):
        core.buffer_updated(len(view) + 1)
    view = core.get_buffer()  # a second get_buffer replaces the first view
    view[:3] = b"abc"
    assert core.buffer_updated(3) == b"abc"


def test_readcore_idle_read_ahead_is_bounded_by_read_chunk_size() -> None:
    core = ReadCore(read_chunk_size=16)
    engine = Engine(core, [TEXT])
    assert engine.receive() is PENDING
    assert core.buffered_nbytes == 16
    assert len(core.get_buffer()) == 0  # full: receive nothing while idle
    assert core.read_bytes(20) is PENDING  # a pending read may read further
    assert engine.receive(Bytes(20)) == TEXT[:20]
    # Grown past read_chunk_size (and kept: not 4x it), the buffer still
    # reads at most read_chunk_size bytes ahead while idle.
    result = core.read_bytes(40)
    while result is PENDING:
        result = engine.receive(Bytes(40))
    assert result == TEXT[20:60]
    leftover = core.buffered_nbytes
    assert core.read_bytes(leftover) == TEXT[60 : 60 + leftover]
    assert core.buffered_nbytes == 0 and core._ra is None  # drained: no storage held
    assert len(core.get_buffer()) == 16
    engine.chunks = [TEXT[:10]]
    assert engine.receive() is PENDING
    assert len(core.get_buffer()) == 6


def test_readcore_views_are_released() -> None:
    """Every view the core took or lent is released when a read ends, so
    callers can resize their buffers (what PyPy would otherwise delay)."""
    target = bytearray(64)
    core = ReadCore(read_chunk_size=16, direct_min_nbytes=8)
    assert core.read_into(memoryview(target)) is PENDING
    view = core.get_buffer()
    view[:10] = TEXT[:10]
    assert core.buffer_updated(10) is PENDING
    core.get_buffer()  # lent, then the stream dies
    assert core.connection_lost(None) is not None
    target.extend(b"ok")  # no export left
    core.discard()


def test_readcore_module_is_pure() -> None:
    """The core imports no socket, selector or event loop, and nothing of
    Tornado's or the face's (Tornado's exceptions come through ``..errors``)."""
    tree = ast.parse(source_path(_readcore).read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.module is None:  # from . import name
                imported.update("." * node.level + alias.name for alias in node.names)
            else:
                imported.add(("." * node.level) + node.module)
    # cython: what picks the compiled build's C paths (._cyshim where Cython is absent)
    # (.._native: the pure twins of the compiled build's C functions)
    allowed = {"__future__", "enum", "re", "sys", "typing", "cython", ".._cyshim", ".._native"}
    allowed |= {"..errors", "..wire.framing"}
    assert imported <= allowed


def test_an_empty_read_ahead_buffer_is_lent_whole_with_no_slice() -> None:
    """With nothing read ahead, `get_buffer` lends the read-ahead storage's
    own view (no memoryview slice made per receive); with bytes read ahead,
    a slice of its free tail, which the core releases at the next call (a
    view is valid until then)."""
    _readcore.read_ahead_pool(64).clear()
    core = ReadCore(read_chunk_size=64)
    first = core.get_buffer()
    assert len(first) == 64
    first[:5] = b"hello"
    del first  # (a view kept past the next call keeps the storage out of the pool)
    assert core.buffer_updated(5) is PENDING
    ra = core._ra
    assert core.read_bytes(5) == b"hello"  # drained: nothing read ahead, storage given back
    assert core._ra is None
    second = core.get_buffer()
    assert core._ra is ra and len(second) == 64  # the same storage, taken again
    second[:3] = b"abc"
    del second
    assert core.buffer_updated(3) is PENDING
    third = core.get_buffer()
    assert len(third) == 61
    third[:2] = b"de"
    assert core.buffer_updated(2) is PENDING
    with pytest.raises(ValueError, match="released"):
        third[:1] = b"x"  # released by the core: it cannot write into storage any more
    assert core.read_bytes(5) == b"abcde"


def test_fill_copies_bytes_read_ahead_only_when_they_fill_the_whole_bytearray() -> None:
    """`ReadCore.fill` (the face's shortest ``read_into``): True and one copy
    when the bytes read ahead fill all of a non-empty bytearray and no read
    is pending; else False with nothing changed."""
    core = ReadCore(read_chunk_size=64)
    view = core.get_buffer()
    view[:10] = b"0123456789"
    assert core.buffer_updated(10) is PENDING
    small, big, empty = bytearray(4), bytearray(7), bytearray()
    assert core.fill(bytearray(11)) is False and core.fill(empty) is False  # 11 > 10 read ahead; empty
    assert core.fill(small) is True and small == b"0123"
    assert core.buffered_nbytes == 6
    assert core.fill(big) is False and big == bytes(7) and core.buffered_nbytes == 6
    target = bytearray(8)
    assert core.read_into(memoryview(target)) is PENDING  # takes the 6, waits for 2 more
    assert core.fill(bytearray(1)) is False  # a read is pending
    assert core.buffered_nbytes == 0 and target[:6] == b"456789"


# -- read-ahead storage is reused only when no view of it is alive -----------------


class KeepingReader(SpyReader):
    """A reader that keeps what it is fed: a slice and a copy of the view
    (against the contract: a view is valid until the next call on the core)."""

    def __init__(self) -> None:
        super().__init__(max_frames=4)
        self.kept: list[memoryview] = []

    def feed(self, data: Any) -> int:
        self.kept += [data[:8], memoryview(data)]
        return super().feed(data)


def test_readcore_storage_with_a_live_view_never_serves_another_stream() -> None:
    """Storage goes back to the pool only when no view of it is alive: a
    reader that kept slices of what it was fed, or an engine that kept the
    lent view past the next call, keeps that storage out of the pool (it is
    freed with the last view), so that another stream's bytes never land
    where an old view can see them."""
    pool = _readcore.read_ahead_pool(64)
    pool.clear()
    message = frames_message([b"abcdefgh"])
    core = ReadCore(read_chunk_size=64)
    keeper = KeepingReader()
    assert core.read_message(keeper) is PENDING
    view = core.get_buffer()
    ra = core._ra
    view[: len(message)] = message
    del view
    assert [bytes(frame) for frame in core.buffer_updated(len(message))] == [b"abcdefgh"]
    assert core._ra is None and core.storage_nbytes == 0  # drained: given back...
    assert all(free.obj is not ra for free in pool._free)  # ...but not to the pool: views of it live
    other = ReadCore(read_chunk_size=64)
    view = other.get_buffer()
    assert other._ra is not ra
    view[:64] = b"z" * 64
    del view
    assert other.buffer_updated(64) is PENDING
    assert [bytes(kept) for kept in keeper.kept] == [message[:8], message]  # untouched

    # The lent view itself, kept past the next call: released (pure build),
    # or keeping its storage out of the pool (compiled build).
    pool.clear()
    core = ReadCore(read_chunk_size=64)
    kept = core.get_buffer()
    ra = core._ra
    kept[:3] = b"abc"
    assert core.buffer_updated(3) is PENDING
    assert core.read_bytes(3) == b"abc" and core._ra is None
    taken = ReadCore(read_chunk_size=64)
    view = taken.get_buffer()
    try:
        kept[:1] = b"!"
    except ValueError:  # released: it reaches no storage any more
        pass
    else:
        assert taken._ra is not ra  # never handed to another stream
    view[:1] = b"x"
    del view
    assert taken.buffer_updated(1) is PENDING and taken.read_bytes(1) == b"x"


def test_readcore_pooled_storage_has_no_export_but_its_own_view() -> None:
    """What a pool keeps is unreachable but through the pool: releasing the
    one view of a pooled buffer leaves the bytearray resizable (BufferError
    would say that something still exports it)."""
    pool = _readcore.read_ahead_pool(64)
    pool.clear()
    core = ReadCore(read_chunk_size=64)
    for _ in range(3):
        view = core.get_buffer()
        view[:5] = b"hello"
        del view
        assert core.buffer_updated(5) is PENDING
        assert core.read_bytes(5) == b"hello"
    assert len(pool._free) == 1 and pool.free_nbytes == 64
    free = pool._free.pop()
    ra = free.obj
    free.release()
    ra.extend(b"resizable")  # no BufferError: no view of it was left anywhere
