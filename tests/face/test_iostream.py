"""ReadIntoIOStream: the shared conformance suite (stock vs ours, plain and
TLS) and the behaviour only our class has, observed over real sockets."""

import asyncio
import functools
import hashlib
import mmap
import random
import select
import socket
import struct
import tracemalloc

import numpy as np
import pytest
from tornado.iostream import IOStream, SSLIOStream, StreamBufferFullError, StreamClosedError

from tornado_readinto import IncompleteReadError, ReadIntoIOStream, SSLReadIntoIOStream
from tornado_readinto.diagnostics.testing import (
    FakeSocket,
    RecordingSocket,
    buffer_address,
    check_eof_mid_read,
    check_exact_reads,
    check_random_duplex,
    check_straddling_reads,
    check_write_types,
    stream_pair,
)
from tornado_readinto.errors import BufferBusyError
from tornado_readinto.face.iostream import DIRECT_READ_MIN_NBYTES, DRAINED_VALID_S

from ..conftest import bytes_waiting, new_event_loop, run, until

IMPLS = ["stock", "readinto", "stock-tls", "readinto-tls"]


@pytest.fixture(params=IMPLS)
def make_pair(request, tls_contexts):
    """The A/B fixture: one test body, stock Tornado and ours, plain and TLS."""
    impl = request.param
    if impl.endswith("tls"):
        cls = SSLReadIntoIOStream if impl.startswith("readinto") else SSLIOStream
        server_ctx, client_ctx = tls_contexts
        return functools.partial(stream_pair, cls, server_ssl=server_ctx, client_ssl=client_ctx)
    cls = ReadIntoIOStream if impl == "readinto" else IOStream
    return functools.partial(stream_pair, cls)


@pytest.fixture(params=["readinto", "readinto-tls"])
def make_ours(request, tls_contexts):
    if request.param == "readinto-tls":
        server_ctx, client_ctx = tls_contexts
        return functools.partial(stream_pair, SSLReadIntoIOStream, server_ssl=server_ctx, client_ssl=client_ctx)
    return functools.partial(stream_pair, ReadIntoIOStream)


# -- shared conformance suite --------------------------------------------------


def test_iostream_exact_reads(make_pair):
    run(check_exact_reads(make_pair))


def test_iostream_straddling_reads(make_pair):
    run(check_straddling_reads(make_pair))


def _reset(stream):
    """Close ``stream``'s socket with a TCP reset (``SO_LINGER`` 0), not a FIN."""
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    stream.close()


def test_iostream_peer_reset_fails_the_reads(make_pair, loop_name):
    """A peer sends bytes and resets the connection before the loop polls
    again, so one event brings the loop both the bytes and the error.
    uvloop runs the READ callback of a socket that reported an error once
    more, then stops watching it: a stream that stopped at a short recv
    there would wait forever.  A read that the bytes do not satisfy fails;
    one that they satisfy returns them, and the read after it fails."""

    async def main():
        server, client = await make_pair()
        try:
            reading = server.read_bytes(10_000)  # parks: READ registered
            client.write(b"x" * 100)  # sent at once
            assert not client.writing()
            _reset(client)
            with pytest.raises(StreamClosedError):
                await asyncio.wait_for(reading, 10)
        finally:
            server.close()
            client.close()
        server, client = await make_pair()
        try:
            reading = server.read_bytes(100)
            client.write(b"y" * 100)
            assert not client.writing()
            _reset(client)
            assert await asyncio.wait_for(reading, 10) == b"y" * 100
            with pytest.raises(StreamClosedError):
                await asyncio.wait_for(server.read_bytes(10), 10)
        finally:
            server.close()
            client.close()

    run(main(), loop=loop_name)


def test_peer_reset_closes_an_idle_stream(make_ours, loop_name):
    """With no read pending, a peer's last bytes and its reset in one event
    still close the stream and run its close callback (what a server relies
    on to notice a client that went away), on both loops.  (Stock Tornado
    does not: with no read pending it stops at the bytes, buffers them, and
    then watches for nothing.)"""

    async def main():
        server, client = await make_ours()
        closed = asyncio.Event()
        server.set_close_callback(closed.set)
        try:
            assert await _echo_once(server, client)  # READ is registered, nothing pending
            client.write(b"z" * 100)
            assert not client.writing()
            _reset(client)
            await asyncio.wait_for(closed.wait(), 10)
            assert server.closed()
        finally:
            server.close()
            client.close()

    run(main(), loop=loop_name)


async def _echo_once(server, client):
    """One request and its reply: True when both arrived intact."""
    reading = server.read_bytes(4)
    await client.write(b"ping")
    if await reading != b"ping":
        return False
    await server.write(b"pong")
    return await client.read_bytes(4) == b"pong"


def test_iostream_set_nodelay_reaches_the_socket(make_pair):
    """set_nodelay toggles TCP_NODELAY on the socket every call, as stock
    does, plain and TLS; after close it is a harmless no-op."""

    async def main():
        server, client = await make_pair()
        try:
            for value in (False, True, False, 1, 0):
                server.set_nodelay(value)
                assert server.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == (1 if value else 0)
        finally:
            server.close()
            client.close()
        server.set_nodelay(True)  # closed: nothing happens

    run(main())


def test_iostream_set_nodelay_on_a_unix_socket_does_nothing():
    async def main():
        a, b = socket.socketpair(socket.AF_UNIX)
        stream = ReadIntoIOStream(a)
        try:
            stream.set_nodelay(True)
            stream.set_nodelay(False)
            await stream.write(b"x")
            assert b.recv(1) == b"x"
        finally:
            stream.close()
            b.close()

    run(main())


def test_iostream_write_types(make_pair):
    run(check_write_types(make_pair))


@pytest.mark.parametrize("seed", [1, 2])
def test_iostream_random_duplex_by_hash(make_pair, seed):
    run(check_random_duplex(make_pair, seed=seed), timeout=60)


@pytest.mark.parametrize("use_read_into", [False, True])
def test_iostream_eof_mid_read_raises_stream_closed(make_pair, use_read_into):
    exc = run(check_eof_mid_read(make_pair, use_read_into))
    assert isinstance(exc, StreamClosedError)


# -- ours only: buffers of every kind ------------------------------------------


@pytest.mark.parametrize(
    "make_buf",
    [
        lambda: memoryview(bytearray(16)).cast("d"),  # 2 items, 16 bytes
        lambda: np.zeros((4, 8), dtype=np.float64),
        lambda: __import__("array").array("I", bytes(40)),
        lambda: mmap.mmap(-1, 300_000),
        lambda: np.zeros((3, 100_000), dtype=np.uint8),
    ],
    ids=["typed-memoryview", "numpy-2d", "array.array", "mmap", "numpy-2d-large"],
)
def test_read_into_any_buffer_sized_by_nbytes(make_ours, make_buf):
    async def exact():
        server, client = await make_ours()
        try:
            buf = make_buf()
            nbytes = memoryview(buf).nbytes
            payload = random.Random(nbytes).randbytes(nbytes)
            await client.write(payload[:7])
            await asyncio.sleep(0.01)  # let some bytes be read ahead first
            await client.write(payload[7:] + b"tail")
            assert await server.read_into(buf) == nbytes
            assert memoryview(buf).cast("B").tobytes() == payload
            assert await server.read_bytes(4) == b"tail"
        finally:
            server.close()
            client.close()

    run(exact())


def test_stock_read_into_typed_memoryview_is_broken():
    """Documents the stock defect we fix: a 16-byte 'd' view is sized by
    len() == 2, so stock reads 2 bytes (ours reads 16; see above)."""

    async def main():
        server, client = await stream_pair(IOStream)
        try:
            await client.write(bytes(range(16)))
            await asyncio.sleep(0.01)
            buf = memoryview(bytearray(16)).cast("d")
            try:
                n = await server.read_into(buf)
            except ValueError:
                return "ValueError"
            return n
        finally:
            server.close()
            client.close()

    assert run(main()) in (2, "ValueError")


def test_read_into_readonly_buffer_raises_typeerror_before_reading():
    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        try:
            await client.write(b"abc")
            with pytest.raises(TypeError, match="read-only"):
                server.read_into(b"123")
            with pytest.raises(TypeError, match="C-contiguous"):
                server.read_into(np.zeros((4, 4), dtype=np.uint8)[:, ::2])
            assert not server.reading()
            assert await server.read_bytes(3) == b"abc"  # nothing was consumed
        finally:
            server.close()
            client.close()

    run(main())


def test_read_into_zero_length_completes_at_once_without_recv():
    async def main():
        server, client = await stream_pair(ReadIntoIOStream, wrap_socket=RecordingSocket)
        try:
            fut = server.read_into(bytearray(0))
            assert fut.done() and fut.result() == 0
            fut = server.read_into(np.empty((0, 3)))
            assert fut.done() and fut.result() == 0
            assert server.socket.recvs == []
        finally:
            server.close()
            client.close()

    run(main())


def test_read_into_bigger_than_max_buffer_size():
    """Stock raises StreamBufferFullError for a read_into past max_buffer_size;
    the caller's buffer does not count against it here."""

    async def main(cls):
        server, client = await stream_pair(cls, max_buffer_size=100_000)
        try:
            payload = random.Random(3).randbytes(1_000_000)
            client.write(payload)
            buf = bytearray(len(payload))
            await server.read_into(buf)
            return buf == payload
        except StreamBufferFullError:
            return "full"
        finally:
            server.close()
            client.close()

    assert run(main(ReadIntoIOStream)) is True
    assert run(main(IOStream)) == "full"


def test_read_into_partial_returns_what_arrived(make_ours):
    async def main():
        server, client = await make_ours()
        try:
            buf = bytearray(100_000)
            reading = server.read_into(buf, partial=True)
            await client.write(b"hello")
            n = await reading
            assert n == 5 and buf[:5] == b"hello"
            # partial with data already buffered completes inline
            await client.write(b"abcdef")
            assert await server.read_bytes(2) == b"ab"
            fut = server.read_into(bytearray(10), partial=True)
            assert await fut == 4
        finally:
            server.close()
            client.close()

    run(main())


@pytest.mark.parametrize("use_read_into", [False, True])
def test_eof_mid_read_raises_incomplete_read_with_counts(make_ours, use_read_into):
    exc = run(check_eof_mid_read(make_ours, use_read_into))
    assert isinstance(exc, IncompleteReadError)
    assert (exc.expected, exc.received) == (100, 10)
    assert "after 10 of 100 bytes" in str(exc)


def test_eof_mid_large_direct_read_counts_bytes_received():
    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        try:
            buf = bytearray(1_000_000)
            reading = server.read_into(buf)
            await client.write(b"z" * 300_000)
            client.close()
            with pytest.raises(IncompleteReadError) as info:
                await reading
            assert info.value.expected == 1_000_000 and info.value.received == 300_000
            assert buf[:300_000] == b"z" * 300_000
            assert server.closed()
            buf.extend(b"x")  # our view of buf was released: resizable again
        finally:
            server.close()

    run(main())


@pytest.mark.parametrize("how", ["wait_for", "task_cancel"])
def test_cancelled_read_closes_stream(make_ours, how):
    async def main():
        server, client = await make_ours()
        try:
            await client.write(b"abc")  # 3 of 10 bytes
            if how == "wait_for":
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(server.read_into(bytearray(10)), 0.05)
            else:
                task = asyncio.ensure_future(server.read_bytes(10))
                await until(server.reading)  # the read is pending
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            assert server.closed()
            with pytest.raises(StreamClosedError):
                await server.read_bytes(1)
        finally:
            server.close()
            client.close()

    run(main())


@pytest.mark.parametrize("then", ["read_again", "close", "bytes_arrive"])
def test_cancelled_plain_read_closes_stream_before_its_callback_runs(then):
    """On uvloop (no GIL contention seen) a pending read's Future is a plain
    asyncio Future, whose cancellation reaches the stream through a done
    callback on the loop's next iteration.  Whatever touches the stream
    first (a new read, close, the bytes arriving) sees the cancellation:
    the stream closes, nothing is delivered, nothing is logged as an error."""

    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        try:
            pending = server.read_into(bytearray(4))
            assert type(pending) is asyncio.Future
            pending.cancel()
            assert not server.closed()  # its done callback has not run yet
            if then == "read_again":
                with pytest.raises(StreamClosedError):
                    server.read_into(bytearray(4))
            elif then == "close":
                server.close()
            else:
                client.socket.send(b"abcd")
                await until(lambda: bytes_waiting(server.socket) == 4)
                server._read_ready()  # the READ event, ahead of the callback
            assert server.closed()
            assert not server.reading()
            await asyncio.sleep(0)  # the done callback runs: nothing more happens
            assert server.closed() and pending.cancelled()
        finally:
            server.close()
            client.close()

    run(main(), loop="uvloop")


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_closing_after_the_loop_closed_fails_the_pending_read_quietly(loop_name):
    """A stream closed after its event loop was closed (at interpreter exit,
    say) closes without raising, and its pending read fails; the plain read
    Future's cancellation callback must not be scheduled on the closed
    loop."""
    loop = new_event_loop(loop_name)
    asyncio.set_event_loop(loop)
    try:

        async def start():
            server, client = await stream_pair(ReadIntoIOStream)
            return server, client, server.read_into(bytearray(4))

        server, client, pending = loop.run_until_complete(start())
    finally:
        loop.close()
        asyncio.set_event_loop(None)
    server.close()
    client.close()
    assert server.closed()
    assert isinstance(pending.exception(), StreamClosedError)


def test_concurrent_read_raises_buffer_busy():
    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        try:
            first = server.read_bytes(4)
            with pytest.raises(BufferBusyError, match="already in progress"):
                server.read_into(bytearray(4))
            await client.write(b"1234")
            assert await first == b"1234"
        finally:
            server.close()
            client.close()

    run(main())


def test_read_bytes_negative_raises_valueerror():
    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        try:
            with pytest.raises(ValueError, match="num_bytes >= 0"):
                server.read_bytes(-1)
        finally:
            server.close()
            client.close()

    run(main())


def test_random_mixed_reads_against_stock_by_hash():
    """Tornado-style many-mixed-reads: the same random read sequence on stock
    and ours must produce the same bytes."""

    async def transcript(cls, seed):
        server, client = await stream_pair(cls)
        rng = random.Random(seed)
        data = random.Random(seed + 100).randbytes(3_000_000)
        out = hashlib.sha256()
        try:
            writing = asyncio.ensure_future(client.write(data))
            got = 0
            while got < len(data):
                n = min(rng.choice((1, 3, 512, 5000, 40_000, 250_000)), len(data) - got)
                if rng.random() < 0.5:
                    chunk = await server.read_bytes(n)
                else:
                    buf = bytearray(n)
                    await server.read_into(buf)
                    chunk = bytes(buf)
                out.update(chunk)
                got += n
            await writing
            return out.hexdigest(), hashlib.sha256(data).hexdigest()
        finally:
            server.close()
            client.close()

    for seed in (7, 8):
        ours, expected = run(transcript(ReadIntoIOStream, seed))
        stock, _ = run(transcript(IOStream, seed))
        assert ours == stock == expected


# -- ours only: where the bytes land, and how many syscalls --------------------


def test_large_read_into_lands_in_caller_buffer_zero_copy():
    """Every recv of a large read_into targets the caller's memory, for
    exactly the bytes still missing, as long as DIRECT_READ_MIN_NBYTES or more
    are missing; only a smaller remainder (if the recvs happen to leave one)
    goes through the read-ahead buffer.  How the kernel splits the bytes into
    recvs is up to the machine's pace: the checks hold for any split."""

    async def main():
        server, client = await stream_pair(ReadIntoIOStream, wrap_socket=RecordingSocket)
        sock = server.socket
        try:
            nbytes = 8 * 1024 * 1024
            payload = random.Random(5).randbytes(nbytes)
            buf = np.empty(nbytes, dtype=np.uint8)
            lo = buffer_address(buf)
            reading = server.read_into(buf)
            await client.write(payload)
            assert await reading == nbytes
            assert buf.tobytes() == payload
            in_place = [lo <= r.address < lo + nbytes for r in sock.recvs]
            direct = [r for r, inside in zip(sock.recvs, in_place) if inside]
            other = [r for r, inside in zip(sock.recvs, in_place) if not inside]
            filled = 0
            for r in direct:
                assert nbytes - filled >= DIRECT_READ_MIN_NBYTES  # large enough to receive in place
                assert r.address == lo + filled  # the unfilled tail, in order
                assert r.requested == nbytes - filled  # exactly what is missing
                filled += r.received or 0
            remainder = nbytes - filled
            if remainder == 0:
                assert other == []  # nothing went through the read-ahead buffer
                assert server._core.reads._ra is None  # which was never even allocated
            else:
                # the small remainder, after every direct recv, through the read-ahead buffer
                assert remainder < DIRECT_READ_MIN_NBYTES
                assert other and in_place == [True] * len(direct) + [False] * len(other)
                assert sum(r.received or 0 for r in other) >= remainder
        finally:
            server.close()
            client.close()

    run(main())


def test_small_message_costs_one_recv_and_no_allocation():
    """A small framed message (8-byte header + 100 bytes) that arrived whole
    is read with one recv into the reused read-ahead buffer: no EAGAIN recv
    and no per-read buffer allocation."""

    async def main():
        server, client = await stream_pair(ReadIntoIOStream, wrap_socket=RecordingSocket)
        sock = server.socket
        try:
            header, body = bytearray(8), bytearray(100)
            msg = (100).to_bytes(8, "little") + bytes(range(100))
            for _i in range(3):  # warm up: the pool's read-ahead storage is allocated once
                await client.write(msg)
                await server.read_into(header)
                await server.read_into(body)
            ra = server._core.reads._ra
            sock.reset()
            tracemalloc.start()
            try:
                for _i in range(50):
                    await client.write(msg)
                    await until(lambda: bytes_waiting(sock) == len(msg))  # the message has arrived whole
                    await server.read_into(header)
                    await server.read_into(body)
                    assert body == msg[8:]
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            assert ra is None and server._core.reads._ra is None  # between messages: no storage held
            # each message's recv lands in the same pooled storage, taken and given back
            assert len({r.address for r in sock.recvs}) == 1
            assert len(sock.recvs) == 50
            assert all(r.received == 108 for r in sock.recvs)
            assert peak < 32 * 1024  # no 64 KiB buffer per recv
        finally:
            server.close()
            client.close()

    run(main())


def test_busy_stream_keeps_read_interest_registered():
    """Stock drops READ interest whenever bytes are left over after a read and
    re-adds it on the next (an epoll_ctl pair); ours keeps it."""

    async def count_updates(cls):
        server, client = await stream_pair(cls)
        updates = []
        loop = server.io_loop
        orig = loop.update_handler

        def counting(fd, events):
            updates.append(events)
            return orig(fd, events)

        loop.update_handler = counting
        try:
            msg = (100).to_bytes(8, "little") + bytes(100)
            for _i in range(40):
                reading = server.read_bytes(8)
                await asyncio.sleep(0)
                await client.write(msg)
                await reading
                await server.read_bytes(100)
        finally:
            loop.update_handler = orig
            server.close()
            client.close()
        return len(updates)

    ours = run(count_updates(ReadIntoIOStream))
    stock = run(count_updates(IOStream))
    assert ours <= 2, ours
    assert stock >= 40, stock


def test_read_bytes_large_uses_few_recvs():
    """read_bytes of 16 MiB receives into one buffer sized for it (stock makes
    a 64 KiB recv per chunk)."""

    async def main():
        server, client = await stream_pair(ReadIntoIOStream, wrap_socket=RecordingSocket)
        try:
            nbytes = 16 * 1024 * 1024
            payload = random.Random(9).randbytes(nbytes)
            reading = server.read_bytes(nbytes)
            await client.write(payload)
            assert await reading == payload
            data_recvs = [r for r in server.socket.recvs if r.received]
            assert max(r.requested for r in data_recvs) > 1024 * 1024
            assert server._core.reads._ra is None  # the grown buffer was given back
        finally:
            server.close()
            client.close()

    run(main())


# -- fault injection without a network -----------------------------------------


def _fake_stream(script, **kwargs):
    sock = FakeSocket(script)
    return ReadIntoIOStream(sock, **kwargs), sock


async def _drive(future, sock, rounds=50):
    """Make the fake socket readable until ``future`` is done; return it."""
    for _ in range(rounds):
        if future.done():
            break
        sock.make_readable()
        await asyncio.sleep(0.005)
    return await future


def test_fake_short_reads_and_eagain_fill_buffer_exactly():
    async def main():
        payload = bytes(range(256)) * 400  # 102400 bytes, direct path
        script = [payload[:1], BlockingIOError(), payload[1:5000], payload[5000:]]
        stream, sock = _fake_stream(script)
        try:
            buf = bytearray(len(payload))
            assert await _drive(stream.read_into(buf), sock) == len(payload)
            assert buf == payload
            # direct path: each recv asks for exactly the missing tail
            assert sock.recv_sizes[:4] == [102400, 102399, 102399, 102399 - 4999]
            assert all(size > 0 for size in sock.recv_sizes)  # never recv of 0
        finally:
            stream.close()

    run(main())


def test_fake_connection_reset_mid_read_fails_with_stream_closed():
    async def main():
        stream, sock = _fake_stream([b"x" * 50_000, ConnectionResetError(104, "reset")])
        buf = bytearray(100_000)
        with pytest.raises(IncompleteReadError) as info:
            await _drive(stream.read_into(buf), sock)
        assert info.value.received == 50_000
        assert isinstance(info.value.real_error, ConnectionResetError)
        assert stream.closed()

    run(main())


def test_fake_read_into_over_2gib_bookkeeping():
    """A buffer over 2 GiB: each recv asks for the whole missing tail and the
    counts add up (the fake claims bytes without touching memory)."""

    async def main():
        nbytes = 2**31 + 4096
        big = mmap.mmap(-1, nbytes)  # lazily mapped: never touched here
        stream, sock = _fake_stream([2**31 - 1, 4097])
        try:
            assert await _drive(stream.read_into(big), sock) == nbytes
            # the whole 2 GiB+ tail first; the last 4097 bytes are under
            # DIRECT_READ_MIN_NBYTES, so they come through the read-ahead buffer
            assert 4097 < DIRECT_READ_MIN_NBYTES
            assert sock.recv_sizes[:2] == [nbytes, 64 * 1024]
        finally:
            stream.close()
            big.close()

    run(main())


def test_tls_recv_is_clipped_to_1gib():
    """OpenSSL takes an int: each TLS recv_into asks for at most 1 GiB."""

    class FakeTLS:
        asked = []

        def recv_into(self, buf, nbytes):
            self.asked.append(nbytes)
            return nbytes

    stream = SSLReadIntoIOStream.__new__(SSLReadIntoIOStream)
    stream._ssl_accepting = False
    stream.socket = FakeTLS()
    big = mmap.mmap(-1, 2**31 + 10)
    try:
        with memoryview(big) as view:
            assert stream.read_from_fd(view) == 2**30
        assert FakeTLS.asked == [2**30]
    finally:
        big.close()


def test_start_tls_returns_our_tls_class(tls_contexts):
    async def main():
        server_ctx, client_ctx = tls_contexts
        server, client = await stream_pair(ReadIntoIOStream, busy_poll_s=0)
        try:
            await client.write(b"STARTTLS\n")
            assert await server.read_until(b"\n") == b"STARTTLS\n"
            server_tls, client_tls = await asyncio.gather(
                server.start_tls(True, server_ctx),
                client.start_tls(False, client_ctx, server_hostname="127.0.0.1"),
            )
            assert isinstance(server_tls, SSLReadIntoIOStream)
            assert server_tls.busy_poll_s == client_tls.busy_poll_s == 0  # carried over
            payload = random.Random(1).randbytes(200_000)
            await client_tls.write(payload)
            buf = bytearray(len(payload))
            await server_tls.read_into(buf)
            assert buf == payload
            server_tls.close()
            client_tls.close()
        finally:
            server.close()
            client.close()

    run(main())


def test_read_into_over_2gib_real_socket():
    """A real 2 GiB + 1 MiB read_into over loopback."""

    async def main():
        nbytes = 2**31 + 2**20
        server, client = await stream_pair(ReadIntoIOStream)
        # numpy gets transparent huge pages: a plain mmap faults 4 KiB at a time
        src = np.zeros(nbytes, dtype=np.uint8)
        dst = np.empty(nbytes, dtype=np.uint8)
        try:
            src[:8] = np.frombuffer(b"FIRST---", dtype=np.uint8)
            src[-8:] = np.frombuffer(b"---LAST!", dtype=np.uint8)
            writing = client.write(src)
            assert await server.read_into(dst) == nbytes
            await writing
            assert dst[:8].tobytes() == b"FIRST---" and dst[-8:].tobytes() == b"---LAST!"
            assert not dst[8 : nbytes // 2].any()
        finally:
            server.close()
            client.close()

    run(main(), timeout=120)


# -- busy polling and memory -------------------------------------------------------


def test_close_releases_read_ahead_buffer():
    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        await client.write(b"abc")
        assert await server.read_bytes(1) == b"a"
        assert server._core.reads._ra is not None
        client.close()
        server.close()
        assert server._core.reads._ra is not None  # 2 bytes still buffered: readable after close
        assert await server.read_bytes(2) == b"bc"
        assert server._core.reads._ra is None  # drained after close: memory given back

    run(main())


def test_read_into_on_closed_stream_raises_and_releases_the_buffer():
    """As stock, a read_into that a closed stream cannot fill raises
    StreamClosedError (after copying what was read ahead); unlike stock, the
    caller's buffer is not left exported, so it can be resized."""

    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        await client.write(b"abc")
        assert await server.read_bytes(1) == b"a"
        client.close()
        server.close()
        buf = bytearray(10)
        with pytest.raises(StreamClosedError):
            server.read_into(buf)
        assert buf[:2] == b"bc"
        buf.extend(b"more")  # BufferError if a view of it were still held
        with pytest.raises(StreamClosedError):
            server.read_bytes(1)

    run(main())


@pytest.mark.parametrize("kind", ["read_bytes", "read_until", "read_message"])
def test_every_read_kind_waits_on_a_drained_socket_without_a_recv(loop_name, stream_clock, kind):
    """The reads that go through Tornado's ``_try_inline_read`` behave as
    `read_into` below: right after a short recv proved the socket empty (and
    a reply went out: on uvloop a READ event's proof counts once a send has
    shown the socket has no error, see the peer-reset tests) they wait for
    the loop without a recv (the bytes already there arrive with the loop's
    next poll); once the proof is stale they try the recv first and complete
    inline."""
    from tornado_readinto.wire.framing import FrameReader, pack_header

    message = pack_header([4]) + b"ping" if kind == "read_message" else b"ping\n"

    async def main():
        server, client = await stream_pair(ReadIntoIOStream, wrap_socket=RecordingSocket, busy_poll_s=0)
        sock = server.socket
        reader = FrameReader()

        def start():
            if kind == "read_bytes":
                return server.read_bytes(len(message))
            if kind == "read_until":
                return server.read_until(b"\n")
            return server.read_message(reader)

        def same(result):
            return [bytes(f) for f in result] == [b"ping"] if kind == "read_message" else result == message

        try:
            reading = start()
            client.socket.sendall(message)
            assert same(await reading)  # its recv was short: drained
            await server.write(b"ack")  # a reply
            sock.reset()
            client.socket.sendall(message)  # there, but the loop has not polled since
            reading = start()
            assert not reading.done() and sock.recvs == []  # waits for the loop
            assert same(await reading)
            sock.reset()
            client.socket.sendall(message)
            select.select([sock], [], [], 10)  # arrived (no loop turn)
            stream_clock.now += DRAINED_VALID_S
            reading = start()
            assert reading.done() and same(reading.result())
            assert [r.received for r in sock.recvs] == [len(message)]
        finally:
            server.close()
            client.close()

    run(main(), loop=loop_name)


def test_a_read_events_proof_waits_on_uvloop_for_a_send_or_recv_to_show_no_error(loop_name, stream_clock):
    """uvloop stops watching a socket after an event that reported an error
    (it runs the READ callback once more first), and a short recv in that
    callback does not show the error, which only the next recv or send
    returns.  So there, a READ event's short recv proves the socket drained
    only once a send (a reply) or another recv has shown it has no error: a
    read started with no send in between tries one recv (EAGAIN here), and
    one started after a reply waits for the loop without one.  asyncio's own
    loop never drops a socket: there the read waits at once."""

    async def main():
        server, client = await stream_pair(ReadIntoIOStream, wrap_socket=RecordingSocket, busy_poll_s=0)
        sock = server.socket
        assert server._core.drops_on_error == (loop_name != "asyncio")
        try:
            buf = bytearray(4)
            for reply in (False, True):
                reading = server.read_into(buf)  # parks
                client.socket.sendall(b"ping")
                assert await reading == 4  # completed by a short recv in a READ event
                if reply:
                    await server.writelines([b"pong"])
                sock.reset()
                reading = server.read_into(buf)
                assert not reading.done()
                tried = loop_name != "asyncio" and not reply
                assert [r.received for r in sock.recvs] == ([None] if tried else [])
                client.socket.sendall(b"next")
                assert await reading == 4 and buf == b"next"
            assert await client.read_bytes(4) == b"pong"
        finally:
            server.close()
            client.close()

    run(main(), loop=loop_name)


def test_a_drained_socket_is_retried_once_the_proof_is_stale(loop_name, stream_clock):
    """A short recv proves the socket empty, so a read that starts soon after
    waits for the loop without a recv bound to fail with EAGAIN; one that
    starts `DRAINED_VALID_S` later (the loop thread was held up, e.g. by
    another thread holding the GIL) tries the recv first and, the data being
    there, completes inline: an already resolved Future, no loop turn.  A
    write starts the window again (and on uvloop confirms a READ event's
    proof, see the peer-reset tests)."""

    async def main():
        server, client = await stream_pair(ReadIntoIOStream, wrap_socket=RecordingSocket, busy_poll_s=0)
        sock = server.socket
        try:
            buf = bytearray(4)
            reading = server.read_into(buf)  # nothing there: parks, READ registered
            client.socket.sendall(b"ping")
            assert await reading == 4  # its recv was short: drained
            await server.writelines([b"ack"])  # a reply
            sock.reset()
            client.socket.sendall(b"pong")  # there, but the loop has not polled since
            reading = server.read_into(buf)
            assert not reading.done() and sock.recvs == []  # waits for the loop
            assert await reading == 4 and buf == b"pong"
            sock.reset()
            client.socket.sendall(b"late")
            select.select([sock], [], [], 10)  # arrived (no loop turn)
            stream_clock.now += DRAINED_VALID_S
            reading = server.read_into(buf)
            assert reading.done() and reading.result() == 4 and buf == b"late"
            assert [r.received for r in sock.recvs] == [4]
            # a write starts the window again: a request/response peer answers
            # only after it, however long the reply took to make
            reading = server.read_into(buf)  # the recv above was short: parks
            client.socket.sendall(b"next")
            assert await reading == 4
            stream_clock.now += DRAINED_VALID_S  # a slow reply...
            await server.writelines([b"reply"])  # ...then sent
            sock.reset()
            reading = server.read_into(buf)
            assert not reading.done() and sock.recvs == []  # waits for the loop
            assert await client.read_bytes(8) == b"ackreply"
            client.socket.sendall(b"last")
            assert await reading == 4 and buf == b"last"
        finally:
            server.close()
            client.close()

    run(main(), loop=loop_name)
