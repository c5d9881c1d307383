"""The switch (`tornado_readinto.dask.switch`): dask's own tcp:// served by
this package in every process, from dask configuration alone, checked from
the client (`verify`) and from inside each worker; mixed clusters of switched
and stock processes in both arrangements; the one-call API; turning it off.

Processes are real: ``dask scheduler`` and ``dask worker`` (with its Nanny)
from the command line, on 127.0.0.1, with the helpers of test_dask_deploy.
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
from pathlib import Path
from typing import Any

import dask
import pytest
from distributed import Client, LocalCluster, wait
from distributed.comm import tcp as stock_tcp
from distributed.comm.registry import backends

import tornado_readinto
from tornado_readinto.dask import switch as dask_switch
from tornado_readinto.dask.switch import ENVIRONMENT, PRELOAD, PRELOAD_KEYS, status, verify
from tornado_readinto.errors import NotSwitchedError

from .test_dask_deploy import (
    CHUNK_N,
    NCHUNKS,
    START_TIMEOUT_S,
    CLICluster,
    _env,
    check_scheme,
    check_worker_to_worker,
    cli_cluster,
    connected_client,
    dask_cli,
    expected_total,
    make_chunk,
    total,
)

BUILD = "compiled" if tornado_readinto.COMPILED else "pure"

#: Workers that do not take the switch even where the config says so elsewhere.
NO_SWITCH = {"DASK_" + "__".join(p.upper() for p in key.split(".")): "[]" for key in PRELOAD_KEYS}


def start_stock_worker(joining: CLICluster, client: Client, scheduler_address: str, *, nworkers: int) -> None:
    """Start a stock ``dask worker`` (no preload, its dashboard on a free
    port) in ``joining`` and wait until ``client`` sees ``nworkers``."""
    joining.start(
        "stock-worker",
        dask_cli("worker")
        + [scheduler_address, "--nthreads", "1", "--host", "127.0.0.1"]
        + ["--dashboard-address", "127.0.0.1:0", "--death-timeout", "60s"],
        _env(NO_SWITCH),
    )
    try:
        client.wait_for_workers(nworkers, timeout=START_TIMEOUT_S)
    except TimeoutError as exc:
        raise AssertionError(f"the stock worker did not join\n{joining.log_tail()}") from exc


@pytest.fixture(autouse=True)
def stock_here():
    """This process starts and ends each test with distributed's own backends."""
    dask_switch.switch_off()
    yield
    dask_switch.switch_off()


def assert_switched(entry: dict[str, Any], where: str) -> None:
    assert entry["switched"] is True, (where, entry)
    assert entry["tcp"] == "tornado_readinto.dask.tcp.InPlaceTCPBackend", (where, entry)
    assert entry["tls"] == "tornado_readinto.dask.tcp.InPlaceTLSBackend", (where, entry)
    assert entry["build"] == BUILD, (where, entry)
    if "listener" in entry:
        assert entry["listener_switched"] is True, (where, entry)


def assert_stock(entry: dict[str, Any], where: str) -> None:
    assert entry["switched"] is False, (where, entry)
    assert entry["tcp"] == "distributed.comm.tcp.TCPBackend", (where, entry)
    if "listener" in entry:
        assert entry["listener"] == "distributed.comm.tcp.TCPListener", (where, entry)


def kill_one_worker_and_recompute(client: Client) -> None:
    """Chunks made on worker a; a is SIGKILLed; their sum (on b) is still right:
    the Nanny restarts a and the scheduler recomputes what was lost."""
    a, b = sorted(client.scheduler_info()["workers"])
    chunks = client.map(make_chunk, range(NCHUNKS), workers=[a], allow_other_workers=True, pure=False)
    wait(chunks, timeout=60)
    pid_a = client.run(os.getpid, workers=[a])[a]
    os.kill(pid_a, signal.SIGKILL)
    result = client.submit(total, chunks, workers=[b], allow_other_workers=True, pure=False)
    assert result.result(timeout=90) == expected_total(NCHUNKS)
    client.wait_for_workers(2, timeout=60)


# -- unit: the block, the one call, off again -------------------------------------------


def test_environment_is_the_config_block() -> None:
    assert ENVIRONMENT == {
        "DASK_DISTRIBUTED__SCHEDULER__PRELOAD": PRELOAD,
        "DASK_DISTRIBUTED__WORKER__PRELOAD": PRELOAD,
        "DASK_DISTRIBUTED__NANNY__PRELOAD": PRELOAD,
        "DASK_DISTRIBUTED__CLIENT__PRELOAD": PRELOAD,
    }
    env_config = dask.config.collect_env(ENVIRONMENT)
    for key in PRELOAD_KEYS:
        assert dask.config.get(key, config=env_config) in (PRELOAD, [PRELOAD])
        assert dask.config.get(key, config=dask_switch.CONFIG) == [PRELOAD]


def test_switch_on_and_off_in_process() -> None:
    assert not dask_switch.is_switched() and status()["switched"] is False
    with dask.config.set({"distributed.worker.preload": ["other.module"]}):
        dask_switch.switch_on()
        assert dask_switch.is_switched()
        assert_switched(status(), "this process")
        assert dask.config.get("distributed.worker.preload") == ["other.module", PRELOAD]
        assert dask.config.get("distributed.client.preload") == [PRELOAD]
        dask_switch.switch_on()  # idempotent
        assert dask.config.get("distributed.worker.preload") == ["other.module", PRELOAD]
        dask_switch.switch_off()
        assert dask.config.get("distributed.worker.preload") == ["other.module"]
    assert not dask_switch.is_switched()
    assert type(backends["tcp"]) is stock_tcp.TCPBackend and type(backends["tls"]) is stock_tcp.TLSBackend


def test_status_probe_works_where_the_package_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe that verify() sends is pickled by value and asks for the
    package only inside a try: a process without it reports build None."""
    import cloudpickle

    probe = cloudpickle.loads(cloudpickle.dumps(status))
    assert probe.__module__ == "tornado_readinto_probe"
    monkeypatch.setitem(sys.modules, "tornado_readinto", None)  # import raises ImportError
    report = probe()
    assert report["build"] is None and report["version"] is None and report["switched"] is False
    assert b"tornado_readinto.dask.switch" not in cloudpickle.dumps(status)


def test_preload_module_switches_the_importing_process() -> None:
    import importlib

    import tornado_readinto.dask_preload as preload

    dask_switch.switch_off(config=False)
    importlib.reload(preload)
    assert dask_switch.is_switched()
    dask_switch.switch_off(config=False)
    preload.dask_setup(None)
    assert dask_switch.is_switched()


@pytest.mark.timeout(180)
def test_one_call_switches_a_local_cluster_of_nanny_workers() -> None:
    """``switch_on()`` before ``LocalCluster``: this process (scheduler,
    client) and the Nanny-spawned worker processes all run the package's
    tcp://, as the workers themselves report."""
    dask_switch.switch_on()
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address="127.0.0.1:0"
    ) as cluster:
        with Client(cluster) as client:
            assert cluster.scheduler_address.startswith("tcp://")
            report = verify(client)
            assert_switched(report["client"], "client")
            assert_switched(report["scheduler"], "scheduler")
            assert len(report["workers"]) == 2
            for address, entry in report["workers"].items():
                assert address.startswith("tcp://")
                assert_switched(entry, address)
            assert len(report["nannies"]) == 2
            for address, entry in report["nannies"].items():
                assert_switched(entry, f"nanny of {address}")
            assert report["stock"] == []
            check_worker_to_worker(client, "tcp")


@pytest.mark.timeout(180)
def test_no_switch_means_stock_everywhere(tmp_path: Path) -> None:
    with cli_cluster(tmp_path, scheduler_args=()) as cluster, connected_client(cluster) as client:
        report = verify(client)
        assert_stock(report["client"], "client")
        assert_stock(report["scheduler"], "scheduler")
        for address, entry in report["workers"].items():
            assert_stock(entry, address)
            assert entry["build"] == BUILD  # installed, importable, but not switched on


# -- the block in every process, from the command line ----------------------------------


@pytest.mark.timeout(240)
def test_cli_cluster_switched_by_environment(tmp_path: Path) -> None:
    """``dask scheduler`` and ``dask worker`` (Nanny-spawned workers) with
    the block in their environment: switched, as each reports from inside;
    tasks, worker-to-worker transfer, a worker kill; a stock client talks to
    all of it."""
    with cli_cluster(tmp_path, scheduler_args=(), env=ENVIRONMENT) as cluster, connected_client(cluster) as client:
        workers = check_scheme(client, "tcp")
        report = verify(client)
        assert_stock(report["client"], "client")
        assert_switched(report["scheduler"], "scheduler")
        assert sorted(report["workers"]) == workers
        for address, entry in report["workers"].items():
            assert_switched(entry, address)
        # The nanny process of `dask worker`: the CLI hands the Nanny its own
        # --preload-nanny list (empty), so the config's nanny preload does not
        # run there (documented; the nanny's bytes are stock's either way).
        for address, entry in report["nannies"].items():
            assert_stock(entry, f"nanny of {address}")
        # ... and verify names each of them, with the (stock) client
        nannies = sorted(f"nanny {entry['address']}" for entry in report["nannies"].values())
        assert sorted(report["stock"]) == sorted(["client", *nannies]), report["stock"]
        # from inside each worker: its comm to the scheduler is the package's
        kinds = client.run(lambda dask_worker: type(dask_worker.batched_stream.comm).__module__)
        assert set(kinds.values()) == {"tornado_readinto.dask.backend"}, kinds
        check_worker_to_worker(client, "tcp")
        kill_one_worker_and_recompute(client)
        for address, entry in verify(client)["workers"].items():
            assert_switched(entry, address)


@pytest.mark.timeout(240)
def test_cli_worker_without_nanny_switched_by_environment(tmp_path: Path) -> None:
    """``dask worker --no-nanny``: the worker is the CLI process itself."""
    with (
        cli_cluster(tmp_path, scheduler_args=(), env=ENVIRONMENT, worker_args=("--no-nanny",)) as cluster,
        connected_client(cluster) as client,
    ):
        report = verify(client)
        assert report["nannies"] == {}
        for address, entry in report["workers"].items():
            assert_switched(entry, address)
        check_worker_to_worker(client, "tcp")


@pytest.mark.timeout(240)
def test_mixed_stock_scheduler_switched_workers_stock_client(tmp_path: Path) -> None:
    with (
        cli_cluster(tmp_path, scheduler_args=(), worker_env=ENVIRONMENT) as cluster,
        connected_client(cluster) as client,
    ):
        check_scheme(client, "tcp")
        report = verify(client)
        assert_stock(report["client"], "client")
        assert_stock(report["scheduler"], "scheduler")
        for address, entry in report["workers"].items():
            assert_switched(entry, address)
        check_worker_to_worker(client, "tcp")
        kill_one_worker_and_recompute(client)
        assert client.submit(sum, [1, 2, 3]).result(timeout=30) == 6


@pytest.mark.timeout(240)
def test_mixed_switched_scheduler_stock_workers_switched_client(tmp_path: Path) -> None:
    with cli_cluster(tmp_path, scheduler_args=(), env=ENVIRONMENT, worker_env=NO_SWITCH) as cluster:
        dask_switch.install_backends()  # the client's process
        with connected_client(cluster) as client:
            check_scheme(client, "tcp")
            report = verify(client)
            assert_switched(report["client"], "client")
            assert_switched(report["scheduler"], "scheduler")
            for address, entry in report["workers"].items():
                assert_stock(entry, address)
            check_worker_to_worker(client, "tcp")
            kill_one_worker_and_recompute(client)
            assert client.submit(sum, [1, 2, 3]).result(timeout=30) == 6


@pytest.mark.timeout(240)
def test_mixed_workers_one_switched_one_stock(tmp_path: Path) -> None:
    """Worker-to-worker transfers between a switched and a stock worker, both ways."""
    with cli_cluster(tmp_path, scheduler_args=(), nworkers=0) as cluster:
        for i, extra in enumerate([ENVIRONMENT, NO_SWITCH]):
            cluster.start(
                f"worker-{i}",
                dask_cli("worker")
                + ["--scheduler-file", str(cluster.scheduler_file), "--nworkers", "1", "--nthreads", "1"]
                + ["--no-dashboard", "--dashboard-address", "127.0.0.1:0", "--host", "127.0.0.1"]
                + ["--death-timeout", "60s"],
                _env(extra),
            )
        with connected_client(cluster) as client:
            report = verify(client)["workers"]
            assert sorted(entry["switched"] for entry in report.values()) == [False, True]
            check_worker_to_worker(client, "tcp")  # a -> b
            a, b = sorted(client.scheduler_info()["workers"])
            chunks = client.map(make_chunk, range(4), workers=[b], allow_other_workers=False, pure=False)
            got = client.submit(total, chunks, workers=[a], allow_other_workers=False, pure=False)
            assert got.result(timeout=60) == expected_total(4)  # b -> a
            assert CHUNK_N  # the chunk size of the helpers: 8 MiB each


@pytest.mark.timeout(180)
def test_verify_names_the_stock_worker_of_a_switched_local_cluster(tmp_path: Path) -> None:
    """A switched ``LocalCluster`` (``switch_on()``, a Nanny worker) joined by
    a ``dask worker`` started without the switch: ``verify``'s ``stock``
    names that worker and its nanny, and nothing else, and ``strict=True``
    raises `NotSwitchedError` naming them."""
    dask_switch.switch_on()
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address="127.0.0.1:0"
        ) as cluster,
        Client(cluster) as client,
    ):
        assert verify(client, strict=True)["stock"] == []
        joining = CLICluster(tmp_path, tmp_path / "scheduler.json")
        try:
            start_stock_worker(joining, client, cluster.scheduler_address, nworkers=2)
            report = verify(client)
            (stock_worker,) = [address for address, entry in report["workers"].items() if not entry["switched"]]
            nanny = client.scheduler_info()["workers"][stock_worker]["nanny"]
            assert report["stock"] == [f"worker {stock_worker}", f"nanny {nanny}"], report["stock"]
            with pytest.raises(NotSwitchedError) as raised:
                verify(client, strict=True)
            assert raised.value.stock == report["stock"]
            assert str(raised.value) == f"2 of 6 processes are stock: worker {stock_worker}, nanny {nanny}"
            assert isinstance(raised.value, RuntimeError)
        finally:
            joining.stop()


# -- the README's block, exactly as written ----------------------------------------------

README = Path(__file__).resolve().parents[2] / "README.rst"


def code_block_after(path: Path, marker: str, language: str) -> str:
    """The text of the ``.. code-block:: <language>`` right after the first
    line of ``path`` that contains ``marker`` (and an ``.. example-setup:``
    comment for tests/test_examples.py, if any), dedented."""
    lines = path.read_text(encoding="utf-8").splitlines()
    at = next(i for i, line in enumerate(lines) if marker in line)
    directive = next(
        i for i in range(at + 1, len(lines)) if lines[i].strip() and not lines[i].startswith(".. example-setup:")
    )
    assert lines[directive].strip() == f".. code-block:: {language}", lines[directive]
    block: list[str] = []
    for line in lines[directive + 1 :]:
        if line.strip() and not line.startswith((" ", "\t")):
            break
        block.append(line)
    return textwrap.dedent("\n".join(block)).strip("\n") + "\n"


def readme_switch_lines() -> list[str]:
    """The ``export`` lines of the console block right after the line that
    contains ``dask-tcp-switch`` in README.rst."""
    block = code_block_after(README, "dask-tcp-switch", "console")
    return [line.strip() for line in block.splitlines() if line.strip()]


def readme_switch_environment() -> dict[str, str]:
    env = {}
    for line in readme_switch_lines():
        assert line.startswith("export "), line
        name, sep, value = line[len("export ") :].partition("=")
        assert sep and name.isidentifier() and value and " " not in value, line
        env[name] = value
    return env


def test_readme_block_is_the_switch() -> None:
    assert readme_switch_environment() == ENVIRONMENT


@pytest.mark.timeout(240)
def test_readme_block_starts_a_switched_cluster(tmp_path: Path) -> None:
    """``dask scheduler`` and ``dask worker`` started with exactly the README's
    lines in their environment (run through a shell, as a user would paste
    them): every worker and the scheduler report the switch from inside."""
    import subprocess

    env = dict(os.environ)
    for key in list(env):
        if key.startswith("DASK_DISTRIBUTED__") and key.endswith("__PRELOAD"):
            del env[key]
    script = "\n".join([*readme_switch_lines(), "env"])
    shell_env = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, check=True).stdout
    exported = dict(line.split("=", 1) for line in shell_env.splitlines() if line.startswith("DASK_DISTRIBUTED__"))
    with cli_cluster(tmp_path, scheduler_args=(), env=exported) as cluster, connected_client(cluster) as client:
        check_scheme(client, "tcp")
        report = verify(client)
        assert_switched(report["scheduler"], "scheduler")
        for address, entry in report["workers"].items():
            assert_switched(entry, address)
        assert client.submit(sum, [1, 2, 3]).result(timeout=30) == 6
