"""The write side of ReadIntoIOStream: gather writes, one Future per
writelines, integrity, resets mid-write, and dask.distributed's private use."""

import asyncio
import gc
import hashlib
import random
import socket
import struct

import numpy as np
import pytest
from tornado.iostream import IOStream, StreamBufferFullError, StreamClosedError

from tornado_readinto import ReadIntoIOStream, SSLReadIntoIOStream
from tornado_readinto.core.writebuffer import ChunkedWriteBuffer
from tornado_readinto.diagnostics.testing import RecordingSocket, stream_pair
from tornado_readinto.face.iostream import IOV_MAX

from ..conftest import run


async def _recording_pair(**kwargs):
    """A stream pair whose server socket is a `RecordingSocket`."""
    server, client = await stream_pair(ReadIntoIOStream, wrap_socket=RecordingSocket, **kwargs)
    return server, client, server.socket


def test_writelines_header_and_8_frames_is_one_sendmsg_one_future():
    async def main():
        server, client, sock = await _recording_pair()
        try:
            header = struct.pack("<9Q", 8, *[1024] * 8)
            frames = [bytes([i]) * 1024 for i in range(8)]
            futures_before = len(server._write_futures)
            fut = server.writelines([header, *frames])
            assert fut.done()  # sent inline: the socket had room
            assert futures_before == 0 and len(server._write_futures) == 0
            # idle socket: one syscall straight from the caller's buffers, nothing queued
            assert sock.sends == [len(header) + 8 * 1024] and sock.sendmsg_buffers == [9]
            got = await client.read_bytes(len(header) + 8 * 1024)
            assert got == header + b"".join(frames)
            assert server._total_write_index == server._total_write_done_index == len(got)

            # behind queued bytes, small frames are coalesced: one buffer for all nine
            sock.reset()
            server._write_buffer.append(b"queued")
            server._total_write_index += 6
            fut = server.writelines([header, *frames])
            assert sock.sends == [6 + len(header) + 8 * 1024] and sock.sendmsg_buffers == [1]
            await fut
            assert await client.read_bytes(6 + len(got)) == b"queued" + got

            sock.reset()
            big = [bytes([i]) * 100_000 for i in range(4)]  # by reference: 5 iovecs
            await server.writelines([header, *big])
            assert sock.sendmsg_buffers[0] == 5
            assert await client.read_bytes(len(header) + 400_000) == header + b"".join(big)
        finally:
            server.close()
            client.close()

    run(main())


def test_writes_sent_at_once_share_one_resolved_future_and_a_queued_write_gets_its_own():
    async def main():
        server, client, sock = await _recording_pair()
        try:
            first = server.writelines([b"a", bytearray(b"bc")])
            second = server.write(memoryview(b"def"))
            assert first is second and first.done() and first.result() is None
            called = []
            first.add_done_callback(called.append)
            second.add_done_callback(called.append)
            assert not second.cancel()  # done: nothing to cancel
            assert await client.read_bytes(6) == b"abcdef"
            await asyncio.sleep(0)  # done callbacks run at the next loop iteration (FIFO)
            assert called == [first, first]  # each callback once, as for any done Future

            # more than the socket takes: the rest is queued, under a Future of its own
            server.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            big = bytes(range(256)) * 40_000  # 10 MB
            queued = server.write(big)
            assert queued is not first and not queued.done()
            assert server.write(b"!") is not first  # behind queued bytes: its own Future too
            got = await client.read_bytes(len(big) + 1)
            await queued
            assert got == big + b"!"
            assert server.write(b"x") is first  # idle again
        finally:
            server.close()
            client.close()

    run(main())


def test_stock_write_per_frame_costs_one_send_each():
    """The stock baseline we compare against: one send() per queued chunk."""

    async def main():
        server, client = await stream_pair(IOStream, wrap_socket=RecordingSocket)
        try:
            for i in range(9):
                server.write(bytes([i]) * 3000)
            assert len(server.socket.sends) == 9
            await client.read_bytes(9 * 3000)
        finally:
            server.close()
            client.close()

    run(main())


def test_writelines_batches_at_iov_max():
    async def main():
        server, client, sock = await _recording_pair()
        try:
            frames = [bytes([i % 256]) * 9000 for i in range(IOV_MAX + 10)]
            reading = client.read_bytes(sum(map(len, frames)))
            await server.writelines(frames)
            assert await reading == b"".join(frames)
            assert max(sock.sendmsg_buffers) <= IOV_MAX
        finally:
            server.close()
            client.close()

    run(main(), timeout=60)


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_writes_random_sizes_to_64mib_by_hash(tls, tls_contexts):
    async def main():
        if tls:
            server_ctx, client_ctx = tls_contexts
            server, client = await stream_pair(SSLReadIntoIOStream, server_ssl=server_ctx, client_ssl=client_ctx)
        else:
            server, client = await stream_pair(ReadIntoIOStream)
        rng = random.Random(64)
        sizes = [0, 1, 7, 8192, 8193, 70_000, 1 << 20, 64 << 20] + [rng.randrange(0, 300_000) for _ in range(30)]
        rng.shuffle(sizes)
        pieces = [np.frombuffer(rng.randbytes(n), dtype=np.uint8) if n % 2 else rng.randbytes(n) for n in sizes]
        expected = hashlib.sha256(b"".join(memoryview(p).tobytes() for p in pieces)).hexdigest()
        total = sum(sizes)
        try:

            async def write():
                for i in range(0, len(pieces), 5):
                    await server.writelines(pieces[i : i + 5])

            async def read():
                h, got = hashlib.sha256(), 0
                buf = bytearray(1 << 20)
                while got < total:
                    n = await client.read_into(memoryview(buf)[: min(len(buf), total - got)])
                    h.update(memoryview(buf)[:n])
                    got += n
                return h.hexdigest()

            _, digest = await asyncio.gather(write(), read())
            assert digest == expected
        finally:
            server.close()
            client.close()

    run(main(), timeout=120)


def test_peer_reset_mid_write_fails_all_futures_and_releases_views():
    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        try:
            buffers = [bytearray(4 << 20) for _ in range(8)]  # 32 MiB: more than the socket takes
            futures = [server.writelines(buffers[i : i + 2]) for i in range(0, 8, 2)]
            await asyncio.sleep(0.05)
            assert not all(f.done() for f in futures)
            client.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()  # RST
            results = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 5)
            failed = [r for r in results if isinstance(r, StreamClosedError)]
            assert failed and all(r is None or isinstance(r, StreamClosedError) for r in results)
            assert server.closed()
            gc.collect()
            for b in buffers:  # no view of ours is left: every buffer is resizable
                b.extend(b"x")
        finally:
            server.close()

    run(main())


def test_write_after_close_raises():
    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        server.close()
        client.close()
        with pytest.raises(StreamClosedError):
            server.writelines([b"x"])
        with pytest.raises(StreamClosedError):
            server.write(b"x")

    run(main())


def test_max_write_buffer_size_is_honoured():
    async def main():
        server, client = await stream_pair(ReadIntoIOStream, max_write_buffer_size=10 << 20)
        try:
            server.writelines([bytearray(8 << 20)])  # some is sent at once, the rest queued
            with pytest.raises(StreamBufferFullError):
                server.writelines([bytearray(8 << 20), b"x"])
            with pytest.raises(StreamBufferFullError):
                server.write(bytearray(16 << 20))
        finally:
            server.close()
            client.close()

    run(main())


def test_write_typed_memoryview_and_numpy_sized_by_nbytes():
    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        try:
            arr = np.arange(3000, dtype=np.float64).reshape(30, 100)
            typed = memoryview(bytearray(range(256)) * 40).cast("d")
            await server.write(arr)
            await server.write(typed)
            assert await client.read_bytes(arr.nbytes) == arr.tobytes()
            assert await client.read_bytes(typed.nbytes) == typed.tobytes()
            assert server._total_write_index == arr.nbytes + typed.nbytes
        finally:
            server.close()
            client.close()

    run(main())


def test_dask_private_write_sequence():
    """dask.distributed's TCP comm appends memoryviews to _write_buffer, bumps
    _total_write_index, then calls write(b"") for a Future (tcp.py)."""

    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        try:
            assert isinstance(server._write_buffer, ChunkedWriteBuffer)
            frames = [b"header--", bytes(range(200)) * 1000, memoryview(b"small")]
            total = 0
            for frame in frames:
                chunk = memoryview(frame)
                server._write_buffer.append(chunk)
                server._total_write_index += chunk.nbytes
                total += chunk.nbytes
            fut = server.write(b"")
            await fut
            assert await client.read_bytes(total) == b"".join(bytes(f) for f in frames)
        finally:
            server.close()
            client.close()

    run(main())


def test_distributed_tcp_comm_runs_over_our_stream(monkeypatch):
    """distributed's own TCP comm, with its streams swapped for ours, still
    round-trips messages: its private write sequence works unchanged."""
    from distributed.comm import connect, listen

    made = []

    async def main():
        from tornado.tcpclient import TCPClient

        real_connect = TCPClient.connect

        async def connect_ours(self, host, port, **kwargs):
            stream = await real_connect(self, host, port, **kwargs)
            sock = stream.socket
            if stream._state is not None:
                stream.io_loop.remove_handler(sock)
            stream._state = None
            stream.socket = None  # the stock stream gives its socket up
            ours = ReadIntoIOStream(sock, max_buffer_size=stream.max_buffer_size)
            made.append(ours)
            return ours

        monkeypatch.setattr(TCPClient, "connect", connect_ours)

        async def handler(comm):
            msg = await comm.read()
            await comm.write(msg)
            await comm.close()

        listener = await listen("tcp://127.0.0.1:0", handler)
        await listener.start()
        try:
            comm = await connect(listener.contact_address)
            payload = {"op": "echo", "data": b"x" * 300_000, "n": tuple(range(100))}
            await comm.write(payload)
            assert await comm.read() == payload
            await comm.close()
        finally:
            listener.stop()
        assert made and isinstance(made[0], ReadIntoIOStream)

    run(main())
