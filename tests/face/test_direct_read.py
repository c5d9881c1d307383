"""The READ callback that the asyncio loop calls directly
(`ReadIntoIOStream._read_ready`, registered with the public ``add_reader``
in place of Tornado's reader): READ events skip Tornado's
``AsyncIOLoop._handle_events`` while Tornado's books stay right (WRITE
events, ``remove_handler`` on close, ``IOLoop.close(all_fds=True)``,
``start_tls``), on asyncio's loop and on uvloop, over real sockets.

Calls are counted by wrapping the IOLoop's ``_handle_events`` on the
instance before anything registers: Tornado hands that attribute to
``add_reader``/``add_writer`` when it registers an fd.
"""

from __future__ import annotations

import asyncio
import collections
import socket

import pytest
from tornado.ioloop import IOLoop
from tornado.iostream import StreamClosedError
from tornado.log import gen_log
from tornado.platform.asyncio import AsyncIOLoop

from tornado_readinto import ReadIntoIOStream, SSLReadIntoIOStream
from tornado_readinto.core import _cpus, _gilheld
from tornado_readinto.diagnostics.testing import stream_pair
from tornado_readinto.face.iostream import direct_read_loop

from ..conftest import bytes_waiting, new_event_loop, run, until

READ = IOLoop.READ
WRITE = IOLoop.WRITE
MESSAGES = 50


def count_tornado_dispatch(io_loop):
    """Count the calls of Tornado's ``AsyncIOLoop._handle_events`` by event
    (READ, WRITE) from now on; returns the Counter."""
    calls = collections.Counter()
    dispatch = io_loop._handle_events

    def counting(fd, events):
        calls[events] += 1
        return dispatch(fd, events)

    io_loop._handle_events = counting
    return calls


def counting_class(stream_class):
    """A subclass of ``stream_class`` that counts the READ events each
    stream handles, whichever way they come (both call its ``_readable``; a
    class with its own ``_readable`` has its core hand READ events to the
    face, as a TLS face does: settled when the stream is made)."""

    class Counting(stream_class):
        read_events = 0

        def _readable(self):
            self.read_events += 1
            super()._readable()

    return Counting


def keep_socket_open(stream):
    """Make ``stream.close()`` leave its socket open (the test closes it),
    so that the loop can be watched for a registration left behind."""
    sock = stream.socket
    stream.close_fd = lambda: None
    return sock


async def check_nothing_left(io_loop, stream, sock, peer, tornado_calls, caplog, close=True):
    """After ``stream`` closed with ``sock`` left open: neither Tornado's
    books nor the asyncio loop know the fd, and while bytes wait in ``sock``
    (readable) and it can send (writable), the loop calls nothing for it
    over several turns.  Then ``sock`` is closed (with ``close``).

    Watching the loop is the check that holds on both loops: asyncio's
    ``remove_reader`` says False when there was nothing to remove, uvloop's
    (0.23) returns None whatever it removed.
    """
    fd = sock.fileno()
    assert fd not in io_loop.handlers and fd not in io_loop.readers and fd not in io_loop.writers
    # Where a reader left behind would go: the closed stream's direct
    # reader hands the event to the face's dispatch, which logs it ("Got
    # events for closed stream"); Tornado's own reader is counted.
    start = len(caplog.records)
    before = sum(tornado_calls.values())
    peer.socket.send(b"late bytes")
    await until(lambda: bytes_waiting(sock) > 0)
    for _ in range(10):
        await asyncio.sleep(0)
    late = [r.getMessage() for r in caplog.records[start:] if r.name == gen_log.name]
    assert late == [] and sum(tornado_calls.values()) == before, (late, tornado_calls)
    loop = io_loop.asyncio_loop
    assert not loop.remove_reader(fd) and not loop.remove_writer(fd)
    if close:
        sock.close()


async def echo_messages(server, client, count, nbytes=1024):
    """``count`` messages client -> server, each read by a read that waits
    for its READ event (it starts before the bytes are sent)."""
    buf = bytearray(nbytes)
    for i in range(count):
        reading = server.read_into(buf)
        message = bytes([i % 256]) * nbytes
        await client.write(message)
        assert await reading == nbytes
        assert buf == message


@pytest.mark.parametrize("stream_class", [ReadIntoIOStream, SSLReadIntoIOStream])
def test_direct_read_events_skip_tornados_dispatch(loop_name, stream_class, tls_contexts):
    async def main():
        io_loop = IOLoop.current()
        tornado_calls = count_tornado_dispatch(io_loop)
        counting = counting_class(stream_class)
        if stream_class is SSLReadIntoIOStream:
            server_ctx, client_ctx = tls_contexts
            server, client = await stream_pair(counting, server_ssl=server_ctx, client_ssl=client_ctx)
        else:
            server, client = await stream_pair(counting)
        try:
            assert server._read_loop is io_loop.asyncio_loop
            assert not server._core.calls.plain_events
            await server.write(b"registers nothing: sent at once")  # (a TLS stream is registered already)
            await client.read_bytes(31)
            server.read_events = 0  # (a TLS handshake's events are not the echo's)
            # READ is not registered yet on a plain stream: the first read
            # registers it (Tornado's add_handler, then our add_reader).
            await echo_messages(server, client, MESSAGES)
            assert server.read_events >= MESSAGES
            assert tornado_calls[READ] == 0, tornado_calls
        finally:
            server.close()
            client.close()

    run(main(), loop=loop_name)


def test_direct_read_write_events_still_go_through_tornados_dispatch(loop_name):
    """A write the kernel cannot take at once waits for WRITE through
    Tornado's dispatch, while READ keeps coming directly."""

    async def main():
        io_loop = IOLoop.current()
        tornado_calls = count_tornado_dispatch(io_loop)
        server, client = await stream_pair(ReadIntoIOStream)
        try:
            server.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            reading = server.read_into(bytearray(4))  # READ registered, directly
            big = bytes(8 * 1024 * 1024)
            writing = server.write(big)
            assert not writing.done() and server._state & WRITE
            received = await client.read_bytes(len(big))
            await writing
            assert len(received) == len(big)
            await client.write(b"done")
            assert await reading == 4
            assert tornado_calls[WRITE] >= 1 and tornado_calls[READ] == 0, tornado_calls
            # WRITE and READ both registered on one fd, then WRITE dropped
            # (update_handler): the direct reader stays.
            assert server._state & READ and not server._state & WRITE
            await echo_messages(server, client, 5)
            assert tornado_calls[READ] == 0, tornado_calls
        finally:
            server.close()
            client.close()

    run(main(), loop=loop_name)


def test_direct_read_close_leaves_no_reader_or_writer(loop_name, caplog):
    """``close`` (Tornado's ``remove_handler``) removes the direct reader and
    Tornado's writer: nothing is left registered for the fd."""

    async def main():
        io_loop = IOLoop.current()
        tornado_calls = count_tornado_dispatch(io_loop)
        server, client = await stream_pair(ReadIntoIOStream)
        await echo_messages(server, client, 3)  # READ registered, directly
        assert tornado_calls[READ] == 0, tornado_calls
        sock = keep_socket_open(server)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        reading = server.read_into(bytearray(4))
        writing = server.write(bytes(8 * 1024 * 1024))  # stays queued: the client does not read
        assert server._state & READ and server._state & WRITE
        assert sock.fileno() in io_loop.readers and sock.fileno() in io_loop.writers
        server.close()
        with pytest.raises(StreamClosedError):
            await reading
        with pytest.raises(StreamClosedError):
            await writing
        await check_nothing_left(io_loop, server, sock, client, tornado_calls, caplog)
        client.close()

    run(main(), loop=loop_name)


def test_direct_read_reader_follows_read_interest_dropped_and_added_again(loop_name):
    """A full read-ahead buffer drops READ (``update_handler`` removes the
    direct reader); the next read registers it again, directly again."""

    async def main():
        io_loop = IOLoop.current()
        tornado_calls = count_tornado_dispatch(io_loop)
        server, client = await stream_pair(ReadIntoIOStream, read_chunk_size=1024)
        try:
            fd = server.fileno().fileno()
            updates = []
            update = io_loop.update_handler

            def recording(fd, events):
                updates.append(events)
                return update(fd, events)

            io_loop.update_handler = recording
            payload = bytes(range(256)) * 32  # 8 KiB: more than the read-ahead holds
            for _ in range(3):
                first = server.read_bytes(16)
                await client.write(payload)
                assert await first == payload[:16]
                # The rest arrives with no read pending and fills the read-ahead.
                await until(lambda: not server._state & READ)
                assert not io_loop.asyncio_loop.remove_reader(fd)  # dropped: no reader for the fd
                rest = await server.read_bytes(len(payload) - 16)  # READ again, directly
                assert rest == payload[16:]
            assert tornado_calls[READ] == 0, tornado_calls
            assert any(not events & READ for events in updates) and any(events & READ for events in updates)
        finally:
            server.close()
            client.close()

    run(main(), loop=loop_name)


def test_direct_read_ioloop_close_all_fds_closes_the_streams_socket(loop_name, caplog):
    """``IOLoop.close(all_fds=True)`` removes the fd (the direct reader
    with it: the loop is watched right then, before it closes) and then
    closes the stream's socket."""
    io_loop = AsyncIOLoop(asyncio_loop=new_event_loop(loop_name))
    tornado_calls = count_tornado_dispatch(io_loop)
    removed = []
    try:

        async def register():
            server, client = await stream_pair(ReadIntoIOStream)
            await echo_messages(server, client, 3)
            assert tornado_calls[READ] == 0, tornado_calls  # READ registered, directly
            server.read_into(bytearray(4))  # pending
            return server, client

        server, client = io_loop.run_sync(register)
        sock = server.socket
        fd = sock.fileno()
        assert io_loop.handlers[fd][0] is sock
        remove_handler = io_loop.remove_handler

        def watched(fd):
            remove_handler(fd)
            removed.append(fd)
            watch = check_nothing_left(io_loop, server, sock, client, tornado_calls, caplog, close=False)
            io_loop.asyncio_loop.run_until_complete(watch)

        io_loop.remove_handler = watched
    finally:
        io_loop.close(all_fds=True)
    client.close()  # never registered: not the IOLoop's to close
    assert removed == [fd]
    assert sock.fileno() == -1  # closed by IOLoop.close
    assert not io_loop.handlers and not io_loop.readers


def test_direct_read_start_tls_hands_the_fd_over(loop_name, tls_contexts, caplog):
    """``start_tls`` removes the plain stream's registration (its direct
    reader) and the TLS stream registers its own, directly again."""
    server_ctx, client_ctx = tls_contexts

    async def main():
        io_loop = IOLoop.current()
        tornado_calls = count_tornado_dispatch(io_loop)
        server, client = await stream_pair(ReadIntoIOStream)
        await echo_messages(server, client, 5)  # both plain streams registered READ
        await echo_messages(client, server, 5)
        assert server.fileno().fileno() in io_loop.readers
        tls_server, tls_client = await asyncio.gather(
            server.start_tls(True, server_ctx), client.start_tls(False, client_ctx, server_hostname="127.0.0.1")
        )
        try:
            assert isinstance(tls_server, SSLReadIntoIOStream) and tls_server._read_loop is io_loop.asyncio_loop
            # the plain stream's core let go of the socket: it never touches it again
            old = server._core.io
            assert old.closed and old.calls.sock is None and old.calls.fd == -1 and not old.calls.keep_gil
            assert not old.policy.lowat.ok and old.policy.lowat.sock is None and old.policy.lowat.mark == 1
            await echo_messages(tls_server, tls_client, 10)
            await echo_messages(tls_client, tls_server, 10)
            assert tornado_calls[READ] == 0, tornado_calls
            sock = keep_socket_open(tls_server)
        finally:
            tls_server.close()
        await check_nothing_left(io_loop, tls_server, sock, tls_client, tornado_calls, caplog)
        tls_client.close()

    run(main(), loop=loop_name)


def test_direct_read_waiter_runs_inside_the_read_event(loop_name, monkeypatch):
    """The same-turn wake-up (`tornado_readinto.face._facecore.EagerFuture`) holds on the direct
    path: the task awaiting the read runs its next step before the READ
    callback returns."""
    monkeypatch.setattr(_gilheld, "held_until", 1.0)  # eager Futures on uvloop too (a stall was seen)
    monkeypatch.setattr(_cpus, "parallel_cpus", lambda: 2)  # ...where two threads can run at once

    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        try:
            order = []
            direct = server._read_ready

            def recording():
                order.append("event")
                direct()
                order.append("returned")

            server._read_ready = recording

            async def waiter():
                assert await server.read_into(bytearray(4)) == 4
                order.append("woke")

            task = asyncio.ensure_future(waiter())
            await asyncio.sleep(0)  # the read parks
            await client.write(b"abcd")
            await task
            assert order == ["event", "woke", "returned"], order
        finally:
            server.close()
            client.close()

    run(main(), loop=loop_name)


class RegistrationOverridden(AsyncIOLoop):
    """An IOLoop whose books are not Tornado's own (here: the same, through
    an override): its streams keep Tornado's dispatch."""

    def update_handler(self, fd, events):
        super().update_handler(fd, events)


def test_direct_read_only_where_tornados_books_are_known(loop_name):
    io_loop = RegistrationOverridden(asyncio_loop=new_event_loop(loop_name))
    try:
        assert direct_read_loop(io_loop) is None

        async def main():
            tornado_calls = count_tornado_dispatch(io_loop)
            server, client = await stream_pair(ReadIntoIOStream)
            try:
                assert server._read_loop is None
                await echo_messages(server, client, 10)
                assert tornado_calls[READ] >= 10  # today's path: Tornado's dispatch
            finally:
                server.close()
                client.close()
            assert not io_loop.handlers and not io_loop.readers

        io_loop.run_sync(main)
    finally:
        io_loop.close()
    plain = AsyncIOLoop(asyncio_loop=new_event_loop(loop_name))
    try:
        assert direct_read_loop(plain) is plain.asyncio_loop
    finally:
        plain.close()


@pytest.mark.parametrize("parallel", [1, 2])
def test_read_futures_wake_eagerly_on_asyncio_and_once_the_gil_was_seen_contended(loop_name, monkeypatch, parallel):
    """On asyncio's loop (a Python loop: a saved turn saves more than the
    wake-up costs) a read's Future is always the eager one.  On uvloop it is
    the plain one (asyncio's own scheduling, in C) until a stall was seen in
    the process, the eager one after, but only where two threads of the
    process can run at once: on one CPU the plain one's wake-ups run in
    uvloop's ready queue, one GIL hold per loop turn.  Cancelling either
    closes its stream."""
    from tornado_readinto.face import _facecore

    monkeypatch.setattr(_cpus, "parallel_cpus", lambda: parallel)

    def expected(stalled):
        eager = loop_name == "asyncio" or (stalled and parallel >= 2)
        return _facecore._EagerReadFuture if eager else asyncio.Future

    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        try:
            for stalled, payload in ((False, b"abcd"), (True, b"efgh")):
                if stalled:
                    monkeypatch.setattr(_gilheld, "held_until", 1.0)  # a stall was seen, long ago
                pending = server.read_into(bytearray(4))
                assert type(pending) is expected(stalled)
                await client.write(payload)
                assert await pending == 4
            cancelled = server.read_into(bytearray(4))
            cancelled.cancel()
            if type(cancelled) is asyncio.Future:
                # the plain one's cancellation closes its stream through its
                # done callback, on the loop's next iteration
                await asyncio.sleep(0)
            assert server.closed()
        finally:
            server.close()
            client.close()

    run(main(), loop=loop_name)
