"""ReadIntoTCPServer and ReadIntoTCPClient: Tornado's own tcpserver_test and
tcpclient_test with TCPServer/TCPClient replaced by ours, then our own checks
(stream types on both ends, plain and TLS; failures)."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from contextlib import closing

import pytest
import tornado.testing
import tornado.util
from tornado.iostream import StreamClosedError
from tornado.tcpclient import TCPClient
from tornado.test import tcpclient_test as upstream_client
from tornado.test import tcpserver_test as upstream_server

from tornado_readinto import (
    ReadIntoIOStream,
    ReadIntoTCPClient,
    ReadIntoTCPServer,
    SSLReadIntoIOStream,
)

from .. import _upstream
from ..conftest import run, until

# -- Tornado's suites ------------------------------------------------------------


class _UpstreamTestTCPServer(upstream_client.TestTCPServer, ReadIntoTCPServer):
    """tcpclient_test's server, accepting through ReadIntoTCPServer."""


def _run_subproc_with_ours(self, code):
    # The multiprocess tests run TCPServer's documented examples in a child
    # interpreter: run them with ours.
    stock = "from tornado.tcpserver import TCPServer"
    assert stock in code
    code = code.replace(stock, "from tornado_readinto import ReadIntoTCPServer as TCPServer")
    return upstream_server.TestMultiprocess.run_subproc(self, code)


_upstream.mirror_everywhere(
    upstream_server,
    globals(),
    patches={"TCPServer": ReadIntoTCPServer},
    overrides={"TestMultiprocess": {"run_subproc": _run_subproc_with_ours}},
)
_upstream.mirror_everywhere(
    upstream_client,
    globals(),
    patches={
        "TCPServer": ReadIntoTCPServer,
        "TCPClient": ReadIntoTCPClient,
        "TestTCPServer": _UpstreamTestTCPServer,
    },
)


@pytest.fixture(autouse=True, scope="module")
def _upstream_suites_built_our_streams():
    yield
    for module in (upstream_server, upstream_client):
        _upstream.check_built(module)


# -- our own checks --------------------------------------------------------------


class _RecordingServer(ReadIntoTCPServer):
    """Echoes what it reads until EOF; records the streams it was given."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.streams = []
        self.handled = asyncio.Event()

    async def handle_stream(self, stream, address):
        self.streams.append(stream)
        self.handled.set()
        buf = bytearray(65536)
        try:
            while True:
                n = await stream.read_into(buf, partial=True)
                await stream.write(bytes(buf[:n]))
        except StreamClosedError:
            pass
        finally:
            stream.close()


def _listen(server, family=socket.AF_INET, host="127.0.0.1"):
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    sock.listen(16)
    sock.setblocking(False)
    server.add_socket(sock)
    return sock.getsockname()[1]


async def _until_closed(stream, timeout=5):
    """Wait until the peer closes ``stream`` (cleanly or not)."""
    try:
        await asyncio.wait_for(stream.read_until_close(), timeout)
    except StreamClosedError:
        pass


async def _echo_once(stream, payload=b"hello"):
    await stream.write(payload)
    buf = bytearray(len(payload))
    await stream.read_into(buf)
    assert bytes(buf) == payload


@pytest.mark.parametrize("host,family", [("127.0.0.1", socket.AF_INET), ("::1", socket.AF_INET6)])
def test_tcp_stream_types_plain(host, family):
    async def main():
        server = _RecordingServer(max_buffer_size=1 << 20, read_chunk_size=4096)
        port = _listen(server, family, host)
        client = ReadIntoTCPClient()
        try:
            stream = await client.connect(host, port, max_buffer_size=1 << 21)
            try:
                assert type(stream) is ReadIntoIOStream
                assert stream.max_buffer_size == 1 << 21
                await _echo_once(stream)
                (server_stream,) = server.streams
                assert type(server_stream) is ReadIntoIOStream
                # TCPServer's arguments reach the stream
                assert server_stream.max_buffer_size == 1 << 20
                assert server_stream.read_chunk_size == 4096
            finally:
                stream.close()
        finally:
            server.stop()
            client.close()

    run(main())


@pytest.mark.parametrize("options", ["context", "dict"])
def test_tcp_stream_types_tls(tls_contexts, tmp_path, options):
    server_ctx, client_ctx = tls_contexts

    async def main():
        if options == "dict":
            import trustme

            ca = trustme.CA()
            cert = ca.issue_cert("127.0.0.1")
            certfile, keyfile = tmp_path / "cert.pem", tmp_path / "key.pem"
            cert.cert_chain_pems[0].write_to_path(str(certfile))
            cert.private_key_pem.write_to_path(str(keyfile))
            ssl_options = dict(certfile=str(certfile), keyfile=str(keyfile))
            client_ssl = ssl.create_default_context()
            ca.configure_trust(client_ssl)
        else:
            ssl_options, client_ssl = server_ctx, client_ctx
        server = _RecordingServer(ssl_options=ssl_options)
        port = _listen(server)
        client = ReadIntoTCPClient()
        try:
            stream = await client.connect("127.0.0.1", port, ssl_options=client_ssl, timeout=10)
            try:
                assert type(stream) is SSLReadIntoIOStream
                await _echo_once(stream, b"x" * 100_000)
                (server_stream,) = server.streams
                assert type(server_stream) is SSLReadIntoIOStream
                assert server_stream.socket.version().startswith("TLS")
            finally:
                stream.close()
        finally:
            server.stop()
            client.close()

    run(main())


def test_tcp_server_make_stream_hook_chooses_arguments():
    class Server(_RecordingServer):
        def make_stream(self, connection, address):
            return ReadIntoIOStream(connection, busy_poll_s=0)

    async def main():
        server = Server()
        port = _listen(server)
        client = ReadIntoTCPClient()
        try:
            stream = await client.connect("127.0.0.1", port)
            with closing(stream):
                await _echo_once(stream)
            assert server.streams[0].busy_poll_s == 0
        finally:
            server.stop()
            client.close()

    run(main())


def test_tcp_server_make_stream_error_is_logged_and_server_keeps_serving(caplog):
    class Server(_RecordingServer):
        fail = True

        def make_stream(self, connection, address):
            if self.fail:
                self.fail = False
                connection.close()
                raise RuntimeError("no stream for you")
            return super().make_stream(connection, address)

    async def main():
        server = Server()
        port = _listen(server)
        client = ReadIntoTCPClient()
        try:
            first = await client.connect("127.0.0.1", port)
            with closing(first):
                with pytest.raises(StreamClosedError):
                    await first.read_bytes(1)
            second = await client.connect("127.0.0.1", port)
            with closing(second):
                await _echo_once(second)
        finally:
            server.stop()
            client.close()

    with caplog.at_level(logging.ERROR, logger="tornado.application"):
        run(main())
    assert any("Error in connection callback" in r.getMessage() for r in caplog.records)


def test_tcp_server_tls_handshake_failure_is_logged_and_server_keeps_serving(tls_contexts, caplog):
    server_ctx, client_ctx = tls_contexts

    async def main():
        server = _RecordingServer(ssl_options=server_ctx)
        port = _listen(server)
        client = ReadIntoTCPClient()
        try:
            # 1. garbage instead of a ClientHello
            raw = await client.connect("127.0.0.1", port)
            await raw.write(b"GET / HTTP/1.0\r\n\r\n" * 10)
            await _until_closed(raw)
            raw.close()
            # 2. a client that does not trust the server's certificate
            with pytest.raises(ssl.SSLError):
                await client.connect("127.0.0.1", port, ssl_options=ssl.create_default_context(), timeout=10)
            # 3. the server still serves a good client
            good = await client.connect("127.0.0.1", port, ssl_options=client_ctx, timeout=10)
            with closing(good):
                await _echo_once(good)
            await until(lambda: all(s.closed() for s in server.streams[:2]))  # the test's timeout bounds a hang
            assert len(server.streams) == 3
            assert server.streams[0].closed() and server.streams[1].closed()
        finally:
            server.stop()
            client.close()

    with caplog.at_level(logging.WARNING, logger="tornado.general"):
        run(main())
    ssl_errors = [r for r in caplog.records if r.getMessage().startswith("SSL Error on")]
    assert len(ssl_errors) >= 1, [r.getMessage() for r in caplog.records]


def test_tcp_client_connect_to_closed_port_fails_like_stock():
    async def main():
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()  # nobody listens there now
        errors = []
        for client in (TCPClient(), ReadIntoTCPClient()):
            try:
                with pytest.raises(OSError) as info:
                    await client.connect("127.0.0.1", port)
                errors.append((type(info.value), type(info.value.real_error)))
            finally:
                client.close()
        # stock raises StreamClosedError whose real_error is the refusal
        assert errors == [(StreamClosedError, ConnectionRefusedError)] * 2

    run(main())


def test_tcp_client_timeout_and_source_port():
    async def main():
        server = _RecordingServer()
        port = _listen(server)
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        source_port = probe.getsockname()[1]
        probe.close()
        client = ReadIntoTCPClient()
        try:
            stream = await client.connect("127.0.0.1", port, source_ip="127.0.0.1", source_port=source_port, timeout=5)
            with closing(stream):
                assert stream.socket.getsockname()[1] == source_port
                await _echo_once(stream)
            # a TLS handshake that never completes: a plain server answers nothing
            tls_client_ctx = ssl.create_default_context()
            silent = socket.socket()
            silent.bind(("127.0.0.1", 0))
            silent.listen(1)
            try:
                # tornado.util.TimeoutError: the builtin one from Python 3.11 on,
                # asyncio's before; Tornado 6.6 names the TLS handshake, 6.5 not
                with pytest.raises(tornado.util.TimeoutError, match="Timeout"):
                    await client.connect("127.0.0.1", silent.getsockname()[1], ssl_options=tls_client_ctx, timeout=0.3)
            finally:
                silent.close()
        finally:
            server.stop()
            client.close()

    run(main())


# -- one accept path for the package ------------------------------------------------


def test_comm_listen_accepts_through_readinto_tcp_server(tls_contexts):
    from tornado_readinto.channel import comm
    from tornado_readinto.face.tcpserver import HandshakingTCPServer

    server_ctx, client_ctx = tls_contexts

    async def main():
        seen = []

        async def handler(c):
            seen.append(type(c.stream))
            await c.write(await c.read())
            await c.close()

        for address, kwargs, stream_type in [
            ("tcp://127.0.0.1:0", {}, ReadIntoIOStream),
            ("tls://127.0.0.1:0", {"ssl_context": server_ctx}, SSLReadIntoIOStream),
        ]:
            listener = await comm.listen(address, handler, **kwargs)
            try:
                assert isinstance(listener._server, HandshakingTCPServer)
                assert isinstance(listener._server, ReadIntoTCPServer)
                client_kwargs = {"ssl_context": client_ctx} if kwargs else {}
                c = await comm.connect(listener.contact_address, **client_kwargs)
                assert type(c.stream) is stream_type
                await c.write({"x": 1})
                assert await c.read() == {"x": 1}
                await c.close()
            finally:
                listener.stop()
        assert seen == [ReadIntoIOStream, SSLReadIntoIOStream]

    run(main())


def test_handshaking_server_drops_failed_tls_handshake_and_keeps_serving(tls_contexts, caplog):
    from tornado_readinto.face.tcpserver import HandshakingTCPServer

    server_ctx, client_ctx = tls_contexts

    async def main():
        handled = []

        async def handler(stream, address):
            handled.append(type(stream))
            with closing(stream):
                await stream.write(b"ok")

        server = HandshakingTCPServer(handler, ssl_context=server_ctx, tls_handshake_timeout=0.5)
        port = _listen(server)
        client = ReadIntoTCPClient()
        try:
            silent = await client.connect("127.0.0.1", port)  # never says hello: times out
            bad = await client.connect("127.0.0.1", port)
            await bad.write(b"\x16\x03\x01\x00\x05hello")  # not a ClientHello
            good = await client.connect("127.0.0.1", port, ssl_options=client_ctx, timeout=5)
            assert await good.read_bytes(2) == b"ok"
            for stream in (silent, bad):
                await _until_closed(stream)
            for stream in (silent, bad, good):
                stream.close()
        finally:
            server.stop()
            server.stop()  # idempotent
            client.close()
        assert handled == [SSLReadIntoIOStream]

    with caplog.at_level(logging.WARNING, logger="tornado_readinto.face.tcpserver"):
        run(main())
    failures = [r.getMessage() for r in caplog.records if r.name == "tornado_readinto.face.tcpserver"]
    assert len(failures) == 2, failures
    assert all(m.startswith("TLS handshake with") for m in failures)


def test_dask_backend_imports_no_private_names_from_comm():
    import ast
    import inspect

    from tornado_readinto.dask import backend as dask_backend

    tree = ast.parse(inspect.getsource(dask_backend))
    private = [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module in ("comm", "tornado_readinto.channel.comm")
        for alias in node.names
        if alias.name.startswith("_")
    ]
    assert private == []


_CONNECT_BY_ADDRESS = """
import asyncio, socket, threading
from tornado_readinto import ReadIntoTCPClient

async def main():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = ReadIntoTCPClient()
        stream = await client.connect("127.0.0.1", listener.getsockname()[1])
        print(threading.active_count())
        stream.close()
        client.close()

asyncio.run(main())
"""


def test_tcp_client_connects_to_an_address_without_starting_a_thread():
    """Tornado's default resolver on asyncio's loop runs getaddrinfo in an
    executor thread that then stays, and a process with another thread never
    busy-polls: a numeric host is resolved inline (in a fresh process, so
    that no earlier test's thread counts)."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", _CONNECT_BY_ADDRESS], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1"]


def test_tcp_client_still_resolves_names():
    async def main():
        server = ReadIntoTCPServer()
        sock, port = tornado.testing.bind_unused_port()
        server.add_sockets([sock])
        client = ReadIntoTCPClient()
        try:
            stream = await client.connect("localhost", port)
            assert isinstance(stream, ReadIntoIOStream)
            stream.close()
        finally:
            client.close()
            server.stop()

    run(main())
