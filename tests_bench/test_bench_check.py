"""The check suite (``python -m benchmarks check``): its summary from
hand-made JSON files shaped like the suites' own (``benchmarks/results/``)
and from real ones, ``--dry-run``, ``--only``, ``--from`` and the exit
status; nothing here runs a benchmark."""

from __future__ import annotations

import importlib
import json
import shutil
import statistics
import subprocess
from pathlib import Path
from typing import Any

import pytest

from benchmarks import check
from benchmarks.check import SUITE, Target, summarise

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
MIB100 = 100 << 20


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def load_entry(server: str, loop: str, us: list[float], msgs: list[float], rate: float = 0.0) -> dict[str, Any]:
    """An entry of ``load --json`` (benchmarks/results/check/load.json)."""
    repeats = [
        {"messages": int(m * 2), "elapsed_s": 2.0, "msgs_per_s": m, "server_cpu_s": 1.99, "loop_cpu_s": 1.98,
         "client_cpu_s": 1.3, "server_cpu_us_per_msg": u + 0.1, "loop_cpu_us_per_msg": u, "client_cpu_us_per_msg": 30.0,
         "server_cpu_pct": 99.5, "loop_cpu_pct": 99.4, "client_cpu_pct": 65.0, "p50_s": 0.002, "p99_s": 0.004}
        for u, m in zip(us, msgs)
    ]  # fmt: skip
    return {
        "impl": server, "wire": "framed", "msize_text": "1KiB", "server": server, "loop": loop, "clients": 64,
        "msize": 1024, "rate": rate, "gil_thread": False, "tls": False, "repeats": repeats, "client_loop": "uvloop",
        "verified_messages": 1000, "skipped": None, "error": None, "status": "ok", "messages_sent": 1000,
        "messages_echoed_by_server": 1000, "full_compares": 256, "loop_thread_cpu_s": 5.9,
        **{m: summary([r[m] for r in repeats]) for m in ("msgs_per_s", "loop_cpu_us_per_msg", "server_cpu_us_per_msg")},
        "x_asyncio-streams": None, "x_stock": None, "msgs_per_s_x_stock": None,
    }  # fmt: skip


def echo_entry(impl: str, msgs: list[float], msize: int = MIB100) -> dict[str, Any]:
    """An entry of ``echo --json`` (benchmarks/results/check/echo.json)."""
    repeats = [{"msgs_per_s": m, "messages": 10, "elapsed_s": 1.25, "p50_s": 0.1, "p99_s": 0.12,
                "mib_per_s": m * msize / (1 << 20)} for m in msgs]  # fmt: skip
    return {
        "msize_text": "100MiB", "impl": impl, "msize": msize, "nframes": 1, "mode": "pingpong", "clients": 1,
        "window": 1, "repeats": repeats, "verified_messages": 90, "skipped": None, "error": None, "status": "ok",
        "msgs_per_s": summary(msgs), "x_stock-read_bytes": None, "x_threads": None,
    }  # fmt: skip


def dask_entry(workload: str, protocol: str, values: list[float], status: str = "ok") -> dict[str, Any]:
    """An entry of ``dask --json`` (benchmarks/results/check/dask.json)."""
    metric = {"rpc": "RPC/s", "transfer": "GB/s", "transfer-cold": "GB/s wall"}[workload]
    return {
        "metric": metric, "higher_is_better": True, "compared_by": "ratio", "workload": workload,
        "protocol": protocol, "baseline": "tcp", "repeats": [{"value": v, "elapsed_s": 1.0} for v in values],
        "skipped": "needs numpy" if status == "skipped" else None, "error": None, "status": status,
        "value": summary(values) if values else None, "x_baseline": None,
    }  # fmt: skip


def write(path: Path, results: list[dict[str, Any]]) -> None:
    path.write_text(json.dumps({"meta": {"argv": [], "repeat": 3}, "results": results}))


@pytest.fixture
def out(tmp_path: Path) -> Path:
    # uvloop: readinto 30 vs protocol 20 (1.5x, PASS at the bound) and streams 25 (1.2x, MISS).
    # asyncio: framed-pool 50 vs protocol 20 (2.5x, MISS), streams 60 (0.83x, PASS); no readinto row.
    # readinto-spin on uvloop: less CPU (PASS) but fewer msgs/s (MISS).
    # bound-floor on uvloop: 26, 1.3x protocol (PASS (info)) and 1.04x streams (MISS (info)).
    write(tmp_path / "load.json", [
        load_entry("readinto", "uvloop", [29, 30, 33], [30e3, 31e3, 29e3]),
        load_entry("readinto-spin", "uvloop", [28, 29, 30], [28e3, 29e3, 30e3]),
        load_entry("framed-pool", "uvloop", [22, 24, 26], [33e3, 34e3, 32e3]),
        load_entry("bound-floor", "uvloop", [25, 26, 31], [35e3, 36e3, 30e3]),
        load_entry("asyncio-protocol", "uvloop", [19, 20, 21], [40e3, 41e3, 39e3]),
        load_entry("asyncio-streams", "uvloop", [25, 25, 25], [35e3, 35e3, 35e3]),
        load_entry("framed-pool", "asyncio", [50, 50, 50], [20e3, 20e3, 20e3]),
        load_entry("asyncio-protocol", "asyncio", [20, 20, 20], [30e3, 30e3, 30e3]),
        load_entry("asyncio-streams", "asyncio", [60, 60, 60], [15e3, 15e3, 15e3]),
    ])  # fmt: skip
    write(tmp_path / "echo.json", [
        echo_entry("readinto", [10.0, 10.5, 11.0]),
        echo_entry("framed-pool", [9.0, 9.2, 9.4]),
        echo_entry("threads", [10.0, 10.0, 10.0]),
        echo_entry("readinto", [1.0], msize=1 << 20),  # another size: not compared
    ])  # fmt: skip
    write(tmp_path / "dask.json", [
        dask_entry("rpc", "tcp", [1000, 1100, 900]),
        dask_entry("rpc", "readinto", [1600, 1500, 1700]),
        dask_entry("transfer", "tcp", [1.0, 1.0, 1.0]),
        dask_entry("transfer", "readinto", [1.8, 1.9, 1.7]),
        dask_entry("transfer-cold", "tcp", [], status="skipped"),
        dask_entry("transfer-cold", "readinto", [], status="skipped"),
    ])  # fmt: skip
    return tmp_path


def verdicts(outcomes: list[check.Outcome]) -> dict[tuple[str, str], str]:
    return {(o.target.file, o.target.label): o.verdict for o in outcomes}


def test_summary_pass_and_miss(out: Path) -> None:
    outcomes = summarise(out, ["load.json", "load-offered.json", "echo.json", "dask.json"])
    assert [o.target for o in outcomes] == list(check.TARGETS)
    got = verdicts(outcomes)
    assert got["load.json", "uvloop: readinto / asyncio-protocol loop us/msg"] == "PASS"
    assert got["load.json", "uvloop: readinto / asyncio-streams loop us/msg"] == "MISS"
    assert got["load.json", "uvloop: framed-pool / asyncio-protocol loop us/msg"] == "PASS"
    assert got["load.json", "asyncio: framed-pool / asyncio-protocol loop us/msg"] == "MISS"
    assert got["load.json", "asyncio: framed-pool / asyncio-streams loop us/msg"] == "PASS"
    assert got["load.json", "asyncio: readinto / asyncio-streams loop us/msg"] == "NO DATA"
    assert got["load.json", "uvloop: readinto-spin / readinto loop us/msg"] == "PASS (info)"
    assert got["load.json", "uvloop: readinto-spin / readinto msgs/s"] == "MISS (info)"
    # the floor is held to readinto's bounds (1.5x protocol, 1.0x streams), as information
    assert got["load.json", "uvloop: bound-floor / asyncio-protocol loop us/msg"] == "PASS (info)"
    assert got["load.json", "uvloop: bound-floor / asyncio-streams loop us/msg"] == "MISS (info)"
    assert got["load.json", "asyncio: bound-floor / asyncio-streams loop us/msg"] == "NO DATA"
    assert not any("framed-pool" in label and "bound-floor" in label for _, label in got)
    assert {v for (file, _), v in got.items() if file == "load-offered.json"} == {"NO DATA"}  # no file
    assert got["echo.json", "100MiB: readinto / threads msgs/s"] == "PASS"
    assert got["echo.json", "100MiB: framed-pool / threads msgs/s"] == "MISS"
    assert got["dask.json", "rpc: readinto / tcp rate"] == "PASS"
    assert got["dask.json", "transfer: readinto / tcp rate"] == "MISS"
    assert got["dask.json", "transfer-cold: readinto / tcp rate"] == "NO DATA"  # skipped rows

    first = outcomes[0]  # uvloop readinto / asyncio-protocol: median over median, repeat by repeat
    assert first.ratio == pytest.approx(1.5)
    assert first.paired == pytest.approx([29 / 19, 30 / 20, 33 / 21])
    rows = [" ".join(line.split()) for line in check.format_summary(outcomes).splitlines()]
    assert "load.json uvloop: readinto / asyncio-protocol loop us/msg 1.50x (1.50x-1.57x) <= 1.50x PASS" in rows
    assert "echo.json 100MiB: framed-pool / threads msgs/s 0.92x (0.90x-0.94x) >= 0.95x MISS" in rows
    assert "dask.json transfer-cold: readinto / tcp rate - >= 1.50x NO DATA" in rows


@pytest.mark.skipif((ROOT / "PKG-INFO").exists() and not RESULTS.exists(),
                    reason="an sdist carries no benchmarks/results/ (MANIFEST.in prunes it)")
def test_ratios_agree_with_the_suites_own(tmp_path: Path) -> None:
    """On real files (the quick check's own, ``benchmarks/results/check/``),
    the check's ratios are the suites' own ratio columns."""
    for name in ("load.json", "echo.json", "dask.json"):
        shutil.copy(RESULTS / "check" / name, tmp_path / name)
    files = ["load.json", "echo.json", "dask.json"]
    outcomes = {(o.target.file, o.target.label): o for o in summarise(tmp_path, files)}

    def saved(file: str, key: str, **where: Any) -> float:
        entries = json.loads((tmp_path / file).read_text())["results"]
        return next(e[key] for e in entries if all(e[k] == v for k, v in where.items()))

    load_ratio = outcomes["load.json", "asyncio: readinto / asyncio-streams loop us/msg"].ratio
    assert load_ratio == pytest.approx(saved("load.json", "x_asyncio-streams", server="readinto", loop="asyncio"))
    echo_ratio = outcomes["echo.json", "100MiB: readinto / threads msgs/s"].ratio
    assert echo_ratio == pytest.approx(saved("echo.json", "x_threads", impl="readinto", msize=MIB100))
    dask_ratio = outcomes["dask.json", "transfer: readinto / tcp rate"].ratio
    assert dask_ratio == pytest.approx(saved("dask.json", "x_baseline", protocol="readinto", workload="transfer"))
    assert len(outcomes["dask.json", "transfer: readinto / tcp rate"].paired) == 5  # --repeat 5


def test_dry_run_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert SUITE.main(["--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[3] for line in lines] == ["load", "load", "echo", "dask"]
    assert all(line.split()[1:3] == ["-m", "benchmarks"] for line in lines)
    assert [line.split()[-1] for line in lines] == [f"OUT/{f}.json" for f in ("load", "load-offered", "echo", "dask")]
    assert "--offered 3000" in lines[1] and "--offered" not in lines[0]
    assert "--msize 100MiB" in lines[2] and "--pair tcp" in lines[3]


def test_only_filters(out: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert SUITE.main(["--dry-run", "--only", "dask,echo", "--out", "/x"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[-1] for line in lines] == ["/x/echo.json", "/x/dask.json"]  # in the order they run

    assert SUITE.main(["--from", str(out), "--only", "echo"]) == 0
    text = capsys.readouterr().out
    assert "echo.json" in text and "load.json" not in text and "dask.json" not in text
    with pytest.raises(SystemExit):
        SUITE.parse_args(["--only", "http"])
    with pytest.raises(SystemExit):
        SUITE.parse_args(["--from", str(out), "--out", str(out)])


def test_runs_one_after_the_other_and_a_failure_fails(
    out: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ran: list[list[str]] = []

    def fake_run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
        ran.append(cmd)  # subprocess.run waits: the next starts after this one ended
        return subprocess.CompletedProcess(cmd, 1 if cmd[3] == "echo" else 0)

    monkeypatch.setattr(check.subprocess, "run", fake_run)
    assert SUITE.main(["--out", str(out)]) == 1  # echo failed
    assert [cmd[3] for cmd in ran] == ["load", "load", "echo", "dask"]
    captured = capsys.readouterr()
    assert "FAILED: -m benchmarks echo" in captured.err
    assert "PASS" in captured.out and "MISS" in captured.out  # the summary of what is there

    ran.clear()
    assert SUITE.main(["--out", str(tmp_path / "new"), "--only", "dask"]) == 0  # misses and no data: still 0
    assert [cmd[3] for cmd in ran] == ["dask"] and (tmp_path / "new").is_dir()


@pytest.mark.parametrize("name", list(check.RUNS))
def test_the_commands_are_valid_for_their_suites(name: str) -> None:
    for _, argv in check.RUNS[name]:
        if argv[0] == "dask":
            pytest.importorskip("distributed")
        suite = importlib.import_module(f"benchmarks.{argv[0]}").SUITE
        suite.parse_args([*argv[1:], "--json", "x.json"])


def test_target_labels_are_unique() -> None:
    labels = [(t.file, t.label) for t in check.TARGETS]
    assert len(labels) == len(set(labels)) == 2 * 2 * (4 + 2 + 2) + 2 + 3  # targets, floor and spin rows
    assert all(isinstance(t, Target) and t.op in ("<=", ">=") for t in check.TARGETS)
