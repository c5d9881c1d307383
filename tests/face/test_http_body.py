"""Request and response bodies under ReadIntoHTTPServer: a fixed-length
body is received with read_into into one growing buffer that becomes
request.body; a streamed body is cut into chunk_size pieces from one bounded
buffer; limits, truncation, gzip, 100-continue and unknown delegates behave
as stock; a large response chunk leaves with its headers in one gather write.

All over real sockets on 127.0.0.1; the checks count calls and bytes, never
time."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import json
import logging
import socket
import tracemalloc

import pytest
import tornado
from tornado import httputil, web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from tornado.simple_httpclient import HTTPStreamClosedError
from tornado.testing import bind_unused_port

from tornado_readinto import ReadIntoHTTPServer, ReadIntoIOStream
from tornado_readinto.diagnostics.testing import FakeSocket
from tornado_readinto.face.httpserver import (
    GATHER_MIN_NBYTES,
    INITIAL_BODY_NBYTES,
    STREAM_RECV_NBYTES,
    YIELD_NBYTES,
    ReadIntoHTTP1Connection,
    read_body_bytes,
)

from .._http import read_response, stop_server, wait_no_connections
from ..conftest import run

MiB = 1024 * 1024

#: Events seen by the handlers of the running test (reset by the fixture).
EVENTS: list[tuple] = []


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _pattern(nbytes: int) -> bytes:
    return bytes(range(256)) * (nbytes // 256) + bytes(range(nbytes % 256))


class _Body(web.RequestHandler):
    def post(self):
        body = self.request.body
        EVENTS.append(("post", type(self.request.connection).__name__))
        self.write({"type": type(body).__name__, "nbytes": len(body), "sha256": _digest(body)})


@web.stream_request_body
class _Streamed(web.RequestHandler):
    def prepare(self):
        limit = self.get_query_argument("limit", None)
        if limit is not None:
            self.request.connection.set_max_body_size(int(limit))  # type: ignore[union-attr]
        self.hash = hashlib.sha256()
        self.sizes = []
        self.types = set()

    def data_received(self, chunk):
        self.types.add(type(chunk).__name__)
        self.sizes.append(len(chunk))
        self.hash.update(chunk)

    def put(self):
        self.write({"sizes": self.sizes, "types": sorted(self.types), "sha256": self.hash.hexdigest()})

    def on_connection_close(self):
        EVENTS.append(("streamed closed", sum(self.sizes)))
        for event in STREAMED_CLOSED:
            event.set()


#: Events that `_Streamed.on_connection_close` sets: Tornado calls it from the
#: stream's close callback, which may run after the server has dropped the
#: connection, so a test that expects it waits for it.
STREAMED_CLOSED: list[asyncio.Event] = []


#: What the response handlers send (made before any tracing starts).
PAYLOAD = bytes(range(256)) * (16 * 1024)  # 4 MiB


class _Download(web.RequestHandler):
    def get(self):
        mode = self.get_query_argument("mode", "whole")
        if mode == "whole":  # one write_headers(..., chunk) with Content-Length
            self.write(PAYLOAD)
        elif mode == "chunked":  # flushed without Content-Length: chunked encoding
            self.write(PAYLOAD)
            self.flush()
            self.write(PAYLOAD[:1000])
        elif mode == "too-long":  # a Content-Length shorter than the body
            self.set_header("Content-Length", "10")
            self.write(PAYLOAD)


def _app():
    return web.Application([("/body", _Body), ("/streamed", _Streamed), ("/download", _Download)])


@pytest.fixture
def reads(monkeypatch):
    """Record the reads made on ReadIntoIOStreams (the clients in this
    module use plain sockets, so these are the server's)."""
    EVENTS.clear()
    calls = []
    read_into, read_bytes = ReadIntoIOStream.read_into, ReadIntoIOStream.read_bytes

    def recording_read_into(self, buf, partial=False):
        with memoryview(buf) as view:
            calls.append(("read_into", view.nbytes, partial))
        return read_into(self, buf, partial)

    def recording_read_bytes(self, num_bytes, partial=False):
        calls.append(("read_bytes", num_bytes, partial))
        return read_bytes(self, num_bytes, partial)

    monkeypatch.setattr(ReadIntoIOStream, "read_into", recording_read_into)
    monkeypatch.setattr(ReadIntoIOStream, "read_bytes", recording_read_bytes)
    return calls


async def _serve(target=None, **kwargs):
    sock, port = bind_unused_port()
    server = ReadIntoHTTPServer(target if target is not None else _app(), **kwargs)
    server.add_sockets([sock])
    return server, port


def _head(method, path, nbytes, extra=""):
    return f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {nbytes}\r\n{extra}\r\n".encode()


def _blocking_request(port, head, body, pieces=1):
    """Send ``head`` + ``body`` (in ``pieces``) from a blocking socket; return
    (status line, body) of the response, or (b"", b"") if the server closed."""
    with socket.create_connection(("127.0.0.1", port)) as sock, sock.makefile("rb") as reader:
        sock.sendall(head)
        step = max(1, -(-len(body) // pieces))
        view = memoryview(body)  # slices without copies
        try:
            for start in range(0, len(body), step):
                sock.sendall(view[start : start + step])
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server refused the body and closed
        try:
            return read_response(reader)
        except ConnectionResetError:
            return b"", b""


async def _request(port, head, body, pieces=1):
    """`_blocking_request` in a thread: the client copies nothing in this
    process's heap, so tracemalloc sees only the server."""
    return await asyncio.get_running_loop().run_in_executor(None, _blocking_request, port, head, body, pieces)


# -- fixed-length bodies ---------------------------------------------------------------


def test_http_body_fixed_length_lands_via_read_into_in_one_growing_buffer(reads):
    nbytes = 16 * MiB
    body = _pattern(nbytes)

    async def main():
        server, port = await _serve(max_body_size=64 * MiB)
        try:
            tracemalloc.start()
            status, reply = await _request(port, _head("POST", "/body", nbytes), body, pieces=7)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            assert status.startswith(b"HTTP/1.1 200"), status
            assert json.loads(reply) == {"type": "bytes", "nbytes": nbytes, "sha256": _digest(body)}
            return peak
        finally:
            await stop_server(server)

    peak = run(main())
    assert EVENTS == [("post", "ReadIntoHTTP1Connection")]
    # no read_bytes: the body came in read_into calls whose targets are the
    # successive regions of one buffer doubling from 1 MiB
    assert reads == [("read_into", n, False) for n in (MiB, MiB, 2 * MiB, 4 * MiB, 8 * MiB)]
    assert sum(n for _, n, _ in reads) == nbytes
    # that buffer is request.body: one body-sized allocation, never a second
    # one (stock holds a joined bytearray and its bytes copy at the end)
    assert nbytes <= peak < 1.2 * nbytes, peak  # stock: 2.06x


def test_http_body_small_and_empty_fixed_length_bodies(reads):
    async def main():
        server, port = await _serve()
        try:
            for nbytes in (0, 1, 100, 65536, INITIAL_BODY_NBYTES + 1):
                body = _pattern(nbytes)
                status, reply = await _request(port, _head("POST", "/body", nbytes), body)
                assert json.loads(reply) == {"type": "bytes", "nbytes": nbytes, "sha256": _digest(body)}, nbytes
        finally:
            await stop_server(server)

    run(main())
    assert all(call[0] == "read_into" for call in reads)


def test_http_body_plain_callback_with_xheaders_uses_read_into(reads):
    seen = []

    def callback(request):
        seen.append((type(request.body), len(request.body), _digest(request.body), request.remote_ip))
        request.connection.write_headers(
            httputil.ResponseStartLine("HTTP/1.1", 200, "OK"), httputil.HTTPHeaders({"Content-Length": "2"})
        )
        request.connection.write(b"ok")
        request.connection.finish()

    body = _pattern(3 * MiB)

    async def main():
        server, port = await _serve(callback, xheaders=True)
        try:
            status, reply = await _request(port, _head("POST", "/", len(body), "X-Real-Ip: 10.1.2.3\r\n"), body)
            assert (status.split()[1], reply) == (b"200", b"ok")
        finally:
            await stop_server(server)

    run(main())
    assert seen == [(bytes, len(body), _digest(body), "10.1.2.3")]
    assert [c[0] for c in reads] == ["read_into"] * 3  # 1 + 1 + 1 MiB


def test_http_body_expect_100_continue(reads):
    body = _pattern(2 * MiB + 5)

    def client(port):
        with socket.create_connection(("127.0.0.1", port)) as sock, sock.makefile("rb") as reader:
            sock.sendall(_head("POST", "/body", len(body), "Expect: 100-continue\r\n"))
            interim = reader.readline() + reader.readline()
            sock.sendall(body)
            return interim, read_response(reader)

    async def main():
        server, port = await _serve()
        try:
            return await asyncio.get_running_loop().run_in_executor(None, client, port)
        finally:
            await stop_server(server)

    interim, (status, reply) = run(main())
    assert interim == b"HTTP/1.1 100 (Continue)\r\n\r\n"
    assert json.loads(reply)["sha256"] == _digest(body)
    assert {c[0] for c in reads} == {"read_into"}


# -- streamed bodies -------------------------------------------------------------------


def test_http_body_streamed_gets_bounded_chunks_from_a_bounded_buffer(reads):
    nbytes = 8 * MiB + 3
    body = _pattern(nbytes)
    chunk_nbytes = 16 * 1024

    async def main():
        server, port = await _serve(chunk_size=chunk_nbytes, max_body_size=64 * MiB)
        try:
            tracemalloc.start()
            status, reply = await _request(port, _head("PUT", "/streamed", nbytes), body, pieces=5)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            assert status.startswith(b"HTTP/1.1 200"), status
            return json.loads(reply), peak
        finally:
            await stop_server(server)

    reply, peak = run(main())
    assert reply["sha256"] == _digest(body) and reply["types"] == ["bytes"]
    sizes = reply["sizes"]
    assert sum(sizes) == nbytes and max(sizes) <= chunk_nbytes
    assert len(sizes) >= nbytes // chunk_nbytes
    # one reused buffer of STREAM_RECV_NBYTES, each read taking what arrived
    assert {c[0] for c in reads} == {"read_into"}
    assert all(n <= STREAM_RECV_NBYTES and partial for _, n, partial in reads)
    assert len(reads) < len(sizes)
    # never the whole body in memory (measured: 0.33 MiB; stock 0.16 MiB)
    assert peak < MiB, peak


async def _counting_loop_turns(coro):
    """Await ``coro`` while a callback counts the event loop's turns;
    return (turns, its result)."""
    ticks = 0
    done = False

    def tick():
        nonlocal ticks
        if not done:
            ticks += 1
            asyncio.get_running_loop().call_soon(tick)

    tick()
    try:
        result = await coro
    finally:
        done = True
    return ticks, result


def test_http_body_streamed_reading_gives_the_loop_turns():
    """Bytes that are all there at once (a scripted socket) still leave
    the event loop a turn per YIELD_NBYTES, as Tornado's own reader does."""
    nbytes = 4 * MiB

    async def main():
        fake = FakeSocket(script=[nbytes] * 64)
        stream = ReadIntoIOStream(fake)  # type: ignore[arg-type]
        conn = ReadIntoHTTP1Connection(stream, False)
        received = []

        class Recorder(httputil.HTTPMessageDelegate):
            def data_received(self, chunk):
                received.append(len(chunk))

        try:
            ticks, _ = await _counting_loop_turns(conn._read_streamed_body(nbytes, Recorder()))
        finally:
            stream.close()
        return ticks, received

    ticks, received = run(main())
    assert sum(received) == nbytes
    assert ticks >= nbytes // YIELD_NBYTES - 1


def test_http_body_fixed_length_reading_gives_the_loop_turns():
    nbytes = 16 * MiB

    async def main():
        fake = FakeSocket(script=[nbytes] * 64)
        stream = ReadIntoIOStream(fake)  # type: ignore[arg-type]
        try:
            ticks, body = await _counting_loop_turns(read_body_bytes(stream, nbytes))
        finally:
            stream.close()
        return ticks, body, fake.recv_sizes

    ticks, body, recv_sizes = run(main())
    assert type(body) is bytes and len(body) == nbytes
    assert recv_sizes == [MiB, MiB, 2 * MiB, 4 * MiB, 8 * MiB]  # one recv per region
    assert ticks >= len(recv_sizes)  # every region, all there at once, is followed by a turn


# -- limits and failures ---------------------------------------------------------------


def test_http_body_max_body_size_still_enforced(reads, caplog):
    async def main():
        server, port = await _serve(max_body_size=MiB)
        try:
            status, reply = await _request(port, _head("POST", "/body", MiB), _pattern(MiB))
            assert json.loads(reply)["nbytes"] == MiB
            status, _ = await _request(port, _head("POST", "/body", MiB + 1), _pattern(MiB + 1))
            assert status.startswith(b"HTTP/1.1 400") or status == b""
            # a streamed handler lowering the limit in prepare()
            status, _ = await _request(port, _head("PUT", "/streamed?limit=65536", 65537), _pattern(65537))
            assert status.startswith(b"HTTP/1.1 400") or status == b""
            await wait_no_connections(server)
        finally:
            await stop_server(server)

    with caplog.at_level(logging.INFO, logger="tornado.general"):
        run(main())
    assert sum("Content-Length too long" in r.getMessage() for r in caplog.records) == 2
    # nothing was read into a buffer for the refused bodies
    assert sum(n for kind, n, _ in reads if kind == "read_into") == MiB
    assert [e for e in EVENTS if e[0] == "post"] == [("post", "ReadIntoHTTP1Connection")]


@pytest.mark.parametrize("path", ["/body", "/streamed"])
def test_http_body_truncated_by_the_client_closes_cleanly(reads, caplog, path):
    nbytes = 4 * MiB
    sent = MiB + 12345

    def client(port):
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(_head("PUT" if path == "/streamed" else "POST", path, nbytes))
            sock.sendall(_pattern(sent))
            sock.shutdown(socket.SHUT_WR)
            # Until the server closes: it has then taken the connection (a
            # connection still in the listen backlog is not yet among the
            # server's, and wait_no_connections would not wait for it).
            with contextlib.suppress(ConnectionResetError):
                while sock.recv(65536):
                    pass

    async def main():
        closed = asyncio.Event()
        STREAMED_CLOSED[:] = [closed]
        server, port = await _serve()
        try:
            await asyncio.get_running_loop().run_in_executor(None, client, port)
            await wait_no_connections(server)
            if path == "/streamed":
                await closed.wait()
        finally:
            STREAMED_CLOSED.clear()
            await stop_server(server)

    with caplog.at_level(logging.WARNING):
        run(main())
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    if tornado.version_info < (6, 6):
        # Tornado 6.5 itself logs the cancelled handler task (stock too;
        # 6.6 checks f.cancelled() first)
        warnings = [r for r in warnings if "_HandlerDelegate.execute" not in r.getMessage()]
    assert warnings == []
    assert not [e for e in EVENTS if e[0] == "post"]  # the handler never ran
    if path == "/streamed":
        assert EVENTS == [("streamed closed", sent)]
    assert {c[0] for c in reads} == {"read_into"}


# -- stock paths kept ------------------------------------------------------------------


def test_http_body_gzip_request_falls_back_to_stock(reads):
    plain = _pattern(2 * MiB)
    packed = gzip.compress(plain)

    async def main():
        server, port = await _serve(decompress_request=True)
        try:
            head = _head("POST", "/body", len(packed), "Content-Encoding: gzip\r\n")
            _, reply = await _request(port, head, packed)
            assert json.loads(reply) == {"type": "bytes", "nbytes": len(plain), "sha256": _digest(plain)}
            compressed_reads = list(reads)
            reads.clear()
            _, reply = await _request(port, _head("POST", "/body", len(plain)), plain)
            assert json.loads(reply)["sha256"] == _digest(plain)
            return compressed_reads
        finally:
            await stop_server(server)

    compressed_reads = run(main())
    assert {c[0] for c in compressed_reads} == {"read_bytes"}  # Tornado's own chunked reads
    assert {c[0] for c in reads} == {"read_into"}  # an uncompressed body on the same server


def test_http_body_unknown_delegate_falls_back_to_stock(reads):
    received = []

    class Delegate(httputil.HTTPMessageDelegate):
        def __init__(self, conn):
            self.conn = conn

        def data_received(self, chunk):
            received.append(chunk)

        def finish(self):
            self.conn.write_headers(
                httputil.ResponseStartLine("HTTP/1.1", 200, "OK"), httputil.HTTPHeaders({"Content-Length": "0"})
            )
            self.conn.finish()

    class Router(httputil.HTTPServerConnectionDelegate):
        def start_request(self, server_conn, request_conn):
            return Delegate(request_conn)

    body = _pattern(MiB)

    async def main():
        server, port = await _serve(Router())
        try:
            status, _ = await _request(port, _head("POST", "/", len(body)), body)
            assert status.startswith(b"HTTP/1.1 200")
        finally:
            await stop_server(server)

    run(main())
    assert b"".join(received) == body
    assert {c[0] for c in reads} == {"read_bytes"}


# -- responses ---------------------------------------------------------------------------


def test_http_response_large_chunk_leaves_with_its_headers_in_one_gather_write(monkeypatch):
    writes = []
    writelines = ReadIntoIOStream.writelines

    def recording_writelines(self, buffers):
        buffers = list(buffers)
        writes.append([len(b) for b in buffers])
        return writelines(self, buffers)

    monkeypatch.setattr(ReadIntoIOStream, "writelines", recording_writelines)
    assert len(PAYLOAD) >= GATHER_MIN_NBYTES
    buf = bytearray(len(PAYLOAD))

    async def main():
        server, port = await _serve()
        try:
            tracemalloc.start()
            status, nbytes = await asyncio.get_running_loop().run_in_executor(
                None, _blocking_get_into, port, "/download?mode=whole", buf
            )
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            assert status.startswith(b"HTTP/1.1 200") and nbytes == len(PAYLOAD) and buf == PAYLOAD
            return peak
        finally:
            await stop_server(server)

    peak = run(main())
    # header block and the 4 MiB chunk, by reference, in one writelines
    assert len(writes) == 1 and len(writes[0]) == 2 and writes[0][1] == len(PAYLOAD)
    # no copy of the body (stock: data += chunk makes one of 4 MiB)
    assert peak < len(PAYLOAD) // 2, peak


def _blocking_get_into(port, path, buf):
    """GET ``path``; receive the body into ``buf`` (allocated before any
    tracing, so that tracemalloc sees only the server)."""
    with socket.create_connection(("127.0.0.1", port)) as sock, sock.makefile("rb") as reader:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        status = reader.readline()
        while reader.readline() not in (b"\r\n", b""):
            pass
        view, filled = memoryview(buf), 0
        while filled < len(buf):
            n = reader.readinto(view[filled:])
            if not n:
                break
            filled += n
        return status, filled


def test_http_response_chunked_and_over_length_keep_stock_behaviour(caplog):
    async def main():
        server, port = await _serve()
        client = AsyncHTTPClient(force_instance=True)
        try:
            response = await client.fetch(f"http://127.0.0.1:{port}/download?mode=chunked")
            assert response.body == PAYLOAD + PAYLOAD[:1000]
            assert response.headers.get("Transfer-Encoding") == "chunked"
            response = await client.fetch(f"http://127.0.0.1:{port}/download?mode=whole")
            assert response.body == PAYLOAD
            with pytest.raises((HTTPClientError, HTTPStreamClosedError)):
                await client.fetch(f"http://127.0.0.1:{port}/download?mode=too-long")
        finally:
            client.close()
            await stop_server(server)

    with caplog.at_level(logging.ERROR):
        run(main())
    assert any("Tried to write more data than Content-Length" in str(r.exc_info) for r in caplog.records if r.exc_info)
