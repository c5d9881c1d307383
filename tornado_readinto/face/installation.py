"""`install` / `uninstall`: make Tornado's own entry points build
`ReadIntoIOStream`\\ s, process-wide, through Tornado's ``configure``.

After `install()`:

* ``HTTPServer(...)`` (hence `tornado.web.Application.listen` and
  `tornado.testing.AsyncHTTPTestCase`) builds a `ReadIntoHTTPServer`
  (``HTTPServer.configure``);
* ``AsyncHTTPClient()`` builds a `ReadIntoAsyncHTTPClient`
  (``AsyncHTTPClient.configure``), keeping the keyword arguments configured
  before when the previous implementation was a `SimpleAsyncHTTPClient`, and
  replacing any other (``CurlAsyncHTTPClient``: configure it again after
  `install` to keep it);
* websocket handlers run over the HTTP server's streams, so over ours.

``install(stream_kwargs={"busy_poll_s": 0})`` passes extra keyword arguments
to every stream those servers and clients build (here: no busy polling).

It configures classes in the calling process only, creating no IOLoop, thread
or socket: processes forked after it (``tornado.process.fork_processes``)
inherit it.

Not covered, because Tornado offers no hook: code that names `TCPServer`,
`TCPClient` or `SimpleAsyncHTTPClient` directly (use `ReadIntoTCPServer`,
`ReadIntoTCPClient`, `ReadIntoAsyncHTTPClient`), and
`tornado.websocket.websocket_connect` (use
`tornado_readinto.websocket_connect`).  ``AsyncHTTPClient()`` caches one
client per IOLoop: one made before `install` on the same loop stays stock.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from tornado.httpclient import AsyncHTTPClient
from tornado.httpserver import HTTPServer

from ._tornado_entry_points import SimpleAsyncHTTPClient
from .httpclient import ReadIntoAsyncHTTPClient
from .httpserver import ReadIntoHTTPServer

__all__ = ["install", "uninstall", "installed"]

_lock = threading.Lock()
# Configurable._save_configuration() of each base, taken by install().
_saved: dict[type, Any] = {}
# The stream_kwargs of the install() in effect.
_stream_kwargs: dict[str, Any] = {}


def installed() -> bool:
    """Whether `install` is in effect.

    .. versionadded:: 0.1
    """
    return bool(_saved)


def install(*, stream_kwargs: Mapping[str, Any] | None = None) -> None:
    """Make ``HTTPServer(...)``, ``Application.listen``, ``AsyncHTTPClient()``
    and websocket handlers use `ReadIntoIOStream`, process-wide.

    Opt-in; call it once at start-up, before servers and clients are made.
    Calling it again while installed does nothing (with other
    ``stream_kwargs``, it raises `RuntimeError`: `uninstall` first).
    `uninstall` undoes it.

    :arg stream_kwargs: extra keyword arguments for every stream that those
        servers and clients build, for example ``{"busy_poll_s": 0}`` to
        turn busy polling off (`ReadIntoHTTPServer` and
        `ReadIntoAsyncHTTPClient` take the same argument).

    .. versionadded:: 0.1
    """
    kwargs = dict(stream_kwargs or {})
    with _lock:
        if _saved:
            if kwargs != _stream_kwargs:
                raise RuntimeError(
                    f"install() is in effect with stream_kwargs={_stream_kwargs}; uninstall() before "
                    f"installing with stream_kwargs={kwargs}"
                )
            return
        server_saved = HTTPServer._save_configuration()
        client_saved = AsyncHTTPClient._save_configuration()
        server_kwargs = dict(server_saved[1] or {})
        if kwargs:
            server_kwargs["stream_kwargs"] = kwargs
        HTTPServer.configure(ReadIntoHTTPServer, **server_kwargs)
        client_kwargs: dict[str, Any] = {}
        if issubclass(AsyncHTTPClient.configured_class(), SimpleAsyncHTTPClient):
            client_kwargs = dict(client_saved[1] or {})
        if kwargs:
            client_kwargs["stream_kwargs"] = kwargs
        AsyncHTTPClient.configure(ReadIntoAsyncHTTPClient, **client_kwargs)
        _stream_kwargs.clear()
        _stream_kwargs.update(kwargs)
        _saved[HTTPServer] = server_saved
        _saved[AsyncHTTPClient] = client_saved


def uninstall() -> None:
    """Undo `install`: restore exactly the ``HTTPServer`` and
    ``AsyncHTTPClient`` configuration (class and keyword arguments) that was
    in effect before it.  Calling it when not installed does nothing.

    Servers and clients already made keep their streams.

    .. versionadded:: 0.1
    """
    with _lock:
        for base, saved in _saved.items():
            base._restore_configuration(saved)  # type: ignore[attr-defined]
        _saved.clear()
        _stream_kwargs.clear()
