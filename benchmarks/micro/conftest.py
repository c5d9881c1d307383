"""Shared fixtures of the pytest-benchmark micro-benchmarks, and their
collection: pytest collects ``bench_*.py`` here (``test_*.py`` names the
tests, in ``tests/`` and ``tests_bench/``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest


def pytest_collect_file(file_path: Path, parent: Any) -> Any:
    """Collect the micro-benchmark modules, ``bench_*.py``."""
    if file_path.suffix == ".py" and file_path.name.startswith("bench_"):
        return pytest.Module.from_parent(parent, path=file_path)
    return None


@pytest.fixture
def loop():
    """A fresh event loop (Tornado streams attach to the running one)."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    loop.close()
    asyncio.set_event_loop(None)
