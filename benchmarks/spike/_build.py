"""Compile the gate spike (run as a script by `benchmarks.spike.build`, in a
child process so that the compiler's output can be captured and reported):

    python _build.py SRC_DIR OUT_DIR

``SRC_DIR`` holds copies of ``_spikecore.py`` and ``_spikecore.pxd`` (and no
``__init__.py``: the extension is the top-level module ``_spikecore``);
Cython's pure-Python mode compiles the .py with the types of the .pxd, and
the extension lands in ``OUT_DIR``.  Needs Cython and setuptools, and a C
compiler.
"""

from __future__ import annotations

import sys
from pathlib import Path

#: Cython's directives for the spike (its hot path indexes only buffers whose
#: bounds it checked itself).
DIRECTIVES = {
    "language_level": 3,
    "boundscheck": False,
    "wraparound": False,
    "initializedcheck": False,
    "cdivision": True,
}


def main(src_dir: str, out_dir: str) -> None:
    from Cython.Build import cythonize
    from setuptools import Extension
    from setuptools.dist import Distribution

    src = Path(src_dir)
    extension = Extension("_spikecore", [str(src / "_spikecore.py")], extra_compile_args=["-O2"])
    modules = cythonize([extension], compiler_directives=DIRECTIVES, annotate=False, quiet=True)
    dist = Distribution({"name": "spike", "ext_modules": modules, "script_args": []})
    command = dist.get_command_obj("build_ext")
    command.build_lib = out_dir
    command.build_temp = str(src / "temp")
    command.inplace = False
    command.ensure_finalized()
    command.run()


if __name__ == "__main__":
    main(*sys.argv[1:3])
