"""`install` / `uninstall`: make Tornado's own entry points build
`ReadIntoIOStream`\\ s, process-wide, through Tornado's ``configure``.

After `install()`:

* ``HTTPServer(...)`` (hence `tornado.web.Application.listen` and
  `tornado.testing.AsyncHTTPTestCase`) builds a `ReadIntoHTTPServer`
  (``HTTPServer.configure``);
* ``AsyncHTTPClient()`` builds a `ReadIntoAsyncHTTPClient`
  (``AsyncHTTPClient.configure``), keeping the keyword arguments configured
  before when the previous implementation was a `SimpleAsyncHTTPClient`;
* websocket handlers run over the HTTP server's streams, so over ours.

Not covered, because Tornado offers no hook: code that names `TCPServer`,
`TCPClient` or `SimpleAsyncHTTPClient` directly (use `ReadIntoTCPServer`,
`ReadIntoTCPClient`, `ReadIntoAsyncHTTPClient`), and
`tornado.websocket.websocket_connect` (use
`tornado_readinto.websocket_connect`).  ``AsyncHTTPClient()`` caches one
client per IOLoop: one made before `install` on the same loop stays stock.
"""

from __future__ import annotations

import threading
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


def installed() -> bool:
    """Whether `install` is in effect.

    .. versionadded:: 0.1
    """
    return bool(_saved)


def install() -> None:
    """Make ``HTTPServer(...)``, ``Application.listen``, ``AsyncHTTPClient()``
    and websocket handlers use `ReadIntoIOStream`, process-wide.

    Opt-in; call it once at start-up, before servers and clients are made.
    Calling it again while installed does nothing.  `uninstall` undoes it.

    .. versionadded:: 0.1
    """
    with _lock:
        if _saved:
            return
        server_saved = HTTPServer._save_configuration()
        client_saved = AsyncHTTPClient._save_configuration()
        HTTPServer.configure(ReadIntoHTTPServer, **(server_saved[1] or {}))
        client_kwargs: dict[str, Any] = {}
        if issubclass(AsyncHTTPClient.configured_class(), SimpleAsyncHTTPClient):
            client_kwargs = dict(client_saved[1] or {})
        AsyncHTTPClient.configure(ReadIntoAsyncHTTPClient, **client_kwargs)
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
