"""The one place that names Tornado internals this package depends on.

`ReadIntoIOStream` subclasses `tornado.iostream.IOStream` and replaces its read
and write machinery, so it necessarily uses private attributes and helpers of
``tornado.iostream``.  They are listed (and imported) here so that a Tornado
release that changes them fails loudly at import time, and so that one test
(`tests/test_tornado_compat.py`) can check that they still exist.
"""

from __future__ import annotations

import ssl
from typing import Any

import tornado
from tornado.concurrent import future_set_result_unless_cancelled
from tornado.http1connection import (
    HTTP1Connection,
    HTTP1ServerConnection,
    _ExceptionLoggingContext,
    _GzipMessageDelegate,
)
from tornado.httpclient import HTTPRequest, _RequestProxy
from tornado.httpserver import HTTPServer, _CallableAdapter, _HTTPRequestContext, _ProxyAdapter
from tornado.iostream import (
    _ERRNO_CONNRESET,
    IOStream,
    SSLIOStream,
    StreamBufferFullError,
    StreamClosedError,
    UnsatisfiableReadError,
    _StreamBuffer,
)
from tornado.netutil import _client_ssl_defaults, _server_ssl_defaults, ssl_wrap_socket
from tornado.routing import _RoutingDelegate
from tornado.simple_httpclient import SimpleAsyncHTTPClient
from tornado.tcpclient import TCPClient
from tornado.tcpserver import TCPServer
from tornado.util import Configurable
from tornado.web import _HandlerDelegate

__all__ = [
    "MIN_TORNADO",
    "PRIVATE_ENTRY_POINT_HOOKS",
    "PRIVATE_INSTANCE_ATTRS",
    "PRIVATE_SSL_STREAM_HOOKS",
    "PRIVATE_STREAM_ATTRS",
    "PRIVATE_STREAM_HOOKS",
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
    "IOStream",
    "SSLIOStream",
    "StreamBufferFullError",
    "StreamClosedError",
    "UnsatisfiableReadError",
    "_StreamBuffer",
    "_ERRNO_CONNRESET",
    "_client_ssl_defaults",
    "_server_ssl_defaults",
    "default_ssl_context",
    "check_entry_point_hooks",
    "check_stream_attrs",
    "future_set_result_unless_cancelled",
    "ssl_wrap_socket",
]

#: Oldest Tornado whose iostream internals match what this package overrides
#: (the 6.5 series moved to ``_StreamBuffer.peek`` returning views that must be
#: released; 6.6 is what we measure against).
MIN_TORNADO = (6, 5)

if tornado.version_info[:2] < MIN_TORNADO or tornado.version_info[0] != 6:
    raise ImportError(f"tornado_readinto needs tornado>={MIN_TORNADO[0]}.{MIN_TORNADO[1]},<7, found {tornado.version}")

#: Private `BaseIOStream` attributes that this package reads or writes, and that
#: dask.distributed's TCP comm uses (``_write_buffer``, ``_total_write_index``).
PRIVATE_STREAM_ATTRS = (
    "_read_buffer",
    "_read_buffer_size",
    "_user_read_buffer",
    "_write_buffer",
    "_total_write_index",
    "_total_write_done_index",
    "_write_futures",
    "_read_future",
    "_read_bytes",
    "_read_partial",
    "_read_delimiter",
    "_read_regex",
    "_read_max_bytes",
    "_read_until_close",
    "_close_callback",
    "_connect_future",
    "_ssl_connect_future",
    "_connecting",
    "_state",
    "_closed",
)


#: Methods of Tornado's ``BaseIOStream``/``IOStream``/``SSLIOStream`` (private
#: hooks, and the public ``read_from_fd``/``write_to_fd`` that subclasses
#: implement) that `ReadIntoIOStream` or `SSLReadIntoIOStream` override or
#: call.  ``tests/test_tornado_compat.py`` checks that each exists on Tornado's
#: classes and that every method our stream classes define under a name
#: Tornado's classes also have is listed here: an override is never silent.
PRIVATE_STREAM_HOOKS = (
    "_handle_read",
    "_handle_write",
    "_handle_events",
    "_handle_connect",
    "_read_to_buffer_loop",
    "_find_read_pos",
    "_finish_read",
    "_read_from_buffer",
    "_signal_closed",
    "_start_read",
    "_try_inline_read",
    "_maybe_add_error_listener",
    "_add_io_state",
    "_check_closed",
    "_is_connreset",
    "close_fd",
    "read_from_fd",
    "write_to_fd",
)

#: The same for `SSLReadIntoIOStream` and Tornado's ``SSLIOStream``.
PRIVATE_SSL_STREAM_HOOKS = ("_do_ssl_handshake", "wait_for_handshake", "_finish_ssl_connect")


def default_ssl_context(server_side: bool) -> ssl.SSLContext:
    """Tornado's default TLS context for one side, as its ``start_tls`` uses
    it: Tornado 6.5 keeps an ``SSLContext`` in ``tornado.netutil``, 6.6 a
    cached function that makes one."""
    value: Any = _server_ssl_defaults if server_side else _client_ssl_defaults
    return value() if callable(value) else value  # type: ignore[no-any-return]


def check_stream_attrs(stream: object) -> list[str]:
    """Return the names in `PRIVATE_STREAM_ATTRS` that ``stream`` lacks."""
    return [name for name in PRIVATE_STREAM_ATTRS if not hasattr(stream, name)]


#: Private class-level names of Tornado's entry points that
#: `tornado_readinto.tcpserver`, `.tcpclient`, `.httpclient`, `.websocket` and
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
#: `tornado_readinto.httpserver`, the HTTP message delegate chain it walks
#: (``_GzipMessageDelegate._delegate``/``_decompressor``, ``_ProxyAdapter`` and
#: ``_RoutingDelegate`` ``.delegate``), where the body is stored
#: (``_HandlerDelegate.chunks``, ``_CallableAdapter._chunks``: a bytearray in
#: Tornado 6.6, a list in 6.5, that ``finish()`` turns into ``request.body``),
#: whether it is streamed (``_HandlerDelegate.stream_request_body``) and
#: whether the response is finished (``HTTP1Connection._write_finished``);
#: and what ``HTTPServer.handle_stream`` passes to a connection it builds
#: (``protocol``, ``trusted_downstream``, ``conn_params``, ``_connections``),
#: which `ReadIntoHTTPServer.handle_stream` does in its place.
#: An instance is needed to see them; ``tests/test_tornado_compat.py`` checks
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
