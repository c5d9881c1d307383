"""The dask benchmark (``python -m benchmarks.dask``): its pure parts on
hand-made results (ratios, table, JSON round trip, the A/B order,
arguments), the busy-worker's spinner in this process, and tiny real runs of
every workload over both protocols."""

from __future__ import annotations

import ast
import json
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("distributed")

from benchmarks import dask as bench  # noqa: E402
from benchmarks import dask_busyworker as busy  # noqa: E402
from benchmarks import harness as h  # noqa: E402
from benchmarks.dask import SUITE, DaskResult, _square, ratio  # noqa: E402
from benchmarks.harness import alternation  # noqa: E402
from benchmarks.harness.cpu import host_reported_kib  # noqa: E402


def imported_modules(module: Any) -> set[str]:
    """Every module ``module``'s source imports, at its top or inside a
    function, relative imports resolved against its package."""
    tree = ast.parse(Path(module.__file__).read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = module.__name__.rsplit(".", node.level)[0] if node.level else ""
            parent = ".".join(part for part in (base, node.module or "") if part)
            names |= {parent} | {f"{parent}.{alias.name}" for alias in node.names}
    return names


def test_the_busy_worker_workload_does_not_import_the_suite() -> None:
    """`benchmarks.dask` imports the busy-worker workload; the workload and
    the task functions never import it back, not even inside a function
    (no import loop)."""
    from benchmarks import dask_tasks

    assert "benchmarks.dask_busyworker" in imported_modules(bench)
    from benchmarks import dask_busy

    for module in (busy, dask_busy, dask_tasks):
        assert not {"benchmarks.dask", "benchmarks.dask_profile", "benchmarks.dask_netpath"} & imported_modules(module)


def make_result(workload: str, protocol: str, baseline: str, values: list[float], **kw: Any) -> DaskResult:
    return DaskResult(workload, protocol, baseline, repeats=[{"value": v} for v in values], **kw)


@pytest.fixture
def results() -> list[DaskResult]:
    return [
        make_result("rpc", "tcp", "tcp", [1000, 1100, 900, 1050, 950]),
        make_result("rpc", "readinto", "tcp", [1500, 1400, 1600, 1450, 1550]),
        make_result("chain", "tcp", "tcp", [2.0, 2.2, 1.8]),
        make_result("chain", "readinto", "tcp", [1.6, 1.5, 1.7]),
        make_result("transfer", "tls", "tls", [0.8, 0.9, 1.0]),
        make_result("transfer", "readinto-tls", "tls", [1.2]),
        DaskResult("tasks", "tcp", "tcp", error="VerificationError: wrong results of 20000 tasks\ntrace"),
        make_result("tasks", "readinto", "tcp", [4000, 4100, 3900]),
        DaskResult("shuffle", "tcp", "tcp", skipped="needs pandas and pyarrow"),
        DaskResult("shuffle", "readinto", "tcp", skipped="needs pandas and pyarrow"),
        DaskResult(
            "busy-worker-rpc",
            "tcp",
            "tcp",
            repeats=[{"value": v, "switches_per_rpc": s} for v, s in ((40, 20.0), (50, 21.0), (60, 19.5))],
        ),
        DaskResult(
            "busy-worker-rpc[arith@1ms]",
            "readinto",
            "tcp",
            repeats=[{"value": v, "switches_per_rpc": 6.5} for v in (400, 380)],
        ),
        make_result("busy-worker-rpc[arith@1ms]", "tcp", "tcp", [200, 190]),
        make_result("busy-worker-rpc", "readinto", "tcp", [100, 80, 120]),
        make_result("busy-worker-fetch", "tcp", "tcp", [0.3, 0.2, 0.4]),
        make_result("busy-worker-fetch", "readinto", "tcp", [0.1, 0.2, 0.05]),
        make_result("busy-worker-heartbeat", "tcp", "tcp", [0.004, -0.002, 0.010]),
        make_result("busy-worker-heartbeat", "readinto", "tcp", [-0.003, 0.001, -0.001]),
    ]


def by(results: list[DaskResult], workload: str, protocol: str) -> DaskResult:
    return next(r for r in results if (r.workload, r.protocol) == (workload, protocol))


def test_bench_dask_ratio_is_a_speedup_for_rates_and_times(results: list[DaskResult]) -> None:
    assert ratio(results, by(results, "rpc", "readinto")) == pytest.approx(1500 / 1000)
    # s per chain: lower is better, so the ratio is tcp's time over readinto's
    assert ratio(results, by(results, "chain", "readinto")) == pytest.approx(2.0 / 1.6)
    assert ratio(results, by(results, "transfer", "readinto-tls")) == pytest.approx(1.2 / 0.9)
    assert ratio(results, by(results, "busy-worker-rpc", "readinto")) == pytest.approx(100 / 50)
    assert ratio(results, by(results, "busy-worker-fetch", "readinto")) == pytest.approx(0.3 / 0.1)
    # none for a baseline, for a failed baseline, for a skipped workload
    assert ratio(results, by(results, "rpc", "tcp")) is None
    assert ratio(results, by(results, "tasks", "readinto")) is None
    assert ratio(results, by(results, "shuffle", "readinto")) is None


def test_bench_dask_format_table(results: list[DaskResult]) -> None:
    text = SUITE.format_table(results)
    lines = text.splitlines()
    assert "over 5 repeats" in lines[0]
    header = next(line for line in lines if line.startswith("workload"))
    assert header.split() == [
        "workload", "protocol", "metric", "median", "(min-max)", "switches/RPC", "-", "baseline", "x", "baseline"
    ]  # fmt: skip
    rpc = next(line for line in lines if line.startswith("rpc") and "readinto" in line)
    assert rpc.split() == ["rpc", "readinto", "RPC/s", "1.5k", "(1.4k-1.6k)", "1.50x"]
    rpc_tcp = next(line for line in lines if line.startswith("rpc") and " tcp " in line)
    assert rpc_tcp.split()[-1] == "-"  # no ratio on the baseline's own row
    chain = next(line for line in lines if line.startswith("chain") and "readinto" in line)
    assert "s per chain" in chain and "1.6s (1.5s-1.7s)" in chain and chain.endswith("1.25x")
    transfer = next(line for line in lines if line.startswith("transfer") and "readinto-tls" in line)
    assert transfer.split()[-3:] == ["GB/s", "1.2", "1.33x"]  # one repeat: no spread
    failed = next(line for line in lines if line.startswith("tasks") and " tcp " in line)
    assert failed.split()[:3] == ["tasks", "tcp", "tasks/s"]
    assert "FAILED: VerificationError: wrong results of 20000 tasks" in failed and "trace" not in text
    assert "SKIPPED shuffle: needs pandas and pyarrow" in lines
    busy_tcp = next(line for line in lines if line.startswith("busy-worker-rpc ") and " tcp " in line)
    assert busy_tcp.split()[-2:] == ["20.0", "-"]  # switches per RPC (median) beside RPC/s
    variant = next(line for line in lines if line.startswith("busy-worker-rpc[arith@1ms]") and "readinto" in line)
    assert variant.split() == ["busy-worker-rpc[arith@1ms]", "readinto", "RPC/s", "390", "(380-400)", "6.5", "2.00x"]
    fetch = next(line for line in lines if line.startswith("busy-worker-fetch") and "readinto" in line)
    assert fetch.split() == ["busy-worker-fetch", "readinto", "s", "per", "fetch", "100ms", "(50ms-200ms)", "3.00x"]
    assert sum("shuffle" in line for line in lines) == 1  # listed once, not as rows
    # a delay that can be negative: readinto's median minus tcp's (-1ms - 4ms), never a ratio
    heartbeat = next(line for line in lines if line.startswith("busy-worker-heartbeat") and "readinto" in line)
    assert heartbeat.split()[-2:] == ["-5ms", "-"]
    # a blank line between workloads, none inside one
    i = lines.index(rpc)
    assert lines[i - 1].startswith("rpc") or lines[i + 1].startswith("rpc")
    assert "" in lines[lines.index(header) :]
    # columns line up: the values of the readinto rows end where the header's column ends
    widths = {len(line) for line in lines if line.startswith(("rpc", "chain", "transfer", "busy-worker"))}
    assert len(widths) == 1


def test_bench_dask_json_round_trip(results: list[DaskResult], tmp_path: Path) -> None:
    data = SUITE.to_json(results, {"argv": ["--repeat", "5"]})
    path = tmp_path / "out.json"
    path.write_text(json.dumps(data))
    loaded = json.loads(path.read_text())
    assert loaded["meta"] == {"argv": ["--repeat", "5"]}
    rpc = next(e for e in loaded["results"] if (e["workload"], e["protocol"]) == ("rpc", "readinto"))
    assert rpc["status"] == "ok" and rpc["metric"] == "RPC/s" and rpc["higher_is_better"] is True
    assert rpc["value"] == {"median": 1500, "min": 1400, "max": 1600}
    assert rpc["x_baseline"] == pytest.approx(1.5)
    statuses = {(e["workload"], e["protocol"]): e["status"] for e in loaded["results"]}
    assert statuses[("tasks", "tcp")] == "failed" and statuses[("shuffle", "tcp")] == "skipped"
    again = [SUITE.from_json(e) for e in loaded["results"]]
    assert SUITE.format_table(again) == SUITE.format_table(results)


def test_bench_dask_alternation_is_abba() -> None:
    assert alternation(4) == [(0, 0), (0, 1), (1, 1), (1, 0), (2, 0), (2, 1), (3, 1), (3, 0)]
    order = [side for _, side in alternation(5)]
    assert order.count(0) == order.count(1) == 5


def test_bench_dask_square_sizes() -> None:
    side, chunk = _square(1 << 30, 64 << 20)
    assert side % chunk == 0 and side // chunk == 4  # 16 chunks of about 64 MiB
    assert abs(chunk * chunk * 8 - (64 << 20)) < (64 << 20) * 0.01
    assert abs(side * side * 8 - (1 << 30)) < (1 << 30) * 0.01
    assert _square(1000, 64 << 20)[0] >= 1


def test_bench_dask_parse_args() -> None:
    args = SUITE.parse_args(["--workload", "rpc,chain", "--pair", "tls", "--transfer-size", "16MiB", "--repeat", "7"])
    assert args.workload == ["rpc", "chain"] and args.pair == ["tls"]
    assert args.transfer_size == 16 << 20 and args.repeat == 7
    defaults = SUITE.parse_args([])
    assert defaults.workload == list(bench.DEFAULT_WORKLOADS) and defaults.pair == ["tcp", "tls"]
    # The workloads users run compare stock with the README's block: alone, on the switch pairs.
    users = SUITE.parse_args(["--workload", "gather,scheduler-scale"])
    assert users.pair == ["switch", "switch-tls"] and not set(users.workload) & set(defaults.workload)
    assert defaults.repeat >= 5 and defaults.tasks == 20_000 and defaults.chain == 1000
    assert "busy-worker" in defaults.workload and "busy-worker" in bench.PAIR_WORKLOADS["tls"]
    assert defaults.busy_rpc == 100 and defaults.busy_size == 64 << 20
    assert defaults.busy_shape == ["arith", "builtins", "dictlist", "numpy"] and defaults.switch_interval is None
    args = SUITE.parse_args(["--busy-shape", "numpy,arith", "--switch-interval", "5ms,1ms,500us"])
    assert args.busy_shape == ["numpy", "arith"] and args.switch_interval == [5e-3, 1e-3, 500e-6]
    assert [busy.variant_name(*v) for v in busy.variants(args)] == [
        "numpy@5ms", "arith@5ms", "numpy@1ms", "arith@1ms", "numpy@500us", "arith@500us"]  # fmt: skip
    for bad in (["--busy-shape", "cpu"], ["--switch-interval", "10us"], ["--switch-interval", "abc"]):
        with pytest.raises(SystemExit):
            SUITE.parse_args(bad)
    with pytest.raises(SystemExit):
        SUITE.parse_args(["--workload", "nope"])
    with pytest.raises(SystemExit):
        SUITE.parse_args(["--pair", "udp"])


def test_bench_dask_plot_writes_png(results: list[DaskResult], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "dask.png"
    SUITE.plot(results, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_dask_spinner_stops_when_told() -> None:
    """The busy-worker task: it counts itself while it spins, and returns
    ``stopped=True`` once `stop_spinning` ran (``False`` at its deadline)."""
    from benchmarks import dask_busy

    results: list[dict[str, Any]] = []
    try:
        assert dask_busy.spin(0.0)["stopped"] is False  # the deadline, not a stop
        spinner = threading.Thread(target=lambda: results.append(dask_busy.spin(60.0)))
        spinner.start()
        while dask_busy.spinning() != 1 and spinner.is_alive():
            spinner.join(0.001)
        assert dask_busy.spinning() == 1
        assert dask_busy.stop_spinning() in (0, 1)
        spinner.join(60)
        assert not spinner.is_alive() and dask_busy.spinning() == 0
        assert results[0]["stopped"] is True and results[0]["thread_cpu_s"] > 0
    finally:
        dask_busy._stop.clear()


def test_bench_dask_busy_worker_tiny_real_run(tmp_path: Path) -> None:
    """busy-worker on fresh one-worker clusters of both pairs, one task
    shape: the RPCs answer with the busy worker's identity, the fetched array
    has the right size and sum, both spinners were still spinning when it
    ended; every row of the variant is there, the RPC row with the loop
    thread's switches per RPC."""
    path = tmp_path / "dask.json"
    argv = ["--workload", "busy-worker", "--repeat", "1", "--warmup", "0", "--busy-rpc", "5",
            "--busy-size", "1MiB", "--busy-shape", "builtins", "--busy-tasks", "2", "--busy-heartbeats", "1",
            "--json", str(path)]  # fmt: skip
    assert SUITE.main(argv) == 0
    data = json.loads(path.read_text())
    assert data["meta"]["busy_worker"] == {"n_workers": 1, "threads_per_worker": 2, "fresh_cluster": True}
    assert h.missing_meta(data) == [] and data["meta"]["packages"]["distributed"]
    rows = data["results"]
    assert [(r["workload"], r["protocol"]) for r in rows] == [
        (f"{row}[builtins]", p)
        for pair in (("tcp", "readinto"), ("tls", "readinto-tls"))
        for row in busy.BUSY_ROWS
        for p in pair
    ]
    for r in rows:
        assert r["status"] == "ok", r
        (repeat,) = r["repeats"]
        assert repeat["value"] is not None
        if r["workload"] == "busy-worker-rpc[builtins]":
            assert repeat["count"] == 5 and repeat["switches_per_rpc"] >= 0 and "releases_per_rpc" not in repeat
        elif r["workload"] == "busy-worker-fetch[builtins]":
            assert repeat["nbytes"] == 1 << 20
        elif r["workload"] == "busy-worker-task[builtins]":
            assert repeat["value"] > 0 and len(repeat["spinner_rounds"]) == 2 and min(repeat["spinner_rounds"]) > 0
        elif r["workload"] == "busy-worker-latency[builtins]":
            assert len(repeat["latencies_s"]) == 2
        else:
            assert len(repeat["gaps_s"]) == 1 and repeat["interval_s"] > 0
        if r["protocol"] not in ("tcp", "tls"):
            if r["workload"] == "busy-worker-heartbeat[builtins]":
                # a delay (gap minus interval) may be negative: compared by difference, never by ratio
                assert r["x_baseline"] is None and r["compared_by"] == "difference"
            else:
                assert r["x_baseline"] > 0


def test_bench_dask_busy_worker_switch_interval_smoke(tmp_path: Path) -> None:
    """--switch-interval on the tcp pair: each worker runs at the interval
    (checked inside the repetition: readinto's through the dask config key,
    tcp's through sys.setswitchinterval), the rows carry the variant, and
    --busy-count adds the loop thread's GIL-releasing calls by origin.  This
    process keeps its own interval."""
    import sys

    own = sys.getswitchinterval()
    path = tmp_path / "dask.json"
    argv = ["--workload", "busy-worker", "--pair", "tcp", "--repeat", "1", "--warmup", "0", "--busy-rpc", "5",
            "--busy-size", "64KiB", "--busy-shape", "numpy", "--busy-tasks", "1", "--busy-heartbeats", "0",
            "--switch-interval", "700us", "--busy-count", "--json", str(path)]  # fmt: skip
    assert SUITE.main(argv) == 0
    data = json.loads(path.read_text())
    assert data["meta"]["switch_intervals"] == [700e-6] and data["meta"]["busy_shapes"] == ["numpy"]
    rows = {(r["workload"], r["protocol"]): r for r in data["results"]}
    assert set(rows) == {(f"{row}[numpy@700us]", p) for row in busy.BUSY_ROWS for p in ("tcp", "readinto")}
    for (workload, _), r in rows.items():
        if workload == "busy-worker-heartbeat[numpy@700us]":
            assert r["status"] == "ok" and r["repeats"][0]["value"] is None  # not measured
            continue
        assert r["status"] == "ok", r
    for p in ("tcp", "readinto"):
        (repeat,) = rows["busy-worker-rpc[numpy@700us]", p]["repeats"]
        assert sum(repeat["polls_per_rpc"].values()) > 0  # asyncio's loop (tornado's default): polls seen
    assert sys.getswitchinterval() == own


def test_bench_dask_tiny_real_run_of_every_workload(tmp_path: Path) -> None:
    """Every workload on the shared clusters runs and passes its own result
    checks (sums, shapes, row counts) on real tcp:// and readinto://
    clusters, the P2P shuffle included (pandas and pyarrow are in the test
    extra).  busy-worker has its own test above."""
    path = tmp_path / "dask.json"
    shared = [w for w in bench.DEFAULT_WORKLOADS if w not in bench.FRESH_CLUSTER_WORKLOADS]
    argv = [
        "--workload", ",".join(shared),
        "--pair", "tcp", "--repeat", "1", "--warmup", "0", "--rpc", "20", "--tasks", "40", "--chain", "8",
        "--transfer-size", "1MiB", "--transfer-count", "2", "--full-size", "8MiB", "--full-chunk", "1MiB",
        "--rechunk-size", "4MiB", "--shuffle-rows", "4000", "--shuffle-partitions", "4", "--json", str(path),
    ]  # fmt: skip
    assert SUITE.main(argv) == 0
    rows = json.loads(path.read_text())["results"]
    assert {(r["workload"], r["protocol"]) for r in rows} == {(w, p) for w in shared for p in ("tcp", "readinto")}
    for r in rows:
        assert r["status"] == "ok", r
        assert len(r["repeats"]) == 1 and r["value"]["median"] > 0


def test_bench_dask_parse_env() -> None:
    """--env NAME=VALUE, repeatable, collected into a dict (empty without it);
    the value may be empty or hold '='; a name must be one."""
    assert SUITE.parse_args([]).env == {}
    args = SUITE.parse_args(["--env", "TORNADO_READINTO_HOLD_GIL=0", "--env", "A_1=x=y", "--env", "EMPTY="])
    assert args.env == {"TORNADO_READINTO_HOLD_GIL": "0", "A_1": "x=y", "EMPTY": ""}
    for bad in ("NOVALUE", "=1", "1A=2", "A B=1"):
        with pytest.raises(SystemExit):
            SUITE.parse_args(["--env", bad])
    assert bench.side_env("readinto-tls", args) == args.env and bench.side_env("tls", args) == {}


def test_bench_dask_transfer_cold_tiny_real_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """transfer-cold on a fresh tcp:// and readinto:// cluster per
    repetition: both rows pass their own checks (every shape and sum) with a
    positive wall-clock GB/s; --env reaches the readinto side's worker
    processes only, and this process's environment is as it was."""
    import os

    monkeypatch.delenv("BENCH_DASK_PROBE", raising=False)
    path = tmp_path / "dask.json"
    argv = ["--workload", "transfer-cold", "--pair", "tcp", "--repeat", "1", "--warmup", "0", "--transfer-size",
            "1MiB", "--cold-count", "2", "--env", "BENCH_DASK_PROBE=on", "--json", str(path)]  # fmt: skip
    assert SUITE.main(argv) == 0
    assert "BENCH_DASK_PROBE" not in os.environ
    data = json.loads(path.read_text())
    assert data["meta"]["env"] == {"BENCH_DASK_PROBE": "on"}
    assert data["meta"]["transfer_cold"] == {"n_workers": 2, "threads_per_worker": 1, "fresh_cluster": True}
    rows = data["results"]
    assert [(r["workload"], r["protocol"]) for r in rows] == [("transfer-cold", "tcp"), ("transfer-cold", "readinto")]
    for r in rows:
        assert r["status"] == "ok", r
        assert r["metric"] == "GB/s wall" and r["higher_is_better"] is True and r["value"]["median"] > 0
        (repeat,) = r["repeats"]
        assert repeat["count"] == 2 and repeat["nbytes"] == 2 << 20 and repeat["elapsed_s"] > 0
    assert rows[0]["repeats"][0]["worker_env"] == {"BENCH_DASK_PROBE": None}
    assert rows[1]["repeats"][0]["worker_env"] == {"BENCH_DASK_PROBE": "on"}
    assert rows[1]["x_baseline"] > 0


def test_bench_dask_transfer_cold_pretouch_tiny_real_run(tmp_path: Path) -> None:
    """--pretouch: each repetition's receiving worker touched its memory
    first (recorded in the meta and in every repeat), and every repeat
    records that worker's user and kernel CPU seconds per GiB received."""
    path = tmp_path / "dask.json"
    argv = ["--workload", "transfer-cold", "--pair", "tcp", "--repeat", "1", "--warmup", "0", "--transfer-size",
            "1MiB", "--cold-count", "2", "--pretouch", "--json", str(path)]  # fmt: skip
    assert SUITE.main(argv) == 0
    data = json.loads(path.read_text())
    assert data["meta"]["pretouch"] is True
    for r in data["results"]:
        assert r["status"] == "ok", r
        (repeat,) = r["repeats"]
        assert repeat["pretouch"] is True
        assert repeat["sink_user_s_per_gib"] >= 0 and repeat["sink_sys_s_per_gib"] >= 0
        # this machine's kernel either counts what it hands back to the host or does not
        assert (repeat["host_reported_mib"] is None) == (host_reported_kib() is None), repeat


def test_bench_dask_transfer_cold_floor_tiny_real_run(tmp_path: Path) -> None:
    """--floor: transfer-cold gains a bare-fetch row (the same fetches with
    no dask: blocking recv_into over plain TCP), run in the same alternation,
    checked byte for byte, with a ratio to the baseline like the others'."""
    path = tmp_path / "dask.json"
    argv = ["--workload", "transfer-cold", "--pair", "tcp", "--repeat", "1", "--warmup", "0", "--transfer-size",
            "1MiB", "--cold-count", "3", "--pretouch", "--floor", "--json", str(path)]  # fmt: skip
    assert SUITE.main(argv) == 0
    data = json.loads(path.read_text())
    assert data["meta"]["floor"] is True
    rows = data["results"]
    assert [r["protocol"] for r in rows] == ["tcp", "readinto", bench.BARE_FETCH]
    floor = rows[2]
    assert floor["status"] == "ok", floor
    (repeat,) = floor["repeats"]
    assert repeat["count"] == 3 and repeat["nbytes"] == 3 << 20 and repeat["pretouch"] is True
    assert len(repeat["per_array_ms"]) == 3 and all(ms > 0 for ms in repeat["per_array_ms"])
    assert repeat["value"] == pytest.approx(repeat["nbytes"] / repeat["elapsed_s"] / 1e9)
    assert floor["x_baseline"] > 0


def test_bench_dask_barefetch_checks_every_byte() -> None:
    """The bare fetch's check fails, naming the array, when one byte of it
    differs from what the sender filled it with; a run passes it."""
    import numpy as np

    from benchmarks.harness import barefetch

    assert barefetch.run(2, 1 << 16, pretouch=False)["count"] == 2
    arrays = [np.full(1 << 12, barefetch._fill(i), np.uint8) for i in range(3)]
    barefetch.check_arrays(arrays)
    arrays[1][4095] ^= 1
    with pytest.raises(RuntimeError, match="array 1 does not hold"):
        barefetch.check_arrays(arrays)


def test_bench_dask_host_reported_kib_reads_the_counter(tmp_path: Path) -> None:
    """`host_reported_kib`: the number in the page-reporting counter file,
    None where the file is missing or not a number; `_delta_mib` turns two
    readings into MiB handed back between them, None if either is None."""
    counter = tmp_path / "reported_kib"
    counter.write_text("524434448\n")
    assert host_reported_kib(str(counter)) == 524434448
    assert host_reported_kib(str(tmp_path / "missing")) is None
    counter.write_text("Y\n")
    assert host_reported_kib(str(counter)) is None
    assert bench._delta_mib(1024, 3072) == 2.0
    assert bench._delta_mib(None, 3072) is None and bench._delta_mib(1024, None) is None


def test_bench_dask_pretouch_makes_the_memory_resident() -> None:
    """`pretouch` writes every page of the block: the process takes at least
    one page fault per 2 MiB (a huge page) of it."""
    import resource

    nbytes = 64 << 20
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    assert bench.pretouch(nbytes) == nbytes
    assert resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before >= nbytes // (2 << 20)


def test_bench_dask_switch_pair_tiny_real_run(tmp_path: Path) -> None:
    """The switch pair: stock tcp:// against tcp:// with the switch on in
    every process of its side (`open_side` checks each process's listener
    through ``dask_switch.verify``, and fails the side otherwise); both rows
    pass their own checks, and this process is stock again afterwards."""
    from tornado_readinto.dask import switch as dask_switch

    path = tmp_path / "dask.json"
    argv = ["--workload", "rpc,transfer", "--pair", "switch", "--repeat", "1", "--warmup", "0",
            "--transfer-size", "1MiB", "--rpc", "50", "--json", str(path)]  # fmt: skip
    assert SUITE.main(argv) == 0
    assert not dask_switch.is_switched()
    rows = json.loads(path.read_text())["results"]
    assert [(r["workload"], r["protocol"]) for r in rows] == [
        ("rpc", "tcp"), ("rpc", "tcp+switch"), ("transfer", "tcp"), ("transfer", "tcp+switch")
    ]  # fmt: skip
    assert all(r["status"] == "ok" and r["value"]["median"] > 0 for r in rows), rows


def test_bench_dask_switch_routes_by_peer_whenever_a_comm_is_made() -> None:
    """`switchroutes`: with a stock and a switched side in one process, a comm
    made after both started (as dask's connection pools make them) is this
    package's to a process of the switched side and distributed's to one of
    the stock side, whichever side started last; listeners made while a
    switched side starts are this package's; once the switched side ends the
    process is stock again."""
    import asyncio

    from distributed.comm import connect, listen
    from distributed.comm.tcp import TCP, TCPListener

    from benchmarks.harness.switchroutes import routes
    from tornado_readinto.dask import switch as dask_switch
    from tornado_readinto.dask.backend import ReadIntoComm
    from tornado_readinto.dask.tcp import InPlaceTCPListener

    async def handle(comm: Any) -> None:
        await comm.write(await comm.read())
        await comm.close()

    async def echo(address: str) -> Any:
        comm = await connect(address)
        await comm.write({"x": 1})
        assert await comm.read() == {"x": 1}
        await comm.close()
        return comm

    async def main() -> None:
        with routes.side(True) as name_switched, routes.side(False) as name_stock:
            with routes.start(True):
                switched = listen("tcp://127.0.0.1:0", handle)
                await switched.start()
            with routes.start(False):
                stock = listen("tcp://127.0.0.1:0", handle)
                await stock.start()
            name_switched([switched.contact_address])
            name_stock([stock.contact_address])
            assert isinstance(switched, InPlaceTCPListener)
            assert type(stock) is TCPListener
            assert isinstance(await echo(switched.contact_address), ReadIntoComm)
            assert type(await echo(stock.contact_address)) is TCP
            assert not dask_switch.is_switched()  # the routing backend, not the switch
            switched.stop()
        assert type(await echo(stock.contact_address)) is TCP
        from distributed.comm.registry import backends

        assert type(backends["tcp"]).__module__ == "distributed.comm.tcp"
        stock.stop()

    asyncio.run(main())


def test_bench_dask_each_pair_has_its_own_baseline() -> None:
    """Pairs share the baseline protocol's name (``tcp+spec``): each row is
    compared with the baseline of its own pair's run, not the first one."""
    rows = [
        make_result("transfer", "tcp+spec", "tcp+spec", [0.5], pair="switch-sink"),
        make_result("transfer", "tcp+switch-sink", "tcp+spec", [0.75], pair="switch-sink"),
        make_result("transfer", "tcp+spec", "tcp+spec", [1.0], pair="switch-source"),
        make_result("transfer", "tcp+switch-source", "tcp+spec", [1.1], pair="switch-source"),
    ]
    assert ratio(rows, rows[1]) == pytest.approx(0.75 / 0.5)
    assert ratio(rows, rows[3]) == pytest.approx(1.1 / 1.0)


def test_bench_dask_mixed_pairs_tiny_real_run(tmp_path: Path) -> None:
    """The mixed pairs: a stock scheduler and client with one switched
    worker, the fetching one (switch-sink) or the serving one
    (switch-source), against the same SpecCluster with neither switched
    (tcp+spec); `open_mixed_side` checks through ``dask_switch.verify``
    that exactly that worker is switched, or none.  Every array crosses between a
    switched and a stock process and passes its checks; each row has its
    own pair's baseline; this process stays stock."""
    from tornado_readinto.dask import switch as dask_switch

    path = tmp_path / "dask.json"
    argv = ["--workload", "transfer", "--pair", "switch-sink,switch-source", "--repeat", "1", "--warmup", "0",
            "--transfer-size", "1MiB", "--transfer-count", "2", "--json", str(path)]  # fmt: skip
    assert SUITE.main(argv) == 0
    assert not dask_switch.is_switched()
    rows = json.loads(path.read_text())["results"]
    assert [(r["pair"], r["protocol"]) for r in rows] == [
        ("switch-sink", "tcp+spec"), ("switch-sink", "tcp+switch-sink"),
        ("switch-source", "tcp+spec"), ("switch-source", "tcp+switch-source"),
    ]  # fmt: skip
    assert all(r["status"] == "ok" and r["value"]["median"] > 0 for r in rows), rows
    for mixed, base in ((rows[1], rows[0]), (rows[3], rows[2])):
        assert mixed["x_baseline"] == pytest.approx(mixed["value"]["median"] / base["value"]["median"], rel=1e-3)
