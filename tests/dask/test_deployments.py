"""The switch under each deployment tool, with real processes on 127.0.0.1.

Each test starts a cluster the way the deployment guide
(``docs/guides/deployment.rst``) says to switch it, then checks from the
client, with `tornado_readinto.dask.switch.verify`, that the scheduler, every
worker and every nanny is switched (``strict=True``: a stock one is named in
the failure), and moves numpy arrays made on one worker to the other
(``check_worker_to_worker``: the sum, and the receiving worker's
``transfer_incoming_log``).

- dask-gateway: ``dask-gateway-server`` (its local backend, its own proxy,
  the per-cluster TLS certificates) configured with exactly the guide's
  ``dask-gateway-switch`` block, which this module reads from the guide.
- dask-jobqueue: its ``LocalCluster`` (each job a local process running
  ``distributed.cli.dask_worker``), the README's block in the environment.
- dask-mpi: ``dask_mpi.initialize`` in 4 ranks of mpich's ``mpiexec``, the
  README's block in its environment.
- the CLIs: ``dask scheduler`` and ``dask worker`` (Nanny) with the README's
  block, and ``--preload-nanny`` for the nanny.

Every process is started in a session of its own and stopped in a
``finally`` (its process group), or, where the tool starts it, by the tool
and then by its process id.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import dask
import pytest
from distributed import Client

from tornado_readinto.dask import switch as dask_switch
from tornado_readinto.dask.switch import PRELOAD, verify

from .test_dask_deploy import (
    REPO_ROOT,
    START_TIMEOUT_S,
    CLICluster,
    _env,
    check_worker_to_worker,
    cli_cluster,
    connected_client,
)
from .test_dask_switch import assert_switched, code_block_after, readme_switch_environment

T = TypeVar("T")

DEPLOYMENT_GUIDE = REPO_ROOT / "docs" / "guides" / "deployment.rst"
VENV_BIN = str(Path(sys.executable).parent)


@pytest.fixture(autouse=True)
def stock_here() -> Iterator[None]:
    """This process starts and ends each test with distributed's own backends."""
    dask_switch.switch_off()
    yield
    dask_switch.switch_off()


def check_report(report: dict[str, Any], scheme: str, nworkers: int, nnannies: int) -> None:
    """Every process of a `verify` report is switched and listens on ``scheme://127.0.0.1``."""
    assert report["stock"] == [], report["stock"]
    assert_switched(report["client"], "client")
    assert_switched(report["scheduler"], "scheduler")
    assert report["scheduler"]["address"].startswith(f"{scheme}://127.0.0.1:"), report["scheduler"]
    assert len(report["workers"]) == nworkers, sorted(report["workers"])
    for address, entry in report["workers"].items():
        assert address.startswith(f"{scheme}://127.0.0.1:"), address
        assert_switched(entry, address)
    assert len(report["nannies"]) == nnannies, sorted(report["nannies"])
    for entry in report["nannies"].values():
        assert entry["address"].startswith(f"{scheme}://127.0.0.1:"), entry
        assert_switched(entry, f"nanny {entry['address']}")


def check_cluster(client: Client, scheme: str, nnannies: int) -> None:
    """From the client: all switched (``strict``), then arrays worker to worker."""
    check_report(verify(client, strict=True), scheme, nworkers=2, nnannies=nnannies)
    check_worker_to_worker(client, scheme)


def loopback_interface() -> str:
    """The interface that holds 127.0.0.1 (``lo`` on Linux, ``lo0`` on macOS)."""
    import psutil  # a dependency of distributed

    for name, addresses in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == "127.0.0.1" for a in addresses):
            return str(name)
    raise AssertionError("no interface holds 127.0.0.1")


def need(module: str, *, posix_only: bool = False) -> None:
    """Import ``module``, which setup.cfg's test extra installs: missing, it
    fails the test (on Windows, where the extra leaves the POSIX-only tools
    out, it skips)."""
    try:
        importlib.import_module(module)
    except ImportError as exc:
        if posix_only and sys.platform == "win32":
            pytest.skip(f"{module} is POSIX-only (setup.cfg's test extra leaves it out on Windows)")
        pytest.fail(f"{module} does not import ({exc}); it is in setup.cfg's test extra: pip install -e '.[test]'")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def asked_again_over_stock_tls(ask: Callable[[], T]) -> T:
    """``ask()``, asked again (3 times in all) when a comm fails with
    `CommClosedError`.  A stock process's tls:// comms fail on CPython
    3.14/3.15 with OpenSSL 3.4+ when another TLS connection of the process
    failed just before (an OpenSSL error left queued: python/cpython#148594;
    this package's streams empty the queue, tornado_readinto.face._sslerrors): a
    broadcast from a stock scheduler can then raise for one nanny's comm,
    and asking again takes new comms."""
    from distributed.comm import CommClosedError

    for attempt in range(3):
        try:
            return ask()
        except CommClosedError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def pids_of(client: Client) -> list[int]:
    """The process ids of the scheduler, the workers and the nannies (the
    broadcasts asked again over a stock scheduler's tls://)."""
    pids = [asked_again_over_stock_tls(lambda: client.run_on_scheduler(os.getpid))]
    pids += asked_again_over_stock_tls(lambda: client.run(os.getpid)).values()
    pids += asked_again_over_stock_tls(lambda: client.run(os.getpid, nanny=True)).values()
    return pids


def kill_leftovers(pids: list[int], *, groups: bool) -> None:
    """SIGKILL what is left of processes a tool started (their process groups
    with ``groups``), never this process or its group."""
    for pid in pids:
        if pid == os.getpid():
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if groups and os.getpgid(pid) != os.getpgrp():
                os.killpg(os.getpgid(pid), signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)


def without_preloads(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not (k.startswith("DASK_DISTRIBUTED__") and k.endswith("__PRELOAD"))}


# -- dask-gateway ---------------------------------------------------------------------------

#: The test's own gateway settings; the guide's block follows them in the file.
GATEWAY_SETTINGS = """\
c.DaskGateway.address = "127.0.0.1:0"
c.Proxy.address = "127.0.0.1:{port}"
c.DaskGateway.backend_class = "dask_gateway_server.backends.local.UnsafeLocalBackend"
c.LocalBackend.clusters_directory = {clusters!r}
"""


def gateway_up(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1 only, never a proxy
    try:
        with opener.open(url + "/api/health", timeout=5) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def guide_recipe() -> str:
    """The ``python`` block right after the line with ``dask-gateway-switch`` in the guide."""
    return code_block_after(DEPLOYMENT_GUIDE, "dask-gateway-switch", "python")


#: What the block mends: the README's environment block as the clusters'
#: ``environment``, and only the commands that distributed 2026.8 has.
ENVIRONMENT_ONLY = f"""\
c.ClusterConfig.scheduler_cmd = ["dask", "scheduler"]
c.ClusterConfig.worker_cmd = ["dask", "worker"]
c.ClusterConfig.environment = {readme_switch_environment()!r}
"""


@contextlib.contextmanager
def gateway_client(tmp_path: Path, recipe: str) -> Iterator[Client]:
    """A dask-gateway-server on 127.0.0.1 whose configuration file is the
    test's settings and then ``recipe``; a client of a new cluster of 2 workers."""
    from dask_gateway import BasicAuth, GatewayCluster

    port = free_port()
    config = tmp_path / "dask_gateway_config.py"
    settings = GATEWAY_SETTINGS.format(port=port, clusters=str(tmp_path / "clusters"))
    # After the recipe, as the test's own: the local backend gives the workers
    # no --host, and they would listen on every interface.
    bind_loopback = 'c.ClusterConfig.worker_cmd = [*c.ClusterConfig.worker_cmd, "--host", "127.0.0.1"]\n'
    config.write_text(settings + "\n# the recipe, as written\n" + recipe + "\n" + bind_loopback)
    # the backend passes PATH and PYTHONPATH on to the scheduler and workers
    env = without_preloads(_env(None))
    env["PATH"] = os.pathsep.join([VENV_BIN, env.get("PATH", "")])
    server = CLICluster(tmp_path, tmp_path / "unused")
    url = f"http://127.0.0.1:{port}"
    pids: list[int] = []
    try:
        proc = server.start("gateway", [str(Path(VENV_BIN) / "dask-gateway-server"), "-f", str(config)], env)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not gateway_up(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the gateway did not start\n{server.log_tail()}")
            time.sleep(0.1)
        dask_switch.switch_on()  # the client, as the block in its environment would
        with dask.config.set({"gateway.http-client.proxy": False}):
            cluster = GatewayCluster(url, auth=BasicAuth("dask-user", "unused"), shutdown_on_close=True)
        try:
            cluster.scale(2)
            with cluster.get_client() as client:
                try:
                    asked_again_over_stock_tls(lambda: client.wait_for_workers(2, timeout=START_TIMEOUT_S))
                except TimeoutError as exc:
                    raise AssertionError(f"workers did not join\n{server.log_tail()}") from exc
                pids = pids_of(client)
                yield client
        finally:
            cluster.close()  # shuts the cluster down
            # dask-gateway 2026.3's Gateway.close() raises if called again
            # (distributed 2026.8's LoopRunner refuses its stopped loop), and
            # Gateway.__del__ calls it again: once is enough.
            cluster.gateway.close = lambda: None
    finally:
        server.stop()  # SIGTERM: the gateway stops its clusters' processes, then exits
        kill_leftovers(pids, groups=True)  # each was started in a session of its own


# -- dask-jobqueue --------------------------------------------------------------------------


@contextlib.contextmanager
def jobqueue_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:
    from dask_jobqueue.local import LocalCluster as JobQueueLocalCluster

    # The jobs inherit this environment (the README's block); this process,
    # which runs the scheduler and the client, switches as the block would
    # have switched it had it been set before the program started.
    for name, value in readme_switch_environment().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PYTHONPATH", _env(None)["PYTHONPATH"])
    dask_switch.switch_on()
    pids: list[int] = []
    try:
        with JobQueueLocalCluster(
            cores=1,
            processes=1,
            memory="1GiB",
            interface=loopback_interface(),
            local_directory=str(tmp_path),
            scheduler_options={"dashboard": False, "dashboard_address": "127.0.0.1:0"},
            worker_extra_args=["--preload-nanny", PRELOAD, "--no-dashboard", "--dashboard-address", "127.0.0.1:0"],
        ) as cluster:
            cluster.scale(jobs=2)
            with Client(cluster, timeout="30s") as client:
                client.wait_for_workers(2, timeout=START_TIMEOUT_S)
                pids = pids_of(client)
                yield client
    finally:
        kill_leftovers(pids, groups=False)  # the jobs share this process's group


# -- the CLIs -------------------------------------------------------------------------------


@contextlib.contextmanager
def cli_client(tmp_path: Path) -> Iterator[Client]:
    dask_switch.switch_on()  # the client, as the block in its environment would
    with (
        cli_cluster(
            tmp_path, scheduler_args=(), env=readme_switch_environment(), worker_args=("--preload-nanny", PRELOAD)
        ) as cluster,
        connected_client(cluster) as client,
    ):
        yield client


# -- dask-mpi -------------------------------------------------------------------------------

#: The program that ``mpiexec`` runs in each rank: rank 0 the scheduler,
#: ranks 2 and 3 the workers, rank 1 the client, which writes its report.
MPI_PROGRAM = """\
import json, sys
from dask_mpi import initialize
initialize(interface=sys.argv[2], dashboard=False, dashboard_address="127.0.0.1:0", nthreads=1)
from distributed import Client
from tornado_readinto.dask.switch import verify
from tests.dask.test_dask_deploy import check_worker_to_worker
with Client(timeout="30s") as client:
    client.wait_for_workers(2, timeout=60)
    report = verify(client)
    check_worker_to_worker(client, "tcp")
with open(sys.argv[1], "w") as f:
    json.dump(report, f)
"""


def mpiexec() -> list[str]:
    """mpich's single-host launcher from its wheel (it forks the ranks and
    talks to them over pipes: no socket of its own), else its ``mpiexec``."""
    for name in ("mpiexec.gforker", "mpiexec"):
        path = Path(VENV_BIN) / name
        if path.exists():
            return [str(path)]
    raise AssertionError(f"no mpiexec in {VENV_BIN}: the test extra installs mpich")


def run_mpi(tmp_path: Path) -> dict[str, Any]:
    program = tmp_path / "program.py"
    program.write_text(MPI_PROGRAM)
    out = tmp_path / "report.json"
    env = _env(readme_switch_environment())
    env["UCX_NET_DEVICES"] = loopback_interface()  # mpich's UCX netmod (Linux): the loopback interface only
    runner = CLICluster(tmp_path, tmp_path / "unused")
    try:
        proc = runner.start(
            "mpiexec", [*mpiexec(), "-n", "4", sys.executable, str(program), str(out), loopback_interface()], env
        )
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"mpiexec did not finish\n{runner.log_tail()}") from None
        assert proc.returncode == 0 and out.exists(), runner.log_tail()
    finally:
        runner.stop()
    return dict(json.loads(out.read_text()))


# -- the tests ------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_gateway_cluster_is_switched_by_the_guides_recipe(tmp_path: Path) -> None:
    """dask-gateway-server with the guide's block: the scheduler (which the
    gateway starts with a ``--preload`` of its own), both workers and their
    nannies are switched; arrays cross the tls:// comms between the workers."""
    need("dask_gateway_server.backends.local", posix_only=True)
    with gateway_client(tmp_path, guide_recipe()) as client:
        assert client.scheduler.address.startswith("gateway://127.0.0.1:")
        check_cluster(client, "tls", nnannies=2)


@pytest.mark.timeout(120)
def test_gateway_environment_alone_leaves_the_scheduler_stock(tmp_path: Path) -> None:
    """Why the block is on the command lines: with the README's block as the
    clusters' ``environment`` the workers are switched, but the scheduler
    (the gateway's ``--preload`` replaces the config's) and the nannies (the
    CLI's ``--preload-nanny``) are not, and ``verify`` names them."""
    need("dask_gateway_server.backends.local", posix_only=True)
    with gateway_client(tmp_path, ENVIRONMENT_ONLY) as client:
        # The stock scheduler speaks stock tls:// (see asked_again_over_stock_tls).
        report = asked_again_over_stock_tls(lambda: verify(client))
        for address, entry in report["workers"].items():
            assert_switched(entry, address)
        scheduler = f"scheduler {report['scheduler']['address']}"
        nannies = sorted(f"nanny {entry['address']}" for entry in report["nannies"].values())
        assert report["stock"] == [scheduler, *nannies], report["stock"]


def test_gateway_default_commands_are_replaced() -> None:
    """Gateway 2026.3's default commands are gone from distributed 2026.8;
    with the guide's block, the command the backend builds for the scheduler
    names both preloads, this package's first."""
    need("dask_gateway_server.backends.local", posix_only=True)
    from types import SimpleNamespace

    from dask_gateway_server.backends.base import ClusterConfig
    from dask_gateway_server.backends.local import LocalBackend
    from traitlets.config import Config

    assert ClusterConfig().scheduler_cmd == ["dask-scheduler"]
    assert ClusterConfig().worker_cmd == ["dask-worker"]
    assert not (Path(VENV_BIN) / "dask-scheduler").exists() and not (Path(VENV_BIN) / "dask-worker").exists()
    c = Config()
    exec(compile(guide_recipe(), "recipe", "exec"), {"c": c})
    config = ClusterConfig(config=c)
    backend = SimpleNamespace(default_host="127.0.0.1", cluster_heartbeat_period=15)
    argv = LocalBackend.get_scheduler_command(backend, SimpleNamespace(config=config))  # type: ignore[arg-type]
    assert argv[:2] == ["dask", "scheduler"]
    preloads = [argv[i + 1] for i, word in enumerate(argv) if word == "--preload"]
    assert preloads == [PRELOAD, "dask_gateway.scheduler_preload"], argv
    assert config.worker_cmd == ["dask", "worker", "--preload", PRELOAD, "--preload-nanny", PRELOAD]


@pytest.mark.timeout(120)
def test_jobqueue_local_cluster_is_switched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """dask-jobqueue's LocalCluster: the scheduler and client in this
    process, each job a ``distributed.cli.dask_worker`` process with a Nanny."""
    need("dask_jobqueue")
    with jobqueue_client(tmp_path, monkeypatch) as client:
        check_cluster(client, "tcp", nnannies=2)


@pytest.mark.timeout(120)
def test_mpi_cluster_is_switched(tmp_path: Path) -> None:
    """dask-mpi in 4 ranks of mpich (scheduler, client, 2 workers), the
    README's block in ``mpiexec``'s environment: the client rank's report."""
    need("mpi4py", posix_only=True)
    need("dask_mpi")
    report = run_mpi(tmp_path)
    check_report(report, "tcp", nworkers=2, nnannies=0)


@pytest.mark.timeout(120)
def test_cli_cluster_with_nannies_is_switched(tmp_path: Path) -> None:
    """``dask scheduler`` and ``dask worker`` (Nanny) with the README's block
    in their environment and ``--preload-nanny`` on the worker's command line."""
    with cli_client(tmp_path) as client:
        check_cluster(client, "tcp", nnannies=2)
