"""The transport engine (`tornado_readinto._transport`): which streams get it,
what a message costs on it (counted: receives, sends, Futures), large reads
landing in the caller's buffer, flow control both ways, and closing, on
asyncio's loop and on uvloop.  Tornado's own suites run on it too (see
test_tornado_upstream.py, test_tcp.py, test_http.py)."""

import asyncio
import os
import socket
import ssl
import struct

import pytest
from tornado.iostream import IOStream

from tornado_readinto import ReadIntoIOStream, SSLReadIntoIOStream, _transport
from tornado_readinto import iostream as iostream_module
from tornado_readinto.errors import IncompleteReadError
from tornado_readinto.testing import RecordingSocket

from .conftest import TrackingAllocator, run, until
from .test_costs import Counts as FutureCounts

NMESSAGES = 100
PAYLOAD = bytes(range(256)) * 4  # 1 KiB
HEADER = struct.pack("<QQ", 1, len(PAYLOAD))


def _tcp_pair():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    for sock in (client, server):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return server, client


# -- which engine ------------------------------------------------------------------------


def test_the_default_engine_is_the_selector_and_the_environment_can_change_it(monkeypatch):
    async def main():
        monkeypatch.delenv(_transport.ENV_VAR, raising=False)
        a, b = socket.socketpair()
        streams = [ReadIntoIOStream(a), ReadIntoIOStream(b, engine="auto")]
        assert [s.engine for s in streams] == ["selector", "selector"]
        monkeypatch.setenv(_transport.ENV_VAR, "transport")
        c, d = socket.socketpair()
        streams += [ReadIntoIOStream(c), ReadIntoIOStream(d, engine="selector")]
        assert [s.engine for s in streams[2:]] == ["transport", "selector"]
        for stream in streams:
            stream.close()

    run(main())


def test_an_unknown_engine_is_refused_before_anything_is_made():
    a, b = socket.socketpair()
    with a, b:
        with pytest.raises(ValueError, match="engine must be one of selector, transport or 'auto', got 'epoll'"):
            ReadIntoIOStream(a, engine="epoll")
        with pytest.raises(ValueError, match="got 'epoll'"):
            SSLReadIntoIOStream(b, engine="epoll")


def test_streams_the_transport_cannot_carry_run_on_the_selector(tls_contexts):
    class OwnReads(ReadIntoIOStream):
        def read_from_fd(self, buf):
            return super().read_from_fd(buf)

    async def main():
        made = []
        a, b = socket.socketpair()
        made.append(ReadIntoIOStream(RecordingSocket(a), engine="transport"))  # a wrapper's methods count
        made.append(OwnReads(b, engine="transport"))  # Tornado's read hook, overridden
        c = socket.socket()
        made.append(SSLReadIntoIOStream(c, ssl_options=tls_contexts[1], engine="transport"))
        assert [s.engine for s in made] == ["selector", "selector", "selector"]
        d, e = socket.socketpair()
        made += [ReadIntoIOStream(d, engine="transport"), ReadIntoIOStream(e, engine="transport")]
        assert [s.engine for s in made[3:]] == ["transport", "transport"]  # AF_UNIX is carried
        for stream in made:
            stream.close()

    run(main())


def test_a_read_from_fd_set_on_the_instance_moves_the_stream_to_the_selector(loop_name):
    async def main():
        a, b = socket.socketpair()
        stream = ReadIntoIOStream(a, engine="transport")
        calls = []

        def read_from_fd(buf):
            calls.append(len(buf))
            return ReadIntoIOStream.read_from_fd(stream, buf)

        future = stream.read_bytes(3)  # nothing there yet: the transport is being made
        stream.read_from_fd = read_from_fd
        b.send(b"abc")
        assert await future == b"abc"
        assert stream.engine == "selector" and calls
        stream.close()
        b.close()

    run(main(), loop=loop_name)


# -- what a message costs -------------------------------------------------------------------


class _Counts(FutureCounts):
    """`FutureCounts` (Futures by kind), plus the transport protocol's
    ``get_buffer``/``buffer_updated`` calls and the stream's ``sendmsg``."""

    def __init__(self, monkeypatch):
        super().__init__(monkeypatch)
        self.get_buffer = self.buffer_updated = self.sendmsg = 0
        counts = self
        protocol = _transport.StreamProtocol
        get_buffer, buffer_updated = protocol.get_buffer, protocol.buffer_updated
        sendmsg = ReadIntoIOStream._sendmsg

        def counting_get_buffer(self, sizehint):
            counts.get_buffer += 1
            return get_buffer(self, sizehint)

        def counting_buffer_updated(self, nbytes):
            counts.buffer_updated += 1
            return buffer_updated(self, nbytes)

        def counting_sendmsg(self, buffers):
            counts.sendmsg += 1
            return sendmsg(self, buffers)

        monkeypatch.setattr(protocol, "get_buffer", counting_get_buffer)
        monkeypatch.setattr(protocol, "buffer_updated", counting_buffer_updated)
        monkeypatch.setattr(ReadIntoIOStream, "_sendmsg", counting_sendmsg)

    def reset(self):
        self.get_buffer = self.buffer_updated = self.sendmsg = self.parked = self.resolved = 0


def test_a_small_message_costs_one_receive_one_sendmsg_and_two_futures(loop_name, monkeypatch):
    async def main():
        server_sock, client_sock = _tcp_pair()
        counts = _Counts(monkeypatch)
        server = ReadIntoIOStream(server_sock, engine="transport", busy_poll_s=0)
        client = IOStream(client_sock)

        async def echo():
            head, body = bytearray(16), bytearray(len(PAYLOAD))
            for i in range(NMESSAGES):
                if i == 2:  # the first read is inline, before the transport exists
                    counts.reset()
                await server.read_into(head)
                await server.read_into(body)
                await server.writelines([head, body])

        task = asyncio.ensure_future(echo())
        for i in range(NMESSAGES):
            payload = i.to_bytes(8, "little") + PAYLOAD[8:]
            await client.write(HEADER + payload)  # one send: it arrives whole
            assert await client.read_bytes(16 + len(PAYLOAD)) == HEADER + payload
        await task
        assert server._transport is not None
        n = NMESSAGES - 2
        # the loop's transport received each message once, into the read-ahead
        assert (counts.get_buffer, counts.buffer_updated) == (n, n)
        assert counts.sendmsg == n  # the reply: one gather write
        # the header read waits for the transport; the body read is resolved
        # at once; the write returns the stream's one resolved Future
        assert (counts.parked, counts.resolved) == (n, n)
        server.close()
        client.close()

    run(main(), loop=loop_name)


def test_a_framed_message_costs_one_receive_one_allocator_call_per_frame_and_one_future(loop_name, monkeypatch):
    from tornado_readinto import FramedStream
    from tornado_readinto.allocators import BufferPool

    async def main():
        server_sock, client_sock = _tcp_pair()
        counts = _Counts(monkeypatch)
        server = ReadIntoIOStream(server_sock, engine="transport", busy_poll_s=0)
        client = IOStream(client_sock)
        pool = BufferPool()
        allocator = TrackingAllocator(pool)
        framed = FramedStream(server, allocator=allocator)

        async def echo():
            for i in range(NMESSAGES):
                if i == 2:  # the first read is inline, before the transport exists
                    counts.reset()
                    allocator.calls.clear()
                frames = await framed.read_frames()
                await framed.write_frames(frames)
                pool.release_all(frames)

        task = asyncio.ensure_future(echo())
        for i in range(NMESSAGES):
            payload = i.to_bytes(8, "little") + PAYLOAD[8:]
            await client.write(HEADER + payload)
            assert await client.read_bytes(16 + len(PAYLOAD)) == HEADER + payload
        await task
        n = NMESSAGES - 2
        assert server._transport is not None
        assert (counts.get_buffer, counts.buffer_updated, counts.sendmsg) == (n, n, n)
        assert allocator.calls == [len(PAYLOAD)] * n  # one allocator call per frame
        # the read waits for the transport; the write makes no Future
        assert (counts.parked, counts.resolved) == (n, 0)
        server.close()
        client.close()

    run(main(), loop=loop_name)


# -- large reads and writes ------------------------------------------------------------------


def test_a_large_read_into_is_received_straight_into_the_callers_buffer(loop_name, monkeypatch):
    nbytes = 16 * 1024 * 1024

    async def main():
        a, b = socket.socketpair()
        stream = ReadIntoIOStream(a, engine="transport")
        peer = ReadIntoIOStream(b)
        target = bytearray(nbytes)
        landed = {"caller": 0, "other": 0}
        get_buffer, buffer_updated = _transport.StreamProtocol.get_buffer, _transport.StreamProtocol.buffer_updated
        last = []

        def recording_get_buffer(self, sizehint):
            view = get_buffer(self, sizehint)
            last[:] = [view.obj is target]
            return view

        def recording_buffer_updated(self, n):
            landed["caller" if last[0] else "other"] += n
            return buffer_updated(self, n)

        monkeypatch.setattr(_transport.StreamProtocol, "get_buffer", recording_get_buffer)
        monkeypatch.setattr(_transport.StreamProtocol, "buffer_updated", recording_buffer_updated)
        assert await stream.read_bytes(0) == b""
        stream.set_close_callback(lambda: None)  # makes the transport now, reading ahead
        await until(lambda: stream._transport is not None)
        data = os.urandom(nbytes)
        future = stream.read_into(target)
        await peer.write(data)
        assert await future == nbytes
        assert target == data
        # nothing was read ahead before the read started; every byte went
        # straight into the caller's buffer (remainders under 16 KiB excepted)
        assert landed["other"] < iostream_module.DIRECT_READ_MIN_NBYTES
        assert landed["caller"] + landed["other"] == nbytes
        target.extend(b"x")  # released: resizable again
        stream.close()
        peer.close()

    run(main(), loop=loop_name)


def test_reading_pauses_while_idle_with_a_full_read_ahead_and_resumes_for_a_read(loop_name):
    async def main():
        a, b = socket.socketpair()
        stream = ReadIntoIOStream(a, engine="transport", read_chunk_size=4096)
        data = os.urandom(256 * 1024)
        stream.set_close_callback(lambda: None)
        await until(lambda: stream._transport is not None)
        b.setblocking(False)
        b.send(data[:65536])
        await until(lambda: stream._reading_paused)
        assert 4096 <= stream._core.buffered_nbytes < 65536  # bounded while no read is pending
        future = stream.read_bytes(len(data))
        assert not stream._reading_paused
        sent = 65536
        while sent < len(data):
            try:
                sent += b.send(data[sent:])
            except BlockingIOError:
                await asyncio.sleep(0)
        assert await future == data
        stream.close()
        b.close()

    run(main(), loop=loop_name)


def test_a_write_the_kernel_cannot_take_is_sent_from_the_stream_queue_in_order(loop_name):
    nbytes = 32 * 1024 * 1024

    async def main():
        a, b = socket.socketpair()
        stream = ReadIntoIOStream(a, engine="transport")
        peer = ReadIntoIOStream(b)
        data = bytearray(os.urandom(nbytes))
        small = b"tail" * 10
        first = stream.write(data)
        second = stream.write(small)
        assert not first.done() and stream.writing()
        # what the transport holds is a copied piece; the caller's data stays queued
        assert 0 < stream._transport_held <= _transport.TRANSPORT_PIECE_NBYTES or not stream._write_paused
        got = bytearray(nbytes + len(small))
        assert await peer.read_into(got) == len(got)
        await first
        await second
        assert got == data + small
        assert not stream.writing() and stream.write_buffer_nbytes == 0
        del data[:]  # no view of it is left
        stream.close()
        peer.close()

    run(main(), loop=loop_name)


def test_a_close_while_writing_releases_the_callers_buffer_and_fails_the_write(loop_name):
    async def main():
        a, b = socket.socketpair()
        stream = ReadIntoIOStream(a, engine="transport")
        data = bytearray(16 * 1024 * 1024)
        future = stream.write(data)
        await until(lambda: stream._transport is not None and stream._write_paused)
        stream.close()
        with pytest.raises(iostream_module.StreamClosedError):
            await future
        del data[:]
        b.close()

    run(main(), loop=loop_name)


# -- closing ------------------------------------------------------------------------------


def test_the_transport_closes_the_socket_and_the_peer_sees_eof(loop_name):
    async def main():
        a, b = socket.socketpair()
        stream = ReadIntoIOStream(a, engine="transport")
        closed = []
        stream.set_close_callback(lambda: closed.append(True))
        await until(lambda: stream._transport is not None)
        stream.close()
        assert stream.closed()
        await until(lambda: closed == [True])  # Tornado runs it as a callback
        b.setblocking(False)
        while True:
            try:
                assert b.recv(1) == b""  # EOF: the socket was closed
                break
            except BlockingIOError:
                await asyncio.sleep(0)
        b.close()

    run(main(), loop=loop_name)


def test_a_close_before_the_transport_is_made_closes_the_socket(loop_name):
    async def main():
        a, b = socket.socketpair()
        stream = ReadIntoIOStream(a, engine="transport")
        stream.set_close_callback(lambda: None)  # starts making the transport
        assert stream._attach_task is not None and stream._transport is None
        stream.close()
        assert a.fileno() == -1  # not begun: closed at once, the task cancelled
        b.settimeout(5)
        assert b.recv(1) == b""
        b.close()
        # one that had begun: the transport closes the socket once made
        c, d = socket.socketpair()
        stream = ReadIntoIOStream(c, engine="transport")
        stream.set_close_callback(lambda: None)
        await until(lambda: stream._protocol.started)
        stream.close()
        d.setblocking(False)
        while True:
            try:
                assert d.recv(1) == b""
                break
            except BlockingIOError:
                await asyncio.sleep(0)
        d.close()

    run(main(), loop=loop_name)


def test_eof_from_the_peer_closes_the_stream_and_fails_a_pending_read(loop_name):
    async def main():
        a, b = socket.socketpair()
        stream = ReadIntoIOStream(a, engine="transport")
        future = stream.read_into(bytearray(10))
        b.send(b"four")
        b.close()
        with pytest.raises(IncompleteReadError) as caught:
            await future
        assert (caught.value.expected, caught.value.received) == (10, 4)
        assert stream.closed()

    run(main(), loop=loop_name)


def test_start_tls_after_traffic_on_the_transport(loop_name, tls_contexts):
    server_ctx, client_ctx = tls_contexts

    async def main():
        server_sock, client_sock = _tcp_pair()
        server = ReadIntoIOStream(server_sock, engine="transport")
        client = ReadIntoIOStream(client_sock, engine="transport")
        for stream in (server, client):
            stream.set_close_callback(lambda: None)  # makes the transport now
        await until(lambda: server._transport is not None and client._transport is not None)
        client.write(b"STARTTLS\r\n")
        assert await server.read_until(b"\r\n") == b"STARTTLS\r\n"
        server.write(b"GO\r\n")
        assert await client.read_until(b"\r\n") == b"GO\r\n"
        server_tls, client_tls = await asyncio.gather(
            server.start_tls(True, server_ctx),
            client.start_tls(False, client_ctx, server_hostname="127.0.0.1"),
        )
        assert isinstance(server_tls, SSLReadIntoIOStream) and isinstance(client_tls, SSLReadIntoIOStream)
        client_tls.write(b"secret\r\n")
        assert await server_tls.read_until(b"\r\n") == b"secret\r\n"
        assert isinstance(server_tls.socket, ssl.SSLSocket)
        server_tls.close()
        client_tls.close()

    run(main(), loop=loop_name)


# -- failures inside the loop's receive ---------------------------------------------------


def test_an_allocator_failing_inside_the_loops_receive_closes_the_stream_with_its_error(loop_name):
    from tornado_readinto import FramedStream
    from tornado_readinto.framing import pack_header

    async def main():
        a, b = socket.socketpair()
        stream = ReadIntoIOStream(a, engine="transport")
        calls = []

        def allocator(nbytes):
            calls.append(nbytes)
            raise MemoryError(f"no room for {nbytes} bytes")

        framed = FramedStream(stream, allocator=allocator)
        future = asyncio.ensure_future(framed.read_frames())
        await until(lambda: stream._transport is not None)
        b.send(pack_header([100_000]))  # the header alone: no frame view asked yet
        await until(lambda: stream.nbytes_received > 0)
        assert not calls
        b.send(b"x" * 1000)  # the loop asks for the frame's buffer: the allocator fails there
        with pytest.raises(iostream_module.StreamClosedError) as caught:
            await future
        assert calls == [100_000]
        assert isinstance(caught.value.real_error, MemoryError) and stream.closed()
        b.close()

    run(main(), loop=loop_name)


def test_a_transport_made_while_the_read_ahead_is_full_keeps_every_byte(loop_name):
    # The pause asked in connection_made does not hold on uvloop (or Python
    # < 3.11): the loop receives once more, into room past read_chunk_size.
    async def main():
        a, b = socket.socketpair()
        stream = ReadIntoIOStream(a, engine="transport", read_chunk_size=16)
        b.send(b"line\r\n" + b"p" * 10)
        assert await stream.read_until(b"\r\n") == b"line\r\n"  # inline: no transport yet
        stream.read_chunk_size = 8  # what is read ahead is now all a stream may hold while idle
        assert stream._core.buffered_nbytes == 10 and stream._transport is None
        data = os.urandom(8 * 1024 * 1024)
        write = stream.write(data)  # more than the kernel takes: the transport is made
        await until(lambda: stream._transport is not None)
        b.send(b"q" * 100)
        peer = ReadIntoIOStream(b)
        got = bytearray(len(data))
        assert await peer.read_into(got) == len(data)
        await write
        assert got == data
        assert await stream.read_bytes(110) == b"p" * 10 + b"q" * 100
        assert not stream.closed()
        stream.close()
        peer.close()

    run(main(), loop=loop_name)
