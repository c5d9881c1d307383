"""Tests of the benchmark harness (``benchmarks/``), apart from the library's
own tests in ``tests/``; the README's test command runs both (``testpaths``
in setup.cfg).  The micro-benchmarks themselves live in
``benchmarks/micro/bench_*.py`` and run with ``pytest benchmarks/micro``."""

from tests.conftest import _gil_uncontended, _tornado_logs_enabled  # noqa: F401 - autouse fixtures
