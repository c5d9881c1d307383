"""What one small message costs on the server side of a ping-pong, counted
(never timed) over real sockets, on asyncio's default loop and on uvloop:
syscalls per message, Futures per message, allocator calls per frame."""

import asyncio
import selectors
import shutil
import socket
import struct

import pytest
from tornado.iostream import IOStream

from tornado_readinto import FramedStream, ReadIntoIOStream, SSLReadIntoIOStream
from tornado_readinto.core import busypoll
from tornado_readinto.diagnostics.testing import RecordingSocket, stream_pair
from tornado_readinto.face import _facecore as core_module
from tornado_readinto.wire.allocators import BufferPool

from ..conftest import TrackingAllocator, run

NMESSAGES = 200
PAYLOAD = bytes(range(256)) * 4  # 1 KiB
HEADER = struct.pack("<QQ", 1, len(PAYLOAD))


class Counts:
    """Futures made by the stream (all in its core, _facecore.py), by kind."""

    def __init__(self, monkeypatch):
        self.resolved = 0  # plain Futures (reads served from the read-ahead, writes) made here
        self.parked = 0  # read Futures that waited for the socket
        counts = self
        # (a write sent at once returns the stream's one resolved Future,
        # made at its first such write: counted only if that came here)

        class CountingFuture(core_module.Future):
            # a plain read Future that waits gets the stream's done callback
            # (for its cancellation): counted as parked, not resolved
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                counts.resolved += 1

            def add_done_callback(self, fn, **kwargs):
                if getattr(fn, "__name__", None) == "on_read_done":
                    counts.resolved -= 1
                    counts.parked += 1
                super().add_done_callback(fn, **kwargs)

        class CountingEagerReadFuture(core_module._EagerReadFuture):
            # the read Future of asyncio's loop, and of uvloop's once contended
            __slots__ = ()

            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                counts.parked += 1

        monkeypatch.setattr(core_module, "Future", CountingFuture)
        monkeypatch.setattr(core_module, "_EagerReadFuture", CountingEagerReadFuture)


def _pair(**kwargs):
    """Our server stream over a `RecordingSocket`, and a stock Tornado client
    (whose Futures are not counted)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client_sock = socket.create_connection(listener.getsockname())
        server_sock, _ = listener.accept()
    for sock in (client_sock, server_sock):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return ReadIntoIOStream(RecordingSocket(server_sock), **kwargs), IOStream(client_sock)


async def _pingpong(client, server_task, nmessages):
    for i in range(nmessages):
        payload = i.to_bytes(8, "little") + PAYLOAD[8:]
        client.write(HEADER)
        await client.write(payload)
        head = bytearray(16)
        body = bytearray(len(PAYLOAD))
        await client.read_into(head)
        await client.read_into(body)
        assert head == HEADER and body == payload
    client.close()
    return await server_task


@pytest.mark.parametrize("busy_poll_s", [0, 50e-6])
def test_read_into_echo_costs_one_recv_one_sendmsg_one_future_per_message(
    loop_name, busy_poll_s, monkeypatch, stream_clock
):
    # spinning is refused while other threads exist (earlier tests may have
    # left idle executor threads): let the spinning case spin
    monkeypatch.setattr(busypoll, "other_threads", lambda: False)
    monkeypatch.setattr(busypoll, "room_to_spin", lambda: True)  # even if run on one CPU

    async def main():
        server, client = _pair(busy_poll_s=busy_poll_s)
        sock = server.socket
        counts = None

        async def echo():
            nonlocal counts
            head, body = bytearray(16), bytearray(len(PAYLOAD))
            for _ in range(2):  # the first read registers READ with the loop
                await server.read_into(head)
                await server.read_into(body)
                await server.writelines([head, body])
            sock.reset()  # count from the third message on
            counts = Counts(monkeypatch)
            for _ in range(NMESSAGES - 2):
                await server.read_into(head)
                await server.read_into(body)
                await server.writelines([head, body])
            monkeypatch.undo()

        await _pingpong(client, asyncio.ensure_future(echo()), NMESSAGES)
        server.close()
        nmessages = NMESSAGES - 2
        received = [r for r in sock.recvs if r.received]
        assert len(received) == nmessages and all(r.received == 16 + len(PAYLOAD) for r in received)
        assert len(sock.recvs) == nmessages  # no recv that was bound to fail with EAGAIN
        assert sock.sends == [16 + len(PAYLOAD)] * nmessages and sock.sendmsg_buffers == [2] * nmessages
        # per message: the header read waits for the socket (its own Future);
        # the payload read is filled from the read-ahead buffer and returns
        # the stream's resolved Future of such reads, made at the first
        # message (its count, 1024, repeats); the write makes none either (it
        # returns the stream's one resolved write Future)
        assert (counts.parked, counts.resolved) == (nmessages, 0)

    run(main(), loop=loop_name)


def test_tls_echo_costs_one_receive_per_message_none_bound_to_fail(loop_name, stream_clock, tls_contexts):
    """A TLS receive returns at most one record, and one shorter than asked
    and than a full record ends the peer's write with nothing left decrypted
    in the SSL object: the next read waits for the loop without an
    ``SSL_read`` bound to fail with "want read".  Per echoed message, one
    receive, of the whole message."""

    async def main():
        server_ctx, client_ctx = tls_contexts
        server, client = await stream_pair(
            SSLReadIntoIOStream, server_ssl=server_ctx, client_ssl=client_ctx, busy_poll_s=0
        )
        received = []
        ssl_read = server.read_from_fd

        def counting_read(view):
            nbytes = ssl_read(view)
            received.append(nbytes)
            return nbytes

        server.read_from_fd = counting_read

        async def echo():
            head, body = bytearray(16), bytearray(len(PAYLOAD))
            for i in range(NMESSAGES):
                if i == 2:  # the first read registers READ with the loop
                    received.clear()
                await server.read_into(head)
                await server.read_into(body)
                await server.writelines([head, body])

        echoing = asyncio.ensure_future(echo())
        try:
            for i in range(NMESSAGES):
                payload = i.to_bytes(8, "little") + PAYLOAD[8:]
                await client.write(HEADER + payload)
                assert await client.read_bytes(16 + len(PAYLOAD)) == HEADER + payload
            await echoing
            assert received == [16 + len(PAYLOAD)] * (NMESSAGES - 2)
        finally:
            server.close()
            client.close()

    run(main(), loop=loop_name)


def test_reads_filled_from_the_read_ahead_share_a_resolved_future_while_the_count_repeats(loop_name):
    """A ``read_into`` that the bytes read ahead fill returns the stream's
    resolved Future of such reads while its count repeats, and a new one
    when the count changes; each resolves to its own count and its buffer
    holds its own bytes.  A read that waits always gets a Future of its own."""
    data = bytes(range(40))

    async def main():
        server, client = _pair()
        client.socket.sendall(data)  # all 40 bytes wait in the kernel before the first recv
        first = bytearray(4)
        assert await server.read_into(first) == 4
        assert server._core.reads.buffered_nbytes == 36  # the rest were read ahead
        bufs = [bytearray(n) for n in (8, 8, 4, 8, 8)]
        futures = [server.read_into(b) for b in bufs]
        assert all(f.done() for f in futures)
        assert [f.result() for f in futures] == [8, 8, 4, 8, 8]
        assert futures[0] is futures[1] and futures[3] is futures[4]
        assert len({id(f) for f in futures}) == 3  # 8, then 4, then 8 again: a new one each change
        assert b"".join([first, *bufs]) == data
        waiting = server.read_into(bytearray(8))  # nothing read ahead: it waits
        assert not waiting.done() and waiting is not futures[4]
        client.write(data[:8])
        assert await waiting == 8
        client.close()
        server.close()

    run(main(), loop=loop_name)


def test_framed_echo_costs_one_recv_one_sendmsg_one_future_no_pool_round_trip(loop_name, monkeypatch, stream_clock):
    async def main():
        server, client = _pair()
        sock = server.socket
        pool = BufferPool()
        allocator = TrackingAllocator(pool)
        framed = FramedStream(server, allocator=allocator)
        counts = None

        async def echo():
            nonlocal counts
            for _ in range(2):  # the first read registers READ with the loop
                await framed.write_frames(await framed.read_frames())
            sock.reset()
            allocator.calls.clear()
            counts = Counts(monkeypatch)
            for _ in range(NMESSAGES - 2):
                frames = await framed.read_frames()
                await framed.write_frames(frames)
                pool.release_all(frames)
            monkeypatch.undo()

        await _pingpong(client, asyncio.ensure_future(echo()), NMESSAGES)
        server.close()
        nmessages = NMESSAGES - 2
        assert len([r for r in sock.recvs if r.received]) == len(sock.recvs) == nmessages
        assert len(sock.sends) == nmessages and sock.sendmsg_buffers == [2] * nmessages
        assert (counts.parked, counts.resolved) == (nmessages, 0)  # the read waits; the write makes none
        assert allocator.calls == [len(PAYLOAD)] * nmessages  # one allocator call per frame
        # a 1 KiB frame is a plain bytearray: no pool bookkeeping at all
        assert (pool.hits, pool.misses, pool.nbuffers_outstanding) == (0, 0, 0)

    run(main(), loop=loop_name)


def test_replies_to_pipelined_messages_leave_in_one_sendmsg_and_a_lone_reply_is_never_held(loop_name):
    async def main():
        server, client = _pair()
        sock = server.socket
        messages = [HEADER + i.to_bytes(8, "little") + PAYLOAD[8:] for i in range(10)]
        try:
            # a lone message: its reply goes out inside writelines
            await client.write(messages[0])
            head, body = bytearray(16), bytearray(len(PAYLOAD))
            await server.read_into(head)
            await server.read_into(body)
            sock.reset()
            fut = server.writelines([head, body])
            assert fut.done() and sock.sends == [len(messages[0])]
            assert await client.read_bytes(len(messages[0])) == messages[0]

            # ten pipelined messages in one segment: ten replies, one sendmsg
            await client.write(b"".join(messages))
            sock.reset()
            for _ in messages:
                await server.read_into(head)
                await server.read_into(body)
                await server.writelines([head, body])
            assert sock.sends == [len(messages) * len(messages[0])]
            assert await client.read_bytes(len(messages) * len(messages[0])) == b"".join(messages)

            # replies held while the rest of a message is still to come leave
            # as soon as the read has to wait for it
            await client.write(messages[1] + messages[2][:100])
            sock.reset()
            await server.read_into(head)
            await server.read_into(body)
            await server.writelines([head, body])
            assert sock.sends == []  # held: more input is read ahead
            await server.read_into(head)  # still read ahead: no flush
            assert sock.sends == []
            reading = server.read_into(body)  # must wait for the socket: flushes
            assert sock.sends == [len(messages[1])]
            assert await client.read_bytes(len(messages[1])) == messages[1]
            await client.write(messages[2][100:])
            await reading
            assert bytes(head + body) == messages[2]

            # a held reply is sent before close()
            await client.write(messages[3] + messages[4])
            await server.read_into(head)
            await server.read_into(body)
            await server.writelines([head, body])
            server.close()
            assert await client.read_bytes(len(messages[3])) == messages[3]
        finally:
            server.close()
            client.close()

    run(main(), loop=loop_name)


def test_cork_holds_only_small_buffers_and_at_most_64_kib():
    async def main():
        server, client = _pair()
        sock = server.socket
        try:
            await client.write(HEADER * 4)
            await server.read_bytes(16)  # 48 bytes stay read ahead
            sock.reset()
            server.write(bytes(8 * 1024))  # not small: sent at once
            assert len(sock.sends) == 1
            for _ in range(70):  # 70 KiB of small replies: the cork holds 64 KiB
                server.write(bytes(1024))
            assert len(sock.sends) == 2 and sock.sends[1] == 64 * 1024 + 1024
            await server.write(b"")
            assert await client.read_bytes(8 * 1024 + 70 * 1024) == bytes(78 * 1024)
        finally:
            server.close()
            client.close()

    run(main())


def test_cork_never_holds_back_a_flush_behind_bytes_queued_directly():
    """dask.distributed appends to ``_write_buffer`` itself and awaits
    ``write(b"")``: that Future must wait for those bytes, cork or not."""

    async def main():
        server, client = _pair()
        try:
            await client.write(HEADER * 2)
            await server.read_bytes(16)  # 16 bytes stay read ahead: replies are corked
            assert server.write(b"reply").done() and server._cork_nbytes == 5
            big = bytes(range(256)) * (64 * 1024)  # 16 MiB: more than the socket takes at once
            server._write_buffer.append(big)
            server._total_write_index += len(big)
            flushed = server.write(b"")
            assert not flushed.done()
            assert await client.read_bytes(5 + len(big)) == b"reply" + big
            await flushed
            assert server._cork_nbytes == 0 and not server._write_buffer
        finally:
            server.close()
            client.close()

    run(main())


# -- the dask comm path ----------------------------------------------------------------
# A readinto:// comm against distributed's own tcp://, both ends on one loop
# in this process, one small message at a time (an RPC and its answer).


async def _dask_rpcs(scheme: str, nmessages: int) -> None:
    """``nmessages`` request/answer round trips over one ``scheme`` comm
    (busy polling off: whether a loop may spin depends on the threads that
    earlier tests left in the process)."""
    import dask

    with dask.config.set({"distributed.comm.readinto.busy-poll": 0}):
        await _dask_rpcs_with_config(scheme, nmessages)


async def _dask_rpcs_with_config(scheme: str, nmessages: int) -> None:
    from distributed.comm import connect, listen

    served = asyncio.Event()

    async def echo(comm):
        try:
            while True:
                try:
                    msg = await comm.read()
                except Exception:
                    return
                await comm.write(msg)
        finally:
            served.set()

    listener = await listen(f"{scheme}://127.0.0.1:0", echo)
    await listener.start()
    try:
        comm = await connect(listener.contact_address)
        for i in range(nmessages):
            await comm.write({"op": "identity", "i": i})
            assert (await comm.read())["i"] == i
        await comm.close()
        # The server's handler ends once it has read the close: wait for it,
        # or the caller may close the loop with the handler's task pending
        # (its wake-up queued), which asyncio logs as a destroyed task.
        await served.wait()
    finally:
        listener.stop()


def test_dask_comm_costs_one_recv_one_sendmsg_per_small_message(loop_name, monkeypatch, stream_clock):
    """The listening side of a readinto:// comm, over a recording socket:
    every request is one recv and every answer one sendmsg."""
    import tornado_readinto.dask.backend  # noqa: F401  (registers the scheme)
    from tornado_readinto.face.tcpserver import ReadIntoTCPServer

    sockets = []
    make_stream = ReadIntoTCPServer.make_stream

    def recording_make_stream(self, connection, address):
        sockets.append(RecordingSocket(connection))
        return make_stream(self, sockets[-1], address)

    monkeypatch.setattr(ReadIntoTCPServer, "make_stream", recording_make_stream)
    nmessages = 50
    run(_dask_rpcs("readinto", nmessages), loop=loop_name)
    (sock,) = sockets
    recvs = [r.received for r in sock.recvs]
    handshake, request = sock.sends[0], sock.sends[1]
    # the first recv of the fresh stream may find nothing yet (EAGAIN); after
    # it, every recv brings data (the handshake, possibly with the first
    # request, then each request alone), but the last, which reads the EOF
    assert None not in recvs[1:] and recvs[-1] == 0
    assert sum(r for r in recvs if r) == handshake + nmessages * request
    assert len([r for r in recvs if r]) <= nmessages + 1
    assert sock.sends == [handshake] + [request] * nmessages  # each answer: one sendmsg


class CountingSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """asyncio's selector, counting its polls: one per loop iteration."""

    polls = 0

    def select(self, timeout=None):
        CountingSelector.polls += 1
        return super().select(timeout)


_UVLOOP_TURNS = """
import asyncio, sys
import uvloop
from tests.face.test_costs import _dask_rpcs
import tornado_readinto.dask.backend
uvloop.new_event_loop().run_until_complete(_dask_rpcs(sys.argv[1], int(sys.argv[2])))
"""


def _uvloop_polls(scheme: str, nmessages: int) -> int:
    """epoll waits of a whole process running ``_dask_rpcs`` on uvloop,
    counted by strace (uvloop's loop is C: no Python hook sees its turns)."""
    import os
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "strace")
        subprocess.run(
            [
                "strace",
                "-f",
                "-c",
                "-o",
                report,
                "-e",
                "trace=epoll_wait,epoll_pwait",
                sys.executable,
                "-c",
                _UVLOOP_TURNS,
                scheme,
                str(nmessages),
            ],
            check=True,
            timeout=120,
            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        )
        with open(report) as f:
            return sum(int(line.split()[3]) for line in f if line.split()[-1:] in (["epoll_wait"], ["epoll_pwait"]))


@pytest.mark.parametrize("scheme", ["tcp", "readinto"])
def test_dask_comm_loop_turns_per_small_message(loop_name, scheme):
    """Loop iterations per round trip (both ends on the loop), counted: two
    per message each way on asyncio's loop (the poll that reports the data,
    the turn that runs the woken coroutine), one on uvloop, whose polls and
    callbacks share a turn; readinto:// takes no more than tcp:// and a test
    fails if that grows.  Counted as the difference between runs of 100 and
    300 round trips, so that setup does not count."""
    import tornado_readinto.dask.backend  # noqa: F401

    if loop_name == "uvloop":
        if shutil.which("strace") is None:
            pytest.skip("counting uvloop's polls needs strace")
        turns = (_uvloop_polls(scheme, 300) - _uvloop_polls(scheme, 100)) / 200
        expected = 2
    else:
        counts = []
        for nmessages in (100, 300):
            loop = asyncio.SelectorEventLoop(CountingSelector())
            try:
                before = CountingSelector.polls
                loop.run_until_complete(asyncio.wait_for(_dask_rpcs(scheme, nmessages), 30))
                counts.append(CountingSelector.polls - before)
            finally:
                loop.close()
        turns = (counts[1] - counts[0]) / 200
        expected = 4
    # a rare deferred loopback delivery may add a poll (allow 1 in 20 round
    # trips); a stalled process may complete a read inline and save one
    assert expected / 2 <= turns <= expected + 0.05, turns
