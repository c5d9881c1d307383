"""Shared fixtures of the pytest-benchmark micro-benchmarks."""

import asyncio

import pytest


@pytest.fixture
def loop():
    """A fresh event loop (Tornado streams attach to the running one)."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    loop.close()
    asyncio.set_event_loop(None)
