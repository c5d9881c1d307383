"""``python -m benchmarks dask --netpath PATH[,PATH...]``: the dask workloads
whose measured bytes have one direction (``rpc``, ``transfer``,
``transfer-cold``) across a network path: loopback, or a veth pair between
two network namespaces (`benchmarks.harness.netpath`).

For each path `run_path` opens it and starts the *driver*,
``python -m benchmarks.dask_netpath ARGS RESULTS``, in the client's
namespace.  The driver runs the pairs and workloads as ``benchmarks.dask``
does without ``--netpath`` (the same alternation, checks and rows), except
that each side's cluster is separate processes started across the path
(`open_side`)::

    server namespace (10.213.0.1)           client namespace (10.213.0.2)
      dask scheduler                          the driver: Client, the clock
      dask worker a: makes the arrays         dask worker b: fetches and reduces them

so that every timed RPC (client -> scheduler) and every transferred array
(worker a -> worker b) crosses the veth.  ``loopback`` in the list runs the
same processes on 127.0.0.1: the reference for the other paths.  The
workers run without a nanny (``--no-nanny``, one thread each), so that a
worker's pid is the process ``ip netns exec`` started.

Why a child process rather than ``setns(2)`` in this one: a network
namespace belongs to a thread, and ``setns`` moves the calling thread only.
distributed's client runs its event loop in a thread of its own, which
other clients of the process share and which may already exist, and
Tornado resolves names in others.  A process that ``ip netns exec``
starts has all its threads in the namespace, and when it fails it cannot
leave this process in the wrong one.  It also starts with the switch off and
with dask config as this process sets it.

Every repetition also reads the CPU time (user + system from
``/proc/PID/stat``, in clock ticks of 10 ms) of the scheduler, both workers and the
driver before and after its timed part (`benchmarks.dask.measure`).  From
these it reports the CPU of the two ends per GB moved for the transfers
(workers a and b, b's reduction included) and per RPC for ``rpc``
(scheduler and client).  On a rate-limited path (``mtu1500@1gbit``) the link
sets the throughput, and a cheaper comm's gain shows as CPU saved.

Clean-up: a side's processes are terminated when the side closes, also
after an exception.  The driver and everything it starts form one process
group, killed when the driver ends for any reason, before `netpath.open_path`
removes the namespaces.  Their temporary files (scheduler file, logs, the
workers' local directories) go to one directory that is removed last.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import dask as bench
from benchmarks import harness as h
from benchmarks.harness import check, netpath, switchroutes
from benchmarks.harness.processes import child_env

#: A side's two workers: a makes and serves the arrays (server namespace),
#: b fetches and reduces them (client namespace): ``Side.workers`` order.
WORKER_ROLES = ("a", "b")

#: Seconds for the scheduler to write its address, and for both workers to join it.
STARTUP_TIMEOUT_S = 120.0
#: Seconds a process has, after SIGTERM, to exit before SIGKILL.
STOP_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Spawned:
    """`bench.Side.cluster` of a side of separate processes: the one thing a
    workload asks of its cluster."""

    scheduler_address: str


# -- this process: one driver per path --------------------------------------------------------


def run_paths(args: argparse.Namespace, progress: Callable[[str], None]) -> list[bench.DaskResult]:
    """Every path of ``--netpath`` in turn, each fresh (`run_path`)."""
    return [result for spec in args.netpath for result in run_path(spec, args, progress)]


def run_path(
    spec: netpath.PathSpec, args: argparse.Namespace, progress: Callable[[str], None]
) -> list[bench.DaskResult]:
    """The run's pairs and workloads across a fresh ``spec`` path, measured by a
    driver process in its client namespace.  Every result names the path.  If
    the path cannot be opened or the driver dies, every planned row fails with
    the reason."""
    try:
        with tempfile.TemporaryDirectory(prefix="bench-dask-netpath-") as tmp, netpath.open_path(spec) as path:
            progress(f"{spec.name}: {spec.describe()}; scheduler and worker a at {path.server_host},"
                     f" worker b and the client at {path.client_host}")  # fmt: skip
            results = _drive(path, args, Path(tmp))
    except (netpath.NetPathError, h.CaseFailed) as exc:
        results = [bench.DaskResult(w, p, b, error=str(exc), pair=pair) for pair, w, p, b in planned(args)]
    for result in results:
        result.path = spec.name
        result.extra["netpath"] = spec.record()
    return results


def planned(args: argparse.Namespace) -> list[tuple[str, str, str, str]]:
    """(pair, workload, protocol, baseline) of every row the run makes."""
    rows = []
    for pair in args.pair:
        baseline, readinto = bench.PAIRS[pair]
        for workload in (w for w in args.workload if w in bench.PAIR_WORKLOADS[pair]):
            rows += [(pair, workload, protocol, baseline) for protocol in (baseline, readinto)]
    return rows


def _drive(path: netpath.NetPath, args: argparse.Namespace, tmp: Path) -> list[bench.DaskResult]:
    """Run the driver in ``path``'s client namespace and return its results.
    The driver's progress lines pass through to stderr.  It runs in a process
    group of its own, and all of that group is killed on the way out.  Its
    temporary files and its processes' files go under ``tmp``.

    :raises CaseFailed: it exited with an error.
    """
    args_file, results_file = tmp / "args.pickle", tmp / "results.pickle"
    args_file.write_bytes(pickle.dumps(argparse.Namespace(**vars(args), path=path)))
    argv = [*path.client_prefix(), sys.executable, "-m", "benchmarks.dask_netpath", str(args_file), str(results_file)]
    driver = subprocess.Popen(argv, stdin=subprocess.DEVNULL, env={**child_env(), "TMPDIR": str(tmp)},
                              start_new_session=True)  # fmt: skip
    try:
        status = driver.wait()
    finally:
        _kill_group(driver)
    if status != 0 or not results_file.exists():
        raise h.CaseFailed(f"the {path.spec.name} driver exited with status {status} (its stderr is above)")
    results: list[bench.DaskResult] = pickle.loads(results_file.read_bytes())
    return results


def _kill_group(leader: subprocess.Popen[bytes]) -> None:
    """End ``leader``'s process group: SIGTERM, then SIGKILL to whatever is left
    after `STOP_TIMEOUT_S` (nothing, when the driver closed its sides itself)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(leader.pid, signal.SIGTERM)
    try:
        leader.wait(timeout=STOP_TIMEOUT_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()


# -- the driver (in the client's namespace) ---------------------------------------------------


def drive(argv: Sequence[str]) -> int:
    """The driver: ``ARGS`` (a pickle of the run's arguments, with the open
    `netpath.NetPath` as ``path``) in, the results pickled to ``RESULTS``.
    Its sides open across the path (``args.remote_side``: `open_side`)."""
    args_file, results_file = argv
    with open(args_file, "rb") as f:
        args = pickle.load(f)
    args.remote_side = functools.partial(open_side, path=args.path)
    name = args.path.spec.name
    results = bench.run_clusters(args, lambda line: print(f"{name}: {line}", file=sys.stderr, flush=True))
    with open(results_file, "wb") as f:
        pickle.dump(results, f)
    return 0


def switched_roles(protocol: str) -> set[str]:
    """The processes of a side the switch is on in: all of them for ``tcp+switch``
    (dask config, as `bench.open_side` does), the one worker of a mixed side
    (its own preload, as `bench.open_mixed_side` does), else none."""
    if protocol.endswith(bench.SWITCHED):
        return {"scheduler", *WORKER_ROLES}
    index = bench.MIXED_ROLES.get(protocol)
    return set() if index is None else {WORKER_ROLES[index]}


@contextlib.contextmanager
def open_side(protocol: str, args: argparse.Namespace, path: netpath.NetPath) -> Iterator[bench.Side]:
    """One side's cluster across ``path``: ``dask scheduler`` and worker a in
    the server's namespace, worker b in the client's (``--no-nanny
    --nthreads 1``), and a client in this process.  Each process's address,
    pid and switch state are checked; ``--env`` goes to the readinto side's
    workers.  The processes stop on the way out.  Starting takes a few
    seconds (three interpreters importing distributed)."""
    import dask
    from distributed import Client

    from tornado_readinto.dask import switch as dask_switch

    scheme = "readinto" if protocol == "readinto" else "tcp"
    env = bench.side_env(protocol, args)
    mixed_role = bench.MIXED_ROLES.get(protocol)
    with tempfile.TemporaryDirectory(prefix="side-") as tmp, contextlib.ExitStack() as opened:
        on = protocol.endswith(bench.SWITCHED)
        name = opened.enter_context(switchroutes.routes.side(on))  # this process's comms to the side's
        with switchroutes.routes.start(on):  # the config the processes inherit, and the client
            config = {"DASK_INTERNAL_INHERIT_CONFIG": dask.config.serialize(dask.config.global_config)}
            scheduler_file = f"{tmp}/scheduler.json"
            scheduler_argv = ["distributed.cli.dask_scheduler", "--host", path.server_host, "--port", "0",
                              "--protocol", scheme, "--no-dashboard", "--scheduler-file", scheduler_file]  # fmt: skip
            log = f"{tmp}/scheduler.log"
            processes = {"scheduler": opened.enter_context(_started(path.server_prefix(), scheduler_argv, config, log))}
            address = _scheduler_address(processes["scheduler"], scheduler_file, log)
            for i, (role, prefix, host) in enumerate(
                (("a", path.server_prefix(), path.server_host), ("b", path.client_prefix(), path.client_host))
            ):
                preload = ["--preload", dask_switch.PRELOAD] if mixed_role == i else []
                worker_argv = ["distributed.cli.dask_worker", address, "--host", host, "--protocol", scheme,
                               "--name", role, "--nthreads", "1", "--no-nanny", "--no-dashboard", *preload]  # fmt: skip
                log = f"{tmp}/worker-{role}.log"
                processes[role] = opened.enter_context(_started(prefix, worker_argv, {**config, **env}, log))
            client = opened.enter_context(Client(address, timeout="60s"))
            client.wait_for_workers(len(WORKER_ROLES), timeout=STARTUP_TIMEOUT_S)
            name(switchroutes.side_addresses(client))
        by_name = {str(w["name"]): a for a, w in client.scheduler_info()["workers"].items()}
        addresses = {"scheduler": client.scheduler.address, "client": client.scheduler_comm.comm.local_address,
                     **{role: by_name[role] for role in WORKER_ROLES}}  # fmt: skip
        pids = {"client": os.getpid(), **{role: proc.pid for role, proc in processes.items()}}
        _check_placed(client, path, scheme, addresses, pids)
        _check_switched(client, switched_roles(protocol), addresses)
        worker_env = bench.check_worker_env(client, env, args)
        yield bench.Side(
            protocol, Spawned(address), client, [addresses[role] for role in WORKER_ROLES], worker_env=worker_env,
            processes={role: bench.Process(pids[role], addresses[role]) for role in addresses},
        )  # fmt: skip


@contextlib.contextmanager
def _started(
    prefix: Sequence[str], argv: Sequence[str], env: dict[str, str], log_path: str
) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m ARGV`` after ``prefix`` (``ip netns exec NAME``, which
    execs it: the pid is the process's), its output to ``log_path``;
    terminated on the way out (SIGKILL after `STOP_TIMEOUT_S`)."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([*prefix, sys.executable, "-m", *argv], stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, env={**child_env(), **env})  # fmt: skip
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _scheduler_address(scheduler: subprocess.Popen[bytes], scheduler_file: str, log_path: str) -> str:
    """The address the scheduler wrote to ``scheduler_file`` once it listens.

    :raises CaseFailed: it exited, or wrote nothing within `STARTUP_TIMEOUT_S`.
    """
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError, KeyError):
            with open(scheduler_file) as f:
                return str(json.load(f)["address"])
        if scheduler.poll() is not None:
            break
        time.sleep(0.05)
    with open(log_path, errors="replace") as log:
        tail = "\n".join(log.read().splitlines()[-12:])
    raise h.CaseFailed(f"dask scheduler did not start (status {scheduler.poll()}):\n{tail}")


def _check_placed(
    client: Any, path: netpath.NetPath, scheme: str, addresses: dict[str, str], pids: dict[str, int]
) -> None:
    """Each process is where it belongs: the scheduler and worker a at the
    server's address, worker b and the client at the client's, on ``scheme``
    (the measured bytes cross the path); and the pids this process reads CPU
    time from are the workers' and the scheduler's own."""
    from distributed.comm import get_address_host, parse_address

    hosts = {"scheduler": path.server_host, "a": path.server_host, "b": path.client_host, "client": path.client_host}
    placed = {role: (parse_address(a)[0], get_address_host(a)) for role, a in addresses.items()}
    check(placed == {role: (scheme, host) for role, host in hosts.items()}, f"not placed across the path: {addresses}")
    seen = {addresses[r]: pid for r, pid in pids.items() if r in WORKER_ROLES}
    check(client.run(os.getpid) == seen, f"worker pids {client.run(os.getpid)}, started {seen}")
    check(client.run_on_scheduler(os.getpid) == pids["scheduler"], "the scheduler's pid is not the one started")


def _check_switched(client: Any, roles: set[str], addresses: dict[str, str]) -> None:
    """The switch is on in the processes of ``roles`` (scheduler, a, b) and in no other
    (`dask_switch.verify`: a worker's comms and listener, the scheduler's listener)."""
    from tornado_readinto.dask import switch as dask_switch

    report = dask_switch.verify(client)
    states = {"scheduler": {report["scheduler"].get("listener_switched", False)}}
    for role in WORKER_ROLES:
        worker = report["workers"][addresses[role]]
        states[role] = {worker["switched"], worker.get("listener_switched", False)}
    expected = {role: {role in roles} for role in states}
    check(states == expected, f"switched should be {expected}, is {states}: {report}")


class NetpathDaskSuite(bench.DaskSuite):
    """The dask suite with ``--netpath``: `run_paths` across each path."""

    def run_paths(self, args: argparse.Namespace, progress: Callable[[str], None]) -> list[bench.DaskResult]:
        return run_paths(args, progress)


#: The dask suite that ``python -m benchmarks dask`` and ``python -m
#: benchmarks.dask`` run.
SUITE = NetpathDaskSuite()


if __name__ == "__main__":
    sys.exit(drive(sys.argv[1:]))
