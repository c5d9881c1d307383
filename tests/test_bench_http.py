"""benchmarks.http: the pure parts, and one tiny end-to-end run (both
implementations, every case, the built-in load generator)."""

import os
import subprocess
import sys

import pytest

from benchmarks.http import Result, _content_length, cpu_seconds, format_table, round_ratios

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_bench_http_format_table_ratios():
    results = [
        Result("stock", "hello", "wrk", 1000, 1.0, 0, 0.5),
        Result("readinto", "hello", "wrk", 1500, 1.0, 0, 0.5),
    ]
    lines = format_table(results).splitlines()
    assert lines[0].split()[:3] == ["case", "impl", "gen"]
    stock, ours = lines[2].split(), lines[3].split()
    assert stock[-2:] == ["1.00", "1.00"]
    assert ours[3] == "1500.0"
    assert ours[-2:] == ["1.50", "1.50"]  # 1.5x requests/s, 500 vs 333 us per request


def test_bench_http_format_table_rounds_give_median_and_spread_of_side_by_side_ratios():
    results = [
        # round 0: a fast spell; round 1: slow; round 2: in between
        Result("stock", "post", "builtin", 10, 1.0, 0, 5.0, 0),
        Result("readinto", "post", "builtin", 20, 1.0, 0, 2.5, 0),
        Result("readinto", "post", "builtin", 6, 1.0, 0, 3.0, 1),
        Result("stock", "post", "builtin", 4, 1.0, 0, 2.0, 1),
        Result("stock", "post", "builtin", 8, 1.0, 0, 4.0, 2),
        Result("readinto", "post", "builtin", 14, 1.0, 0, 3.5, 2),
    ]
    assert round_ratios(results, "post", "readinto") == ([2.0, 1.5, 1.75], [4.0, 1.0, 2.0])
    lines = format_table(results).splitlines()
    assert len(lines) == 4  # header, rule, one row per implementation
    ours = lines[3]
    assert ours.split()[:3] == ["post", "readinto", "builtin"]
    assert "14.0 (6.0-20.0)" in ours  # requests/s: median (min-max) over the rounds
    assert "1.75 (1.50-2.00)" in ours  # ratios within each round, then median (min-max)
    assert "2.00 (1.00-4.00)" in ours  # CPU per request: 0.125, 0.5, 0.25 vs 0.5


def test_bench_http_content_length_of_a_response_head():
    assert _content_length(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n") == 12
    with pytest.raises(RuntimeError):
        _content_length(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n")


def test_bench_http_cpu_seconds_grows():
    before = cpu_seconds(os.getpid())
    sum(i * i for i in range(300_000))
    assert cpu_seconds(os.getpid()) >= before > 0


def _tiny_run(*args: str) -> list[list[str]]:
    """Run ``python -m benchmarks.http`` with the built-in load generator,
    0.2 s per keep-alive case over 2 connections, plus ``args``; check that
    it succeeded and that every row served requests; return the table rows
    (split on whitespace)."""
    result = subprocess.run(
        [
            sys.executable, "-m", "benchmarks.http", "--load-generator", "builtin", "--duration", "0.2",
            "--connections", "2", *args,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line.split() for line in result.stdout.splitlines()[2:]]
    assert all(float(r[3]) > 0 for r in rows)
    return rows


def test_bench_http_runs_tiny():
    rows = _tiny_run("--body-mib", "1", "--download-mib", "1", "--repeat", "1")
    assert [(r[0], r[1]) for r in rows] == [
        (case, impl) for case in ("hello", "post", "put", "download") for impl in ("stock", "readinto")
    ]


def test_bench_http_serves_on_uvloop():
    rows = _tiny_run("--cases", "hello", "--loop", "uvloop")
    assert [(r[0], r[1]) for r in rows] == [("hello", "stock"), ("hello", "readinto")]
