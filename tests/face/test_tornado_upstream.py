"""Tornado's own iostream test suite, run unchanged against our classes, on
both event loops.

The upstream module is imported (not its classes) so that pytest does not
collect the upstream tests a second time under their own names.
"""

import os
import ssl
from unittest import mock

from tornado.netutil import ssl_options_to_context, ssl_wrap_socket
from tornado.test import iostream_test as upstream
from tornado.testing import gen_test

from tornado_readinto import ReadIntoIOStream, SSLReadIntoIOStream

from .. import _upstream

_TORNADO_TEST_DIR = os.path.dirname(upstream.__file__)


def _server_ssl_options():
    return dict(
        certfile=os.path.join(_TORNADO_TEST_DIR, "test.crt"),
        keyfile=os.path.join(_TORNADO_TEST_DIR, "test.key"),
    )


class _OurReadSeam:
    """Upstream tests that patch a private seam of Tornado's read path, which
    these streams do not use (every read goes through
    ``ReadIntoIOStream._read`` and the core's ``receive``), run against the
    stream's own seam, its ``read_from_fd`` (which the core receives
    through when it is replaced): the promise tested stays the same."""

    @gen_test
    def test_read_until_close_with_error(self):
        # Upstream patches BaseIOStream._try_inline_read: an error of the
        # inline read is raised to the caller of read_until_close.
        server, client = yield self.make_iostream_pair()
        try:
            client.read_from_fd = mock.Mock(side_effect=OSError("boom"))
            with self.assertRaisesRegex(OSError, "boom"):
                client.read_until_close()
        finally:
            server.close()
            client.close()


class TestReadIntoIOStream(_OurReadSeam, upstream.TestIOStreamMixin):
    def _make_server_iostream(self, connection, **kwargs):
        return ReadIntoIOStream(connection, **kwargs)

    def _make_client_iostream(self, connection, **kwargs):
        return ReadIntoIOStream(connection, **kwargs)


class TestSSLReadIntoIOStream(_OurReadSeam, upstream.TestIOStreamMixin):
    def _make_server_iostream(self, connection, **kwargs):
        ssl_ctx = ssl_options_to_context(_server_ssl_options(), server_side=True)
        connection = ssl_ctx.wrap_socket(connection, server_side=True, do_handshake_on_connect=False)
        return SSLReadIntoIOStream(connection, **kwargs)

    def _make_client_iostream(self, connection, **kwargs):
        return SSLReadIntoIOStream(connection, ssl_options=dict(cert_reqs=ssl.CERT_NONE), **kwargs)


class TestSSLReadIntoIOStreamContext(_OurReadSeam, upstream.TestIOStreamMixin):
    def _make_server_iostream(self, connection, **kwargs):
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(**_server_ssl_options())
        connection = ssl_wrap_socket(connection, context, server_side=True, do_handshake_on_connect=False)
        return SSLReadIntoIOStream(connection, **kwargs)

    def _make_client_iostream(self, connection, **kwargs):
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return SSLReadIntoIOStream(connection, ssl_options=context, **kwargs)


class TestReadIntoIOStreamWebHTTP(upstream.AsyncHTTPTestCase, upstream.TestIOStreamWebMixin):
    def _make_client_iostream(self):
        import socket

        return ReadIntoIOStream(socket.socket())

    def get_app(self):
        return self.mixin_get_app()


class TestSSLReadIntoIOStreamWebHTTPS(upstream.AsyncHTTPSTestCase, upstream.TestIOStreamWebMixin):
    def _make_client_iostream(self):
        import socket

        return SSLReadIntoIOStream(socket.socket(), ssl_options=dict(cert_reqs=ssl.CERT_NONE))

    def get_app(self):
        return self.mixin_get_app()


# -- the same suites on uvloop -------------------------------------------------------


class _OnUvloop(_upstream.OnLoop):
    loop = "uvloop"

    def test_the_loop_is_uvloop(self):
        import uvloop

        assert isinstance(self.io_loop.asyncio_loop, uvloop.Loop)


class TestReadIntoIOStreamUvloop(_OnUvloop, TestReadIntoIOStream):
    pass


class TestSSLReadIntoIOStreamUvloop(_OnUvloop, TestSSLReadIntoIOStream):
    pass


class TestSSLReadIntoIOStreamContextUvloop(_OnUvloop, TestSSLReadIntoIOStreamContext):
    pass


class TestReadIntoIOStreamWebHTTPUvloop(_OnUvloop, TestReadIntoIOStreamWebHTTP):
    pass


class TestSSLReadIntoIOStreamWebHTTPSUvloop(_OnUvloop, TestSSLReadIntoIOStreamWebHTTPS):
    pass


# -- start_tls: Tornado's suite, its IOStream being ours, everywhere -------------------

_upstream.mirror_everywhere(upstream, globals(), patches={"IOStream": ReadIntoIOStream}, only=("TestIOStreamStartTLS",))
