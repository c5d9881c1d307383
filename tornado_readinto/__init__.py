"""tornado_readinto: zero-copy framed messaging over Tornado IOStreams.

The names below are imported lazily (PEP 562), so that ``import
tornado_readinto.wire.framing`` (a pure codec) does not pull in Tornado.

Two builds of the stream's core: compiled (Cython extension modules built
from the same ``.py`` files, the default where the install could compile
them) and pure Python (the reference).  ``TORNADO_READINTO_NO_EXTENSIONS=1``
in the environment selects pure Python at import; `COMPILED` says which
build runs.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> submodule that defines it
_EXPORTS = {
    "ReadIntoIOStream": "face.iostream",
    "SSLReadIntoIOStream": "face.iostream",
    "ChunkedWriteBuffer": "core.writebuffer",
    "FrameReader": "wire.framing",
    "NEED_DATA": "wire.framing",
    "pack_header": "wire.framing",
    "FramedStream": "channel.framed",
    "ReadIntoError": "errors",
    "FramingError": "errors",
    "FrameTooLargeError": "errors",
    "IncompleteReadError": "errors",
    "BufferBusyError": "errors",
    "ReadTimeoutError": "errors",
    "CommClosedError": "errors",
    "CommTimeoutError": "errors",
    "HandshakeError": "errors",
    "NotSwitchedError": "errors",
    "Comm": "channel.comm",
    "connect": "channel.comm",
    "listen": "channel.comm",
    "ReadIntoTCPServer": "face.tcpserver",
    "ReadIntoTCPClient": "face.tcpclient",
    "ReadIntoHTTPServer": "face.httpserver",
    "ReadIntoAsyncHTTPClient": "face.httpclient",
    "ReadIntoWebSocketClientConnection": "face.websocket",
    "websocket_connect": "face.websocket",
    "install": "face.installation",
    "uninstall": "face.installation",
    "installed": "face.installation",
}

__all__ = sorted(_EXPORTS) + ["COMPILED", "__version__", "why_pure"]

#: The modules that have a compiled build, below the package: ``setup.py``
#: reads this list (the only one) and compiles the same ``.py``, typed by the
#: ``.pxd`` beside it where there is one, or as it is.
_COMPILED_MODULES: tuple[str, ...] = (
    "core._policy",
    "core._sockcalls",
    "core._readcore",
    "core._streamcore",
    "face._facecore",
    "core.writebuffer",
    "wire.framing",
    "core.busypoll",
    "face.iostream",
    "channel.framed",
    "wire.allocators",
)

#: The modules that exist only compiled (``setup.py`` compiles a ``.pyx``;
#: there is no ``.py`` of the same name): the pure build has none of them,
#: and runs a twin that lives elsewhere (``_gilheld_native``: the ctypes calls
#: of ``core._gilheld``).
_NATIVE_MODULES: tuple[str, ...] = ("core._gilheld_native",)

#: ``TORNADO_READINTO_NO_EXTENSIONS`` (any non-empty value) was set at import:
#: the core modules load from their ``.py`` source even where extension
#: modules of the same names are installed.
NO_EXTENSIONS: bool = bool(os.environ.get("TORNADO_READINTO_NO_EXTENSIONS"))


class _PureSourceFinder:
    """A meta-path finder that loads the compiled modules from their ``.py``
    source, and refuses the modules that exist only compiled.  A compiled
    module has the same name as its ``.py`` and the extension wins the usual
    import, so the pure build needs this finder, installed ahead of the
    others when ``NO_EXTENSIONS`` is set.  It is the one place that selects
    the build: ``_gilheld`` uses its compiled-only twin when that imports."""

    _names = frozenset(f"{__name__}.{name}" for name in _COMPILED_MODULES)
    _native = frozenset(f"{__name__}.{name}" for name in _NATIVE_MODULES)

    @classmethod
    def find_spec(
        cls, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname in cls._native:
            message = f"the pure build (TORNADO_READINTO_NO_EXTENSIONS) has no {fullname}, which is compiled only"
            raise ModuleNotFoundError(message, name=fullname)
        if fullname not in cls._names:
            return None
        below = fullname.split(".")[1:]  # e.g. ["core", "_readcore"]
        source = os.path.join(os.path.dirname(__file__), *below[:-1], below[-1] + ".py")
        return importlib.util.spec_from_file_location(fullname, source)


if NO_EXTENSIONS and _PureSourceFinder not in sys.meta_path:
    sys.meta_path.insert(0, _PureSourceFinder)  # type: ignore[arg-type]


def why_pure() -> str | None:
    """Why the pure build runs, in words, or None when the compiled core runs:
    ``TORNADO_READINTO_NO_EXTENSIONS`` was set, the extension modules are not
    installed (no C compiler, or Cython, when the package was built), or one
    failed to import (the message says which, and why).

    .. versionadded:: 0.1
    """
    if NO_EXTENSIONS:
        return "TORNADO_READINTO_NO_EXTENSIONS is set"
    missing = []
    for name in _COMPILED_MODULES:
        module = importlib.import_module(f".{name}", __name__)
        if not isinstance(module.__spec__.loader, importlib.machinery.ExtensionFileLoader):  # type: ignore[union-attr]
            missing.append(name)
    if missing:
        return (
            f"{len(missing)} of the {len(_COMPILED_MODULES)} compiled modules are not installed (e.g. {missing[0]}):"
            " the package was built without a C compiler or Cython"
        )
    for name in _NATIVE_MODULES:
        try:
            importlib.import_module(f".{name}", __name__)
        except ImportError as exc:
            return f"{name} failed to import: {exc}"
    return None


def _compiled() -> bool:
    """Whether the compiled core runs: every module of `_COMPILED_MODULES`
    was loaded from an extension module, and every module of
    `_NATIVE_MODULES` imports (`why_pure` finds no reason)."""
    return why_pure() is None


if TYPE_CHECKING:  # pragma: no cover
    #: True when the compiled core runs, False for the pure-Python build
    #: (no extension modules installed, or ``TORNADO_READINTO_NO_EXTENSIONS``).
    COMPILED: bool
    from .channel.comm import Comm, connect, listen  # noqa: F401
    from .errors import (  # noqa: F401
        BufferBusyError,
        CommClosedError,
        CommTimeoutError,
        FrameTooLargeError,
        FramingError,
        HandshakeError,
        IncompleteReadError,
        NotSwitchedError,
        ReadIntoError,
    )
    from .face.httpclient import ReadIntoAsyncHTTPClient  # noqa: F401
    from .face.httpserver import ReadIntoHTTPServer  # noqa: F401
    from .face.installation import install, installed, uninstall  # noqa: F401
    from .face.iostream import ReadIntoIOStream, SSLReadIntoIOStream  # noqa: F401
    from .face.tcpclient import ReadIntoTCPClient  # noqa: F401
    from .face.tcpserver import ReadIntoTCPServer  # noqa: F401
    from .face.websocket import ReadIntoWebSocketClientConnection, websocket_connect  # noqa: F401


def __getattr__(name: str) -> Any:
    if name == "COMPILED":
        # Lazy too: the core imports Tornado.
        compiled = globals()["COMPILED"] = _compiled()
        return compiled
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
