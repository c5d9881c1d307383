"""The compiled-core spike: a benchmark prototype, not part of the package.

``_spikecore.py`` + ``_spikecore.pxd`` are one ``cdef class SpikeStream`` in
Cython's pure-Python mode (see the module's docstring): the .py runs as it is
(the pure twin, `pure_module`) and compiles with the types of the .pxd (the
compiled build, `compiled_module`).  The benchmark servers ``spike-*``
(``benchmarks/impls/_spike.py``) and ``tests/test_spike.py`` use them.

The compiled build is made on demand, never in the source tree: the first
`compiled_module` (or ``python -m benchmarks.spike``) compiles a copy of the
two files into ``build/spike/<key>/`` of the checkout (``$SPIKE_BUILD_DIR``
instead, if set), where ``<key>`` hashes the sources, this builder, the
interpreter and Cython's version; later calls and other processes load that
build (about 30 s the first time).  It needs Cython and setuptools (the
``test`` and ``bench`` extras) and a C compiler; without them
`compiled_module` raises `SpikeBuildError` saying what failed.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from types import ModuleType

__all__ = ["SpikeBuildError", "build", "build_root", "compiled_module", "pure_module"]

_HERE = Path(__file__).resolve().parent
_SOURCES = ("_spikecore.py", "_spikecore.pxd")
_BUILDER = _HERE / "_build.py"
_MODULE = "_spikecore"  # the extension's name (its init function's)

_compiled: ModuleType | None = None
_failed: SpikeBuildError | None = None


class SpikeBuildError(ImportError):
    """The compiled spike cannot be built or loaded here (no Cython, no C
    compiler, a compile error); the message says which, with the compiler's
    output."""


def build_root() -> Path:
    """Where builds go: ``$SPIKE_BUILD_DIR``, else ``build/spike/`` of the checkout."""
    env = os.environ.get("SPIKE_BUILD_DIR")
    return Path(env) if env else _HERE.parent.parent / "build" / "spike"


def _key() -> str:
    try:
        import Cython
    except ImportError as exc:
        raise SpikeBuildError(
            f"the compiled spike needs Cython ({exc}): pip install cython, or the test or bench extra"
        ) from exc
    digest = hashlib.sha256()
    for path in [*(_HERE / name for name in _SOURCES), _BUILDER]:
        digest.update(path.read_bytes())
    for part in (sys.version, sysconfig.get_config_var("EXT_SUFFIX") or "", Cython.__version__):
        digest.update(part.encode())
    return digest.hexdigest()[:16]


def _built(directory: Path) -> Path | None:
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    path = directory / (_MODULE + suffix)
    return path if path.is_file() else None


def build(root: Path | None = None) -> Path:
    """The compiled extension's file, built under ``root`` (default
    `build_root`) unless a build of the same key is there.

    :raises SpikeBuildError: Cython is missing or the compile failed."""
    root = build_root() if root is None else Path(root)
    target = root / _key()
    built = _built(target)
    if built is not None:
        return built
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".building-", dir=root))
    try:
        src, out = work / "src", work / "out"
        src.mkdir()
        for name in _SOURCES:
            shutil.copyfile(_HERE / name, src / name)
        result = subprocess.run(
            [sys.executable, str(_BUILDER), str(src), str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
        if result.returncode != 0 or _built(out) is None:
            tail = "\n".join(result.stdout.splitlines()[-40:])
            raise SpikeBuildError(
                f"building the compiled spike failed (exit status {result.returncode}; "
                f"needs Cython, setuptools and a C compiler):\n{tail}"
            )
        try:
            out.rename(target)  # atomic: another process may have won the race
        except OSError:
            if _built(target) is None:
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    built = _built(target)
    assert built is not None
    return built


def compiled_module() -> ModuleType:
    """``_spikecore`` compiled (built on demand, see the module docstring),
    loaded once per process.

    :raises SpikeBuildError: it cannot be built here (the same error again
        on later calls, without retrying)."""
    global _compiled, _failed
    if _compiled is not None:
        return _compiled
    if _failed is not None:
        raise _failed
    try:
        path = build()
        spec = importlib.util.spec_from_file_location(_MODULE, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except SpikeBuildError as exc:
        _failed = exc
        raise
    except Exception as exc:  # an extension that does not load
        _failed = SpikeBuildError(f"loading the compiled spike failed: {type(exc).__name__}: {exc}")
        raise _failed from exc
    if not module.COMPILED:
        _failed = SpikeBuildError(f"{path} is not the compiled build")
        raise _failed
    _compiled = module
    return module


def pure_module() -> ModuleType:
    """``benchmarks/spike/_spikecore.py`` imported as plain Python (the pure twin)."""
    module = importlib.import_module(__name__ + "._spikecore")
    assert not module.COMPILED, module.__file__
    return module
