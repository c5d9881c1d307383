"""What the pure build sees of the ``cython`` module: ``cython.compiled`` is
False.

A module compiled in Cython's pure-Python mode does ``import cython`` (which
Cython resolves at compile time) and falls back on this module when Cython
is not installed, so that ``if cython.compiled:`` picks the C path in the
compiled build and the Python path everywhere else.
"""

compiled = False
