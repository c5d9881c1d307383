"""Build the compiled core: Cython's pure-Python mode compiles
``tornado_readinto/core/_policy.py``, ``_sockcalls.py``, ``_readcore.py``,
``_streamcore.py``,
``_facecore.py``, ``writebuffer.py`` and ``framing.py`` (the same ``.py`` files, typed by their ``.pxd``) and
``busypoll.py``, ``iostream.py``, ``framed.py`` and
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

import ast
import os
import pathlib
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext


def _package_list(name: str) -> tuple[str, ...]:
    """A module list of ``tornado_readinto/__init__.py`` (the one place it is
    kept), read without importing the package: an isolated build must not
    run the package's import-time code."""
    tree = ast.parse((pathlib.Path(__file__).parent / "tornado_readinto" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return tuple(f"tornado_readinto.{module}" for module in ast.literal_eval(node.value))
    raise SystemExit(f"setup.py: tornado_readinto/__init__.py has no {name}")


#: The modules compiled: the same .py, typed by the .pxd beside it where
#: there is one, or as it is (ordinary classes, no bytecode).
COMPILED_MODULES = _package_list("_COMPILED_MODULES")

#: The modules compiled from a ``.pyx``: C calls with no ``.py`` of the same
#: name (the pure build runs a twin that lives elsewhere).
NATIVE_MODULES = _package_list("_NATIVE_MODULES")

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
