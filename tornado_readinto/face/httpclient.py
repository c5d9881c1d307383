"""`ReadIntoAsyncHTTPClient`: Tornado's `SimpleAsyncHTTPClient` over
`ReadIntoIOStream`\\ s.

`SimpleAsyncHTTPClient` opens every connection through its ``tcp_client``
attribute (a `TCPClient` made in ``initialize``); this subclass replaces it
with a `ReadIntoTCPClient` sharing the same resolver.  Everything else (the
connection limit and queue, timeouts, redirects, ``max_body_size``,
``hostname_mapping``, TLS options) is stock.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any, cast

from ._tornado_entry_points import SimpleAsyncHTTPClient
from .iostream import ReadIntoIOStream
from .tcpclient import ReadIntoTCPClient

__all__ = ["ReadIntoAsyncHTTPClient"]


class ReadIntoAsyncHTTPClient(SimpleAsyncHTTPClient):
    """A drop-in `tornado.simple_httpclient.SimpleAsyncHTTPClient` whose
    connections are `ReadIntoIOStream`\\ s (`SSLReadIntoIOStream` for
    ``https://``).

    Use it like any `AsyncHTTPClient` implementation::

        client = ReadIntoAsyncHTTPClient()  # one per IOLoop, as stock
        response = await client.fetch("http://127.0.0.1:8888/")

    or make it the default with
    ``AsyncHTTPClient.configure(ReadIntoAsyncHTTPClient)`` (which
    `tornado_readinto.install` does).  Takes the same arguments as
    `SimpleAsyncHTTPClient`, and ``stream_kwargs``: extra keyword arguments
    for every stream, for example ``{"busy_poll_s": 0}``.

    .. versionadded:: 0.1
    """

    def initialize(  # type: ignore[override]
        self, *args: Any, stream_kwargs: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> None:
        super().initialize(*args, **kwargs)
        # Stock made a TCPClient over self.resolver, which it does not own
        # (closing it is a no-op); ours takes its place.
        stock = self.tcp_client
        if stream_kwargs:
            client = cast(_StreamKwargsTCPClient, _StreamKwargsTCPClient.from_tcp_client(stock))
            client.stream_kwargs = dict(stream_kwargs)
            self.tcp_client = client
        else:
            self.tcp_client = ReadIntoTCPClient.from_tcp_client(stock)
        stock.close()


class _StreamKwargsTCPClient(ReadIntoTCPClient):
    """A `ReadIntoTCPClient` that passes ``stream_kwargs`` to its streams."""

    stream_kwargs: dict[str, Any] = {}

    def make_stream(self, sock: socket.socket, max_buffer_size: int | None = None) -> ReadIntoIOStream:
        return ReadIntoIOStream(sock, max_buffer_size=max_buffer_size, **self.stream_kwargs)
