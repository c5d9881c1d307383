"""tornado_readinto: zero-copy framed messaging over Tornado IOStreams.

The names below are imported lazily (PEP 562), so that ``import
tornado_readinto.framing`` (a pure codec) does not pull in Tornado.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> submodule that defines it
_EXPORTS = {
    "ReadIntoIOStream": "iostream",
    "SSLReadIntoIOStream": "iostream",
    "ChunkedWriteBuffer": "writebuffer",
    "FrameReader": "framing",
    "NEED_DATA": "framing",
    "pack_header": "framing",
    "FramedStream": "framed",
    "ReadIntoError": "errors",
    "FramingError": "errors",
    "FrameTooLargeError": "errors",
    "IncompleteReadError": "errors",
    "BufferBusyError": "errors",
    "ReadTimeoutError": "errors",
    "CommClosedError": "errors",
    "CommTimeoutError": "errors",
    "HandshakeError": "errors",
    "Comm": "comm",
    "connect": "comm",
    "listen": "comm",
    "ReadIntoTCPServer": "tcpserver",
    "ReadIntoTCPClient": "tcpclient",
    "ReadIntoHTTPServer": "httpserver",
    "ReadIntoAsyncHTTPClient": "httpclient",
    "ReadIntoWebSocketClientConnection": "websocket",
    "websocket_connect": "websocket",
    "install": "installation",
    "uninstall": "installation",
    "installed": "installation",
}

__all__ = sorted(_EXPORTS) + ["__version__"]

if TYPE_CHECKING:  # pragma: no cover
    from .comm import Comm, connect, listen  # noqa: F401
    from .errors import (  # noqa: F401
        BufferBusyError,
        CommClosedError,
        CommTimeoutError,
        FrameTooLargeError,
        FramingError,
        HandshakeError,
        IncompleteReadError,
        ReadIntoError,
    )
    from .httpclient import ReadIntoAsyncHTTPClient  # noqa: F401
    from .httpserver import ReadIntoHTTPServer  # noqa: F401
    from .installation import install, installed, uninstall  # noqa: F401
    from .iostream import ReadIntoIOStream, SSLReadIntoIOStream  # noqa: F401
    from .tcpclient import ReadIntoTCPClient  # noqa: F401
    from .tcpserver import ReadIntoTCPServer  # noqa: F401
    from .websocket import ReadIntoWebSocketClientConnection, websocket_connect  # noqa: F401


def __getattr__(name: str) -> Any:
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
