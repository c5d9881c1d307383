"""The one place that names the private internals of Tornado's entry points
(TCP server and client, HTTP server and client, websocket, ``configure``)
that `tornado_readinto.face.tcpserver`, `.tcpclient`, `.httpserver`,
`.httpclient`, `.websocket` and `.installation` override, call or read.

The stream-level internals are `tornado_readinto.face._tornado_compat`'s, which
imports no HTTP module, so that the stream and its core import without
``tornado.web`` or ``tornado.httpserver``.  A Tornado that renames one of the
hooks below fails at import (`check_entry_point_hooks`);
``tests/face/test_tornado_compat.py`` checks the instance attributes.
"""

from __future__ import annotations

import tornado
from tornado.http1connection import (
    HTTP1Connection,
    HTTP1ServerConnection,
    _ExceptionLoggingContext,
    _GzipMessageDelegate,
)
from tornado.httpclient import HTTPRequest, _RequestProxy
from tornado.httpserver import HTTPServer, _CallableAdapter, _HTTPRequestContext, _ProxyAdapter
from tornado.routing import _RoutingDelegate
from tornado.simple_httpclient import SimpleAsyncHTTPClient
from tornado.tcpclient import TCPClient
from tornado.tcpserver import TCPServer
from tornado.util import Configurable
from tornado.web import _HandlerDelegate

from . import _tornado_compat  # noqa: F401 - refuses an unsupported Tornado first

__all__ = [
    "PRIVATE_ENTRY_POINT_HOOKS",
    "PRIVATE_INSTANCE_ATTRS",
    "Configurable",
    "HTTP1Connection",
    "HTTP1ServerConnection",
    "HTTPRequest",
    "HTTPServer",
    "SimpleAsyncHTTPClient",
    "TCPClient",
    "TCPServer",
    "_RequestProxy",
    "_CallableAdapter",
    "_HTTPRequestContext",
    "_ExceptionLoggingContext",
    "_GzipMessageDelegate",
    "_HandlerDelegate",
    "_ProxyAdapter",
    "_RoutingDelegate",
    "check_entry_point_hooks",
]


#: Private class-level names of Tornado's entry points that
#: `tornado_readinto.face.tcpserver`, `.tcpclient`, `.httpclient`, `.websocket` and
#: `.installation` override or call, as ``(class, name)``.  Checked at import
#: (`check_entry_point_hooks`), so that a Tornado that renames one fails here
#: rather than silently building stock streams.
PRIVATE_ENTRY_POINT_HOOKS: tuple[tuple[type, str], ...] = (
    (TCPServer, "_handle_connection"),  # builds the accepted stream
    (TCPClient, "_create_stream"),  # builds the connecting stream
    (Configurable, "_save_configuration"),  # install() / uninstall()
    (Configurable, "_restore_configuration"),
    (HTTPRequest, "_DEFAULTS"),  # websocket_connect fills request defaults
    (HTTP1Connection, "_read_fixed_body"),  # ReadIntoHTTP1Connection: bodies via read_into
    (HTTP1Connection, "_format_chunk"),  # ReadIntoHTTP1Connection.write_headers frames its gathered chunk
    (HTTP1Connection, "_parse_headers"),  # ReadIntoHTTP1Connection: the request's headers have arrived
    (HTTP1ServerConnection, "_server_request_loop"),  # ReadIntoHTTP1ServerConnection: its own serving loop
)

#: Private instance attributes set by Tornado's ``__init__``/``initialize``
#: that we read or replace: ``TCPClient._own_resolver`` (who closes the
#: resolver), ``SimpleAsyncHTTPClient.tcp_client`` (the client's connection
#: factory) and ``WebSocketClientConnection.tcp_client``; and, for
#: `tornado_readinto.face.httpserver`, the HTTP message delegate chain it walks
#: (``_GzipMessageDelegate._delegate``/``_decompressor``, ``_ProxyAdapter`` and
#: ``_RoutingDelegate`` ``.delegate``), where the body is stored
#: (``_HandlerDelegate.chunks``, ``_CallableAdapter._chunks``: a bytearray in
#: Tornado 6.6, a list in 6.5, that ``finish()`` turns into ``request.body``),
#: whether it is streamed (``_HandlerDelegate.stream_request_body``) and
#: whether the response is finished (``HTTP1Connection._write_finished``);
#: and what ``HTTPServer.handle_stream`` passes to a connection it builds
#: (``protocol``, ``trusted_downstream``, ``conn_params``, ``_connections``),
#: which `ReadIntoHTTPServer.handle_stream` does in its place.
#: An instance is needed to see them; ``tests/face/test_tornado_compat.py`` checks
#: them.
PRIVATE_INSTANCE_ATTRS: dict[str, tuple[str, ...]] = {
    "tornado.tcpclient.TCPClient": ("_own_resolver", "resolver"),
    "tornado.simple_httpclient.SimpleAsyncHTTPClient": ("tcp_client", "resolver"),
    "tornado.websocket.WebSocketClientConnection": ("tcp_client",),
    "tornado.http1connection.HTTP1Connection": ("_write_finished", "params", "is_client", "stream"),
    "tornado.httpserver.HTTPServer": ("protocol", "trusted_downstream", "conn_params", "_connections"),
    "tornado.http1connection.HTTP1ServerConnection": ("stream", "params", "context"),
    "tornado.http1connection._GzipMessageDelegate": ("_delegate", "_decompressor"),
    "tornado.httpserver._ProxyAdapter": ("delegate",),
    "tornado.httpserver._CallableAdapter": ("_chunks",),
    "tornado.routing._RoutingDelegate": ("delegate",),
    "tornado.web._HandlerDelegate": ("chunks", "stream_request_body"),
}


def check_entry_point_hooks() -> list[str]:
    """Return ``"Class.name"`` for each entry in `PRIVATE_ENTRY_POINT_HOOKS`
    that this Tornado lacks."""
    return [f"{cls.__name__}.{name}" for cls, name in PRIVATE_ENTRY_POINT_HOOKS if not hasattr(cls, name)]


_missing = check_entry_point_hooks()
if _missing:
    raise ImportError(f"tornado_readinto does not support tornado {tornado.version}: it lacks {', '.join(_missing)}")
