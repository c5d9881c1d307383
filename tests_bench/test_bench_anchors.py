"""The asyncio anchors of the echo and load benchmarks, written as a good
user writes them: the Streams reader's ``readexactly`` calls, the read-ahead
``BufferedProtocol``'s parsing (several messages per ``buffer_updated``,
messages split anywhere, a message bigger than its buffer, slices still held
elsewhere), and real echoes over 127.0.0.1 on both loops."""

from __future__ import annotations

import asyncio
import itertools
import socket
from collections.abc import Sequence
from typing import Any

import pytest

from benchmarks.impls import IMPLS, _bounds, availability, load
from benchmarks.impls._async import echo_loop, prepare_socket, run_clients, run_loop, serve
from benchmarks.impls._asyncio import AsyncioStreams, AsyncioStreams3Reads
from benchmarks.impls._bounds import BoundTornado
from benchmarks.impls._common import CasePlan, ConnStats, WireError, pack_header
from benchmarks.impls._protocol import READ_AHEAD_NBYTES, _ReadAheadProtocol


def message(*sizes: int, seed: int = 0) -> tuple[list[bytes], bytes]:
    """Frames of ``sizes`` with distinct bytes, and the message on the wire."""
    frames = [bytes((seed + 7 * i + j) % 251 for j in range(n)) for i, n in enumerate(sizes)]
    return frames, pack_header(frames) + b"".join(frames)


# -- asyncio Streams: the fewest readexactly calls --------------------------------------


class CountingReader(asyncio.StreamReader):
    def __init__(self) -> None:
        super().__init__()
        self.reads: list[int] = []

    async def readexactly(self, n: int) -> bytes:
        self.reads.append(n)
        return await super().readexactly(n)


class FakeWriter:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[bytes]]] = []

    def write(self, data: Any) -> None:
        self.calls.append(("write", [bytes(data)]))

    def writelines(self, data: Sequence[Any]) -> None:
        self.calls.append(("writelines", [bytes(d) for d in data]))

    async def drain(self) -> None:
        self.calls.append(("drain", []))


@pytest.mark.parametrize(
    "cls, sizes, reads",
    [
        (AsyncioStreams, (1000,), [16, 1000]),  # header (count + length), then the payload
        (AsyncioStreams, (10, 0, 30, 40), [16, 24, 80]),  # the other lengths, then all the frames at once
        (AsyncioStreams3Reads, (1000,), [8, 8, 1000]),
        (AsyncioStreams3Reads, (10, 0, 30, 40), [8, 32, 10, 0, 30, 40]),
    ],
)
def test_streams_reads_per_message(cls: type, sizes: tuple[int, ...], reads: list[int]) -> None:
    async def main() -> None:
        frames, wire = message(*sizes)
        reader = CountingReader()
        conn = cls(reader, FakeWriter())
        reader.feed_data(wire + wire)
        for _ in range(2):
            received = await conn.recv()
            assert [bytes(f) for f in received] == frames
        assert reader.reads == reads + reads

    asyncio.run(main())


def test_streams_anchor_sends_one_writelines_and_one_drain() -> None:
    async def main() -> None:
        frames, wire = message(10, 20)
        writer = FakeWriter()
        await AsyncioStreams(asyncio.StreamReader(), writer).send(frames)  # type: ignore[arg-type]
        assert [name for name, _ in writer.calls] == ["writelines", "drain"]
        assert b"".join(writer.calls[0][1]) == wire

    asyncio.run(main())


def test_streams_anchor_eof_and_frameless_message() -> None:
    from benchmarks.impls._common import U64, ConnClosed

    async def main() -> None:
        reader = asyncio.StreamReader()
        conn = AsyncioStreams(reader, FakeWriter())  # type: ignore[arg-type]
        reader.feed_data(U64.pack(0) + U64.pack(0))
        with pytest.raises(WireError):
            await conn.recv()
        reader.feed_eof()
        with pytest.raises(ConnClosed):
            await conn.recv()

    asyncio.run(main())


# -- the read-ahead BufferedProtocol ------------------------------------------------------


class FakeTransport:
    """Records what was written, and can pretend to keep it queued (holding
    the memoryviews it was given, as asyncio 3.12+ and uvloop do)."""

    def __init__(self, queued: bool = False) -> None:
        self.queued = queued
        self.held: list[memoryview] = []
        self.written: list[bytes] = []
        self.aborted = False

    def writelines(self, data: Sequence[Any]) -> None:
        self.written.append(b"".join(bytes(d) for d in data))
        if self.queued:
            self.held += [memoryview(d) for d in data]

    def get_write_buffer_size(self) -> int:
        return sum(v.nbytes for v in self.held)

    def abort(self) -> None:
        self.aborted = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def feed(protocol: _ReadAheadProtocol, data: bytes, chunk: int | None = None) -> int:
    """Hand ``data`` to the protocol in ``chunk``-byte receives (default:
    as much as each ``get_buffer`` takes); the number of receives."""
    calls = 0
    while data:
        buf = protocol.get_buffer(-1)
        n = min(len(buf), len(data), chunk or len(data))
        buf[:n] = data[:n]
        protocol.buffer_updated(n)
        data = data[n:]
        calls += 1
    return calls


def server(queued: bool = False) -> tuple[_ReadAheadProtocol, FakeTransport]:
    protocol = _ReadAheadProtocol(echo=True)
    transport = FakeTransport(queued)
    protocol.connection_made(transport)  # type: ignore[arg-type]
    return protocol, transport


def test_read_ahead_echoes_every_message_of_one_receive() -> None:
    async def main() -> None:
        protocol, transport = server()
        wires = [message(1000, seed=1)[1], message(10, 0, 30, 40, seed=2)[1], message(8, seed=3)[1]]
        assert feed(protocol, b"".join(wires)) == 1  # one buffer_updated for all three
        assert transport.written == wires and protocol.nechoed == 3
        assert not transport.aborted

    asyncio.run(main())


@pytest.mark.parametrize("chunk", [1, 7, 16, 1000])
def test_read_ahead_messages_split_anywhere(chunk: int) -> None:
    async def main() -> None:
        protocol, transport = server()
        wires = [message(1000, seed=i)[1] if i % 2 else message(100, 200, 300, 400, seed=i)[1] for i in range(6)]
        feed(protocol, b"".join(wires), chunk)
        assert transport.written == wires

    asyncio.run(main())


def test_read_ahead_message_bigger_than_its_buffer() -> None:
    async def main() -> None:
        protocol, transport = server()
        big = message(READ_AHEAD_NBYTES, 3 * READ_AHEAD_NBYTES, seed=5)[1]
        small = message(1000, seed=6)[1]
        feed(protocol, small + big + small, chunk=100_000)
        assert transport.written == [small, big, small]

    asyncio.run(main())


def test_read_ahead_never_overwrites_bytes_a_transport_still_holds() -> None:
    """An echo still queued in the transport keeps its bytes, however much
    arrives after it (the buffer is replaced, not compacted)."""

    async def main() -> None:
        protocol, transport = server(queued=True)
        wires = [message(20_000, seed=i)[1] for i in range(40)]  # several buffers' worth
        feed(protocol, b"".join(wires), chunk=30_000)
        assert transport.written == wires
        held = b"".join(bytes(v) for v in transport.held)
        assert held == b"".join(wires)  # every queued echo still intact

    asyncio.run(main())


def test_read_ahead_client_messages_stay_valid_until_released() -> None:
    async def main() -> None:
        protocol = _ReadAheadProtocol(echo=False)
        protocol.connection_made(FakeTransport())  # type: ignore[arg-type]
        frames, wire = message(50_000, 10, seed=9)
        feed(protocol, wire)
        first = await protocol.recv()
        others = [message(60_000, seed=i)[1] for i in range(10)]
        feed(protocol, b"".join(others), chunk=70_000)  # would compact over the first message
        assert [bytes(f) for f in first] == frames
        protocol.release(first)
        for i in range(10):
            echo = await protocol.recv()
            assert [bytes(f) for f in echo] == message(60_000, seed=i)[0]
            protocol.release(echo)

    asyncio.run(main())


def test_read_ahead_rejects_a_bad_header() -> None:
    from benchmarks.impls._common import U64

    async def main() -> None:
        protocol, transport = server()
        feed(protocol, U64.pack(1 << 40) + bytes(8))
        assert transport.aborted and isinstance(protocol._error, WireError)

    asyncio.run(main())


# -- real echoes over 127.0.0.1 -----------------------------------------------------------


def _echo_case(impl: str, loop: str, msize: int, nframes: int) -> tuple[list[ConnStats], int]:
    cls = load(IMPLS[impl])
    plan = CasePlan(msize, nframes, "pipelined", 8, 0.0, 0.05, 1, 2)

    async def main() -> tuple[list[ConnStats], int]:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        server = asyncio.ensure_future(serve(cls, listener, plan.clients))
        stats = await run_clients(cls, listener.getsockname()[1], plan)
        return stats, await server

    return run_loop(loop, main, 60)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize(
    "impl",
    [
        "asyncio-streams",
        "asyncio-protocol",
        "asyncio-streams-3reads",
        "asyncio-protocol-exact",
        # ours, read as the Streams anchors read: 16 bytes, the other
        # lengths, each frame; and three reads per message
        "readinto",
        "readinto-3reads",
        # the lower bounds (benchmarks/impls/_bounds.py) must be real echoes
        "bound-floor",
        "bound-tornado",
        "bound-raw",
    ],
)
@pytest.mark.parametrize("msize, nframes", [(1024, 1), (1024, 4), (300 << 10, 4)])
def test_anchor_and_readinto_echoes_verified(impl: str, loop: str, msize: int, nframes: int) -> None:
    """Pipelined (several messages in flight, so several per receive): every
    echo checked, the first and last of each connection byte for byte."""
    if availability(IMPLS[impl], loop) is not None:
        pytest.skip(f"{impl} on {loop}: {availability(IMPLS[impl], loop)}")
    stats, echoed = _echo_case(impl, loop, msize, nframes)
    sent = sum(s.messages_sent for s in stats)
    assert sent > 2 * 8 and echoed == sent
    assert sum(s.verified_messages for s in stats) == sent
    assert [s.full_compares for s in stats] == [2, 2]


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_bound_tornado_does_the_per_message_duties_it_claims(loop: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lower bound is only a bound if it does what ReadIntoIOStream does
    per message: every head read of a ping-pong that waits parks and tells
    the busy-poll policy, and a short recv sets the empty-socket timestamp.

    Which reads wait is decided by wall-clock time (the empty-socket proof
    holds for 1 ms, a recv that took long counts as a GIL stall), so on a
    busy CPU a head read may try the socket instead of parking.  The
    stream's clock is therefore a counter advancing 1 us a read: then the
    count is fixed by the code alone, on any machine.  The first message is
    on the wire before the server's first read (no proof yet: it tries the
    socket and finds it); each later one, and the EOF, parks once."""
    pytest.importorskip(loop)
    ticks = itertools.count()
    start = _bounds.perf_counter()
    monkeypatch.setattr(_bounds, "perf_counter", lambda: start + 1e-6 * next(ticks))
    nmessages = 20

    async def main() -> tuple[int, int, float]:
        with socket.create_server(("127.0.0.1", 0)) as listener:
            b = socket.create_connection(listener.getsockname())
            a, _ = listener.accept()
        prepare_socket(a)
        prepare_socket(b)
        server = await BoundTornado.from_socket(a)
        client = await BoundTornado.from_socket(b)
        serving = asyncio.ensure_future(echo_loop(server))
        frames = [bytearray(range(256)) * 4]
        for _ in range(nmessages):
            await client.send(frames)
            echo = await client.recv()
            assert [bytes(f) for f in echo] == [bytes(frames[0])]
        stream = server.stream
        parks, drained_at = stream._busy_poll.parks, stream._drained_at  # type: ignore[attr-defined]
        client.close()
        return parks, await asyncio.wait_for(serving, 10), drained_at

    parks, echoed, drained_at = run_loop(loop, main, 30)
    assert echoed == nmessages
    assert parks == nmessages  # the head reads of messages 2..20, then the EOF read
    assert drained_at > start


def test_uvloop_registry_names_the_same_anchors() -> None:
    for name in ("streams", "streams-3reads", "protocol", "protocol-exact"):
        assert IMPLS[f"uvloop-{name}"].target == IMPLS[f"asyncio-{name}"].target
        assert IMPLS[f"uvloop-{name}"].loop == "uvloop"
