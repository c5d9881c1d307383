"""The echo suite's declarations (columns, ratios, JSON, plot) on hand-made
results, plus end-to-end smoke runs of ``python -m benchmarks.echo`` (the
README's command), ``python -m benchmarks echo`` and ``python benchmarks/echo.py``.
The harness's own pure parts are tested in test_bench_harness.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.echo import SUITE, Result, ratio

ROOT = Path(__file__).resolve().parent.parent


def make_result(impl: str, msgs_per_s: list[float], msize: int = 1024, **kw: object) -> Result:
    repeats = [
        {"msgs_per_s": m, "mib_per_s": m * msize / 2**20, "p50_s": 1e-4, "p99_s": 3e-4, "messages": 100}
        for m in msgs_per_s
    ]
    kw.setdefault("server_rss_bytes", 30 << 20)
    kw.setdefault("client_rss_bytes", 40 << 20)
    return Result(impl, msize, 1, "pingpong", repeats=repeats, verified_messages=300, **kw)  # type: ignore[arg-type]


@pytest.fixture
def results() -> list[Result]:
    return [
        make_result("stock-read_bytes", [1000, 1200, 1100]),
        make_result("readinto", [2000, 2600, 2200]),
        make_result("threads", [4400, 4000, 4500]),
        make_result("readinto", [30, 20, 25], msize=1 << 20),  # no baseline in this case
        Result("framed-pool", 1024, 1, "pingpong", error="client exited with status 2: VERIFICATION FAILED\ntrace"),
        Result("dask-tcp", 1024, 1, "pingpong", skipped="needs distributed"),
        Result("dask-tcp", 1 << 20, 1, "pingpong", skipped="needs distributed"),
    ]


def test_result_median_and_spread(results: list[Result]) -> None:
    stock = results[0]
    assert stock.median("msgs_per_s") == 1100
    assert stock.spread("msgs_per_s") == (1000, 1200)
    assert results[4].median("msgs_per_s") is None and not results[4].ok
    assert make_result("x", [1, 2, 3, 4]).median("msgs_per_s") == 2.5


def test_ratio_same_case_only(results: list[Result]) -> None:
    stock, readinto, threads, big = results[:4]
    assert ratio(results, readinto, "stock-read_bytes") == pytest.approx(2200 / 1100)
    assert ratio(results, readinto, "threads") == pytest.approx(2200 / 4400)
    assert ratio(results, stock, "stock-read_bytes") == pytest.approx(1.0)
    assert ratio(results, big, "stock-read_bytes") is None  # no stock run at 1 MiB
    assert ratio(results, results[4], "stock-read_bytes") is None  # failed


def test_format_table(results: list[Result]) -> None:
    table = SUITE.format_table(results)
    lines = table.splitlines()
    readinto = next(line for line in lines if line.startswith("readinto ") and "1KiB" in line)
    assert "2.2k (2k-2.6k)" in readinto  # median (min-max)
    assert "2.00x" in readinto and "0.50x" in readinto
    assert "100us" in readinto and "300us" in readinto
    assert "30/40" in readinto  # RSS MiB, server/client
    assert "one-way payload" in table and "median of 3 repeats" in table
    failed = next(line for line in lines if line.startswith("framed-pool"))
    assert "FAILED: client exited with status 2: VERIFICATION FAILED" in failed and "trace" not in table
    skipped = [line for line in lines if line.startswith("SKIPPED")]
    assert skipped == ["SKIPPED dask-tcp: needs distributed"]  # once per impl
    big = next(line for line in lines if "1MiB" in line)
    assert big.split()[-2:] == ["-", "-"]  # no ratios without baselines


def test_to_json(results: list[Result]) -> None:
    data = json.loads(json.dumps(SUITE.to_json(results, {"argv": ["--full"]})))
    assert data["meta"] == {"argv": ["--full"]}
    entries = data["results"]
    assert [e["status"] for e in entries] == ["ok"] * 4 + ["failed", "skipped", "skipped"]
    readinto = entries[1]
    assert readinto["msgs_per_s"] == {"median": 2200, "min": 2000, "max": 2600}
    assert readinto["x_stock-read_bytes"] == pytest.approx(2.0)
    assert readinto["x_threads"] == pytest.approx(0.5)
    assert readinto["msize_text"] == "1KiB" and len(readinto["repeats"]) == 3
    assert entries[5]["skipped"] == "needs distributed"
    again = [SUITE.from_json(e) for e in entries]
    assert SUITE.to_json(again, {"argv": ["--full"]}) == data


def test_plot_writes_png(tmp_path: Path, results: list[Result]) -> None:
    pytest.importorskip("matplotlib")
    pipelined = make_result("readinto", [900, 1000])
    pipelined.mode = "pipelined"
    path = tmp_path / "echo.png"
    SUITE.plot(results + [pipelined], str(path))
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 5000


def test_plot_without_results(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "empty.png"
    SUITE.plot([Result("dask-tcp", 1024, 1, "pingpong", skipped="no")], str(path))
    assert path.read_bytes().startswith(b"\x89PNG")


def test_echo_cli_smoke(tmp_path: Path) -> None:
    """The real CLI end to end: separate server and client processes, verified echoes."""
    out = tmp_path / "echo.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, "-m", "benchmarks.echo", "--impl", "stock-read_bytes,readinto,threads,comm-readinto",
           "--msize", "1KiB,64KiB", "--mode", "pingpong,pipelined", "--duration", "0.1", "--warmup", "0.02",
           "--repeat", "1", "--json", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr
    assert "x threads" in proc.stdout and "SKIPPED" not in proc.stdout
    assert sum(line.startswith("[") for line in proc.stderr.splitlines()) == 16  # progress per case
    entries = json.loads(out.read_text())["results"]
    cases = {(e["impl"], e["msize"], e["mode"]) for e in entries}
    assert len(entries) == len(cases) == 16
    for e in entries:
        assert e["status"] == "ok", e["error"]
        assert e["verified_messages"] > 0 and e["verified_messages"] == e["messages_sent"]
        assert e["messages_echoed_by_server"] == e["messages_sent"]
        assert e["full_compares"] == 2
        assert e["msgs_per_s"]["median"] > 0 and e["server_rss_bytes"] > 0
        assert e["window"] == (16 if e["mode"] == "pipelined" else 1)


def test_echo_cli_uninit_rows(tmp_path: Path) -> None:
    """``readinto-uninit`` and ``threads-uninit`` (frames received into
    ``uninitialized_allocator`` buffers, huge pages from 4 MiB) echo 8 MiB
    messages, every one verified."""
    from benchmarks.impls import IMPLS, load
    from tornado_readinto.wire.allocators import uninitialized_allocator

    for name in ("readinto-uninit", "threads-uninit"):
        assert load(IMPLS[name])(None)._reused._allocate is uninitialized_allocator, name
    out = tmp_path / "echo.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, "-m", "benchmarks.echo", "--impl", "readinto-uninit,threads-uninit", "--msize", "8MiB",
           "--duration", "0.1", "--warmup", "0.02", "--repeat", "1", "--json", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr
    entries = json.loads(out.read_text())["results"]
    assert [e["impl"] for e in entries] == ["readinto-uninit", "threads-uninit"]
    for e in entries:
        assert e["status"] == "ok", e["error"]
        assert e["verified_messages"] == e["messages_sent"] == e["messages_echoed_by_server"] > 0
    assert type(uninitialized_allocator(8 << 20)).__name__ == "ndarray"  # numpy is installed for the tests


def test_echo_cli_runs_the_asyncio_anchors(tmp_path: Path) -> None:
    """The anchors through ``python -m benchmarks echo``: 4-frame messages,
    pipelined, both loops, verified (their parsing is tested in
    test_bench_anchors)."""
    pytest.importorskip("uvloop")
    out = tmp_path / "echo.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    impls = ["asyncio-streams", "asyncio-protocol", "uvloop-streams", "uvloop-protocol"]
    cmd = [sys.executable, "-m", "benchmarks", "echo", "--impl", ",".join(impls), "--msize", "4KiB",
           "--nframes", "4", "--mode", "pipelined", "--duration", "0.1", "--warmup", "0.02", "--repeat", "1",
           "--json", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr
    entries = json.loads(out.read_text())["results"]
    assert [e["impl"] for e in entries] == impls
    for e in entries:
        assert e["status"] == "ok", e["error"]
        assert e["nframes"] == 4 and e["verified_messages"] == e["messages_sent"] > 16
        assert e["messages_echoed_by_server"] == e["messages_sent"] and e["full_compares"] == 2


def test_echo_as_a_script_with_rounds(tmp_path: Path) -> None:
    """``python benchmarks/echo.py`` (the form in STYLE.md) from another
    directory; ``--rounds 2`` runs the case twice and pools the repeats and
    the counts."""
    out = tmp_path / "echo.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "echo.py"), "--impl", "readinto", "--msize", "1KiB",
           "--duration", "0.05", "--warmup", "0.02", "--repeat", "1", "--rounds", "2", "--json", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr
    assert [line.split(":")[0] for line in proc.stderr.splitlines()] == ["[1/2] readinto 1KiB x1 pingpong"] + [
        "[2/2] readinto 1KiB x1 pingpong"
    ]
    data = json.loads(out.read_text())
    assert data["meta"]["rounds"] == 2 and data["meta"]["repeat"] == 1
    (entry,) = data["results"]
    assert entry["status"] == "ok" and len(entry["repeats"]) == 2
    assert entry["verified_messages"] == entry["messages_sent"] == entry["messages_echoed_by_server"] > 0
    assert entry["full_compares"] == 4  # two per connection and round
