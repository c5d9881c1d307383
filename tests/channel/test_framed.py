"""FramedStream over real sockets: round trips, where frames land, limits,
truncation, resets, and interop with dask.distributed's pack_frames."""

import asyncio
import functools
import hashlib
import random
import socket
import struct
import tracemalloc
import weakref

import numpy as np
import pytest
from distributed.protocol.utils import pack_frames, unpack_frames
from tornado.iostream import StreamClosedError

from tornado_readinto import (
    FramedStream,
    FrameTooLargeError,
    FramingError,
    IncompleteReadError,
    ReadIntoIOStream,
    SSLReadIntoIOStream,
)
from tornado_readinto.diagnostics.testing import RecordingSocket, buffer_address, stream_pair
from tornado_readinto.errors import BufferBusyError
from tornado_readinto.wire.allocators import BufferPool, bytearray_allocator, uninitialized_allocator

from ..conftest import CLOCK_SLACK_S, TrackingAllocator, bytes_waiting, run, until


@pytest.fixture(params=["plain", "tls"])
def make_pair(request, tls_contexts):
    if request.param == "tls":
        server_ctx, client_ctx = tls_contexts
        return functools.partial(stream_pair, SSLReadIntoIOStream, server_ssl=server_ctx, client_ssl=client_ctx)
    return functools.partial(stream_pair, ReadIntoIOStream)


def _random_message(rng):
    nframes = rng.choice([0, 1, 2, 3, 8, 20])
    sizes = [rng.choice([0, 1, 100, 5000, 70_000, 1_500_000]) for _ in range(nframes)]
    return [rng.randbytes(n) for n in sizes]


def _digest(frames):
    h = hashlib.sha256()
    for f in frames:
        h.update(len(f).to_bytes(8, "little"))
        h.update(f)
    return h.hexdigest()


@pytest.mark.parametrize("allocator", ["bytearray", "uninitialized", "pool"])
def test_framed_random_messages_round_trip_by_hash(make_pair, allocator):
    async def main():
        server, client = await make_pair()
        pool = BufferPool(min_pooled_nbytes=0)
        alloc = {"bytearray": bytearray_allocator, "uninitialized": uninitialized_allocator, "pool": pool}[allocator]
        fs_server, fs_client = FramedStream(server, allocator=alloc), FramedStream(client)
        rng = random.Random(allocator)
        messages = [_random_message(rng) for _ in range(40)]
        try:

            async def send():
                for m in messages:
                    await fs_client.write_frames(m)

            async def receive():
                digests = []
                for _ in messages:
                    frames = await fs_server.read_frames()
                    assert all(isinstance(f, memoryview) and not f.readonly and f.format == "B" for f in frames)
                    digests.append(_digest(frames))
                    if allocator == "pool":
                        pool.release_all(frames)
                return digests

            _, got = await asyncio.gather(send(), receive())
            assert got == [_digest(m) for m in messages]
        finally:
            server.close()
            client.close()

    run(main(), timeout=60)


def test_framed_zero_frames_and_empty_frames(make_pair):
    async def main():
        server, client = await make_pair()
        a, b = FramedStream(server), FramedStream(client)
        try:
            for message in ([], [b""], [b"", b"x", b""], [b""] * 5):
                await b.write_frames(message)
                got = await a.read_frames()
                assert [bytes(f) for f in got] == message
        finally:
            server.close()
            client.close()

    run(main())


def test_framed_write_of_frames_that_are_not_a_sequence_of_buffers_sends_nothing():
    """An iterator (it could be read only once: the header would count frames
    the message then lacks) and a frame that is not bytes-like raise at once;
    nothing reaches the peer and the stream goes on."""

    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        a, b = FramedStream(server), FramedStream(client)
        try:
            with pytest.raises(TypeError):
                b.write_frames(iter([b"lost"]))
            with pytest.raises(TypeError, match="bytes-like"):
                b.write_frames([b"lost", 7])
            await b.write_frames((b"kept", bytearray(b"too")))
            assert [bytes(f) for f in await a.read_frames()] == [b"kept", b"too"]
            assert not client.closed() and bytes_waiting(server.socket) == 0
        finally:
            server.close()
            client.close()

    run(main())


def test_framed_small_message_costs_one_recv():
    """A small message that arrived whole is parsed out of the read-ahead
    buffer: one recv for header and frames, no EAGAIN recv."""

    async def main():
        server, client = await stream_pair(ReadIntoIOStream, wrap_socket=RecordingSocket)
        a, b = FramedStream(server), FramedStream(client)
        try:
            message = [b"h" * 30, b"p" * 100]
            for _ in range(20):
                await b.write_frames(message)
                await until(lambda: bytes_waiting(server.socket) == 8 * 3 + 130)  # arrived whole
                server.socket.reset()
                fut = a.read_frames()
                assert fut.done()  # completed inline: no event-loop round trip
                assert [bytes(f) for f in fut.result()] == message
                assert len(server.socket.recvs) == 1
        finally:
            server.close()
            client.close()

    run(main())


def test_framed_large_frames_land_in_allocator_buffers():
    """Bytes of large frames are received straight into the buffers the
    allocator returned (recv targets lie inside them)."""

    async def main():
        buffers = []

        def allocator(nbytes):
            buf = np.empty(nbytes, dtype=np.uint8)
            buffers.append(buf)
            return buf

        server, client = await stream_pair(ReadIntoIOStream, wrap_socket=RecordingSocket)
        a, b = FramedStream(server, allocator=allocator), FramedStream(client)
        try:
            frames = [random.Random(i).randbytes(3 * 1024 * 1024) for i in range(3)]
            reading = a.read_frames()
            await b.write_frames(frames)
            got = await reading
            assert [bytes(f) for f in got] == frames
            ranges = [(buffer_address(x), buffer_address(x) + x.nbytes) for x in buffers]
            direct = sum(
                r.received or 0 for r in server.socket.recvs if any(lo <= r.address < hi for lo, hi in ranges)
            )
            # All went direct but the read-ahead recvs (64 KiB at most each):
            # one for the header, and one per frame whose last bytes were
            # fewer than DIRECT_READ_MIN_NBYTES (they bring the next frame's
            # first bytes with them).
            assert direct >= sum(map(len, frames)) - (len(frames) + 1) * 64 * 1024
        finally:
            server.close()
            client.close()

    run(main())


def test_framed_writes_header_and_8_frames_in_one_sendmsg():
    async def main():
        server, client = await stream_pair(ReadIntoIOStream, wrap_socket=RecordingSocket)
        writer, reader = FramedStream(server), FramedStream(client)
        try:
            frames = [bytes([i]) * 20_000 for i in range(8)]  # referenced, not copied
            server.socket.reset()
            fut = writer.write_frames(frames)
            assert fut.done()  # the socket had room: sent inline
            assert server.socket.sends == [8 + 8 * 8 + 8 * 20_000]
            assert server.socket.sendmsg_buffers == [9]  # header + 8 frames, one syscall
            got = await reader.read_frames()
            assert [bytes(f) for f in got] == frames
        finally:
            server.close()
            client.close()

    run(main())


# -- hostile headers -------------------------------------------------------------


@pytest.mark.parametrize(
    "header, field, limits",
    [
        (struct.pack("<QQ", 1, 2**63), "max_frame_nbytes", {}),
        (struct.pack("<Q", 2**40), "max_frames", {}),
        (struct.pack("<QQQ", 2, 2**35, 2**35), "max_message_nbytes", {"max_message_nbytes": 2**35}),
        (struct.pack("<QQ", 1, 2**20 + 1), "max_frame_nbytes", {"max_frame_nbytes": 2**20}),
    ],
    ids=["length-2**63", "2**40-frames", "sum-over-limit", "frame-over-configured-limit"],
)
def test_framed_hostile_header_rejected_before_allocation(header, field, limits):
    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        alloc = TrackingAllocator()
        fs = FramedStream(server, allocator=alloc, **limits)
        try:
            await client.write(header + b"garbage that must not be delivered")
            await asyncio.sleep(0.01)
            tracemalloc.start()
            try:
                with pytest.raises(FrameTooLargeError) as info:
                    await fs.read_frames()
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            assert info.value.field == field
            assert field in str(info.value) and str(info.value.limit) in str(info.value)
            assert isinstance(info.value, FramingError) and isinstance(info.value, ValueError)
            assert alloc.calls == []
            assert peak < 1024 * 1024
            assert server.closed()
            with pytest.raises(StreamClosedError):
                await fs.read_frames()
        finally:
            server.close()
            client.close()

    run(main())


@pytest.mark.parametrize("cut", [4, 12, 16 + 50, 16 + 8 + 100 + 30_000])
def test_framed_truncated_message_raises_incomplete_read(make_pair, cut):
    async def main():
        server, client = await make_pair()
        fs = FramedStream(server)
        wire = struct.pack("<QQQ", 2, 100, 100_000) + b"a" * 100 + b"b" * 100_000
        try:
            await client.write(wire[:cut])
            client.close()
            with pytest.raises(IncompleteReadError) as info:
                await fs.read_frames()
            assert info.value.received == cut
            assert info.value.expected >= cut
            assert server.closed()
        finally:
            server.close()

    run(main())


def test_framed_close_between_messages_is_plain_stream_closed():
    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        fs = FramedStream(server)
        await FramedStream(client).write_frames([b"x"])
        client.close()
        assert [bytes(f) for f in await fs.read_frames()] == [b"x"]
        with pytest.raises(StreamClosedError) as info:
            await fs.read_frames()
        assert not isinstance(info.value, IncompleteReadError)

    run(main())


def test_framed_send_frames_waits_only_above_high_water_and_counts_wire_bytes():
    """send_frames returns with bytes still queued below the high-water mark,
    waits for them above it, raises when the peer is gone, and returns the
    message's size on the wire (header included)."""

    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        fs_client, fs_server = FramedStream(client), FramedStream(server)
        big = np.ones(32 * 1024 * 1024, dtype=np.uint8)  # more than the socket buffers take
        try:
            sent = await fs_client.send_frames([b"ab", big], high_water_nbytes=1 << 40)
            assert sent == 8 * 3 + 2 + big.nbytes
            assert client.write_buffer_nbytes > 0  # returned before it was all sent
            reading = asyncio.ensure_future(fs_server.read_frames())
            queued = client.write_buffer_nbytes
            await fs_client.send_frames([b"c"], high_water_nbytes=0)  # waits for all of it first
            assert queued > 0 and client.write_buffer_nbytes <= 8 * 2 + 1  # at most "c" is queued
            frames = await reading
            assert bytes(frames[0]) == b"ab" and np.array_equal(np.frombuffer(frames[1], np.uint8), big)
            assert [bytes(f) for f in await fs_server.read_frames()] == [b"c"]
            server.close()
            with pytest.raises(StreamClosedError):
                for _ in range(100):  # until the kernel reports the reset
                    await fs_client.send_frames([big], high_water_nbytes=0)
        finally:
            server.close()
            client.close()

    run(main())


def test_framed_send_frames_frees_each_frame_once_sent():
    """send_frames returns once its message is queued, even over the
    high-water mark, so a caller that drops the message frees each large
    frame when its last byte is sent, not when the whole message is (a
    forwarding process would otherwise hold every message twice)."""

    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        fs_client = FramedStream(client)
        n = 32 * 1024 * 1024  # more than the socket buffers take
        frames = [np.full(n, 1, np.uint8), np.full(n, 2, np.uint8)]
        alive = [weakref.ref(f) for f in frames]
        try:
            sent = await fs_client.send_frames(frames, high_water_nbytes=0)
            assert sent == 8 * 3 + 2 * n and client.write_buffer_nbytes > n  # returned unsent
            del frames
            first = bytearray(8 * 3 + n)
            assert await server.read_into(first) == len(first)  # the header and frame 1
            assert alive[0]() is None and alive[1]() is not None  # frame 1 freed, frame 2 queued
            assert first[24:].count(1) == n
            second = bytearray(n)
            await server.read_into(second)
            assert second.count(2) == n
            await client.write(b"")
            assert alive[1]() is None
        finally:
            server.close()
            client.close()

    run(main())


def test_framed_peer_reset_mid_frame():
    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        fs = FramedStream(server)
        try:
            await client.write(struct.pack("<QQ", 1, 1_000_000) + b"z" * 300_000)
            client.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()  # RST
            with pytest.raises(StreamClosedError) as info:
                await fs.read_frames()
            assert isinstance(info.value, IncompleteReadError)
            assert "frame" in str(info.value)
        finally:
            server.close()

    run(main())


def test_framed_concurrent_read_raises_and_cancel_closes():
    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        fs = FramedStream(server)
        try:
            first = fs.read_frames()
            with pytest.raises(BufferBusyError):
                fs.read_frames()
            await client.write(struct.pack("<QQ", 1, 10) + b"12345")  # half a message
            await until(lambda: server.nbytes_received == 21)  # the server read it
            first.cancel()
            await asyncio.sleep(0)
            assert server.closed()
        finally:
            server.close()
            client.close()

    run(main())


# -- interop with dask.distributed ---------------------------------------------------


def test_framed_reads_distributed_pack_frames():
    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        fs = FramedStream(server)
        frames = [b"abc", b"", bytes(range(256)) * 400, memoryview(b"tail")]
        try:
            await client.write(pack_frames(frames))
            got = await fs.read_frames()
            assert [bytes(f) for f in got] == [bytes(f) for f in frames]
        finally:
            server.close()
            client.close()

    run(main())


def test_framed_writes_what_distributed_unpack_frames_reads():
    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        frames = [b"abc", b"", bytes(range(256)) * 400, np.arange(10, dtype="f8")]
        expected_wire = pack_frames(frames)
        try:
            await FramedStream(server).write_frames(frames)
            wire = await client.read_bytes(len(expected_wire))
            assert wire == expected_wire
            assert [bytes(f) for f in unpack_frames(wire)] == [memoryview(f).tobytes() for f in frames]
        finally:
            server.close()
            client.close()

    run(main())


def test_framed_rejects_stock_stream():
    from tornado.iostream import IOStream

    a, b = socket.socketpair()
    try:
        with pytest.raises(TypeError, match="ReadIntoIOStream"):
            FramedStream(IOStream(a))
    finally:
        a.close()
        b.close()


# -- idle timeout ----------------------------------------------------------------


def test_framed_idle_timeout_closes_stalled_read():
    """The real timer fires: a read stalled mid-message fails with
    ReadTimeoutError and closes the stream, not before the timeout (on the
    loop's clock).  When it fires at the latest is
    test_framed_idle_timeout_fires_on_the_third_silent_tick."""
    from tornado_readinto import ReadTimeoutError

    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        fs = FramedStream(server, read_idle_timeout=0.2)
        try:
            await client.write(struct.pack("<QQ", 1, 100) + b"x" * 10)  # then silence
            loop = asyncio.get_running_loop()
            start = loop.time()
            with pytest.raises(ReadTimeoutError) as info:
                await fs.read_frames()
            assert loop.time() - start >= 0.2 - CLOCK_SLACK_S
            assert info.value.timeout == 0.2 and "frame 0 of 1" in str(info.value)
            assert isinstance(info.value, TimeoutError)
            assert server.closed()
        finally:
            server.close()
            client.close()

    run(main())


class _ManualIdleTicks:
    """Takes the place of the loop's timer for one FramedStream's idle
    checks: each check it schedules is recorded instead, and `tick` runs it
    when the test says so.  The checks then see exactly the bytes the test
    let in between them, however fast or slow the machine is."""

    def __init__(self, fs, monkeypatch):
        self.fs = fs
        self.delays = []
        io_loop = fs.stream.io_loop
        real_call_later = io_loop.call_later

        def call_later(delay, callback, *args, **kwargs):
            if callback == fs._check_idle:
                self.delays.append(delay)
                return object()  # a handle: the stream only tests it for None
            return real_call_later(delay, callback, *args, **kwargs)

        monkeypatch.setattr(io_loop, "call_later", call_later)

    def pending(self):
        return len(self.delays)

    def tick(self):
        """Run the one check that is due (half a timeout after the last)."""
        assert self.delays == [self.fs.read_idle_timeout / 2], self.delays
        self.delays.clear()
        self.fs._check_idle()


def test_framed_idle_timeout_fires_on_the_third_silent_tick(monkeypatch):
    """Checks run every half timeout; a read pending with no byte received
    over three of them fails: between 1 and 1.5 timeouts of silence."""
    from tornado_readinto import ReadTimeoutError

    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        fs = FramedStream(server, read_idle_timeout=0.2)
        ticks = _ManualIdleTicks(fs, monkeypatch)
        try:
            assert ticks.pending() == 0  # no read yet: no check
            reading = fs.read_frames()
            await client.write(struct.pack("<QQ", 1, 100) + b"x" * 10)  # then silence
            await until(lambda: server.nbytes_received == 26)
            ticks.tick()  # bytes since the read began: not silent
            ticks.tick()  # silent since the last check
            assert not reading.done() and not server.closed()
            ticks.tick()  # silent for a second check in a row
            assert server.closed()
            with pytest.raises(ReadTimeoutError) as info:
                await reading
            assert info.value.timeout == 0.2 and "frame 0 of 1" in str(info.value)
            assert ticks.pending() == 0  # closed: checks stop
        finally:
            server.close()
            client.close()

    run(main())


def test_framed_idle_timeout_spares_slow_steady_peer_and_idle_stream(monkeypatch):
    """A stream with no read pending is never idle, however many checks
    pass; a read whose bytes trickle in with at most one silent check
    between them (under one timeout of silence) is never cut."""

    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        fs = FramedStream(server, read_idle_timeout=0.2)
        ticks = _ManualIdleTicks(fs, monkeypatch)
        try:
            assert ticks.pending() == 0  # no read yet: no check
            first = struct.pack("<QQ", 1, 3) + b"one"
            reading = fs.read_frames()  # pending: the checks start
            await client.write(first)
            assert [bytes(f) for f in await reading] == [b"one"]
            for _ in range(10):  # no read pending: idleness is fine
                ticks.tick()
            assert not server.closed()
            wire = struct.pack("<QQ", 1, 12) + b"abcdefghijkl"
            reading = fs.read_frames()
            for i in range(0, len(wire), 4):  # a few bytes, then a silent check: slow, not stalled
                await client.write(wire[i : i + 4])
                expected = len(first) + min(i + 4, len(wire))
                await until(lambda expected=expected: server.nbytes_received == expected)
                ticks.tick()
                ticks.tick()
                assert not server.closed()
            assert [bytes(f) for f in await reading] == [b"abcdefghijkl"]
            assert not server.closed()
        finally:
            server.close()
            client.close()

    run(main())


def test_framed_idle_timeout_must_be_positive():
    a, b = socket.socketpair()
    try:

        async def main():
            with pytest.raises(ValueError, match="read_idle_timeout"):
                FramedStream(ReadIntoIOStream(a), read_idle_timeout=0)

        run(main())
    finally:
        a.close()
        b.close()


def test_framed_bad_header_already_read_ahead_fails_the_future():
    """A good message and a hostile header arrive in one segment: the first
    read delivers the good message, the second returns a Future that fails
    with FrameTooLargeError (not a synchronous StreamClosedError)."""

    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        fs = FramedStream(server, max_frame_nbytes=1000)
        try:
            await client.write(struct.pack("<QQ", 1, 10) + b"x" * 10 + struct.pack("<QQ", 1, 2**40))
            assert [bytes(f) for f in await fs.read_frames()] == [b"x" * 10]
            assert server.nbytes_received == 42  # the bad header was read ahead with the good message
            future = fs.read_frames()
            with pytest.raises(FrameTooLargeError):
                await future
            assert server.closed()
        finally:
            server.close()
            client.close()

    run(main())
