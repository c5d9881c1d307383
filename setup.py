"""Build the compiled core: Cython's pure-Python mode compiles
``tornado_readinto/_emptyproof.py``, ``_lowat.py``, ``_policy.py``, ``_sockcalls.py``, ``_readcore.py``, ``_streamcore.py``,
``_facecore.py``, ``writebuffer.py`` and ``framing.py`` (the same ``.py`` files, typed by their ``.pxd``) and
``busypoll.py``, ``iostream.py``, ``_eager.py``, ``framed.py`` and
``allocators.py`` (as they are, no ``.pxd``) into extension modules of the
same names, and Cython compiles ``_gilheld_native.pyx``, the GIL-keeping socket
calls (C only: their pure twin is ``_gilheld``'s ctypes code).  The typed
modules cimport each other's classes (``_streamcore`` the write queue,
``_readcore`` the frame reader), one more reason to build all or none.

Everything else (metadata, packages, requirements) is in ``setup.cfg``.

The extensions are optional: when Cython is missing or the compiler fails
(``CC=false``), the build prints one line and the package installs pure
Python, which is complete (``tornado_readinto.COMPILED`` is then False).
``TORNADO_READINTO_NO_EXTENSIONS=1`` at build time skips the compile.
"""

from __future__ import annotations

import os
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

#: The modules compiled: the same .py, typed by the .pxd beside it (the
#: first nine) or as it is (the others: ordinary classes, no bytecode).
COMPILED_MODULES = (
    "tornado_readinto._emptyproof",
    "tornado_readinto._lowat",
    "tornado_readinto._policy",
    "tornado_readinto._sockcalls",
    "tornado_readinto._readcore",
    "tornado_readinto._streamcore",
    "tornado_readinto._facecore",
    "tornado_readinto.writebuffer",
    "tornado_readinto.framing",
    "tornado_readinto.busypoll",
    "tornado_readinto.iostream",
    "tornado_readinto._eager",
    "tornado_readinto.framed",
    "tornado_readinto.allocators",
)

#: The modules compiled from a ``.pyx``: C calls with no ``.py`` of the same
#: name (the pure build runs a twin that lives elsewhere).
NATIVE_MODULES = ("tornado_readinto._gilheld_native",)

#: Cython's directives for the core.  ``freethreading_compatible=False``
#: declares the module as needing the GIL (``Py_mod_gil = Py_MOD_GIL_USED``):
#: the core is not thread-safe, so a free-threaded interpreter re-enables the
#: GIL when it imports it, and says so with a warning.
DIRECTIVES = {
    "language_level": 3,
    "freethreading_compatible": False,
    "embedsignature": True,
    # Annotations are for mypy: C types come from the .pxd files only.
    "annotation_typing": False,
}

_FALLBACK = "tornado_readinto: the compiled core was not built ({}); the package will run pure Python"


class OptionalBuildExt(build_ext):
    """``build_ext`` whose failure is not the install's: all extensions or
    none (the compiled ``_streamcore`` needs the compiled ``_readcore`` and
    ``writebuffer``, and ``_readcore`` the compiled ``framing``)."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as e:  # no compiler, a failed compile or link
            self._fall_back(e)

    def _fall_back(self, error: BaseException) -> None:
        for path in self.get_outputs():
            if os.path.exists(path):
                os.remove(path)
        reason = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
        print(_FALLBACK.format(reason), file=sys.stderr)


def extensions() -> list:
    if os.environ.get("TORNADO_READINTO_NO_EXTENSIONS"):
        print(_FALLBACK.format("TORNADO_READINTO_NO_EXTENSIONS is set"), file=sys.stderr)
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        print(_FALLBACK.format("Cython is not installed"), file=sys.stderr)
        return []
    from setuptools import Extension

    modules = [Extension(name, [name.replace(".", "/") + ".py"]) for name in COMPILED_MODULES]
    modules += [Extension(name, [name.replace(".", "/") + ".pyx"]) for name in NATIVE_MODULES]
    try:
        return cythonize(modules, compiler_directives=DIRECTIVES, quiet=True, force=True)  # type: ignore[no-any-return]
    except Exception as e:  # a Cython error: never expected in a release
        print(_FALLBACK.format(f"Cython failed: {e}"), file=sys.stderr)
        return []


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
