"""`ReadIntoAsyncHTTPClient`: Tornado's `SimpleAsyncHTTPClient` over
`ReadIntoIOStream`\\ s.

`SimpleAsyncHTTPClient` opens every connection through its ``tcp_client``
attribute (a `TCPClient` made in ``initialize``); this subclass replaces it
with a `ReadIntoTCPClient` sharing the same resolver.  Everything else (the
connection limit and queue, timeouts, redirects, ``max_body_size``,
``hostname_mapping``, TLS options) is stock.
"""

from __future__ import annotations

from typing import Any

from ._tornado_entry_points import SimpleAsyncHTTPClient
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
    `SimpleAsyncHTTPClient`.

    .. versionadded:: 0.1
    """

    def initialize(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        super().initialize(*args, **kwargs)
        # Stock made a TCPClient over self.resolver, which it does not own
        # (closing it is a no-op); ours takes its place.
        stock = self.tcp_client
        self.tcp_client = ReadIntoTCPClient.from_tcp_client(stock)
        stock.close()
