"""Tests of ``tornado_readinto.wire``."""
