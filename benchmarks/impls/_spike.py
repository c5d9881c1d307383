"""The gate spike of issue #33 as echo servers: ``readinto``'s benchmark code
(``read_into`` the 16-byte head, then each frame; one ``writelines``) on
`tornado_readinto._spikecore.SpikeStream`, a ``cdef class`` whose readable
callback the loop calls directly.

* ``spike-compiled``: the extension (``python setup_spike.py build_ext
  --inplace``); unavailable, saying so, when it is not built.
* ``spike-face``: ``spike-compiled`` behind a thin Python face whose
  ``read_into`` and ``writelines`` are Python methods calling the core's: what
  one Python frame per stream call costs (three per message).
* ``spike-shared``: ``spike-compiled`` whose reads completed at once by the
  read-ahead share one resolved Future per result size (``share_done_reads``):
  one Future fewer per message.
* ``spike-pure``: the same ``_spikecore.py`` imported as plain Python (its
  pure twin), whatever is built; the reference the compiled one is checked
  against.

Not products: no TLS, no limits, no other read modes (see the module's
docstring).  Not in the default sets of ``benchmarks.load``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from ._tornado import ReadInto

_PURE_NAME = "tornado_readinto._spikecore_pure"


def compiled_module() -> ModuleType:
    """`tornado_readinto._spikecore`, compiled.

    :raises ImportError: only the pure ``.py`` is there (not built)."""
    from tornado_readinto import _spikecore

    if not _spikecore.COMPILED:
        raise ImportError("the spike's extension is not built: python setup_spike.py build_ext --inplace")
    return _spikecore


def pure_module() -> ModuleType:
    """``tornado_readinto/_spikecore.py`` imported from its source (as
    ``tornado_readinto._spikecore_pure``), even when the extension is built."""
    module = sys.modules.get(_PURE_NAME)
    if module is not None:
        return module
    import tornado_readinto

    path = Path(tornado_readinto.__file__).parent / "_spikecore.py"
    spec = importlib.util.spec_from_file_location(_PURE_NAME, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[_PURE_NAME] = module
    spec.loader.exec_module(module)
    assert not module.COMPILED
    return module


class SpikeCompiled(ReadInto):
    """``readinto``'s benchmark code on the compiled `SpikeStream`."""

    supports_tls = False

    @classmethod
    def _stream_class(cls) -> type:
        return compiled_module().SpikeStream  # type: ignore[no-any-return]

    @classmethod
    async def from_socket(cls, sock):  # type: ignore[no-untyped-def,override]
        return cls(cls._stream_class()(sock))


class SpikePure(SpikeCompiled):
    """``readinto``'s benchmark code on the pure twin of `SpikeStream`."""

    @classmethod
    def _stream_class(cls) -> type:
        return pure_module().SpikeStream  # type: ignore[no-any-return]


class PythonFace:
    """A thin Python face over a core: each stream call is one Python frame
    that calls the core's C method."""

    def __init__(self, core: Any) -> None:
        self._core = core

    def read_into(self, buf: Any, partial: bool = False) -> Any:
        return self._core.read_into(buf, partial)

    def writelines(self, buffers: Any) -> Any:
        return self._core.writelines(buffers)

    def close(self) -> None:
        self._core.close()

    def closed(self) -> bool:
        return self._core.closed()  # type: ignore[no-any-return]


class SpikeFace(SpikeCompiled):
    """``readinto``'s benchmark code on the compiled `SpikeStream` behind a `PythonFace`."""

    @classmethod
    async def from_socket(cls, sock):  # type: ignore[no-untyped-def,override]
        return cls(PythonFace(cls._stream_class()(sock)))


class SpikeShared(SpikeCompiled):
    """``readinto``'s benchmark code on the compiled `SpikeStream` with
    ``share_done_reads=True``."""

    @classmethod
    async def from_socket(cls, sock):  # type: ignore[no-untyped-def,override]
        return cls(cls._stream_class()(sock, share_done_reads=True))
