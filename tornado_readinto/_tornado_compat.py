"""The one place that names the Tornado stream internals this package
depends on.

`ReadIntoIOStream` subclasses `tornado.iostream.IOStream` and replaces its read
and write machinery, so it necessarily uses private attributes and helpers of
``tornado.iostream``.  They are listed (and imported) here so that a Tornado
release that changes them fails loudly at import time, and so that one test
(`tests/test_tornado_compat.py`) can check that they still exist.

This module imports ``tornado.iostream``, ``tornado.netutil`` and
``tornado.concurrent`` only: the stream and its core import no HTTP module.
The entry points' internals are `tornado_readinto._tornado_entry_points`'.
"""

from __future__ import annotations

import ssl
from typing import Any

import tornado
from tornado.concurrent import future_set_result_unless_cancelled
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

__all__ = [
    "MIN_TORNADO",
    "PRIVATE_SSL_STREAM_HOOKS",
    "PRIVATE_STREAM_ATTRS",
    "PRIVATE_STREAM_HOOKS",
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
