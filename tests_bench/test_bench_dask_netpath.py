"""``python -m benchmarks dask --netpath`` (``benchmarks.dask_netpath``):
what it refuses and defaults to, its CPU figures and table on hand-made
results, and, as root with iproute2, tiny real runs across a veth pair:
the scheduler and worker a in the server's namespace, worker b and the
client in the client's, every measured byte across the veth, and nothing
left behind (namespaces, processes).

Another run on this machine may hold namespaces of its own: the checks
count only this test process's (named by its pid)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("distributed")

from benchmarks import dask as bench  # noqa: E402
from benchmarks import dask_netpath  # noqa: E402
from benchmarks.dask import DaskResult  # noqa: E402
from benchmarks.dask_netpath import SUITE  # noqa: E402  (the dask suite with --netpath)
from benchmarks.harness import netpath  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

UNAVAILABLE = netpath.unavailable([netpath.PathSpec(1500, 10**9)])
needs_netns = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"real namespaces: {UNAVAILABLE}")


def ours() -> list[str]:
    """The namespaces this test process made and has not removed."""
    return [name for name in netpath.namespaces() if name.startswith(f"{netpath.NAME_PREFIX}-{os.getpid()}-")]


def marked(marker: str) -> list[int]:
    """The pids of live processes whose environment holds ``marker`` (they inherited it from this test)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if marker.encode() in f.read():
                        pids.append(int(entry))
            except OSError:
                continue
    return pids


# -- arguments ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, refused",
    [(["--workload", "rpc,chain,tasks"], "workloads rpc, transfer, transfer-cold only, not chain, tasks"),
     (["--pair", "tcp,tls"], "pairs tcp, switch, switch-sink, switch-source only, not tls")],
)  # fmt: skip
def test_netpath_refuses_what_cannot_cross_a_path(
    argv: list[str], refused: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A workload whose bytes do not go one way, or a TLS pair: status 2 and one line saying what runs."""
    with pytest.raises(SystemExit) as exit_info:
        SUITE.parse_args(["--netpath", "loopback", *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"--netpath runs the {refused}" in err and "Traceback" not in err


def test_netpath_defaults_and_without_it_nothing_changes() -> None:
    args = SUITE.parse_args(["--netpath", "loopback"])
    assert args.netpath == [netpath.LOOPBACK]
    assert args.workload == list(bench.NETPATH_WORKLOADS) and args.pair == ["tcp", "switch"]
    plain = SUITE.parse_args([])
    assert plain.netpath is None and plain.workload == list(bench.DEFAULT_WORKLOADS) and plain.pair == ["tcp", "tls"]
    assert "mtu1500@1gbit" in SUITE.parser().format_help()


def test_netpath_without_root_says_why(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(SystemExit) as exit_info:
        SUITE.main(["--netpath", "mtu1500", "--workload", "rpc"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--netpath mtu1500: a network namespace path" in err and "run as root" in err
    assert SUITE.parse_args(["--netpath", "loopback"]).netpath == [netpath.LOOPBACK]  # loopback needs nothing


# -- pure parts ----------------------------------------------------------------------------------


def test_cpu_figures_are_the_two_ends_per_unit_of_work() -> None:
    cpu_s = {"scheduler": 0.3, "client": 0.2, "a": 0.5, "b": 1.5}
    rpc = bench.cpu_figures("rpc", {"count": 1000}, cpu_s)
    assert rpc["cpu_us_per_rpc"] == pytest.approx(500.0) and rpc["cpu_s"] == cpu_s
    transfer = bench.cpu_figures("transfer", {"nbytes": 4 * 10**9}, cpu_s)
    assert transfer["cpu_s_per_gb"] == pytest.approx(0.5)
    unread = bench.cpu_figures("transfer-cold", {"nbytes": 10**9}, {**cpu_s, "b": None})
    assert unread["cpu_s_per_gb"] is None


def test_switched_roles() -> None:
    assert dask_netpath.switched_roles("tcp") == dask_netpath.switched_roles("readinto") == set()
    assert dask_netpath.switched_roles("tcp+spec") == set()
    assert dask_netpath.switched_roles("tcp+switch") == {"scheduler", "a", "b"}
    assert dask_netpath.switched_roles("tcp+switch-source") == {"a"}
    assert dask_netpath.switched_roles("tcp+switch-sink") == {"b"}


def test_table_has_path_and_cpu_columns_and_compares_within_a_path() -> None:
    def result(protocol: str, path: str, gbps: float, cpu: float) -> DaskResult:
        repeats = [{"value": gbps, "cpu_s_per_gb": cpu}]
        return DaskResult("transfer", protocol, "tcp", repeats=repeats, pair="tcp", path=path)

    results = [result("tcp", "loopback", 2.0, 1.0), result("readinto", "loopback", 3.0, 0.5),
               result("tcp", "mtu1500@1gbit", 0.1, 2.0), result("readinto", "mtu1500@1gbit", 0.1, 1.0)]  # fmt: skip
    lines = SUITE.format_table(results).splitlines()
    header = next(line for line in lines if line.startswith("workload"))
    assert header.split()[:4] == ["workload", "protocol", "path", "metric"] and "CPU x base" in header
    limited = next(line for line in lines if "readinto" in line and "mtu1500@1gbit" in line)
    assert limited.split()[-4:] == ["1", "s/GB", "2.00x", "1.00x"]  # the link is the limit: CPU saved
    assert bench.ratio(results, results[3]) == pytest.approx(1.0)  # its own path's baseline, not loopback's
    entry = SUITE.to_json(results)["results"][3]
    assert entry["path"] == "mtu1500@1gbit" and entry["cpu_s_per_gb"]["median"] == 1.0
    assert [SUITE.from_json(e).path for e in SUITE.to_json(results)["results"]] == [r.path for r in results]


# -- real runs (root, iproute2) -------------------------------------------------------------------


def _run(argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], str]:
    """``python -m benchmarks dask ARGV --json`` in this process; its JSON and
    a marker that every process it started inherited in its environment."""
    marker = f"BENCH_DASK_NETPATH_TEST={uuid.uuid4().hex}"
    monkeypatch.setenv(*marker.split("="))
    out = tmp_path / "dask.json"
    assert SUITE.main([*argv, "--repeat", "1", "--warmup", "0", "--json", str(out)]) == 0
    return json.loads(out.read_text()), marker


@needs_netns
def test_rpc_and_transfer_across_the_veth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """rpc and transfer on the tcp pair across mtu1500: each row passes its
    own checks, and names its path.  The scheduler and worker a listen at the
    server's veth address, and worker b and the client's connection are at the
    client's.  The two ends' CPU per RPC and per GB is positive.  Then no
    namespace and no process of the run is left."""
    argv = ["--netpath", "mtu1500", "--workload", "rpc,transfer", "--pair", "tcp",
            "--rpc", "300", "--transfer-size", "16MiB", "--transfer-count", "4"]  # fmt: skip
    data, marker = _run(argv, tmp_path, monkeypatch)
    assert data["meta"]["netpath"] == ["mtu1500"] and data["meta"]["netpath_processes"] == bench.NETPATH_PROCESSES
    rows = data["results"]
    assert [(r["workload"], r["protocol"], r["path"]) for r in rows] == [
        ("rpc", "tcp", "mtu1500"), ("rpc", "readinto", "mtu1500"),
        ("transfer", "tcp", "mtu1500"), ("transfer", "readinto", "mtu1500"),
    ]  # fmt: skip
    for r in rows:
        assert r["status"] == "ok", r["error"]
        assert r["netpath"]["kind"] == "netns-veth" and r["netpath"]["mtu"] == 1500
        (repeat,) = r["repeats"]
        hosts = {role: address.split("://")[1].rsplit(":", 1)[0] for role, address in repeat["addresses"].items()}
        assert hosts == {"scheduler": netpath.SERVER_ADDRESS, "a": netpath.SERVER_ADDRESS,
                         "b": netpath.CLIENT_ADDRESS, "client": netpath.CLIENT_ADDRESS}  # fmt: skip
        assert all(address.startswith(f"{r['protocol']}://") for address in repeat["addresses"].values())
        key = "cpu_us_per_rpc" if r["workload"] == "rpc" else "cpu_s_per_gb"
        assert repeat[key] > 0 and r[key]["median"] == repeat[key]
        assert all(seconds is not None and seconds >= 0 for seconds in repeat["cpu_s"].values())
    assert rows[3]["repeats"][0]["nbytes"] == 4 * (16 << 20)
    assert ours() == [] and marked(marker) == []


@needs_netns
def test_switched_transfer_cold_across_a_rate_limited_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The switch pair's transfer-cold across mtu9000@1gbit, a fresh cluster
    per repetition.  The switched side's scheduler and workers are checked
    to be switched (`dask_netpath.open_side` fails the side otherwise) and the
    stock side's not.  --env reaches the readinto side's workers only, and the
    path's tbf is in the record."""
    monkeypatch.delenv("BENCH_DASK_PROBE", raising=False)
    argv = ["--netpath", "mtu9000@1gbit", "--workload", "transfer-cold", "--pair", "switch",
            "--transfer-size", "8MiB", "--cold-count", "2", "--env", "BENCH_DASK_PROBE=on"]  # fmt: skip
    data, marker = _run(argv, tmp_path, monkeypatch)
    rows = data["results"]
    assert [(r["protocol"], r["path"]) for r in rows] == [("tcp", "mtu9000@1gbit"), ("tcp+switch", "mtu9000@1gbit")]
    for r in rows:
        assert r["status"] == "ok", r["error"]
        assert r["netpath"]["tbf"]["rate_bit_s"] == 10**9
        assert r["cpu_s_per_gb"]["median"] > 0
    assert rows[0]["repeats"][0]["worker_env"] == {"BENCH_DASK_PROBE": None}
    assert rows[1]["repeats"][0]["worker_env"] == {"BENCH_DASK_PROBE": "on"}
    assert "BENCH_DASK_PROBE" not in os.environ
    assert ours() == [] and marked(marker) == []


@needs_netns
def test_a_driver_that_fails_fails_its_rows_and_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver that dies (here: it cannot import the benchmarks) fails every
    row of its path with the reason; the namespaces are removed all the same."""
    broken = {**os.environ, "PYTHONPATH": "/nonexistent", "PYTHONSAFEPATH": "1"}  # and not the working directory
    monkeypatch.setattr(dask_netpath, "child_env", lambda: broken)
    out = tmp_path / "dask.json"
    argv = ["--netpath", "mtu1500", "--workload", "rpc", "--pair", "tcp", "--repeat", "1", "--json", str(out)]
    assert SUITE.main(argv) == 1
    rows = json.loads(out.read_text())["results"]
    assert [(r["protocol"], r["status"], r["path"]) for r in rows] == [("tcp", "failed", "mtu1500"),
                                                                       ("readinto", "failed", "mtu1500")]  # fmt: skip
    assert all("driver exited with status 1" in r["error"] for r in rows)
    assert ours() == []


@needs_netns
def test_sigterm_mid_run_leaves_no_namespace_and_no_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM to ``python -m benchmarks dask --netpath`` while a side's
    processes are up: it exits with 128 + SIGTERM, and its namespaces, its
    driver, scheduler and workers are all gone."""
    marker = f"BENCH_DASK_NETPATH_TEST={uuid.uuid4().hex}"
    monkeypatch.setenv(*marker.split("="))
    argv = [sys.executable, "-m", "benchmarks", "dask", "--netpath", "mtu1500", "--workload", "transfer",
            "--pair", "tcp", "--repeat", "50", "--transfer-size", "1MiB", "--transfer-count", "2"]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=ROOT, stderr=subprocess.PIPE, text=True, env={**os.environ})
    try:
        assert proc.stderr is not None
        line = ""
        while "clusters up" not in line:  # the sides' own start-up timeouts bound the wait
            line = proc.stderr.readline()
            assert line, "it exited before its clusters were up"
        assert any(name.startswith(f"{netpath.NAME_PREFIX}-{proc.pid}-") for name in netpath.namespaces())
        assert len(marked(marker)) >= 4  # the driver, and a side's scheduler and two workers at least
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
        assert proc.returncode == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert not any(name.startswith(f"{netpath.NAME_PREFIX}-{proc.pid}-") for name in netpath.namespaces())
    assert marked(marker) == []
