"""benchmarks.http: the pure parts, and one tiny end-to-end run (both
implementations, every case, the built-in load generator)."""

import os
import subprocess
import sys

import pytest

from benchmarks.http import SUITE, Result, measured, round_ratios
from benchmarks.impls._http import content_length

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def result(impl, case, *rounds):
    """``rounds``: (requests, seconds, nbytes, server CPU seconds) per round."""
    return Result(impl, case, "builtin", [measured(i, dict(zip(("requests", "seconds", "nbytes"), r)), r[3])
                                          for i, r in enumerate(rounds)])  # fmt: skip


def rows(table):
    """The table's rows after its rule line, split on whitespace."""
    lines = table.splitlines()
    return [line.split() for line in lines[lines.index(next(x for x in lines if set(x) == {"-"})) + 1 :] if line]


def test_bench_http_format_table_ratios():
    results = [result("stock", "hello", (1000, 1.0, 0, 0.5)), result("readinto", "hello", (1500, 1.0, 0, 0.5))]
    table = SUITE.format_table(results)
    header = next(line for line in table.splitlines() if line.startswith("case"))
    assert header.split()[:3] == ["case", "impl", "gen"]
    stock, ours = rows(table)
    assert stock[-2:] == ["1.00x", "1.00x"]
    assert ours[3] == "1500.0"
    assert ours[-2:] == ["1.50x", "1.50x"]  # 1.5x requests/s, 500 vs 333 us per request


def test_bench_http_format_table_rounds_give_median_and_spread_of_side_by_side_ratios():
    results = [
        # round 0: a fast spell; round 1: slow; round 2: in between
        result("stock", "post", (10, 1.0, 0, 5.0), (4, 1.0, 0, 2.0), (8, 1.0, 0, 4.0)),
        result("readinto", "post", (20, 1.0, 0, 2.5), (6, 1.0, 0, 3.0), (14, 1.0, 0, 3.5)),
    ]
    assert round_ratios(results, results[1], "requests_per_s") == [2.0, 1.5, 1.75]
    assert round_ratios(results, results[1], "cpu_us_per_request", True) == [4.0, 1.0, 2.0]
    table = SUITE.format_table(results)
    assert "over 3 rounds" in table
    ours = rows(table)[1]
    assert len(rows(table)) == 2  # one row per implementation
    assert ours[:3] == ["post", "readinto", "builtin"]
    assert ours[3:5] == ["14.0", "(6.0-20.0)"]  # requests/s: median (min-max) over the rounds
    assert ours[-4:] == ["1.75x", "(1.50x-2.00x)", "2.00x", "(1.00x-4.00x)"]  # ratios within each round
    entry = SUITE.to_json(results)["results"][1]
    assert entry["x_stock"] == 1.75 and entry["cpu_x_stock"] == 2.0
    assert [r["round"] for r in entry["repeats"]] == [0, 1, 2] and entry["repeats"][0]["server_cpu_s"] == 2.5


def test_bench_http_content_length_of_a_response_head():
    assert content_length(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n") == 12
    with pytest.raises(RuntimeError):
        content_length(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n")


def _tiny_run(*args):
    """Run ``python -m benchmarks http`` with the built-in load generator,
    0.2 s per keep-alive case over 2 connections, plus ``args``; check that
    it succeeded and that every row served requests; return the table rows
    (split on whitespace)."""
    proc = subprocess.run(
        [
            sys.executable, "-m", "benchmarks", "http", "--load-generator", "builtin", "--duration", "0.2",
            "--connections", "2", *args,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = rows(proc.stdout)
    assert all(float(r[3]) > 0 for r in table)
    return table


def test_bench_http_runs_tiny():
    table = _tiny_run("--body-mib", "1", "--download-mib", "1", "--repeat", "1")
    assert [(r[0], r[1]) for r in table] == [
        (case, impl) for case in ("hello", "post", "put", "download") for impl in ("stock", "readinto")
    ]


def test_bench_http_serves_on_uvloop():
    table = _tiny_run("--cases", "hello", "--loop", "uvloop")
    assert [(r[0], r[1]) for r in table] == [("hello", "stock"), ("hello", "readinto")]


def test_bench_http_alias_and_rounds():
    """``python -m benchmarks.http`` (the docs' form) with two rounds: the
    ratios within each round give a median and a spread."""
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.http", "--load-generator", "builtin", "--duration", "0.1",
         "--connections", "2", "--cases", "hello", "--rounds", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    stock, ours = rows(proc.stdout)
    assert stock[-4:] == ["1.00x", "(1.00x-1.00x)", "1.00x", "(1.00x-1.00x)"]
    assert ours[1] == "readinto" and ours[-1].startswith("(") and ours[-3].startswith("(")
