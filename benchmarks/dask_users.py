"""What dask users run, stock against switched: P2P shuffles and rechunks, a
client gathering and scattering arrays, and one scheduler with many workers.

Run through `benchmarks.dask` (``--workload p2p-shuffle,p2p-rechunk,gather,
scatter,scheduler-scale --pair switch,switch-tls``); this module holds the
workloads and the process that runs one repetition.

Every repetition is a fresh driver process (``python -m benchmarks.dask_users
driver SPEC``) that starts its own cluster, times its workload by wall clock
and checks its result.  The switched side's driver starts with exactly the
environment block of the README (``.. dask-tcp-switch``, read from
README.rst), the stock side's with no preload at all; nothing else differs,
and each driver asks every process (`tornado_readinto.dask.switch.verify`)
that it is switched, or that none is.  The sides alternate repetition by
repetition (A B B A ...).

* ``p2p-shuffle``: ``dask.datasets.timeseries`` (``--user-shuffle-days`` days
  at one row per second, ``--user-shuffle-partitions`` partitions; about 1 GB
  for 240 days) persisted, then ``shuffle("id", shuffle_method="p2p")``
  persisted.  Checked: row count, the sum of ``id``, each id in one partition.
* ``p2p-rechunk``: a float64 square array of about ``--user-rechunk-size``
  in 8 row strips, persisted, then rechunked to 8 column strips with
  ``method="p2p"`` and persisted.  Checked: blocks and sum.
* ``gather``: ``--user-arrays`` arrays of ``--transfer-size`` made on the
  workers, then ``client.gather`` of all of them.  Checked: shape and sum
  of each, on the client.
* ``scatter``: the client makes the same arrays, then ``client.scatter``
  sends them to the workers.  Checked by a task per array on its worker.
* ``scheduler-scale``: one ``dask scheduler`` process, ``--scale-workers``
  workers (one thread each) in ``--scale-processes`` other processes, and
  ``--scale-tasks`` tiny tasks from the client.  Reported too: the
  scheduler's CPU per task.

The first four run on a ``LocalCluster`` of 2 worker processes of one thread
each, scheduler and client in the driver process, with dask's defaults
otherwise (P2P's disk storage included).  Over ``tls://`` every process uses
``Security.temporary()`` (the scheduler-scale workload: a throwaway CA's
files, which the CLI needs).

Each repetition also reports the CPU seconds of the processes that matter
(``cpu_s``: the workers that receive; the client for ``gather``; the
scheduler for ``scheduler-scale``) over the timed part.  With
``--user-profile N``, N more repetitions per side run under py-spy
(`benchmarks.dask_profile.sampled`, native stacks, not timed): the share of
those processes' busy samples in the comm's read and write paths
(`COMM_CATEGORIES`: socket calls, TLS, serialization, the comm's Python)
says how much of the workload any comm could change.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

if __package__ in (None, ""):  # pragma: no cover - see benchmarks.dask
    sys.exit("run this module as: python -m benchmarks.dask_users driver SPEC")

from benchmarks.dask_tasks import checksum, inc, make_array
from benchmarks.harness import check
from benchmarks.harness.cpu import process_cpu_s

#: The workloads, in the table's order.
WORKLOADS = ("p2p-shuffle", "p2p-rechunk", "gather", "scatter", "scheduler-scale")

#: The pairs they run in: stock ``tcp://``/``tls://`` against the same with the README's block.
PAIRS = {"switch": "tcp", "switch-tls": "tls"}

#: py-spy categories (`benchmarks.dask_profile.CATEGORIES`) that make the comm's share.
COMM_CATEGORIES = ("syscalls", "tls", "serialization", "comm (Python)")

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.rst")

#: The environment names that switch a process (any preload of dask's), left
#: out of the stock side's environment.
_PRELOAD_NAME = re.compile(r"DASK_DISTRIBUTED__\w+__PRELOAD(_ARGV)?$")


def readme_switch_environment(path: str = README) -> dict[str, str]:
    """The ``export NAME=VALUE`` lines of the console block after the line
    holding ``dask-tcp-switch`` in the README."""
    with open(path) as f:
        lines = f.read().splitlines()
    marker = next(i for i, line in enumerate(lines) if "dask-tcp-switch" in line)
    directive = next(i for i in range(marker + 1, len(lines)) if lines[i].strip())
    check(lines[directive].strip() == ".. code-block:: console", f"README: no console block after {lines[marker]}")
    env: dict[str, str] = {}
    for line in lines[directive + 1 :]:
        if line.strip() and not line.startswith(" "):
            break
        if line.strip().startswith("export "):
            name, _, value = line.strip().removeprefix("export ").partition("=")
            env[name] = value
    check(bool(env), "README: the dask-tcp-switch block sets nothing")
    return env


def side_environment(switched: bool, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """A driver's environment: ``base`` (this process's) without any dask
    preload, plus the README's block on the switched side."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if not _PRELOAD_NAME.match(k)}
    if switched:
        env.update(readme_switch_environment())
    return env


# -- one repetition, in the driver process ---------------------------------------------------------


def _cpu(pids: Mapping[str, int]) -> dict[str, float | None]:
    return {role: process_cpu_s(pid) for role, pid in pids.items()}


def _spent(before: Mapping[str, float | None], after: Mapping[str, float | None]) -> dict[str, float | None]:
    return {r: None if before[r] is None or after[r] is None else after[r] - before[r] for r in before}  # type: ignore[operator]


@contextmanager
def _window(spec: Mapping[str, Any], pids: Mapping[str, int], out: dict[str, Any]) -> Iterator[None]:
    """The timed part: wall clock and CPU of ``pids`` into ``out``; under
    py-spy when the spec says so (then the time is not a result)."""
    with ExitStack() as stack:
        samples = None
        if spec.get("profile"):
            from benchmarks.dask_profile import sampled

            samples = stack.enter_context(sampled(list(pids.values()), 250))
        before = _cpu(pids)
        started = time.perf_counter()
        yield
        out["value"] = time.perf_counter() - started
        out["cpu_s"] = _spent(before, _cpu(pids))
    if samples is not None:
        out["samples"] = {role: dict(samples[pid]) for role, pid in pids.items()}


def _worker_pids(client: Any) -> dict[str, int]:
    return {f"worker{i}": pid for i, (_, pid) in enumerate(sorted(client.run(os.getpid).items()))}


def _security(scheme: str, tmp: str) -> Any:
    if scheme != "tls":
        return None
    from distributed.security import Security

    return Security.temporary()


def check_switch(client: Any, switched: bool) -> dict[str, Any]:
    """Every process of the client's cluster (scheduler, workers, this
    client) is switched, or none is: ``verify`` asked of each."""
    from tornado_readinto.dask import switch as dask_switch

    report = dask_switch.verify(client)
    nprocesses = 2 + len(report["workers"]) + len(report["nannies"])
    stock = report["stock"]
    check(len(stock) == (0 if switched else nprocesses), f"switched should be {switched} in every process: {stock}")
    return {"stock": stock, "processes": nprocesses}


def run_p2p_shuffle(client: Any, spec: Mapping[str, Any], out: dict[str, Any], pids: Mapping[str, int]) -> None:
    import dask
    import dask.dataframe as dd  # noqa: F401 - dask.datasets.timeseries needs it
    from distributed import wait

    days, nparts = spec["shuffle_days"], spec["shuffle_partitions"]
    hours = max(1, days * 24 // nparts)
    end = time.strftime("%Y-%m-%d", time.gmtime(946684800 + hours * nparts * 3600))
    df = dask.datasets.timeseries(start="2000-01-01", end=end, freq="1s", partition_freq=f"{hours}h", seed=1)
    df = client.persist(df)
    wait(df)
    rows, ids = client.compute([df.shape[0], df["id"].sum()], sync=True)
    nunique = int(client.compute(df["id"].nunique(), sync=True))
    with _window(spec, pids, out):
        shuffled = client.persist(df.shuffle("id", shuffle_method="p2p"))
        wait(shuffled)
    got_rows, got_ids = client.compute([shuffled.shape[0], shuffled["id"].sum()], sync=True)
    check((got_rows, got_ids) == (rows, ids), f"shuffled: {got_rows} rows, id sum {got_ids}; were {rows}, {ids}")
    per_partition = client.compute(
        shuffled.map_partitions(lambda p: p["id"].nunique(), meta=(None, "int64")), sync=True
    )
    check(int(per_partition.sum()) == nunique, "an id landed in more than one partition")
    out.update(
        rows=int(rows),
        partitions=shuffled.npartitions,
        nbytes=int(client.compute(df.memory_usage(deep=True).sum(), sync=True)),
    )


def run_p2p_rechunk(client: Any, spec: Mapping[str, Any], out: dict[str, Any], pids: Mapping[str, int]) -> None:
    import dask.array as da
    from distributed import wait

    n = max(64, int(math.sqrt(spec["rechunk_size"] / 8)) // 8 * 8)
    x = client.persist(da.random.RandomState(1).random_sample((n, n), chunks=(n // 8, n)))
    wait(x)
    expected = float(client.compute(x.sum(), sync=True))
    with _window(spec, pids, out):
        y = client.persist(x.rechunk((n, n // 8), method="p2p"))
        wait(y)
    check(y.numblocks == (1, 8), f"rechunked to {y.numblocks} blocks")
    total = float(client.compute(y.sum(), sync=True))
    check(math.isclose(total, expected, rel_tol=1e-9), f"sum after the rechunk {total}, was {expected}")
    out.update(nbytes=int(x.nbytes), shape=[n, n])


def _check_arrays(values: Sequence[tuple[tuple[int, ...], float]], nbytes: int) -> None:
    for i, (shape, total) in enumerate(values):
        check(shape == (nbytes // 8,) and total == float(i) * (nbytes // 8), f"array {i}: {shape}, sum {total}")


def run_gather(client: Any, spec: Mapping[str, Any], out: dict[str, Any], pids: Mapping[str, int]) -> None:
    from distributed import wait

    count, nbytes = spec["arrays"], spec["nbytes"]
    workers = sorted(client.scheduler_info()["workers"])
    arrays = [client.submit(make_array, i, nbytes, workers=[workers[i % 2]], pure=False) for i in range(count)]
    wait(arrays)
    with _window(spec, {**pids, "client": os.getpid()}, out):
        values = client.gather(arrays)
    _check_arrays([checksum(v) for v in values], nbytes)
    out.update(nbytes=count * nbytes)


def run_scatter(client: Any, spec: Mapping[str, Any], out: dict[str, Any], pids: Mapping[str, int]) -> None:
    count, nbytes = spec["arrays"], spec["nbytes"]
    arrays = [make_array(i, nbytes) for i in range(count)]
    with _window(spec, {**pids, "client": os.getpid()}, out):
        futures = client.scatter(arrays)
    _check_arrays(client.gather(client.map(checksum, futures, pure=False)), nbytes)
    held = client.who_has(futures)
    check(all(held[f.key] for f in futures), "a scattered array is on no worker")
    out.update(nbytes=count * nbytes)


RUNS: dict[str, Callable[[Any, Mapping[str, Any], dict[str, Any], Mapping[str, int]], None]] = {
    "p2p-shuffle": run_p2p_shuffle,
    "p2p-rechunk": run_p2p_rechunk,
    "gather": run_gather,
    "scatter": run_scatter,
}


def drive_local(spec: Mapping[str, Any]) -> dict[str, Any]:
    """One repetition of a `RUNS` workload on a fresh 2-worker LocalCluster."""
    from distributed import Client, LocalCluster

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-users-") as tmp:
        security = _security(spec["scheme"], tmp)
        kwargs = {} if security is None else {"security": security}
        with (
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                         protocol=f"{spec['scheme']}://", dashboard_address=":0", **kwargs) as cluster,
            Client(cluster, **kwargs) as client,
        ):  # fmt: skip
            client.wait_for_workers(2, timeout=120)
            out["switch"] = check_switch(client, spec["switched"])
            RUNS[spec["workload"]](client, spec, out, _worker_pids(client))
    return out


# -- scheduler-scale --------------------------------------------------------------------------------


def serve_workers(address: str, count: int, security_files: Mapping[str, str] | None) -> None:
    """``count`` one-thread workers in this process, connected to the
    scheduler at ``address``, until the scheduler closes (the
    ``workers`` command of this module)."""
    import asyncio

    from distributed import Worker

    async def main() -> None:
        kwargs: dict[str, Any] = {}
        if security_files:
            from distributed.security import Security

            kwargs["security"] = Security(**security_files, require_encryption=True)
        workers = [Worker(address, nthreads=1, host="127.0.0.1", dashboard=False, **kwargs) for _ in range(count)]
        await asyncio.gather(*workers)
        await asyncio.gather(*(w.finished() for w in workers))

    asyncio.run(main())


def _tls_files(tmp: str) -> dict[str, str]:
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    ca.cert_pem.write_to_path(f"{tmp}/ca.pem")
    cert.private_key_and_cert_chain_pem.write_to_path(f"{tmp}/cert.pem")
    return {"tls_ca_file": f"{tmp}/ca.pem", "tls_client_cert": f"{tmp}/cert.pem",
            "tls_scheduler_cert": f"{tmp}/cert.pem", "tls_worker_cert": f"{tmp}/cert.pem"}  # fmt: skip


def drive_scale(spec: Mapping[str, Any]) -> dict[str, Any]:
    """One repetition of ``scheduler-scale``: a ``dask scheduler`` process,
    the workers in ``scale_processes`` processes, tasks from this client."""
    from distributed import Client, wait

    out: dict[str, Any] = {}
    n, nprocs, tasks = spec["scale_workers"], spec["scale_processes"], spec["scale_tasks"]
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp, ExitStack() as stack:
        files = _tls_files(tmp) if spec["scheme"] == "tls" else None
        tls_argv = [] if files is None else ["--tls-ca-file", files["tls_ca_file"], "--tls-cert", f"{tmp}/cert.pem"]
        scheduler_file = f"{tmp}/scheduler.json"
        scheduler = subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
             "--protocol", spec["scheme"], "--dashboard-address", ":0", "--scheduler-file", scheduler_file,
             *tls_argv],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        stack.callback(_stop, scheduler)
        deadline = time.monotonic() + 120
        while not os.path.exists(scheduler_file):
            check(scheduler.poll() is None and time.monotonic() < deadline, "dask scheduler did not start")
            time.sleep(0.1)
        time.sleep(0.2)  # written in full
        with open(scheduler_file) as f:
            address = json.load(f)["address"]
        per = [n // nprocs + (1 if i < n % nprocs else 0) for i in range(nprocs)]
        for count in per:
            proc = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.dask_users", "workers", address, str(count), json.dumps(files)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            stack.callback(_stop, proc)
        kwargs: dict[str, Any] = {}
        if files is not None:
            from distributed.security import Security

            kwargs["security"] = Security(**files, require_encryption=True)
        client = stack.enter_context(Client(address, timeout="60s", **kwargs))
        client.wait_for_workers(n, timeout=300)
        out["switch"] = check_switch(client, spec["switched"])
        wait(client.map(inc, range(200), pure=False))  # every worker has served and reported once
        with _window(spec, {"scheduler": scheduler.pid}, out):
            futures = client.map(inc, range(tasks), pure=False, key=[f"scale-{i}" for i in range(tasks)])
            wait(futures)
        total = sum(client.gather(futures))
        check(total == tasks * (tasks + 1) // 2, f"{tasks} tasks summed to {total}")
        spent = out["cpu_s"]["scheduler"]
        out.update(count=tasks, workers=n, scheduler_us_per_task=None if spent is None else spent / tasks * 1e6)
        client.shutdown()
    return out


def _stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def drive(spec: Mapping[str, Any]) -> dict[str, Any]:
    """One repetition (the ``driver`` command of this module)."""
    import logging

    logging.getLogger("distributed.shuffle._scheduler_plugin").setLevel(logging.ERROR)
    return drive_scale(spec) if spec["workload"] == "scheduler-scale" else drive_local(spec)


# -- the parent: repetitions in fresh drivers, alternating --------------------------------------------


def spec_of(
    workload: str, scheme: str, switched: bool, args: argparse.Namespace, profile: bool = False
) -> dict[str, Any]:
    return {
        "workload": workload, "scheme": scheme, "switched": switched, "profile": profile,
        "shuffle_days": args.user_shuffle_days, "shuffle_partitions": args.user_shuffle_partitions,
        "rechunk_size": args.user_rechunk_size, "arrays": args.user_arrays, "nbytes": args.transfer_size,
        "scale_workers": args.scale_workers, "scale_processes": args.scale_processes, "scale_tasks": args.scale_tasks,
    }  # fmt: skip


def run_driver(spec: Mapping[str, Any], timeout: float, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run one repetition in a fresh driver process, whose environment is
    `side_environment` of its side (or ``env``); its result, or an exception
    saying why it has none."""
    env = dict(side_environment(spec["switched"]) if env is None else env)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.dask_users", "driver", json.dumps(spec)],
        env=env, cwd=root, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = "\n".join(proc.stderr.strip().splitlines()[-6:])
        raise RuntimeError(f"driver exited {proc.returncode}: {tail}")
    return json.loads(lines[-1])  # type: ignore[no-any-return]


def comm_share(samples: Mapping[str, Mapping[str, int]]) -> float | None:
    """The comm's share (`COMM_CATEGORIES`) of the busy samples of the sampled processes."""
    total: Counter[str] = Counter()
    for counts in samples.values():
        total.update(counts)
    busy = sum(total.values())
    return None if busy == 0 else sum(total[c] for c in COMM_CATEGORIES) / busy


def main(argv: Sequence[str]) -> int:
    if argv[:1] == ["driver"] and len(argv) == 2:
        print(json.dumps(drive(json.loads(argv[1]))), flush=True)
        return 0
    if argv[:1] == ["workers"] and len(argv) == 4:
        serve_workers(argv[1], int(argv[2]), json.loads(argv[3]))
        return 0
    print("usage: python -m benchmarks.dask_users driver SPEC | workers ADDRESS COUNT FILES", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
