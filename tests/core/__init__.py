"""Tests of ``tornado_readinto.core``."""
