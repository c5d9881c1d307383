"""Imports only when the gate spike's extension is built (``ImplSpec.requires``
of ``spike-compiled``): ``python setup_spike.py build_ext --inplace``."""

from ._spike import compiled_module

compiled_module()
