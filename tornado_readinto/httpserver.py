"""`ReadIntoHTTPServer`: a `tornado.httpserver.HTTPServer` over
`ReadIntoIOStream`\\ s.

It is `HTTPServer` with `ReadIntoTCPServer` in front of `TCPServer`, so every
connection it accepts (plain or TLS) is one of this package's streams; the
HTTP/1.1 protocol code, ``xheaders``, ``max_body_size``, ``decompress_request``
and the rest are stock.  `tornado_readinto.install` makes it the class that
``HTTPServer(...)`` and `tornado.web.Application.listen` build.
"""

from __future__ import annotations

from tornado.httpserver import HTTPServer

from .tcpserver import ReadIntoTCPServer

__all__ = ["ReadIntoHTTPServer"]


class ReadIntoHTTPServer(ReadIntoTCPServer, HTTPServer):
    """A drop-in `tornado.httpserver.HTTPServer` whose connections are
    `ReadIntoIOStream`\\ s (`SSLReadIntoIOStream` with ``ssl_options``)::

        server = ReadIntoHTTPServer(app, max_body_size=1 << 30)
        server.listen(8888)

    Takes the same arguments as `HTTPServer`.  To pass extra stream
    arguments, override `ReadIntoTCPServer.make_stream`.

    .. versionadded:: 0.1
    """
