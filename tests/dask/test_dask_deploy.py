"""The deployment paths of the ``readinto://`` dask backend, with real processes.

Every test starts a ``dask scheduler`` and ``dask worker`` processes from the
command line (the ``dask`` script next to ``sys.executable``) on 127.0.0.1,
each in its own session so that it can be stopped with its Nanny's worker
child, and stops them in a ``finally`` block: SIGTERM to the process group,
SIGKILL after a grace period.  The scheduler is told to exit by itself after
a few idle minutes, the workers when their scheduler is gone, so nothing
outlives a crashed test run for long.

Covered: ``--protocol readinto`` with ``--scheduler-file`` and
``Client(scheduler_file=...)``; ``distributed.comm.default-scheme: readinto``
(no protocol anywhere); ``readinto-tls://`` with ``--tls-*`` files and a
``Security`` client; a worker SIGKILLed while the other one is fetching its
data; ``client.restart()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("distributed")

import dask  # noqa: E402
import numpy as np  # noqa: E402
import trustme  # noqa: E402
from distributed import Client, wait  # noqa: E402
from distributed.security import Security  # noqa: E402

import tornado_readinto.dask.backend as dask_backend  # noqa: E402

from ..conftest import connect_attempts  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60.0  # two interpreters importing distributed at once on 2 busy cores
STOP_GRACE_S = 15.0

CHUNK_N = 1 << 20  # float64 elements: 8 MiB per chunk
NCHUNKS = 8


# -- task functions (imported by the workers from this module: PYTHONPATH=REPO_ROOT) --------


def make_chunk(i: int, n: int = CHUNK_N) -> np.ndarray:
    return np.full(n, float(i))


def total(chunks: Sequence[np.ndarray]) -> float:
    return float(sum(float(c.sum()) for c in chunks))


def expected_total(nchunks: int, n: int = CHUNK_N) -> float:
    return float(n * sum(range(nchunks)))


def gate_get_data(dask_worker: Any, serve: int) -> None:
    """Make this worker answer its first ``serve`` data requests, then none:
    a peer fetching from it holds exactly ``serve`` chunks and waits for the
    next one for as long as the worker lives."""
    original = dask_worker.handlers["get_data"]
    served = 0

    async def gated(comm: Any, **msg: Any) -> Any:
        nonlocal served
        if served >= serve:
            await asyncio.Event().wait()  # never answered
        served += 1
        return await original(comm, **msg)

    dask_worker.handlers["get_data"] = gated


def probe_fetch(dask_worker: Any, keys: Sequence[Any]) -> tuple[int, int]:
    """(keys already in this worker's memory, transfers in flight)."""
    have = sum(1 for k in keys if k in dask_worker.data)
    return have, len(dask_worker.state.in_flight_tasks)


# -- process management -------------------------------------------------------------------


def dask_cli(sub: str) -> list[str]:
    """``dask scheduler`` / ``dask worker`` as a user would type it, from this venv."""
    script = Path(sys.executable).with_name("dask")
    if script.exists():
        return [str(script), sub]
    return [sys.executable, "-m", f"distributed.cli.dask_{sub}"]


@dataclass
class CLICluster:
    """A scheduler and workers started from the command line, in ``directory``."""

    directory: Path
    scheduler_file: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = self.directory / f"{name}.log"
        self.logs.append(log)
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=self.directory, start_new_session=True
            )
        self.processes.append(proc)
        return proc

    def log_tail(self, nbytes: int = 3000) -> str:
        parts = []
        for log in self.logs:
            text = log.read_text(errors="replace") if log.exists() else ""
            parts.append(f"--- {log.name} ---\n{text[-nbytes:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        for proc in self.processes:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for proc in self.processes:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            # The Nanny's worker child shares the group: make sure it is gone too.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)


def _env(extra: dict[str, str] | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env["DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT"] = "30s"
    env.update(extra or {})
    return env


@contextlib.contextmanager
def cli_cluster(
    directory: Path,
    *,
    scheduler_args: Sequence[str] = ("--protocol", "readinto"),
    worker_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    worker_env: dict[str, str] | None = None,
    nworkers: int = 2,
) -> Iterator[CLICluster]:
    """``dask scheduler --scheduler-file F`` and ``nworkers`` x ``dask worker
    --scheduler-file F --nworkers 1 --nthreads 1``, all on 127.0.0.1
    (``worker_env``: more environment for the workers only)."""
    cluster = CLICluster(directory, directory / "scheduler.json")
    full_env = _env(env)
    try:
        scheduler = cluster.start(
            "scheduler",
            dask_cli("scheduler")
            + ["--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--dashboard-address", "127.0.0.1:0"]
            + ["--idle-timeout", "300s"]
            + ["--scheduler-file", str(cluster.scheduler_file), *scheduler_args],
            full_env,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _scheduler_file_complete(cluster.scheduler_file):
            if scheduler.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the scheduler did not start\n{cluster.log_tail()}")
            time.sleep(0.1)
        for i in range(nworkers):
            cluster.start(
                f"worker-{i}",
                dask_cli("worker")
                + ["--scheduler-file", str(cluster.scheduler_file), "--nworkers", "1", "--nthreads", "1"]
                + ["--no-dashboard", "--dashboard-address", "127.0.0.1:0", "--host", "127.0.0.1"]
                + ["--death-timeout", "60s", *worker_args],
                {**full_env, **(worker_env or {})},
            )
        yield cluster
    finally:
        cluster.stop()


def _scheduler_file_complete(path: Path) -> bool:
    """The scheduler has written its whole file (it is not written atomically)."""
    try:
        return "address" in json.loads(path.read_text())
    except (OSError, ValueError):
        return False


def connected_client(cluster: CLICluster, nworkers: int = 2, **kwargs: Any) -> Client:
    client = Client(scheduler_file=str(cluster.scheduler_file), timeout="30s", **kwargs)
    try:
        client.wait_for_workers(nworkers, timeout=START_TIMEOUT_S)
    except Exception as exc:
        client.close()
        raise AssertionError(f"workers did not join: {exc!r}\n{cluster.log_tail()}") from exc
    return client


def check_scheme(client: Client, scheme: str) -> list[str]:
    """Scheduler, workers and nannies all listen on ``scheme://``; returns the workers."""
    info = client.scheduler_info()
    assert client.scheduler.address.startswith(f"{scheme}://127.0.0.1:"), client.scheduler.address
    assert info["address"].startswith(f"{scheme}://"), info["address"]
    workers = sorted(info["workers"])
    assert workers and all(w.startswith(f"{scheme}://127.0.0.1:") for w in workers), workers
    nannies = [w["nanny"] for w in info["workers"].values()]
    assert all(n and n.startswith(f"{scheme}://") for n in nannies), nannies
    return workers


def check_worker_to_worker(client: Client, scheme: str) -> None:
    """Chunks made on worker a are summed on worker b: every byte crosses a
    worker-to-worker ``scheme://`` comm, and the sum is right."""
    a, b = sorted(client.scheduler_info()["workers"])
    chunks = client.map(make_chunk, range(NCHUNKS), workers=[a], allow_other_workers=False, pure=False)
    wait(chunks, timeout=60)
    result = client.submit(total, chunks, workers=[b], allow_other_workers=False, pure=False).result(timeout=60)
    assert result == expected_total(NCHUNKS)
    log = client.run(lambda dask_worker: list(dask_worker.transfer_incoming_log), workers=[b])[b]
    moved = sum(entry["total"] for entry in log if entry["who"] == a)
    assert moved >= NCHUNKS * CHUNK_N * 8, log
    assert all(entry["who"].startswith(f"{scheme}://") for entry in log), log


# -- the tests ----------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_cli_scheduler_and_workers_over_readinto(tmp_path: Path) -> None:
    with cli_cluster(tmp_path) as cluster, connected_client(cluster) as client:
        check_scheme(client, "readinto")
        check_worker_to_worker(client, "readinto")


@pytest.mark.timeout(120)
def test_cli_default_scheme_from_config(tmp_path: Path) -> None:
    """``distributed.comm.default-scheme: readinto`` (here through the
    environment of the scheduler and workers, and ``dask.config.set`` in the
    client): no protocol on any command line, a scheme-less address for the
    client, and still every address is ``readinto://``."""
    env = {"DASK_DISTRIBUTED__COMM__DEFAULT_SCHEME": "readinto"}
    with cli_cluster(tmp_path, scheduler_args=(), env=env) as cluster:
        # Wait for the scheduler file through a first client, then connect as a
        # user with only host:port would.
        with connected_client(cluster) as first:
            address = first.scheduler.address
        assert address.startswith("readinto://127.0.0.1:"), address
        host_port = address.split("://", 1)[1]
        with dask.config.set({"distributed.comm.default-scheme": "readinto"}):
            with Client(host_port, timeout="30s") as client:
                check_scheme(client, "readinto")
                check_worker_to_worker(client, "readinto")


@pytest.fixture(scope="module")
def tls_pem_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A throwaway trustme CA and one certificate for 127.0.0.1, as separate PEM files."""
    d = tmp_path_factory.mktemp("deploy-tls")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    files = {"ca": str(d / "ca.pem"), "cert": str(d / "cert.pem"), "key": str(d / "key.pem")}
    ca.cert_pem.write_to_path(files["ca"])
    cert.private_key_pem.write_to_path(files["key"])
    for i, pem in enumerate(cert.cert_chain_pems):
        pem.write_to_path(files["cert"], append=i > 0)
    return files


@pytest.mark.timeout(120)
def test_cli_readinto_tls_with_security(
    tmp_path: Path, tls_pem_files: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--protocol readinto-tls`` and ``--tls-ca-file/--tls-cert/--tls-key``
    on scheduler and workers (each builds a ``Security`` from them), a
    ``Security`` client; a client without certificates is refused."""
    tls_args = ["--tls-ca-file", tls_pem_files["ca"], "--tls-cert", tls_pem_files["cert"]]
    tls_args += ["--tls-key", tls_pem_files["key"]]
    security = Security(
        tls_ca_file=tls_pem_files["ca"],
        tls_client_cert=tls_pem_files["cert"],
        tls_client_key=tls_pem_files["key"],
        require_encryption=True,
    )
    with (
        cli_cluster(
            tmp_path, scheduler_args=["--protocol", "readinto-tls", *tls_args], worker_args=tls_args
        ) as cluster,
        connected_client(cluster, security=security) as client,
    ):
        check_scheme(client, "readinto-tls")
        check_worker_to_worker(client, "readinto-tls")
        # A client with a certificate from another CA is refused, not retried
        # until its timeout (FatalCommClosedError is an OSError).
        stranger_ca = trustme.CA()
        stranger_files = {"ca": str(tmp_path / "stranger-ca.pem"), "cert": str(tmp_path / "stranger.pem")}
        stranger_ca.cert_pem.write_to_path(stranger_files["ca"])
        stranger_ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(stranger_files["cert"])
        stranger = Security(
            tls_ca_file=stranger_files["ca"], tls_client_cert=stranger_files["cert"], require_encryption=True
        )
        attempts = connect_attempts(monkeypatch, dask_backend)  # this process's connections from now on
        with pytest.raises(OSError):
            Client(client.scheduler.address, security=stranger, timeout="20s").close()
        assert attempts.count("failed") == 1  # the good client's connections, if any, succeed


#: One transfer at a time, one key per transfer: the fetch of NCHUNKS chunks
#: is a sequence of round trips, wide enough a window to kill the sender in.
SLOW_FETCH_ENV = {
    "DASK_DISTRIBUTED__WORKER__CONNECTIONS__OUTGOING": "1",
    "DASK_DISTRIBUTED__WORKER__CONNECTIONS__INCOMING": "1",
    "DASK_DISTRIBUTED__WORKER__TRANSFER__MESSAGE_BYTES_LIMIT": "1MB",
}


@pytest.mark.timeout(150)
def test_cli_worker_sigkilled_mid_transfer_is_recomputed(tmp_path: Path) -> None:
    """Worker b fetches the chunks of 8 MiB that worker a made (16, or nearly:
    the scheduler may place a few on b) one by one; a answers the first 5
    requests only, and is SIGKILLed once b holds those 5
    and waits for the sixth.  The Nanny restarts a, the scheduler recomputes
    the lost chunks, and the sum is right."""
    nchunks, served = 16, 5
    with cli_cluster(tmp_path, env=SLOW_FETCH_ENV) as cluster, connected_client(cluster) as client:
        a, b = check_scheme(client, "readinto")
        pid_a = client.run(os.getpid, workers=[a])[a]
        client.run(gate_get_data, serve=served, workers=[a])
        # Loose restrictions: once a is gone, its chunks may be recomputed anywhere.
        chunks = client.map(make_chunk, range(nchunks), workers=[a], allow_other_workers=True, pure=False)
        wait(chunks, timeout=60)
        # Only the chunks made on a cross the gate (on a loaded machine the
        # scheduler may have run a few on b, since other workers are allowed).
        who_has = client.who_has(chunks)
        keys = [c.key for c in chunks if tuple(who_has[c.key]) == (a,)]
        assert len(keys) > served, who_has
        result = client.submit(total, chunks, workers=[b], allow_other_workers=True, pure=False)
        while True:  # b reaches the gate and stays there; the test's timeout bounds a hang
            have, in_flight = client.run(probe_fetch, keys=keys, workers=[b])[b]
            assert have <= served and not result.done(), (have, result.status)
            if have == served and in_flight:
                break
            time.sleep(0.05)
        os.kill(pid_a, signal.SIGKILL)
        assert result.result(timeout=90) == expected_total(nchunks)
        # The Nanny brought a back as a new process at a new readinto:// address.
        client.wait_for_workers(2, timeout=60)
        workers = check_scheme(client, "readinto")
        assert a not in workers, workers
        pids = client.run(os.getpid)
        assert pid_a not in pids.values(), pids
        # (b held 5 of a's 16 chunks when a was killed: the gate let no more
        # through.  Its transfer_incoming_log is not checked:
        # distributed 2024.8, the last release for Python 3.9, fills it
        # differently.)


@pytest.mark.timeout(120)
def test_cli_client_restart_over_readinto(tmp_path: Path) -> None:
    """``client.restart()`` kills and restarts every worker through its
    Nanny (over readinto://); a computation then runs on the new processes."""
    with cli_cluster(tmp_path) as cluster, connected_client(cluster) as client:
        before = client.run(os.getpid)
        kept = client.submit(make_chunk, 1, pure=False)
        wait(kept, timeout=60)
        client.restart(timeout="60s", wait_for_workers=True)
        after = client.run(os.getpid)
        assert len(after) == 2 and not set(before.values()) & set(after.values()), (before, after)
        assert kept.status in ("cancelled", "lost", "error"), kept.status  # data died with the workers
        check_scheme(client, "readinto")
        check_worker_to_worker(client, "readinto")


@pytest.mark.timeout(120)
def test_cli_worker_takes_the_switch_interval_from_dask_config(tmp_path: Path) -> None:
    """``DASK_DISTRIBUTED__COMM__READINTO__SWITCH_INTERVAL`` in the workers'
    environment only: each worker (started by its Nanny) runs at that
    interval; the scheduler, which did not opt in, and this process keep
    theirs."""
    import sys

    own = sys.getswitchinterval()
    worker_env = {"DASK_DISTRIBUTED__COMM__READINTO__SWITCH_INTERVAL": "700us"}
    with cli_cluster(tmp_path, worker_env=worker_env) as cluster, connected_client(cluster) as client:
        check_scheme(client, "readinto")
        intervals = client.run(sys.getswitchinterval)
        assert len(intervals) == 2 and all(v == pytest.approx(700e-6) for v in intervals.values()), intervals
        assert client.run_on_scheduler(sys.getswitchinterval) == own
        # the worker read the key from its dask config
        keys = client.run(lambda: dask.config.get("distributed.comm.readinto.switch-interval", None))
        assert set(keys.values()) == {"700us"}
    assert sys.getswitchinterval() == own
