"""The compiled-core spike as echo servers: ``readinto``'s benchmark code
(``read_into`` the 16-byte head, then each frame; one ``writelines``) on
``benchmarks/spike/_spikecore.SpikeStream``, a ``cdef class`` whose readable
callback the loop calls directly.

* ``spike-compiled``: the extension, built on demand by
  `benchmarks.spike.compiled_module` (into ``build/spike/``, once per source
  version; ``python -m benchmarks.spike`` builds it ahead); unavailable,
  saying why, when it cannot be built (no Cython, no C compiler).
* ``spike-face``: ``spike-compiled`` behind a thin Python face whose
  ``read_into`` and ``writelines`` are Python methods calling the core's: what
  one Python frame per stream call costs (three per message).
* ``spike-shared``: ``spike-compiled`` whose reads completed at once by the
  read-ahead share one resolved Future per result size (``share_done_reads``):
  one Future fewer per message.
* ``spike-pure``: the same ``_spikecore.py`` imported as plain Python (its
  pure twin); the reference the compiled one is checked against.

Not products: no TLS, no limits, no other read modes (see the module's
docstring).  Not in the default sets of ``benchmarks.load``.
"""

from __future__ import annotations

from typing import Any

from ..spike import compiled_module, pure_module
from ._tornado import ReadInto

__all__ = ["PythonFace", "SpikeCompiled", "SpikeFace", "SpikePure", "SpikeShared"]


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
