"""Idle streams hold no receive storage, over real sockets.

A thousand connections of each kind echo one message and park their next
read; then none of their streams holds read-ahead storage
(`ReadCore.storage_nbytes`), a write-Future deque or a write-queue deque.
Each connection then echoes again: its stream takes storage back, the data
is exact, and it gives the storage back once idle.  The bytes per idle
connection in a whole server are measured by ``python -m benchmarks idle``
(a count of bytes, not a test).
"""

from __future__ import annotations

import asyncio
import resource
import socket

import pytest
from tornado.iostream import StreamClosedError

from tornado_readinto import FramedStream, ReadIntoIOStream
from tornado_readinto.core._readcore import read_ahead_pool

from ..conftest import run, until

NCONNS = 1000
PAYLOAD_NBYTES = 1024


def message(index: int, round_: int) -> bytes:
    payload = bytes((index * 7 + round_ + i) % 251 for i in range(PAYLOAD_NBYTES))
    return (1).to_bytes(8, "little") + PAYLOAD_NBYTES.to_bytes(8, "little") + payload


@pytest.fixture(autouse=True)
def enough_fds():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * NCONNS + 200
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {need}")
    if soft != resource.RLIM_INFINITY and soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def serve(stream: ReadIntoIOStream, kind: str, served: list[int]) -> None:
    """Echo messages until the peer closes: ``read_bytes(16)`` + ``read_into``,
    ``read_until`` (the header is a line) or `FramedStream`."""
    try:
        if kind == "framed":
            framed = FramedStream(stream)
            while True:
                frames = await framed.read_frames()
                await framed.write_frames(frames)
                del frames
                served[0] += 1
        while True:
            if kind == "read_until":
                header = await stream.read_until(b"\n")
                header = header[:-1]
            else:
                header = await stream.read_bytes(16)
            payload = bytearray(int.from_bytes(header[8:], "little"))
            await stream.read_into(payload)
            await stream.write(bytes(header) + payload)
            del header, payload
            served[0] += 1
    except StreamClosedError:
        pass


def wire(kind: str, data: bytes) -> bytes:
    # read_until's header ends with a newline (no payload byte is 10 at its place)
    return data[:16] + b"\n" + data[16:] if kind == "read_until" else data


def held(stream: ReadIntoIOStream) -> int:
    """Bytes of receive storage and write bookkeeping the stream holds."""
    core = stream._core
    nbytes = core.reads.storage_nbytes
    if core.write_futures is not None:
        nbytes += 1
    if core.io.write_buffer._buffers != ():
        nbytes += 1
    return nbytes


@pytest.mark.parametrize("kind", ["read_bytes+read_into", "read_until", "framed"])
def test_a_thousand_idle_streams_hold_no_receive_storage(kind):
    async def main():
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(NCONNS)
        port = listener.getsockname()[1]
        clients, streams, tasks, served = [], [], [], [0]
        try:
            for _ in range(NCONNS):
                clients.append(socket.create_connection(("127.0.0.1", port)))
                conn, _ = listener.accept()
                stream = ReadIntoIOStream(conn)
                streams.append(stream)
                tasks.append(asyncio.ensure_future(serve(stream, kind, served)))
            for round_ in range(2):
                for index, client in enumerate(clients):
                    client.sendall(wire(kind, message(index, round_)))
                echoed = (round_ + 1) * NCONNS
                await until(lambda: served[0] == echoed)  # noqa: B023 (read while the loop body runs)
                for index, client in enumerate(clients):
                    expected = message(index, round_)
                    got = bytearray()
                    while len(got) < len(expected):
                        got += client.recv(len(expected) - len(got))
                    assert got == expected  # exact, storage given back and taken again
                await until(lambda: all(stream.reading() for stream in streams))
                assert sum(held(stream) for stream in streams) == 0
            # What the pool keeps is bounded, whatever the number of streams.
            assert read_ahead_pool(streams[0].read_chunk_size).free_nbytes <= 1024 * 1024
        finally:
            for client in clients:
                client.close()
            for stream in streams:
                stream.close()
            await asyncio.gather(*tasks, return_exceptions=True)
            listener.close()

    run(main(), timeout=120)


def test_a_stream_that_reads_ahead_while_idle_holds_storage_only_until_read():
    """Bytes that arrive while no read is pending are read ahead into storage
    taken from the pool; the read that consumes them gives it back."""

    async def main():
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        client = socket.create_connection(listener.getsockname())
        conn, _ = listener.accept()
        stream = ReadIntoIOStream(conn)
        try:
            reading = stream.read_bytes(5)  # parks: READ registered, and kept while there is room
            client.sendall(b"first")
            assert await reading == b"first"
            assert stream._core.reads.storage_nbytes == 0
            client.sendall(b"0123456789")
            await until(lambda: stream._core.reads.buffered_nbytes == 10)  # READ stays registered: read ahead
            # (a pool buffer, or the bytes' own storage once the pool has run dry: spare_storage)
            assert 10 <= stream._core.reads.storage_nbytes <= stream.read_chunk_size
            target = bytearray(4)
            assert await stream.read_into(target) == 4 and target == b"0123"
            assert 6 <= stream._core.reads.storage_nbytes <= stream.read_chunk_size  # 6 bytes still read ahead
            assert await stream.read_bytes(6) == b"456789"
            assert stream._core.reads.storage_nbytes == 0
        finally:
            stream.close()
            client.close()
            listener.close()

    run(main())


def connected_pair() -> tuple[socket.socket, socket.socket]:
    """A client socket and the server side of its connection, over 127.0.0.1."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        client = socket.create_connection(listener.getsockname())
        conn, _ = listener.accept()
    return client, conn


@pytest.mark.parametrize("kind", ["read_bytes+read_into", "read_until", "framed"])
def test_each_message_gives_its_storage_back_to_the_pool(kind):
    """Twenty messages echoed one after the other take the same pool buffer
    each time: the pool makes one (``misses``) and gets it back after every
    message, whichever read completes the message (a ``read_message``
    reader's included, where a reference held during the give-back kept it
    from the pool in the compiled build: a new zeroed buffer per message)."""
    chunk = {"read_bytes+read_into": 40 << 10, "read_until": 41 << 10, "framed": 42 << 10}[kind]
    pool = read_ahead_pool(chunk)
    misses = pool.misses

    async def main():
        client, conn = connected_pair()
        stream = ReadIntoIOStream(conn, read_chunk_size=chunk)
        served = [0]
        task = asyncio.ensure_future(serve(stream, kind, served))
        try:
            for round_ in range(20):
                data = message(0, round_)
                client.sendall(wire(kind, data))
                await until(lambda: served[0] == round_ + 1)  # noqa: B023 (read while the loop body runs)
                got = bytearray()
                while len(got) < len(data):
                    got += client.recv(len(data) - len(got))
                assert got == data
            await until(stream.reading)
            assert stream._core.reads.storage_nbytes == 0
        finally:
            client.close()
            stream.close()
            await asyncio.gather(task, return_exceptions=True)

    run(main())
    assert pool.misses - misses == 1 and pool.free_nbytes >= chunk


def test_streams_holding_small_messages_at_once_share_pool_buffers(loop_name):
    """Thirty-two streams each complete a header read with a 1 KiB body read
    ahead behind it, and nobody reads the bodies yet (as on uvloop, whose
    tasks run after every readiness callback of the turn): once the pool has
    run dry twice, each stream moves its few bytes into storage of their own
    size and gives the pool buffer back (`ReadCore.spare_storage`), so the
    pool makes two buffers, not thirty-two.  The bodies are exact, and all
    storage is given back once they are read."""
    chunk, nstreams = 43 << 10, 32
    pool = read_ahead_pool(chunk)
    misses = pool.misses

    async def main():
        pairs = [connected_pair() for _ in range(nstreams)]
        streams = [ReadIntoIOStream(conn, read_chunk_size=chunk) for _, conn in pairs]
        try:
            heads = [stream.read_bytes(16) for stream in streams]
            for index, (client, _) in enumerate(pairs):
                client.sendall(message(index, 0))
            assert [bytes(h) for h in await asyncio.gather(*heads)] == [message(i, 0)[:16] for i in range(nstreams)]
            # every body read ahead behind its header (each arrives with it, or on its own next)
            await until(lambda: sum(s._core.reads.buffered_nbytes for s in streams) == nstreams * PAYLOAD_NBYTES)
            assert pool.misses - misses <= 2
            assert sum(s._core.reads.storage_nbytes for s in streams) <= 2 * chunk + nstreams * PAYLOAD_NBYTES
            for index, stream in enumerate(streams):
                assert await stream.read_bytes(PAYLOAD_NBYTES) == message(index, 0)[16:]
                assert stream._core.reads.storage_nbytes == 0
        finally:
            for client, _ in pairs:
                client.close()
            for stream in streams:
                stream.close()

    run(main(), loop=loop_name)


def test_writes_sent_at_once_share_the_loops_one_resolved_future():
    """No stream holds a resolved Future of its own for its writes: every
    write sent at once, on any stream of the loop, returns the loop's one,
    which goes with the loop's last stream."""
    import gc

    from tornado_readinto.diagnostics.testing import stream_pair
    from tornado_readinto.face import _facecore

    async def main():
        pairs = [await stream_pair(ReadIntoIOStream) for _ in range(3)]
        try:
            futures = [server.write(b"x") for server, _ in pairs] + [client.write(b"y") for _, client in pairs]
            assert all(f.done() and f.result() is None for f in futures)
            assert len({id(f) for f in futures}) == 1
            for server, client in pairs:
                assert await client.read_bytes(1) == b"x" and await server.read_bytes(1) == b"y"
            return id(asyncio.get_running_loop())
        finally:
            for server, client in pairs:
                server.close()
                client.close()

    loop_id = run(main())
    gc.collect()
    assert loop_id not in _facecore._SHARED  # gone with the streams (and the loop)


def test_a_parked_read_copies_no_context_and_an_idle_frame_reader_holds_no_list():
    """What waits with a parked read is visited by every full collection of
    the cyclic GC (docs/internals.rst, "Who owns what"): on uvloop, where a
    parked read gets a plain Future, its cancellation callback runs in the
    loop's one shared Context (none copied per read), and a `FrameReader`
    between messages holds no list of frames."""
    import gc

    from tornado_readinto.diagnostics.testing import stream_pair
    from tornado_readinto.face import _facecore

    async def main():
        shared = _facecore.loop_shared(asyncio.get_running_loop()).context
        pairs = [await stream_pair(ReadIntoIOStream) for _ in range(3)]
        try:
            framed = FramedStream(pairs[0][0])
            await pairs[0][1].write(message(0, 0))
            frames = await framed.read_frames()
            assert bytes(frames[0]) == message(0, 0)[16:]
            reader = framed._reader
            assert not [o for o in gc.get_referents(reader) if type(o) is list]
            futures = [framed.read_frames()] + [server.read_into(bytearray(4)) for server, _ in pairs[1:]]
            for future in futures:
                assert type(future) is asyncio.Future and not future.done()
                assert [context for _, context in future._callbacks] == [shared]
            assert not [o for o in gc.get_referents(reader) if type(o) is list]
        finally:
            for _, client in pairs:
                client.close()
        for future in futures:
            with pytest.raises(StreamClosedError):
                await future
        for server, _ in pairs:
            server.close()

    run(main(), loop="uvloop")
