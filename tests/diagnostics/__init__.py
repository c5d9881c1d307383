"""Tests of ``tornado_readinto.diagnostics``."""
