"""``python -m tornado_readinto`` (`tornado_readinto.__main__`), run as a user
runs it: a subprocess, in both builds; its report, its self-check over
127.0.0.1, its exit status; a self-check that cannot pass fails with the
step named; ``--address`` asks a running switched cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from distributed import Client, LocalCluster

import tornado_readinto
from tornado_readinto.dask import switch as dask_switch

ROOT = Path(__file__).resolve().parent.parent
STEPS = ["read_into", "framed message", "switched tcp:// to stock", "stock tcp:// to switched"]
#: The environment of each build (compiled: whatever this run has; the CI runs compiled).
BUILDS = {
    "compiled" if tornado_readinto.COMPILED else "pure": {},
    "pure": {"TORNADO_READINTO_NO_EXTENSIONS": "1"},
}


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "TORNADO_READINTO_NO_EXTENSIONS"}
    environ.update(env or {})
    command = [sys.executable, "-m", "tornado_readinto", *args]
    return subprocess.run(command, cwd=ROOT, env=environ, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("build", sorted(BUILDS))
def test_the_report_and_self_check_pass_in_each_build(build: str) -> None:
    result = run("--json", env=BUILDS[build])
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    assert data["version"] == tornado_readinto.__version__
    assert data["build"] == build
    if build == "pure":
        assert "TORNADO_READINTO_NO_EXTENSIONS" in data["why_pure"]
    else:
        assert data["why_pure"] is None
    assert data["versions"]["tornado"] and data["versions"]["distributed"]
    assert [step["step"] for step in data["self_check"]] == STEPS
    assert all(step["ok"] is True for step in data["self_check"]), data["self_check"]
    assert data["ok"] is True
    assert set(data["dask_switch"]["kinds"]) == {"scheduler", "worker", "nanny", "client"}


def test_the_text_report_names_the_build_and_every_step() -> None:
    result = run()
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith(f"tornado_readinto {tornado_readinto.__version__}: the ")
    lines = [line.strip() for line in result.stdout.splitlines()]
    for step in STEPS:
        assert any(line.startswith(step) and " ok " in line for line in lines), (step, lines)


def test_the_report_says_whether_dask_config_switches_each_kind() -> None:
    env = {key: value for key, value in dask_switch.ENVIRONMENT.items() if "WORKER" in key}
    result = run("--json", env=env)
    kinds = json.loads(result.stdout)["dask_switch"]["kinds"]
    assert kinds["worker"]["switched"] is True and kinds["worker"]["preloads"] == [dask_switch.PRELOAD]
    assert kinds["scheduler"]["switched"] is False
    result = run(env=env)
    assert "switches tcp:// and tls:// for: worker; not for: scheduler, nanny, client" in result.stdout


def test_a_self_check_that_cannot_pass_fails_naming_its_steps() -> None:
    """dask config that limits a frame to 1000 bytes: the self-check's framed
    message and both comm directions are refused; the exit status is 1 and
    the failing steps are named (on stderr, and in the JSON)."""
    env = {"DASK_DISTRIBUTED__COMM__READINTO__MAX_FRAME_SIZE": "1000"}
    result = run(env=env)
    assert result.returncode == 1
    assert "FAILED: framed message, switched tcp:// to stock, stock tcp:// to switched" in result.stderr
    data = json.loads(run("--json", env=env).stdout)
    assert data["ok"] is False
    steps = {step["step"]: step for step in data["self_check"]}
    assert steps["read_into"]["ok"] is True
    assert steps["framed message"]["ok"] is False
    assert "max_frame_nbytes" in steps["framed message"]["detail"]


@pytest.mark.timeout(180)
def test_address_asks_each_process_of_a_running_cluster() -> None:
    dask_switch.switch_on()
    try:
        with (
            LocalCluster(
                n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address="127.0.0.1:0"
            ) as cluster,
            Client(cluster) as client,
        ):
            assert client.submit(sum, [1, 2]).result(timeout=60) == 3
            result = run("--address", cluster.scheduler_address, "--json")
            assert result.returncode == 0, result.stderr
            data = json.loads(result.stdout)
            assert data["stock"] == []
            assert data["scheduler"]["switched"] is True
            (worker,) = data["workers"].values()
            assert worker["counters"]["messages_received"] > 0
            text = run("--address", cluster.scheduler_address)
            assert text.returncode == 0 and "scheduler: switched" in text.stdout
    finally:
        dask_switch.switch_off()
