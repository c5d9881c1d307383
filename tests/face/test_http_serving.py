"""The serving loop of ReadIntoHTTPServer (ReadIntoHTTP1ServerConnection):
the header timeout is one timer per connection instead of one per request,
with stock's deadlines (idle after use, trickled headers, across many
requests) and nothing kept alive once a connection closes; the loop yields
between requests only when the next one may already be there, and pipelined
requests are still answered in order.

Real sockets on 127.0.0.1, on asyncio's loop and on uvloop, against stock
`HTTPServer` where the behaviour must match.  What is asserted of a
timeout is which side closed, and that it did not close before its deadline
(on the loop's clock); never how fast."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import re
import socket
import weakref

import pytest
from tornado import web
from tornado.httpserver import HTTPServer
from tornado.iostream import IOStream
from tornado.platform.asyncio import BaseAsyncIOLoop
from tornado.testing import bind_unused_port

from tornado_readinto import ReadIntoHTTPServer, ReadIntoIOStream
from tornado_readinto.diagnostics.testing import stream_pair
from tornado_readinto.face.httpserver import ReadIntoHTTP1ServerConnection
from tornado_readinto.face.iostream import DRAINED_VALID_S

from .._http import stop_server, wait_no_connections
from ..conftest import CLOCK_SLACK_S, run

SERVERS = [HTTPServer, ReadIntoHTTPServer]


class _Echo(web.RequestHandler):
    def get(self) -> None:
        self.write("hello " + self.get_argument("i", ""))


class _Slow(web.RequestHandler):
    async def get(self) -> None:
        await asyncio.sleep(float(self.get_argument("s")))
        self.write("slow")


async def _serve(server_class, **kwargs):
    sock, port = bind_unused_port()
    server = server_class(web.Application([("/", _Echo), ("/slow", _Slow)]), **kwargs)
    server.add_sockets([sock])
    return server, port


def _request(i: int = 0) -> bytes:
    return f"GET /?i={i} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()


async def _response(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    nbytes = int(re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head).group(1))
    return await reader.readexactly(nbytes)


@contextlib.asynccontextmanager
async def _connected(server_class, **kwargs):
    """A ``server_class`` server and one asyncio client connection to it:
    ``(server, reader, writer)``.  On leaving, the client closes and the
    server must drop the connection; the server is stopped either way."""
    server, port = await _serve(server_class, **kwargs)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        yield server, reader, writer
        writer.close()
        await wait_no_connections(server)
    finally:
        await stop_server(server)


# -- the header timeout ----------------------------------------------------------------


@pytest.mark.parametrize("server_class", SERVERS)
def test_http_serving_header_timeout_is_one_timer_per_connection(loop_name, server_class, monkeypatch):
    """Stock arms (and cancels) a timer for every request's headers; ours
    arms one for the connection, however many requests it serves."""
    nrequests = 30
    timers = []
    call_at = BaseAsyncIOLoop.call_at

    def counting_call_at(self, when, callback, *args, **kwargs):
        timers.append(when)
        return call_at(self, when, callback, *args, **kwargs)

    monkeypatch.setattr(BaseAsyncIOLoop, "call_at", counting_call_at)

    async def main():
        async with _connected(server_class) as (server, reader, writer):  # idle_connection_timeout: 3600 s
            for i in range(nrequests):
                writer.write(_request(i))
                assert await _response(reader) == f"hello {i}".encode()
            (conn,) = server._connections
            assert isinstance(conn.stream, ReadIntoIOStream) == (server_class is ReadIntoHTTPServer)

    run(main(), loop=loop_name)
    if server_class is HTTPServer:
        assert len(timers) >= nrequests
    else:
        assert len(timers) == 1


@pytest.mark.parametrize("server_class", SERVERS)
def test_http_serving_idle_timeout_spans_requests_then_closes_an_idle_connection(loop_name, server_class):
    """Requests 0.1 s apart for twice the timeout keep the connection (the
    first deadline passes while a later read waits: the timer re-arms); then,
    idle, it is closed by the server, not before one timeout after the last
    request was sent (on the loop's clock, which server and client share)."""
    timeout = 0.5

    async def main():
        loop = asyncio.get_running_loop()
        async with _connected(server_class, idle_connection_timeout=timeout) as (_, reader, writer):
            start = loop.time()
            i = 0
            while loop.time() - start < 2 * timeout:
                last_sent = loop.time()  # the server's last header wait starts after this
                writer.write(_request(i))
                assert await _response(reader) == f"hello {i}".encode()
                i += 1
                await asyncio.sleep(timeout / 5)
            assert await reader.read() == b""  # closed by the server (the test's timeout bounds a hang)
            idle = loop.time() - last_sent
            assert idle >= timeout - CLOCK_SLACK_S, idle

    run(main(), loop=loop_name)


@pytest.mark.parametrize("server_class", SERVERS)
def test_http_serving_trickled_headers_are_cut_at_the_header_deadline(loop_name, server_class):
    """A peer that keeps sending header bytes but never ends the header block
    is closed, not before one timeout after the read began, without a
    response: the deadline is on the headers, not on silence (the peer is
    never silent for long, and keeps sending until it is closed: a deadline
    on silence would never fire and the test's timeout would fail it)."""
    timeout = 0.5

    async def main():
        loop = asyncio.get_running_loop()
        start = loop.time()  # before the connection, so before the server's header read began
        async with _connected(server_class, idle_connection_timeout=timeout) as (_, reader, writer):
            writer.write(b"GET / HTTP/1.1\r\n")
            received = None
            i = 0
            try:
                while received is None:
                    writer.write(b"X-Slow-%d: 1\r\n" % i)
                    i += 1
                    await writer.drain()
                    with contextlib.suppress(asyncio.TimeoutError):
                        received = await asyncio.wait_for(reader.read(1), timeout / 10)  # b"": closed
            except ConnectionError:
                received = b""  # closed while we wrote
            closed_after = loop.time() - start
            assert received == b""  # no response
            assert closed_after >= timeout - CLOCK_SLACK_S, closed_after

    run(main(), loop=loop_name)


@pytest.mark.parametrize("server_class", SERVERS)
def test_http_serving_a_slow_handler_is_not_cut_by_the_header_timeout(loop_name, server_class):
    """The deadline covers the wait for headers only: a handler that takes
    three timeouts still answers, and the connection serves on."""
    timeout = 0.2

    async def main():
        async with _connected(server_class, idle_connection_timeout=timeout) as (_, reader, writer):
            writer.write(f"GET /slow?s={3 * timeout} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            assert await _response(reader) == b"slow"
            writer.write(_request(2))
            assert await _response(reader) == b"hello 2"

    run(main(), loop=loop_name)


def test_http_serving_a_closed_connection_keeps_nothing_alive(loop_name):
    """The per-connection timer is dropped when the connection ends: the
    stream and the connection objects are collected, not held by the loop
    until the (hour-long) deadline."""

    async def main():
        async with _connected(ReadIntoHTTPServer) as (server, reader, writer):
            writer.write(_request(1))
            assert await _response(reader) == b"hello 1"
            (conn,) = server._connections
            assert type(conn) is ReadIntoHTTP1ServerConnection
            refs = [weakref.ref(conn), weakref.ref(conn.stream)]
            del conn
            writer.close()
            await writer.wait_closed()
            await wait_no_connections(server)
            for _ in range(3):
                await asyncio.sleep(0)
            gc.collect()
            assert [ref() for ref in refs] == [None, None]

    run(main(), loop=loop_name)


# -- yields between requests -------------------------------------------------------------


def _sent_ahead(requests: list[bytes]):
    """A connected TCP pair whose client end has already sent ``requests``:
    all of them are in the server socket's receive queue before the server
    reads.  Returns ``(client_sock, server_sock, server_address)``."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client_sock = socket.create_connection(listener.getsockname())
        server_sock, address = listener.accept()
    client_sock.sendall(b"".join(requests))
    return client_sock, server_sock, address


def _counting_zero_sleeps(monkeypatch) -> list[float]:
    """Record every ``asyncio.sleep(0)`` (how the serving loops yield)."""
    zero_sleeps: list[float] = []
    sleep = asyncio.sleep

    def counting_sleep(delay, *args, **kwargs):
        if delay == 0:
            zero_sleeps.append(delay)
        return sleep(delay, *args, **kwargs)

    monkeypatch.setattr(asyncio, "sleep", counting_sleep)
    return zero_sleeps


def test_http_serving_yields_exactly_when_the_next_read_may_not_wait(loop_name, monkeypatch):
    """The serving loop asks the stream, after each request, whether the
    next read would wait for the loop; it yields exactly when the answer is
    no.  The answers are scripted (both ways, in a known order) and the
    client runs on the same loop, so nothing races: the yields are exactly
    the scripted "no"s, and the responses come in order."""
    nrequests = 12
    answers = [i % 3 == 0 for i in range(nrequests)]  # True: the next read would wait
    asked: list[bool] = []

    def scripted(stream):
        answer = answers[len(asked)]
        asked.append(answer)
        return answer

    monkeypatch.setattr(ReadIntoIOStream, "read_would_wait", scripted)

    async def main():
        async with _connected(ReadIntoHTTPServer) as (_, reader, writer):
            zero_sleeps = _counting_zero_sleeps(monkeypatch)
            for i in range(nrequests):
                writer.write(_request(i))
                assert await _response(reader) == f"hello {i}".encode()
        return len(zero_sleeps)  # the connection is gone: its loop has ended

    yields = run(main(), loop=loop_name)
    assert len(asked) == nrequests
    assert yields == answers.count(False)


def test_http_serving_the_would_wait_answer_follows_the_stream_state(loop_name, stream_clock):
    """``read_would_wait()`` on known states of a real socket: no while
    bytes are read ahead or before the socket was proved empty; yes once a
    read parked, its recv drained the socket and a response went out (on
    uvloop a READ event's proof counts once a send has shown that the socket
    has no error)."""

    async def main():
        server, client = await stream_pair(ReadIntoIOStream, busy_poll_s=0)
        try:
            assert not server.read_would_wait()  # nothing proved yet
            client.socket.sendall(b"a\nb\n")
            assert await server.read_until(b"\n") == b"a\n"
            assert not server.read_would_wait()  # b"b\n" is read ahead
            assert await server.read_until(b"\n") == b"b\n"
            assert not server.read_would_wait()  # served from the buffer: the socket was not asked
            reading = server.read_until(b"\n")  # parks: nothing there
            client.socket.sendall(b"c\n")
            assert await reading == b"c\n"
            await server.write(b"response")
            assert server.read_would_wait()  # the recv that completed it was short: drained
            stream_clock.now += DRAINED_VALID_S
            assert not server.read_would_wait()  # a proof that old no longer holds
        finally:
            server.close()
            client.close()

    run(main(), loop=loop_name)


@pytest.mark.parametrize("server_class", SERVERS)
def test_http_serving_pipelined_requests_yield_between_them_in_order(
    loop_name, server_class, monkeypatch, stream_clock
):
    """All requests are in the socket before the server reads, so its first
    recv takes them all and, being short, proves the socket empty.  After
    every request but the last the next one is read ahead: ours yields
    there; after the last, the next read must wait: ours does not yield.
    Stock yields after every request.  The responses come in order."""
    nrequests = 30
    requests = [_request(i) for i in range(nrequests)]

    async def main():
        client_sock, server_sock, address = _sent_ahead(requests)
        server = server_class(web.Application([("/", _Echo)]))
        zero_sleeps = _counting_zero_sleeps(monkeypatch)
        try:
            stream_class = ReadIntoIOStream if server_class is ReadIntoHTTPServer else IOStream
            server.handle_stream(stream_class(server_sock), address)
            reader, writer = await asyncio.open_connection(sock=client_sock)
            for i in range(nrequests):
                assert await _response(reader) == f"hello {i}".encode()
            writer.close()
            await wait_no_connections(server)  # the serving loop has ended
            return len(zero_sleeps)
        finally:
            await stop_server(server)

    yields = run(main(), loop=loop_name)
    assert yields == (nrequests if server_class is HTTPServer else nrequests - 1)
