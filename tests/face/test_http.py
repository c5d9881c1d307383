"""ReadIntoHTTPServer, ReadIntoAsyncHTTPClient, websockets and install():
Tornado's httpserver_test, web_test, websocket_test and simple_httpclient_test
with install() in effect, then our own checks."""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import ssl
import unittest.mock

import pytest
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.httpserver import HTTPServer
from tornado.simple_httpclient import HTTPStreamClosedError, SimpleAsyncHTTPClient
from tornado.test import httpserver_test as upstream_httpserver
from tornado.test import simple_httpclient_test as upstream_simple_httpclient
from tornado.test import web_test as upstream_web
from tornado.test import websocket_test as upstream_websocket
from tornado.testing import bind_unused_port
from tornado.websocket import WebSocketHandler

import tornado_readinto
from tornado_readinto import (
    ReadIntoAsyncHTTPClient,
    ReadIntoHTTPServer,
    ReadIntoIOStream,
    ReadIntoTCPClient,
    ReadIntoTCPServer,
    ReadIntoWebSocketClientConnection,
    SSLReadIntoIOStream,
    install,
    uninstall,
    websocket_connect,
)

from .. import _upstream
from ..conftest import run

# -- Tornado's suites, with install() in effect -----------------------------------

_UPSTREAM = {
    upstream_httpserver: {"SimpleAsyncHTTPClient": ReadIntoAsyncHTTPClient},
    upstream_web: {"SimpleAsyncHTTPClient": ReadIntoAsyncHTTPClient},
    upstream_websocket: {
        "SimpleAsyncHTTPClient": ReadIntoAsyncHTTPClient,
        "websocket_connect": websocket_connect,
    },
    upstream_simple_httpclient: {
        "SimpleAsyncHTTPClient": ReadIntoAsyncHTTPClient,
        "TCPServer": ReadIntoTCPServer,
    },
}


def _slow_environment(test):
    """Run an upstream test with Tornado's own knob for slow environments
    (``EMULATION=1``).  Its ``test_request_timeout`` gives a request 0.1 s to
    reach the handler before the client's timeout fires, TLS handshake
    included; on a loaded machine (one CPU shared with a busy process) the
    handshake alone can take longer, and the test then finds no request to
    release.  The knob makes that 0.5 s."""

    @functools.wraps(test)
    def run(self):
        with unittest.mock.patch.dict(os.environ, {"EMULATION": "1"}):
            return test(self)

    return run


for _module, _patches in _UPSTREAM.items():
    for _cls in _upstream.mirror_everywhere(_module, globals(), patches=_patches, use_install=True):
        if "test_request_timeout" in dir(_cls):
            _cls.test_request_timeout = _slow_environment(_cls.test_request_timeout)
del _module, _patches, _cls


@pytest.fixture(autouse=True, scope="module")
def _upstream_suites_built_our_streams():
    yield
    for module in _UPSTREAM:
        _upstream.check_built(module)


@pytest.fixture
def installed():
    install()
    yield
    uninstall()


# -- install() / uninstall() ------------------------------------------------------


def test_install_configures_tornado_and_uninstall_restores_exactly():
    saved = HTTPServer._save_configuration(), AsyncHTTPClient._save_configuration()
    HTTPServer.configure(None, xheaders=True)
    AsyncHTTPClient.configure(SimpleAsyncHTTPClient, max_clients=7)
    try:
        before = HTTPServer._save_configuration(), AsyncHTTPClient._save_configuration()
        assert not tornado_readinto.installed()
        install()
        install()  # harmless
        assert tornado_readinto.installed()
        assert HTTPServer.configured_class() is ReadIntoHTTPServer
        assert AsyncHTTPClient.configured_class() is ReadIntoAsyncHTTPClient

        async def main():
            client = AsyncHTTPClient(force_instance=True)
            try:
                assert type(client) is ReadIntoAsyncHTTPClient
                assert client.max_clients == 7  # configured kwargs are kept
                assert type(client.tcp_client) is ReadIntoTCPClient
            finally:
                client.close()
            server = HTTPServer(web.Application())
            assert type(server) is ReadIntoHTTPServer
            assert server.xheaders is True
            server.stop()

        run(main())
        uninstall()
        uninstall()  # harmless
        assert not tornado_readinto.installed()
        assert (HTTPServer._save_configuration(), AsyncHTTPClient._save_configuration()) == before
    finally:
        uninstall()
        HTTPServer._restore_configuration(saved[0])
        AsyncHTTPClient._restore_configuration(saved[1])


def test_install_drops_kwargs_of_a_non_simple_client():
    class OtherClient(AsyncHTTPClient):
        def initialize(self, special=None, **kwargs):  # pragma: no cover - never built
            super().initialize(**kwargs)

    saved = AsyncHTTPClient._save_configuration()
    AsyncHTTPClient.configure(OtherClient, special=1)
    try:
        install()
        assert AsyncHTTPClient._save_configuration() == (ReadIntoAsyncHTTPClient, {})
        uninstall()
        assert AsyncHTTPClient._save_configuration() == (OtherClient, {"special": 1})
    finally:
        uninstall()
        AsyncHTTPClient._restore_configuration(saved)


def _curl_client_class() -> type:
    """Tornado's CurlAsyncHTTPClient where pycurl imports, else a stand-in
    with the same base (`AsyncHTTPClient`, not `SimpleAsyncHTTPClient`) and
    the same ``initialize`` arguments."""
    try:
        from tornado.curl_httpclient import CurlAsyncHTTPClient
    except ImportError:  # no pycurl

        class CurlAsyncHTTPClient(AsyncHTTPClient):  # type: ignore[no-redef]
            def initialize(self, max_clients=10, defaults=None):  # pragma: no cover - never built
                super().initialize(defaults=defaults)

    return CurlAsyncHTTPClient


def test_install_replaces_a_curl_client_and_configuring_it_after_install_keeps_it():
    """``install()`` replaces a configured CurlAsyncHTTPClient (and its
    configured arguments) with ReadIntoAsyncHTTPClient; configured again
    after ``install()``, curl stays the client while ``HTTPServer(...)``
    still builds a ReadIntoHTTPServer; ``uninstall()`` restores the
    configuration from before ``install()``."""
    curl = _curl_client_class()
    saved = HTTPServer._save_configuration(), AsyncHTTPClient._save_configuration()
    AsyncHTTPClient.configure(curl, max_clients=20)
    try:
        install()
        assert AsyncHTTPClient._save_configuration() == (ReadIntoAsyncHTTPClient, {})  # curl replaced
        AsyncHTTPClient.configure(curl, max_clients=20)  # keep curl
        assert tornado_readinto.installed()
        assert HTTPServer.configured_class() is ReadIntoHTTPServer
        assert AsyncHTTPClient._save_configuration() == (curl, {"max_clients": 20})
        uninstall()
        assert not tornado_readinto.installed()
        assert HTTPServer._save_configuration() == saved[0]
        assert AsyncHTTPClient._save_configuration() == (curl, {"max_clients": 20})
    finally:
        uninstall()
        HTTPServer._restore_configuration(saved[0])
        AsyncHTTPClient._restore_configuration(saved[1])


# -- stream types under a RequestHandler ------------------------------------------


class _TypeHandler(web.RequestHandler):
    def get(self):
        self.write(type(self.request.connection.stream).__name__)

    def post(self):
        self.write(hashlib.sha256(self.request.body).hexdigest() + f" {len(self.request.body)}")


class _EchoWebSocket(WebSocketHandler):
    def on_message(self, message):
        self.write_message(f"{type(self.ws_connection.stream).__name__} {message}")


def _app():
    return web.Application([("/", _TypeHandler), ("/ws", _EchoWebSocket)])


async def _serve(**kwargs):
    """HTTPServer(...) on 127.0.0.1, as a user writes it; returns (server, port)."""
    sock, port = bind_unused_port()
    server = HTTPServer(_app(), **kwargs)
    server.add_sockets([sock])
    return server, port


def _recording_client(client):
    """Record the streams ``client``'s TCPClient builds."""
    streams = []
    make = client.tcp_client.make_stream

    def make_stream(*args, **kwargs):
        stream = make(*args, **kwargs)
        streams.append(stream)
        return stream

    client.tcp_client.make_stream = make_stream
    return streams


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_http_stream_types_after_install(installed, tls_contexts, scheme):
    server_ctx, client_ctx = tls_contexts

    async def main():
        server, port = await _serve(ssl_options=server_ctx if scheme == "https" else None)
        client = AsyncHTTPClient()
        streams = _recording_client(client)
        try:
            response = await client.fetch(f"{scheme}://127.0.0.1:{port}/", ssl_options=client_ctx)
            expected = "SSLReadIntoIOStream" if scheme == "https" else "ReadIntoIOStream"
            assert response.body.decode() == expected
            assert type(server) is ReadIntoHTTPServer
            assert [type(s) for s in streams] == [ReadIntoIOStream]  # start_tls converts it
        finally:
            client.close()
            server.stop()
            await server.close_all_connections()

    run(main())


def test_http_application_listen_after_install(installed):
    async def main():
        sock, port = bind_unused_port()
        sock.close()
        server = _app().listen(port, address="127.0.0.1")
        try:
            assert type(server) is ReadIntoHTTPServer
            response = await AsyncHTTPClient().fetch(f"http://127.0.0.1:{port}/")
            assert response.body == b"ReadIntoIOStream"
        finally:
            server.stop()
            await server.close_all_connections()
            AsyncHTTPClient().close()

    run(main())


@pytest.mark.parametrize("scheme", ["ws", "wss"])
def test_websocket_stream_types_on_both_ends(installed, tls_contexts, scheme):
    server_ctx, client_ctx = tls_contexts

    async def main():
        server, port = await _serve(ssl_options=server_ctx if scheme == "wss" else None)
        try:
            request = HTTPRequest(f"{scheme}://127.0.0.1:{port}/ws", ssl_options=client_ctx)
            conn = await websocket_connect(request)
            try:
                assert isinstance(conn, ReadIntoWebSocketClientConnection)
                client_type = SSLReadIntoIOStream if scheme == "wss" else ReadIntoIOStream
                assert type(conn.protocol.stream) is client_type
                await conn.write_message("hi")
                assert await conn.read_message() == f"{client_type.__name__} hi"
            finally:
                conn.close()
        finally:
            server.stop()
            await server.close_all_connections()

    run(main())


# -- large bodies and limits ---------------------------------------------------------


def test_http_64mib_request_body_arrives_intact(installed):
    body = bytes(range(256)) * (256 * 1024)  # 64 MiB
    assert len(body) == 64 * 1024 * 1024
    expected = f"{hashlib.sha256(body).hexdigest()} {len(body)}".encode()

    async def main():
        server, port = await _serve(max_body_size=128 * 1024 * 1024)
        client = AsyncHTTPClient()
        try:
            response = await client.fetch(
                f"http://127.0.0.1:{port}/",
                method="POST",
                body=body,
                headers={"Content-Type": "application/octet-stream"},
                request_timeout=60,
            )
            assert response.body == expected
        finally:
            client.close()
            server.stop()
            await server.close_all_connections()

    run(main(), timeout=60)


@pytest.mark.parametrize("impl", ["stock", "readinto"])
def test_http_max_body_size_is_enforced(impl, caplog):
    async def main():
        server, port = await _serve(max_body_size=1024 * 1024)
        assert type(server) is (ReadIntoHTTPServer if impl == "readinto" else HTTPServer)
        client = AsyncHTTPClient()
        try:
            ok = await client.fetch(f"http://127.0.0.1:{port}/", method="POST", body=b"x" * (1024 * 1024))
            assert ok.body.endswith(b" 1048576")
            with pytest.raises((HTTPClientError, HTTPStreamClosedError)) as info:
                await client.fetch(f"http://127.0.0.1:{port}/", method="POST", body=b"x" * (1024 * 1024 + 1))
            return type(info.value), getattr(info.value, "code", None)
        finally:
            client.close()
            server.stop()
            await server.close_all_connections()

    if impl == "readinto":
        install()
    try:
        with caplog.at_level(logging.INFO, logger="tornado.general"):
            run(main())
    finally:
        uninstall()
    assert any("Content-Length too long" in r.getMessage() for r in caplog.records)


def test_http_client_connect_to_closed_port_fails_like_stock(installed):
    async def main():
        sock, port = bind_unused_port()
        sock.close()
        client = AsyncHTTPClient()
        try:
            with pytest.raises(ConnectionRefusedError):
                await client.fetch(f"http://127.0.0.1:{port}/")
        finally:
            client.close()

    run(main())


def test_https_client_rejects_untrusted_server(installed, tls_contexts):
    server_ctx, _ = tls_contexts

    async def main():
        server, port = await _serve(ssl_options=server_ctx)
        client = AsyncHTTPClient()
        try:
            with pytest.raises(ssl.SSLError):
                await client.fetch(f"https://127.0.0.1:{port}/", ssl_options=ssl.create_default_context())
        finally:
            client.close()
            server.stop()
            await server.close_all_connections()

    with _QuietSSLErrors():
        run(main())


class _QuietSSLErrors:
    """Silence the expected "SSL Error" warning of the server."""

    def __enter__(self):
        self._logger = logging.getLogger("tornado.general")
        self._level = self._logger.level
        self._logger.setLevel(logging.CRITICAL)

    def __exit__(self, *exc_info):
        self._logger.setLevel(self._level)
