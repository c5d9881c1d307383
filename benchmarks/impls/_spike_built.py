"""Imports only when the gate spike's extension can be had (``ImplSpec.requires``
of ``spike-compiled``): importing it builds the extension on demand
(`benchmarks.spike.compiled_module`; once per source version, into
``build/spike/``), so that a suite's parent process, which checks availability
before it starts a server, builds it before any server process loads it."""

from ..spike import compiled_module

compiled_module()
