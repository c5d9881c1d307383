"""benchmarks.http: the pure parts, and one tiny end-to-end run (both
implementations, every case, the built-in load generator)."""

import os
import subprocess
import sys

from benchmarks.http import Result, cpu_seconds, format_table

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


def test_bench_http_cpu_seconds_grows():
    before = cpu_seconds(os.getpid())
    sum(i * i for i in range(300_000))
    assert cpu_seconds(os.getpid()) >= before > 0


def test_bench_http_runs_tiny():
    result = subprocess.run(
        [
            sys.executable, "-m", "benchmarks.http", "--load-generator", "builtin", "--duration", "0.2",
            "--connections", "2", "--body-mib", "1", "--download-mib", "1", "--repeat", "1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line.split() for line in result.stdout.splitlines()[2:]]
    assert [(r[0], r[1]) for r in rows] == [
        (case, impl) for case in ("hello", "post", "put", "download") for impl in ("stock", "readinto")
    ]
    assert all(float(r[3]) > 0 for r in rows)
