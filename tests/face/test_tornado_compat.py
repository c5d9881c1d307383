"""The Tornado internals this package relies on still exist (and mean what we
think), so an incompatible Tornado release fails here first."""

import socket
import subprocess
import sys

from tornado.iostream import IOStream, SSLIOStream

from tornado_readinto import ReadIntoIOStream, SSLReadIntoIOStream
from tornado_readinto.core.writebuffer import ChunkedWriteBuffer
from tornado_readinto.face import _tornado_compat, _tornado_entry_points

from ..conftest import run


def test_compat_private_attributes_exist_on_stock_and_ours():
    async def main():
        a, b = socket.socketpair()
        streams = [IOStream(a), ReadIntoIOStream(b)]
        try:
            for stream in streams:
                assert _tornado_compat.check_stream_attrs(stream) == [], type(stream)
            # dask.distributed appends to this and bumps _total_write_index
            assert isinstance(streams[1]._write_buffer, ChunkedWriteBuffer)
            for name in ("append", "peek", "advance"):  # clear() is new in 6.6
                assert callable(getattr(streams[0]._write_buffer, name))
        finally:
            for stream in streams:
                stream.close()

    run(main())


def test_compat_stock_hooks_we_override_still_exist():
    for name in _tornado_compat.PRIVATE_STREAM_HOOKS:
        assert hasattr(IOStream, name), name
    for name in _tornado_compat.PRIVATE_SSL_STREAM_HOOKS:
        assert hasattr(SSLIOStream, name), name


def test_compat_every_override_of_a_tornado_stream_method_is_listed():
    """A method our stream classes define under a name that Tornado's
    stream classes also have replaces Tornado's: each such name must be in
    `PRIVATE_STREAM_HOOKS` (or the SSL list); public methods are the
    documented API, whose behaviour the upstream suites check."""
    listed = set(_tornado_compat.PRIVATE_STREAM_HOOKS) | set(_tornado_compat.PRIVATE_SSL_STREAM_HOOKS)
    ours_and_theirs = (
        (ReadIntoIOStream, IOStream),
        (SSLReadIntoIOStream, SSLIOStream),
    )
    for ours, theirs in ours_and_theirs:
        for name, value in vars(ours).items():
            if not callable(value) or name.startswith("__") or not hasattr(theirs, name):
                continue
            if name.startswith("_"):
                assert name in listed, f"{ours.__name__}.{name} overrides Tornado's without being listed"


def test_compat_unsupported_tornado_fails_loudly():
    code = (
        "import tornado; tornado.version_info = (6, 4, 0, 0); tornado.version = '6.4';"
        "import tornado_readinto.face._tornado_compat"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "needs tornado>=6.5" in result.stderr


def test_compat_a_missing_entry_point_hook_is_reported(monkeypatch):
    """The import-time check names what a Tornado release lacks (importing
    this package already proves that this Tornado lacks nothing)."""
    from tornado.tcpserver import TCPServer

    monkeypatch.delattr(TCPServer, "_handle_connection")
    monkeypatch.delattr(_tornado_entry_points.HTTP1Connection, "_parse_headers")
    assert _tornado_entry_points.check_entry_point_hooks() == [
        "TCPServer._handle_connection",
        "HTTP1Connection._parse_headers",
    ]


def test_compat_a_missing_stream_attribute_is_reported():
    class Bare:
        _read_buffer = _write_buffer = None

    missing = _tornado_compat.check_stream_attrs(Bare())
    assert "_read_buffer" not in missing and "_write_buffer" not in missing
    assert "_total_write_index" in missing and len(missing) == len(_tornado_compat.PRIVATE_STREAM_ATTRS) - 2


def test_compat_our_entry_points_override_the_stock_hooks():
    from tornado.tcpclient import TCPClient
    from tornado.tcpserver import TCPServer

    from tornado_readinto import ReadIntoTCPClient, ReadIntoTCPServer
    from tornado_readinto.face.httpserver import ReadIntoHTTP1Connection

    # our copies override exactly the stock private methods
    assert ReadIntoHTTP1Connection._read_fixed_body is not _tornado_entry_points.HTTP1Connection._read_fixed_body
    assert ReadIntoTCPServer._handle_connection is not TCPServer._handle_connection
    assert ReadIntoTCPClient._create_stream is not TCPClient._create_stream


def test_compat_private_instance_attributes_exist():
    from tornado.httpclient import HTTPRequest
    from tornado.simple_httpclient import SimpleAsyncHTTPClient
    from tornado.tcpclient import TCPClient
    from tornado.websocket import WebSocketClientConnection

    async def main():
        client = TCPClient()
        http_client = SimpleAsyncHTTPClient(force_instance=True)
        # a websocket connection to a closed port: it fails, but its
        # __init__ has set its attributes by then
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        request = HTTPRequest(f"ws://127.0.0.1:{port}/", connect_timeout=5)
        ws = WebSocketClientConnection(_tornado_entry_points._RequestProxy(request, HTTPRequest._DEFAULTS))
        a, b = socket.socketpair()
        stream = IOStream(a)
        http_conn = _tornado_entry_points.HTTP1Connection(stream, False)
        http_server = _tornado_entry_points.HTTPServer(lambda request: None)
        try:
            instances = {
                "tornado.tcpclient.TCPClient": client,
                "tornado.simple_httpclient.SimpleAsyncHTTPClient": http_client,
                "tornado.websocket.WebSocketClientConnection": ws,
                "tornado.httpserver.HTTPServer": http_server,
                "tornado.http1connection.HTTP1ServerConnection": _tornado_entry_points.HTTP1ServerConnection(stream),
                **_http_delegates(http_conn),
            }
            for qualname, names in _tornado_entry_points.PRIVATE_INSTANCE_ATTRS.items():
                for name in names:
                    assert hasattr(instances[qualname], name), (qualname, name)
            assert isinstance(http_client.tcp_client, TCPClient)
            assert isinstance(ws.tcp_client, TCPClient)
            try:
                await ws.connect_future
            except OSError:
                pass
        finally:
            client.close()
            http_client.close()
            stream.close()
            b.close()

    run(main())


def _http_delegates(http_conn):
    """One instance of each HTTP message delegate class whose attributes
    `tornado_readinto.face.httpserver` reads, keyed like PRIVATE_INSTANCE_ATTRS."""
    from tornado import httputil, web

    app = web.Application([("/", web.RequestHandler)])
    request = httputil.HTTPServerRequest(
        start_line=httputil.RequestStartLine("POST", "/", "HTTP/1.1"),
        headers=httputil.HTTPHeaders({"Host": "x"}),
        connection=http_conn,
    )
    handler_delegate = _tornado_entry_points._HandlerDelegate(app, request, web.RequestHandler, {}, [], {})
    callable_adapter = _tornado_entry_points._CallableAdapter(lambda request: None, http_conn)
    return {
        "tornado.http1connection.HTTP1Connection": http_conn,
        "tornado.http1connection._GzipMessageDelegate": _tornado_entry_points._GzipMessageDelegate(
            callable_adapter, 65536, 1 << 20
        ),
        "tornado.httpserver._ProxyAdapter": _tornado_entry_points._ProxyAdapter(callable_adapter, http_conn),
        "tornado.httpserver._CallableAdapter": callable_adapter,
        "tornado.routing._RoutingDelegate": _tornado_entry_points._RoutingDelegate(app, None, http_conn),
        "tornado.web._HandlerDelegate": handler_delegate,
    }


def test_compat_body_sinks_turn_a_stored_bytes_into_request_body_without_copy():
    """ReadIntoHTTP1Connection stores the whole body in the sink's chunks
    (a bytearray in Tornado 6.6, a list in 6.5); its finish() must make that
    very object request.body."""
    from tornado import httputil, web

    async def main():
        a, b = socket.socketpair()
        stream = IOStream(a)
        try:
            conn = _tornado_entry_points.HTTP1Connection(stream, False)
            body = b"x" * 100_000
            seen: list = []
            adapter = _tornado_entry_points._CallableAdapter(seen.append, conn)
            start_line = httputil.RequestStartLine("POST", "/", "HTTP/1.1")
            headers = httputil.HTTPHeaders({"Host": "x", "Content-Type": "application/octet-stream"})
            adapter.headers_received(start_line, headers)
            adapter._chunks = [body] if isinstance(adapter._chunks, list) else body  # type: ignore[assignment]
            adapter.finish()
            assert seen[0].body is body

            app = web.Application([("/", web.RequestHandler)])
            request = httputil.HTTPServerRequest(start_line=start_line, headers=headers, connection=conn)
            delegate = _tornado_entry_points._HandlerDelegate(app, request, web.RequestHandler, {}, [], {})
            assert delegate.stream_request_body is False
            delegate.execute = lambda: None  # type: ignore[method-assign]  # finish() stores the body, then executes
            delegate.chunks = [body] if isinstance(delegate.chunks, list) else body  # type: ignore[assignment]
            delegate.finish()
            assert request.body is body
        finally:
            stream.close()
            b.close()

    run(main())


def test_compat_default_ssl_context_takes_tornado_6_5_contexts_and_6_6_factories(monkeypatch):
    import ssl

    client, server = _tornado_compat.default_ssl_context(False), _tornado_compat.default_ssl_context(True)
    assert isinstance(client, ssl.SSLContext) and isinstance(server, ssl.SSLContext)
    assert client.check_hostname and not server.check_hostname  # the sides are not swapped
    # Tornado 6.5 keeps plain contexts where 6.6 keeps cached functions
    monkeypatch.setattr(_tornado_compat, "_client_ssl_defaults", client)
    monkeypatch.setattr(_tornado_compat, "_server_ssl_defaults", server)
    assert _tornado_compat.default_ssl_context(False) is client
    assert _tornado_compat.default_ssl_context(True) is server
