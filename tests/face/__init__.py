"""Tests of ``tornado_readinto.face``."""
