"""Tests of ``tornado_readinto.channel``."""
