"""``install(stream_kwargs=...)``: extra stream arguments (busy polling off,
say) for every stream that Tornado's own servers and clients build."""

from __future__ import annotations

import pytest
from tornado import web
from tornado.httpclient import AsyncHTTPClient
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port

import tornado_readinto
from tornado_readinto import ReadIntoAsyncHTTPClient, ReadIntoHTTPServer, install, uninstall

from ..conftest import run


class _BusyPoll(web.RequestHandler):
    def get(self):
        self.write(repr(self.request.connection.stream.busy_poll_s))


@pytest.fixture
def restore_configuration():
    saved = HTTPServer._save_configuration(), AsyncHTTPClient._save_configuration()
    try:
        yield
    finally:
        uninstall()
        HTTPServer._restore_configuration(saved[0])
        AsyncHTTPClient._restore_configuration(saved[1])


def test_install_stream_kwargs_reach_server_and_client_streams(restore_configuration, loop_name):
    install(stream_kwargs={"busy_poll_s": 0})
    install(stream_kwargs={"busy_poll_s": 0})  # the same again: harmless

    async def main():
        server = HTTPServer(web.Application([("/", _BusyPoll)]))
        assert type(server) is ReadIntoHTTPServer
        sock, port = bind_unused_port()
        server.add_sockets([sock])
        client = AsyncHTTPClient(force_instance=True)
        try:
            assert type(client) is ReadIntoAsyncHTTPClient
            response = await client.fetch(f"http://127.0.0.1:{port}/")
            assert response.body == b"0"  # the server's stream
            stream = await client.tcp_client.connect("127.0.0.1", port)  # the client's streams
            assert stream.busy_poll_s == 0
            stream.close()
        finally:
            client.close()
            server.stop()

    run(main(), loop=loop_name)


def test_install_without_stream_kwargs_keeps_the_default(restore_configuration):
    install()

    async def main():
        server = HTTPServer(web.Application([("/", _BusyPoll)]))
        sock, port = bind_unused_port()
        server.add_sockets([sock])
        client = AsyncHTTPClient(force_instance=True)
        try:
            response = await client.fetch(f"http://127.0.0.1:{port}/")
            assert response.body == repr(0.0).encode()  # busy polling off
        finally:
            client.close()
            server.stop()

    run(main())


def test_install_refuses_other_stream_kwargs_while_installed(restore_configuration):
    install(stream_kwargs={"busy_poll_s": 0})
    with pytest.raises(RuntimeError, match="uninstall"):
        install()
    uninstall()
    assert not tornado_readinto.installed()
    install()  # after uninstall(), anything goes
    assert HTTPServer._save_configuration() == (ReadIntoHTTPServer, {})


def test_uninstall_drops_stream_kwargs(restore_configuration):
    before = HTTPServer._save_configuration(), AsyncHTTPClient._save_configuration()
    install(stream_kwargs={"busy_poll_s": 0})
    assert HTTPServer._save_configuration()[1]["stream_kwargs"] == {"busy_poll_s": 0}
    assert AsyncHTTPClient._save_configuration()[1]["stream_kwargs"] == {"busy_poll_s": 0}
    uninstall()
    assert (HTTPServer._save_configuration(), AsyncHTTPClient._save_configuration()) == before
