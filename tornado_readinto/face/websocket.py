"""Websocket clients over `ReadIntoIOStream`.

The server side needs nothing here: a `tornado.websocket.WebSocketHandler`
runs on the stream of the HTTP connection it upgrades, so it is a
`ReadIntoIOStream` under `ReadIntoHTTPServer` (or after
`tornado_readinto.install`).  The client side does: Tornado's
`tornado.websocket.websocket_connect` builds a stock `TCPClient` inside
`WebSocketClientConnection.__init__`, with no setting and no ``configure``
hook.  `websocket_connect` here takes the same arguments and returns the same
kind of connection, opened through a `ReadIntoTCPClient`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

from tornado import httputil
from tornado.concurrent import Future
from tornado.ioloop import IOLoop
from tornado.netutil import Resolver
from tornado.websocket import WebSocketClientConnection

from ._tornado_entry_points import HTTPRequest, TCPClient, _RequestProxy
from .tcpclient import ReadIntoTCPClient

__all__ = ["ReadIntoWebSocketClientConnection", "websocket_connect"]

# tornado.websocket._default_max_message_size
_DEFAULT_MAX_MESSAGE_SIZE = 10 * 1024 * 1024  # bytes


class ReadIntoWebSocketClientConnection(WebSocketClientConnection):
    """A `tornado.websocket.WebSocketClientConnection` that connects through
    a `ReadIntoTCPClient`, so its stream is a `ReadIntoIOStream`
    (`SSLReadIntoIOStream` for ``wss://``).

    Create it with `websocket_connect`.

    .. versionadded:: 0.1
    """

    # The stock __init__ assigns ``self.tcp_client = TCPClient(resolver=...)``
    # before it starts connecting; this property turns that client into a
    # ReadIntoTCPClient over the same resolver as it is assigned.
    @property  # type: ignore[override]
    def tcp_client(self) -> TCPClient:
        return cast(TCPClient, self.__dict__["_readinto_tcp_client"])

    @tcp_client.setter
    def tcp_client(self, client: TCPClient) -> None:
        if not isinstance(client, ReadIntoTCPClient):
            client = ReadIntoTCPClient.from_tcp_client(client)
        self.__dict__["_readinto_tcp_client"] = client


def websocket_connect(
    url: str | HTTPRequest,
    callback: Callable[[Future[WebSocketClientConnection]], None] | None = None,
    connect_timeout: float | None = None,
    on_message_callback: Callable[[None | str | bytes], None] | None = None,
    compression_options: dict[str, Any] | None = None,
    ping_interval: float | None = None,
    ping_timeout: float | None = None,
    max_message_size: int = _DEFAULT_MAX_MESSAGE_SIZE,
    subprotocols: list[str] | None = None,
    resolver: Resolver | None = None,
) -> Awaitable[WebSocketClientConnection]:
    """`tornado.websocket.websocket_connect` over `ReadIntoIOStream`.

    Same arguments, same result (a Future resolving to a
    `ReadIntoWebSocketClientConnection`, a `WebSocketClientConnection`)::

        conn = await websocket_connect("ws://127.0.0.1:8888/ws")
        await conn.write_message("hello")
        reply = await conn.read_message()

    ``callback`` is deprecated in Tornado 6.5, and here too: use the returned
    Future.

    .. versionadded:: 0.1
    """
    if isinstance(url, HTTPRequest):
        if connect_timeout is not None:
            raise ValueError("pass connect_timeout in the HTTPRequest, not as an argument")
        request = url
        # Copy the headers, as AsyncHTTPClient.fetch does.
        request.headers = httputil.HTTPHeaders(request.headers)
    else:
        request = HTTPRequest(url, connect_timeout=connect_timeout)
    request = cast(HTTPRequest, _RequestProxy(request, HTTPRequest._DEFAULTS))
    conn = ReadIntoWebSocketClientConnection(
        request,
        on_message_callback=on_message_callback,
        compression_options=compression_options,
        ping_interval=ping_interval,
        ping_timeout=ping_timeout,
        max_message_size=max_message_size,
        subprotocols=subprotocols,
        resolver=resolver,
    )
    if callback is not None:
        import warnings

        warnings.warn(
            "The callback argument to websocket_connect is deprecated. Use the returned Future instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        IOLoop.current().add_future(conn.connect_future, callback)
    return conn.connect_future
