"""The pytest-benchmark micro-benchmarks of the pure parts (framing codec,
write buffer, allocators, a stream's calls): ``pytest benchmarks/micro``.
Their files are ``bench_*.py``, so that ``test_*`` names only tests."""
