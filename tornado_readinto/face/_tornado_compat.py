"""The one place that names the Tornado stream internals this package
depends on.

`ReadIntoIOStream` subclasses `tornado.iostream.IOStream` and replaces its read
and write machinery, so it necessarily uses private attributes and helpers of
``tornado.iostream``.  They are listed (and imported) here so that a Tornado
release that changes them fails loudly at import time, and so that one test
(`tests/face/test_tornado_compat.py`) can check that they still exist.

This module imports ``tornado.iostream``, ``tornado.netutil`` and
``tornado.concurrent`` only: the stream and its core import no HTTP module.
The entry points' internals are `tornado_readinto.face._tornado_entry_points`'.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import io
import ssl
import textwrap
import tokenize
from collections.abc import Callable
from typing import Any

import tornado
import tornado.iostream
from tornado.concurrent import future_set_result_unless_cancelled
from tornado.iostream import (
    IOStream,
    SSLIOStream,
    StreamBufferFullError,
    StreamClosedError,
    UnsatisfiableReadError,
)
from tornado.netutil import _client_ssl_defaults, _server_ssl_defaults, ssl_wrap_socket

__all__ = [
    "COPIED_BODIES",
    "MIN_TORNADO",
    "PRIVATE_SSL_STREAM_HOOKS",
    "PRIVATE_STREAM_ATTRS",
    "PRIVATE_STREAM_HOOKS",
    "IOStream",
    "SSLIOStream",
    "StreamBufferFullError",
    "StreamClosedError",
    "UnsatisfiableReadError",
    "_client_ssl_defaults",
    "_server_ssl_defaults",
    "default_ssl_context",
    "check_copied_bodies",
    "check_stream_attrs",
    "copied_bodies_recorded",
    "source_digest",
    "tornado_series",
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
    "_read_buffer",  # a property of ours over the core (Tornado's __init__ assigns it)
    "_read_buffer_size",  # likewise (Tornado's __init__ assigns it)
    "_write_buffer",  # a property over the core's queue: dask appends to it
    "_total_write_index",  # likewise: dask bumps it, then calls write(b"")
    "_total_write_done_index",  # a property over the core's count of bytes sent
    "_write_futures",  # a property over the core's field (as the four below)
    "_read_future",
    "_close_callback",  # handed over by start_tls
    "_connecting",
    "_state",
    "_closed",
)


#: Methods of Tornado's ``BaseIOStream``/``IOStream`` (private hooks, and the
#: public ``read_from_fd``/``write_to_fd`` that subclasses implement) that
#: `ReadIntoIOStream` or `SSLReadIntoIOStream` override or call.
#: ``tests/face/test_tornado_compat.py`` checks that each exists on Tornado's
#: classes and that every method our stream classes define under a name
#: Tornado's classes also have is listed here: an override is never silent.
PRIVATE_STREAM_HOOKS = (
    "_handle_events",  # overridden: wraps _dispatch_events (COPIED_BODIES); WRITE events come here
    "_handle_connect",  # called by our _dispatch_events
    "_signal_closed",  # extended: the core says what a pending read fails with
    "_maybe_add_error_listener",  # overridden: stock's test on the core's fields; runs once a read or write completes
    "_add_io_state",  # extended: a READ it registers goes to our own reader (_read_ready)
    "_is_connreset",  # asked by the error policy and close
    "close_fd",  # called by our close
    "read_from_fd",  # a property: the core receives through it when replaced
    "write_to_fd",  # the core sends through it on sockets without sendmsg
)

#: The same for `SSLReadIntoIOStream` and Tornado's ``SSLIOStream``.
PRIVATE_SSL_STREAM_HOOKS = ("_do_ssl_handshake",)


#: The bodies of Tornado's stream methods that this package copied and
#: edited (or whose contract a method of ours takes over), as ``(ours,
#: Tornado's qualified name in tornado.iostream, digest of Tornado's source
#: per Tornado series: 6.5 as of 6.5.10, 6.6 as of 6.6.1)``.
#: `check_copied_bodies` recomputes the digests of the installed Tornado: one
#: that differs names the copy to re-check.
COPIED_BODIES: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("ReadIntoIOStream.close", "BaseIOStream.close", {"6.5": "fbafbe7679ac7f27", "6.6": "f954bf802f61e2f3"}),
    (
        "ReadIntoIOStream._dispatch_events",
        "BaseIOStream._handle_events",
        {"6.5": "d36b9300501b90ab", "6.6": "313ff4262666b38a"},
    ),
    (
        "FaceCore.read_ready",  # its READ-only case, called by the asyncio loop directly
        "BaseIOStream._handle_events",
        {"6.5": "d36b9300501b90ab", "6.6": "313ff4262666b38a"},
    ),
    ("ReadIntoIOStream.start_tls", "IOStream.start_tls", {"6.5": "61514c5c406b3b12", "6.6": "248f3763384eb27d"}),
    (
        "ReadIntoIOStream._maybe_add_error_listener",
        "BaseIOStream._maybe_add_error_listener",
        {"6.5": "952c450729ddfdcb", "6.6": "952c450729ddfdcb"},
    ),
    ("ReadIntoIOStream.set_nodelay", "IOStream.set_nodelay", {"6.5": "ec427c055ae9acee", "6.6": "ec427c055ae9acee"}),
    ("FaceCore.write_future", "BaseIOStream.write", {"6.5": "3778f04080beeb62", "6.6": "f052e857e1dc6791"}),
    (
        "FaceCore.writable_event",
        "BaseIOStream._handle_write",
        {"6.5": "fbb7cd6817dfe7ff", "6.6": "57c54376e348e36b"},
    ),
    (
        "StreamCore._write_segments",
        "BaseIOStream._handle_write",
        {"6.5": "fbb7cd6817dfe7ff", "6.6": "57c54376e348e36b"},
    ),
    ("FaceCore.started", "BaseIOStream._start_read", {"6.5": "83dce255c300fe9f", "6.6": "83dce255c300fe9f"}),
    ("FaceCore.started", "BaseIOStream._try_inline_read", {"6.5": "a4e2bd07562033f0", "6.6": "a4e2bd07562033f0"}),
    ("ReadIntoIOStream._fail", "BaseIOStream._handle_read", {"6.5": "db118b03f82fd922", "6.6": "db118b03f82fd922"}),
    ("ReadIntoIOStream._fail", "BaseIOStream._read_to_buffer", {"6.5": "efebb668fc26039b", "6.6": "f87575959e47f3a2"}),
    (
        "ReadIntoIOStream._signal_closed",
        "BaseIOStream._signal_closed",
        {"6.5": "72dc96b7092cdc16", "6.6": "f08d22d690a47fbe"},
    ),
    (
        "SSLReadIntoIOStream._readable",
        "SSLIOStream._handle_read",
        {"6.5": "ec5b7bc0cad6c5d4", "6.6": "ec5b7bc0cad6c5d4"},
    ),
    (
        "SSLReadIntoIOStream._writable",
        "SSLIOStream._handle_write",
        {"6.5": "6fc55d7411c63a60", "6.6": "6fc55d7411c63a60"},
    ),
    ("ReadCore._check_limit", "BaseIOStream._check_max_bytes", {"6.5": "a0d9ebc7446b47e3", "6.6": "301be852d3de8559"}),
)


def source_digest(source: str) -> str:
    """A digest of a function's source that ignores its docstring, comments,
    blank lines, line breaks inside brackets and indentation: only a change
    of its code changes it."""
    source = textwrap.dedent(source)
    node = ast.parse(source).body[0]
    docstring = range(0)
    body = getattr(node, "body", None)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        if isinstance(body[0].value.value, str):
            docstring = range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1)
    skip = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)
    lines = source.splitlines(keepends=True)
    words: list[str] = []
    fstring_start: tuple[int, int] | None = None  # Python >= 3.12 splits f-strings
    depth = 0
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == _FSTRING_START:
            depth += 1
            if depth == 1:
                fstring_start = token.start
            continue
        if depth:
            if token.type == _FSTRING_END:
                depth -= 1
                if not depth:
                    assert fstring_start is not None
                    # The whole f-string, as one token (as Python < 3.12 has it).
                    words.append(_slice(lines, fstring_start, token.end))
            continue
        if token.type not in skip and token.start[0] not in docstring:
            words.append(token.string)
    return hashlib.sha256(" ".join(words).encode()).hexdigest()[:16]


_FSTRING_START: int = getattr(tokenize, "FSTRING_START", -1)
_FSTRING_END: int = getattr(tokenize, "FSTRING_END", -1)


def _slice(lines: list[str], start: tuple[int, int], end: tuple[int, int]) -> str:
    """The source text from ``start`` to ``end`` (tokenize positions)."""
    if start[0] == end[0]:
        return lines[start[0] - 1][start[1] : end[1]]
    middle = lines[start[0] : end[0] - 1]
    return lines[start[0] - 1][start[1] :] + "".join(middle) + lines[end[0] - 1][: end[1]]


def tornado_source(qualname: str) -> str:
    """The source of ``tornado.iostream.<qualname>`` as installed."""
    obj: Any = tornado.iostream
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return inspect.getsource(obj)


def check_copied_bodies(get_source: Callable[[str], str] = tornado_source) -> list[str]:
    """Return one message per entry of `COPIED_BODIES` whose Tornado source
    changed in the installed Tornado (empty if none did, or if no digest is
    recorded for this Tornado series: see `copied_bodies_recorded`)."""
    series = tornado_series()
    problems = []
    for ours, theirs, digests in COPIED_BODIES:
        recorded = digests.get(series)
        if recorded is None:
            continue
        digest = source_digest(get_source(theirs))
        if digest != recorded:
            problems.append(
                f"tornado {tornado.version} changed {theirs} (digest {digest}, recorded {recorded}):"
                f" re-check {ours}, which copies it, then record the new digest"
            )
    return problems


def tornado_series() -> str:
    """The installed Tornado's ``major.minor``."""
    return ".".join(map(str, tornado.version_info[:2]))


def copied_bodies_recorded() -> bool:
    """Whether `COPIED_BODIES` has digests for the installed Tornado series."""
    series = tornado_series()
    return all(series in digests for _, _, digests in COPIED_BODIES)


def default_ssl_context(server_side: bool) -> ssl.SSLContext:
    """Tornado's default TLS context for one side, as its ``start_tls`` uses
    it: Tornado 6.5 keeps an ``SSLContext`` in ``tornado.netutil``, 6.6 a
    cached function that makes one."""
    value: Any = _server_ssl_defaults if server_side else _client_ssl_defaults
    return value() if callable(value) else value  # type: ignore[no-any-return]


def check_stream_attrs(stream: object) -> list[str]:
    """Return the names in `PRIVATE_STREAM_ATTRS` that ``stream`` lacks."""
    return [name for name in PRIVATE_STREAM_ATTRS if not hasattr(stream, name)]
