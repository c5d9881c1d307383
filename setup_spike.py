"""Build the gate spike of issue #33 in place (not the package's build):

    python setup_spike.py build_ext --inplace

compiles tornado_readinto/_spikecore.py with the types of _spikecore.pxd
(Cython pure-Python mode) into tornado_readinto/_spikecore.*.so, which then
shadows the .py on import.  Delete the .so to run the pure twin.
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    name="tornado_readinto_spike",
    ext_modules=cythonize(
        [Extension("tornado_readinto._spikecore", ["tornado_readinto/_spikecore.py"], extra_compile_args=["-O2"])],
        compiler_directives={
            "language_level": 3,
            "boundscheck": False,
            "wraparound": False,
            "initializedcheck": False,
            "cdivision": True,
        },
        annotate=False,
    ),
)
