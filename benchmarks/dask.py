"""End-to-end dask.distributed A/B benchmark: ``readinto://`` against ``tcp://``
and ``readinto-tls://`` against ``tls://`` on real clusters.

    python -m benchmarks dask                                  # every workload, 5 repeats
    python -m benchmarks dask --workload rpc,chain --repeat 7 --json dask.json --plot dask.png
    python -m benchmarks dask --pair tls --workload rpc,transfer
    python -m benchmarks dask --full-size 256MiB --transfer-size 16MiB --tasks 2000 --repeat 2   # a quick look
    python -m benchmarks dask --workload busy-worker --repeat 7                 # a worker whose threads hold the GIL
    python -m benchmarks dask --workload busy-worker --pair tcp --switch-interval 5ms,1ms,500us
    python -m benchmarks dask --workload transfer-cold --repeat 7       # fresh clusters, wall-clock GB/s
    python -m benchmarks dask --workload transfer-cold --env TORNADO_READINTO_HOLD_GIL=0   # one heuristic off
    python -m benchmarks dask --workload transfer-cold --pretouch --repeat 15   # receiver's pages resident first
    python -m benchmarks dask --workload transfer-cold --pair switch --pretouch --floor   # and this machine's floor
    python -m benchmarks dask --pair switch-sink,switch-source --workload transfer,transfer-cold   # mixed pairs
    python -m benchmarks dask --netpath loopback,mtu1500,mtu1500@1gbit    # rpc and transfers across a veth (root)

(``python -m benchmarks.dask`` runs the same; ``python benchmarks/dask.py``
would shadow the ``dask`` package with this file.)

For each protocol pair one ``LocalCluster`` of worker processes per protocol
(``n_workers=2, threads_per_worker=1, processes=True``, on 127.0.0.1) is
started and kept for all the workloads of that pair; the scheduler runs in
this process, as ``LocalCluster``'s always does, next to the client.  For
each workload: its data is prepared on both clusters (untimed), one warm-up
repetition runs on each, then the protocols alternate repetition by
repetition (A B B A A B...), so that a drift of the machine hits both alike.
Two workloads start a fresh cluster for every repetition instead (same
alternation; the start is not timed), after the shared clusters are closed:
``transfer-cold`` (two worker processes of one thread, as above) makes
``--cold-count`` arrays on worker a, then times by wall clock one reducing
task per array on worker b until every result is back, with nothing
released early, as a user's workload sees it (`run_fresh_workload`); each
repetition also records the receiving worker's user and kernel CPU seconds
per GiB, and ``--pretouch`` has that worker make as much fresh memory
resident (and free it) just before the clock starts (`pretouch`);
``--floor`` adds a third row to it, ``bare-fetch``: the same arrays fetched
the same way (one request and one array at a time, over a new connection,
into fresh memory kept alive) with no dask, no event loop and no comm, by a
blocking ``recv_into`` (`benchmarks.harness.barefetch`), alternating with
the two protocols, so that its ratio to the baseline says how much faster
than it any comm could make the workload on this machine; and
``busy-worker``, one worker process with two threads, per task shape and
switch interval: its threads run a busy task while the client times tasks,
RPCs, heartbeats and a fetch (`benchmarks.dask_busyworker`).
``--env NAME=VALUE`` (repeatable) sets a variable in the environment the
readinto side's worker processes start with, in every cluster of the run
(`environ`); the scheduler and the client run in this process, which it
leaves as it was.
``--netpath PATH[,PATH...]`` (`NETPATH_WORKLOADS` on `NETPATH_PAIRS`) runs
each side as separate processes across a network path instead
(`benchmarks.dask_netpath`). For a veth pair between two network namespaces,
the scheduler and worker a are in the server's namespace, and worker b and the
client (a driver process) in the client's, so that the timed RPCs and the
transferred arrays cross the veth.  Each repetition then also reports the CPU
time of the two ends per RPC or per GB moved (`cpu_figures`).
The table shows the median and the min-max spread of the repeats, and the
ratio of readinto's median to its baseline's (>1: readinto is faster).

Every repetition checks its result (sums, shapes, counts, row counts); a
wrong result or an error fails that workload and the exit status is
non-zero.  See benchmarks/README.rst, section "dask".
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

if __package__ in (None, ""):  # pragma: no cover - see the module docstring
    sys.exit("run this benchmark as a module: python -m benchmarks dask")

from benchmarks import dask_busyworker as busy
from benchmarks import dask_users as users
from benchmarks import harness as h
from benchmarks.dask_tasks import checksum, environ_of, inc, make_array, make_partition, nunique_keys, usage
from benchmarks.harness import barefetch, check, netpath, switchroutes
from benchmarks.harness import plot as plots
from benchmarks.harness.cpu import host_reported_kib, pretouch

#: ``--pair`` names -> (baseline protocol, readinto protocol).  A protocol
#: ending in `SWITCHED` is distributed's own scheme with the switch on
#: (`tornado_readinto.dask.switch`) in the side's scheduler, client and
#: workers: the same addresses, this package's comms.
PAIRS: dict[str, tuple[str, str]] = {
    "tcp": ("tcp", "readinto"),
    "tls": ("tls", "readinto-tls"),
    "switch": ("tcp", "tcp+switch"),
    "switch-tls": ("tls", "tls+switch"),
    "switch-sink": ("tcp+spec", "tcp+switch-sink"),
    "switch-source": ("tcp+spec", "tcp+switch-source"),
}

#: The suffix of a switched side's protocol name (see `PAIRS`).
SWITCHED = "+switch"
#: ``--floor``'s row of ``transfer-cold``: no dask, no comm (`benchmarks.harness.barefetch`).
BARE_FETCH = "bare-fetch"
#: A mixed side (``tcp+switch-sink``, ``tcp+switch-source``): a stock
#: scheduler and client, and of the two workers only the one named
#: switched, by its own preload (`tornado_readinto.dask.switch.PRELOAD` in
#: that worker's ``preload``): the sink (worker b, which fetches) or the
#: source (worker a, which serves), so that every array crosses between a
#: switched and a stock process, in one direction or the other.  Their
#: baseline, ``tcp+spec``, is the same cluster with neither worker switched
#: (a ``SpecCluster``, not `open_side`'s ``LocalCluster``: one shape for both).
MIXED_ROLES: dict[str, int | None] = {"tcp+spec": None, "tcp+switch-source": 0, "tcp+switch-sink": 1}

#: The readinto side's protocols: ``--env`` applies to their clusters only.
READINTO_PROTOCOLS = tuple(readinto for _, readinto in PAIRS.values())

GB = 1e9  # bytes: the GB/s column is decimal, like dask's own bandwidth figures


@dataclass(frozen=True)
class Metric:
    label: str  # the table's metric column
    higher_is_better: bool
    fmt: Callable[[float | None], str]
    #: Compared with the baseline by a difference, not a ratio: a delay
    #: that can be zero or negative (the heartbeat's lateness).
    by_difference: bool = False


#: Table row (``DaskResult.workload``) -> what one repetition reports.  Most
#: workloads report one row of their own name; see `ROWS`.
METRICS: dict[str, Metric] = {
    "rpc": Metric("RPC/s", True, h.format_rate),
    "tasks": Metric("tasks/s", True, h.format_rate),
    "chain": Metric("s per chain", False, h.format_seconds),
    "transfer": Metric("GB/s", True, h.format_number),
    "transfer-cold": Metric("GB/s wall", True, h.format_number),
    "full": Metric("s", False, h.format_seconds),
    "rechunk": Metric("s", False, h.format_seconds),
    "shuffle": Metric("s", False, h.format_seconds),
    **{row: Metric(*spec) for row, spec in busy.METRICS_BY_ROW.items()},
    **{row: Metric("s wall", False, h.format_seconds) for row in users.WORKLOADS},
}


def metric_of(row: str) -> Metric:
    """The metric of a table row (``busy-worker-rpc[arith@1ms]``: its base row's)."""
    return METRICS[busy.base_row(row)]


#: ``--workload`` names -> their table rows.
ROWS: dict[str, tuple[str, ...]] = {
    **{name: (name,) for name in ("rpc", "tasks", "chain", "transfer", "transfer-cold", "full", "rechunk", "shuffle")},
    "busy-worker": busy.BUSY_ROWS,  # each suffixed with its variant: busy-worker-rpc[arith]
    **{name: (name,) for name in users.WORKLOADS},
}
WORKLOADS = tuple(ROWS)
#: What runs without ``--workload``: all but the workloads users run
#: (`benchmarks.dask_users`), which compare stock with the README's block
#: on the switch pairs only.
DEFAULT_WORKLOADS = tuple(w for w in WORKLOADS if w not in users.WORKLOADS)

#: Workloads that start a fresh cluster for every repetition, after the
#: shared clusters are closed (the others share one cluster per protocol).
FRESH_CLUSTER_WORKLOADS = ("transfer-cold", "busy-worker")

#: The workloads each pair runs (the TLS pair: the RPC, transfer and busy-worker cases).
PAIR_WORKLOADS: dict[str, tuple[str, ...]] = {
    "tcp": WORKLOADS,
    "tls": ("rpc", "transfer", "transfer-cold", "busy-worker"),
    "switch": ("rpc", "transfer", "transfer-cold", *users.WORKLOADS),
    "switch-tls": ("rpc", "transfer", "transfer-cold", *users.WORKLOADS),
    # The client and the scheduler are stock there: only worker-to-worker transfers differ.
    "switch-sink": ("transfer", "transfer-cold"),
    "switch-source": ("transfer", "transfer-cold"),
}

#: The busy-worker cluster: one worker process, both of its threads busy.
BUSY_WORKER_THREADS = busy.BUSY_WORKER_THREADS

#: What ``--netpath`` runs (`benchmarks.dask_netpath`): the workloads whose
#: measured bytes go one way, client -> scheduler (rpc) or worker a -> worker
#: b (the transfers), so that they cross the path; and the pairs on tcp://
#: (the TLS pairs' throwaway certificate names 127.0.0.1, not the veth's addresses).
NETPATH_WORKLOADS = ("rpc", "transfer", "transfer-cold")
NETPATH_PAIRS = ("tcp", "switch", "switch-sink", "switch-source")
NETPATH_DEFAULT_PAIRS = ["tcp", "switch"]
#: Where a ``--netpath`` side's processes run (the JSON's meta records it).
NETPATH_PROCESSES = {
    "scheduler": "server namespace: dask scheduler",
    "a": "server namespace: dask worker --no-nanny --nthreads 1, makes and serves the arrays",
    "b": "client namespace: dask worker --no-nanny --nthreads 1, fetches and reduces them",
    "client": "client namespace: the driver process, Client and clock",
}

#: With ``--netpath``: a workload's metric of CPU per unit of work (the CPU
#: time of the two processes at the ends of its bytes) and the unit the table shows.
CPU_METRICS: dict[str, tuple[str, str]] = {
    "rpc": ("cpu_us_per_rpc", "us/RPC"),
    "transfer": ("cpu_s_per_gb", "s/GB"),
    "transfer-cold": ("cpu_s_per_gb", "s/GB"),
}


@dataclass
class DaskResult(h.Repeated):
    """One workload over one protocol: its repeats (``{"value": ...}`` and
    extras such as wall-clock figures), or why it has none."""

    workload: str
    protocol: str
    baseline: str  # the protocol this one is compared with; itself for the baseline
    repeats: list[dict[str, Any]] = field(default_factory=list)
    skipped: str | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: The ``--pair`` it ran in: pairs share a baseline protocol's name
    #: (``tcp`` in ``tcp``, ``switch``, ``switch-sink``...), not its run.
    pair: str = ""
    #: The network path (``--netpath``), its details in ``extra["netpath"]``.
    path: str = netpath.LOOPBACK.name

    @property
    def metric(self) -> Metric:
        return metric_of(self.workload)

    @property
    def is_baseline(self) -> bool:
        return self.protocol == self.baseline


def ratio(results: Sequence[DaskResult], result: DaskResult) -> float | None:
    """How much faster ``result`` is than its baseline, same workload: the
    ratio of the medians for a rate, its inverse for a time (>1: faster)."""
    if result.is_baseline or result.metric.by_difference:
        return None
    return h.median_ratio(result, baseline_of(results, result), "value",
                          lower_is_better=not result.metric.higher_is_better)  # fmt: skip


def difference(results: Sequence[DaskResult], result: DaskResult) -> float | None:
    """``result``'s median minus its baseline's, for a metric compared by
    difference (`Metric.by_difference`); None otherwise."""
    if result.is_baseline or not result.metric.by_difference or not result.ok:
        return None
    theirs = baseline_of(results, result)
    if theirs is None or not theirs.ok:
        return None
    mine, base = result.median("value"), theirs.median("value")
    return None if mine is None or base is None else mine - base


def baseline_of(results: Sequence[DaskResult], result: DaskResult) -> DaskResult | None:
    """The baseline protocol's result of ``result``'s workload, or None."""
    return h.find_baseline(
        results, result, lambda r: r.protocol == result.baseline, lambda r: (r.workload, r.baseline, r.pair, r.path)
    )


def cpu_metric(result: DaskResult) -> str | None:
    """The key of ``result``'s CPU per unit of work (`CPU_METRICS`), if it has values."""
    key = CPU_METRICS.get(result.workload, ("", ""))[0]
    return key if result.values(key) else None


def cpu_ratio(results: Sequence[DaskResult], result: DaskResult) -> float | None:
    """How much less CPU per unit of work ``result`` spends than its baseline
    (the ratio of the medians, baseline over ``result``: >1 saves CPU)."""
    key = cpu_metric(result)
    if result.is_baseline or key is None:
        return None
    return h.median_ratio(result, baseline_of(results, result), key, lower_is_better=True)


# -- workloads ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Process:
    """A process of a side that each repetition reads the CPU time of."""

    pid: int
    address: str  # where it listens (for the client, its end of the connection to the scheduler)


@dataclass
class Side:
    """One protocol's cluster and client, and the workload's prepared state."""

    protocol: str
    cluster: Any
    client: Any
    workers: list[str]
    state: dict[str, Any] = field(default_factory=dict)
    #: What every worker process saw of the ``--env`` names at start (None: unset).
    worker_env: dict[str, str | None] = field(default_factory=dict)
    #: By role (``scheduler``, ``a``, ``b``, ``client``), the processes whose CPU
    #: time `measure` reports: a ``--netpath`` side's (`benchmarks.dask_netpath`);
    #: none for a LocalCluster.
    processes: dict[str, Process] = field(default_factory=dict)


def _task_count(client: Any) -> int:
    return int(client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)))


def _steady_task_count(client: Any, timeout_s: float = 10.0) -> int:
    """The scheduler's task count once the prepared data's temporaries are
    gone (three equal reads in a row); persisted collections may keep more
    tasks than their partitions (a persisted dataframe keeps its released
    inputs), so this is measured rather than computed."""
    deadline = time.monotonic() + timeout_s
    counts = [_task_count(client)]
    while time.monotonic() < deadline and (len(counts) < 3 or len(set(counts[-3:])) > 1):
        time.sleep(0.05)
        counts.append(_task_count(client))
    return counts[-1]


def _settle(client: Any, keep: int = 0, timeout_s: float = 30.0) -> None:
    """Wait until the scheduler has forgotten the previous repetition's tasks
    (all but ``keep``, the prepared data), so that the next repetition neither
    finds its results still in memory nor pays for their release."""
    deadline = time.monotonic() + timeout_s
    while _task_count(client) > keep:
        if time.monotonic() > deadline:
            print(f"warning: the scheduler still holds more than {keep} tasks after {timeout_s:.0f}s", file=sys.stderr)
            break
        time.sleep(0.02)


def rep_rpc(side: Side, args: argparse.Namespace) -> dict[str, Any]:
    client = side.client

    async def loop(n: int) -> tuple[float, Any]:
        started = time.perf_counter()
        identity = None
        for _ in range(n):
            identity = await client.scheduler.identity()
        return time.perf_counter() - started, identity

    elapsed, identity = client.sync(loop, args.rpc)
    check(identity is not None and identity["type"] == "Scheduler", f"not a scheduler identity: {identity!r}")
    check(identity["address"] == side.cluster.scheduler_address, f"wrong scheduler: {identity['address']}")
    check(sorted(identity["workers"]) == sorted(side.workers), f"wrong workers: {sorted(identity['workers'])}")
    return {"value": args.rpc / elapsed, "elapsed_s": elapsed, "count": args.rpc}


def rep_tasks(side: Side, args: argparse.Namespace) -> dict[str, Any]:
    from distributed import wait

    client, n = side.client, args.tasks
    started = time.perf_counter()
    futures = client.map(inc, range(n), pure=False)
    wait(futures, timeout=args.timeout)
    elapsed = time.perf_counter() - started
    values = client.gather(futures)
    check(len(values) == n and sum(values) == n * (n + 1) // 2, f"wrong results of {n} tasks")
    return {"value": n / elapsed, "elapsed_s": elapsed, "count": n}


def rep_chain(side: Side, args: argparse.Namespace) -> dict[str, Any]:
    client, n = side.client, args.chain
    started = time.perf_counter()
    future = client.submit(inc, 0, workers=[side.workers[0]], allow_other_workers=False, pure=False)
    for i in range(1, n):
        worker = side.workers[i % 2]
        future = client.submit(inc, future, workers=[worker], allow_other_workers=False, pure=False)
    value = future.result(timeout=args.timeout)
    elapsed = time.perf_counter() - started
    check(value == n, f"chain of {n} tasks gave {value}")
    return {"value": elapsed, "hops_per_s": n / elapsed, "count": n}


def prepare_transfer(side: Side, args: argparse.Namespace, rep: int, count: int | None = None) -> None:
    """``count`` (``--transfer-count``) arrays made and kept on worker a, filled with ``first``, ``first + 1``..."""
    from distributed import wait

    source, count = side.workers[0], args.transfer_count if count is None else count
    arrays = [
        side.client.submit(make_array, rep * count + i, args.transfer_size, workers=[source],
                           allow_other_workers=False, pure=False)
        for i in range(count)
    ]  # fmt: skip
    wait(arrays, timeout=args.timeout)
    side.state["arrays"] = arrays
    side.state["first"] = rep * count


def prepare_transfer_cold(side: Side, args: argparse.Namespace, rep: int) -> None:
    prepare_transfer(side, args, rep, args.cold_count)


def _check_checksums(values: Sequence[tuple[tuple[int, ...], float]], first: int, nbytes: int) -> None:
    """Each `checksum` of the arrays `prepare_transfer` made: their shape and sum."""
    n = nbytes // 8
    for i, (shape, total) in enumerate(values):
        check(shape == (n,) and total == float(first + i) * n, f"array {i}: shape {shape}, sum {total}")


def rep_transfer(side: Side, args: argparse.Namespace) -> dict[str, Any]:
    """Retained arrays made on worker a (before the clock starts), one
    consuming task each on worker b: every array crosses a→b once."""
    client, (source, sink) = side.client, side.workers
    arrays, first = side.state.pop("arrays"), side.state.pop("first")
    keys = {str(a.key) for a in arrays}
    reported = host_reported_kib()
    started = time.perf_counter()
    sums = client.map(checksum, arrays, workers=[sink], allow_other_workers=False, pure=False)
    values = client.gather(sums)
    elapsed = time.perf_counter() - started
    reported = _delta_mib(reported, host_reported_kib())
    _check_checksums(values, first, args.transfer_size)
    log = client.run(lambda dask_worker: list(dask_worker.transfer_incoming_log), workers=[sink])[sink]
    mine = [e for e in log if e["who"] == source and keys & {str(k) for k in e["keys"]}]
    received = sum(e["keys"][k] for e in mine for k in e["keys"] if str(k) in keys)
    check(received >= len(arrays) * args.transfer_size, f"worker b logged {received} bytes from a")
    duration = sum(e["duration"] for e in mine)
    return {
        "value": sum(e["total"] for e in mine) / duration / GB if duration > 0 else None,
        "per_transfer_gbps": [e["bandwidth"] / GB for e in mine],
        "wall_gbps": len(keys) * args.transfer_size / elapsed / GB,
        "elapsed_s": elapsed,
        "nbytes": len(keys) * args.transfer_size,
        "transfers": len(mine),
        "host_reported_mib": reported,
    }


def _delta_mib(before_kib: int | None, after_kib: int | None) -> float | None:
    """MiB of free memory handed to the host between two `host_reported_kib`
    readings (None where the kernel does not count them).  A repeat in
    which it is not 0 paid a host round trip for some of its fresh pages."""
    return None if before_kib is None or after_kib is None else (after_kib - before_kib) / 1024


def rep_transfer_cold(side: Side, args: argparse.Namespace) -> dict[str, Any]:
    """On a fresh cluster: one consuming task per array made on worker a,
    all submitted at once to worker b, timed by wall clock until every
    result is gathered.  The client holds the arrays until the clock stops,
    so each one b receives stays in its memory until its task finishes, as a
    real workload's inputs do."""
    client, sink = side.client, side.workers[1]
    arrays, first = side.state.pop("arrays"), side.state.pop("first")
    if args.pretouch:
        client.run(pretouch, len(arrays) * args.transfer_size, workers=[sink])
    before = client.run(usage, workers=[sink])[sink]
    reported = host_reported_kib()
    started = time.perf_counter()
    sums = client.map(checksum, arrays, workers=[sink], allow_other_workers=False, pure=False)
    values = client.gather(sums)
    elapsed = time.perf_counter() - started
    reported = _delta_mib(reported, host_reported_kib())
    after = client.run(usage, workers=[sink])[sink]
    _check_checksums(values, first, args.transfer_size)
    nbytes = len(values) * args.transfer_size
    gib = nbytes / 2**30
    # The receiving worker's costs per GiB received: kernel time is where
    # fresh pages are paid for (see `pretouch`), its page faults say how
    # many, its context switches how often its loop waited.
    per_gib = {f"sink_{name}_per_gib": (after[name] - before[name]) / gib for name in after}
    return {"value": nbytes / elapsed / GB, "elapsed_s": elapsed, "nbytes": nbytes, "count": len(values),
            "worker_env": side.worker_env, "pretouch": args.pretouch, "host_reported_mib": reported,
            **per_gib}  # fmt: skip


def _square(nbytes: int, chunk_nbytes: int) -> tuple[int, int]:
    """(side, chunk side) of a float64 square array of about ``nbytes`` in
    square chunks of about ``chunk_nbytes``."""
    chunk_side = max(1, int(math.sqrt(chunk_nbytes / 8)))
    nchunks = max(1, round(math.sqrt(nbytes / 8) / chunk_side))
    return nchunks * chunk_side, chunk_side


def prepare_full(side: Side, args: argparse.Namespace, rep: int) -> None:
    import dask.array as da
    from distributed import wait

    n, c = _square(args.full_size, args.full_chunk)
    x = side.client.persist(da.random.RandomState(0).random_sample((n, n), chunks=(c, c)))
    wait(x, timeout=args.timeout)
    side.state["x"] = x
    side.state["expected"] = 2 * float(side.client.compute(x.sum()).result(timeout=args.timeout))


def rep_full(side: Side, args: argparse.Namespace) -> dict[str, Any]:
    x = side.state["x"]
    started = time.perf_counter()
    total = side.client.compute((x + x.T).sum()).result(timeout=args.timeout)
    elapsed = time.perf_counter() - started
    expected = side.state["expected"]
    check(math.isclose(total, expected, rel_tol=1e-9), f"(x + x.T).sum() = {total}, expected {expected}")
    return {"value": elapsed, "nbytes": x.nbytes, "shape": list(x.shape)}


def prepare_rechunk(side: Side, args: argparse.Namespace, rep: int) -> None:
    import dask.array as da
    from distributed import wait

    n = max(8, int(math.sqrt(args.rechunk_size / 8)))
    x = side.client.persist(da.random.RandomState(1).random_sample((n, n), chunks=(n, max(1, n // 8))))
    wait(x, timeout=args.timeout)
    side.state["x"] = x
    side.state["expected"] = float(side.client.compute(x.sum()).result(timeout=args.timeout))


def rep_rechunk(side: Side, args: argparse.Namespace) -> dict[str, Any]:
    from distributed import wait

    x = side.state["x"]
    n = x.shape[0]
    y = x.rechunk((max(1, n // 8), n), method="p2p")  # in memory: distributed.p2p.storage.disk is False
    started = time.perf_counter()
    y = side.client.persist(y)
    wait(y, timeout=args.timeout)
    elapsed = time.perf_counter() - started
    check(y.numblocks == (math.ceil(n / max(1, n // 8)), 1), f"rechunked to {y.numblocks} blocks")
    total = float(side.client.compute(y.sum()).result(timeout=args.timeout))
    check(math.isclose(total, side.state["expected"], rel_tol=1e-9), f"sum after rechunk {total}")
    return {"value": elapsed, "nbytes": x.nbytes}


def shuffle_unavailable() -> str | None:
    try:
        import dask.dataframe  # noqa: F401
        import pandas  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError as exc:
        return f"needs pandas and pyarrow ({exc}); pip install pandas pyarrow"
    return None


def prepare_shuffle(side: Side, args: argparse.Namespace, rep: int) -> None:
    import dask.dataframe as dd
    from distributed import wait

    nparts = args.shuffle_partitions
    nrows = args.shuffle_rows // nparts
    df = dd.from_map(make_partition, range(nparts), nrows=nrows, nkeys=args.shuffle_rows)
    df = side.client.persist(df)
    wait(df, timeout=args.timeout)
    side.state["df"] = df
    side.state["rows"] = nrows * nparts
    side.state["value_sum"] = int(side.client.compute(df["value"].sum()).result(timeout=args.timeout))
    side.state["nunique"] = int(side.client.compute(df["key"].nunique()).result(timeout=args.timeout))


def rep_shuffle(side: Side, args: argparse.Namespace) -> dict[str, Any]:
    from distributed import wait

    client, df = side.client, side.state["df"]
    shuffled = df.shuffle("key", shuffle_method="p2p")  # in memory: distributed.p2p.storage.disk is False
    started = time.perf_counter()
    shuffled = client.persist(shuffled)
    wait(shuffled, timeout=args.timeout)
    elapsed = time.perf_counter() - started
    rows = int(client.compute(shuffled.shape[0]).result(timeout=args.timeout))
    check(rows == side.state["rows"], f"{rows} rows after the shuffle, expected {side.state['rows']}")
    value_sum = int(client.compute(shuffled["value"].sum()).result(timeout=args.timeout))
    check(value_sum == side.state["value_sum"], f"value sum {value_sum} after the shuffle")
    # Shuffled on "key": each key in one partition only.
    per_partition = client.compute(shuffled.map_partitions(nunique_keys, meta=(None, "int64")))
    per_partition = per_partition.result(timeout=args.timeout)
    check(int(per_partition.sum()) == side.state["nunique"], "a key landed in more than one partition")
    return {"value": elapsed, "rows": rows}


REPS: dict[str, Callable[[Side, argparse.Namespace], dict[str, Any]]] = {
    "rpc": rep_rpc,
    "tasks": rep_tasks,
    "chain": rep_chain,
    "transfer": rep_transfer,
    "transfer-cold": rep_transfer_cold,
    "full": rep_full,
    "rechunk": rep_rechunk,
    "shuffle": rep_shuffle,
}

#: Untimed set-up: once per workload and side (``rep=-1``), or before every
#: repetition for the transfers (fresh arrays each time, numbered by ``rep``).
PREPARE: dict[str, Callable[[Side, argparse.Namespace, int], None]] = {
    "full": prepare_full,
    "rechunk": prepare_rechunk,
    "shuffle": prepare_shuffle,
}
PREPARE_EACH_REP: dict[str, Callable[[Side, argparse.Namespace, int], None]] = {
    "transfer": prepare_transfer,
    "transfer-cold": prepare_transfer_cold,
}


# -- clusters -------------------------------------------------------------------------------------


def make_security(directory: str) -> Any:
    """A ``Security`` for scheduler, workers and client from a throwaway trustme CA."""
    import trustme
    from distributed.security import Security

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    ca_file, cert_file = f"{directory}/ca.pem", f"{directory}/cert.pem"
    ca.cert_pem.write_to_path(ca_file)
    cert.private_key_and_cert_chain_pem.write_to_path(cert_file)
    return Security(
        tls_ca_file=ca_file,
        tls_client_cert=cert_file,
        tls_scheduler_cert=cert_file,
        tls_worker_cert=cert_file,
        require_encryption=True,
    )


def parse_env(text: str) -> tuple[str, str]:
    """``--env NAME=VALUE`` -> (NAME, VALUE); the value may be empty or hold ``=``."""
    name, sep, value = text.partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise argparse.ArgumentTypeError(f"not NAME=VALUE: {text!r}")
    return name, value


def side_env(protocol: str, args: argparse.Namespace) -> dict[str, str]:
    """``--env`` for a readinto-side cluster, nothing for a baseline's (nor
    for arguments without ``--env``, such as `benchmarks.dask_profile`'s)."""
    return dict(getattr(args, "env", None) or {}) if protocol in READINTO_PROTOCOLS else {}


@contextlib.contextmanager
def environ(env: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` with ``env`` set, as it was again on exit: the
    processes spawned meanwhile (a ``LocalCluster``'s workers, spawned while
    it starts) keep it."""
    saved = environ_of(list(env))
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def check_own_comms(side: Side) -> None:
    """This process's open comms of ``side`` (its client's connection pool,
    and its scheduler's when the scheduler runs here) are all this
    package's on a switched or ``readinto://`` side and all distributed's
    on any other (a mixed side's scheduler and client are stock): a
    repetition ran over the comms its row names (`switchroutes`)."""
    from tornado_readinto.dask.backend import ReadIntoComm

    expect = side.protocol.endswith(SWITCHED) or side.protocol.startswith("readinto")
    pools = [side.client.rpc, getattr(getattr(side.cluster, "scheduler", None), "rpc", None)]
    kinds = {
        (address, type(comm).__name__): isinstance(comm, ReadIntoComm)
        for pool in pools
        if pool is not None
        for by_address in (pool.available, pool.occupied)
        for address, comms in by_address.items()
        for comm in comms
    }
    wrong = sorted(where for where, mine in kinds.items() if mine != expect)
    check(not wrong, f"{side.protocol}: comms of the other kind in this process: {wrong}")


def check_switched(client: Any, on: bool) -> None:
    """Every worker's and the scheduler's listener is the switched class
    (``on``), or none is (`dask_switch.verify`, asked of each process; for
    the scheduler, which runs in this process, its listener's class)."""
    from tornado_readinto.dask import switch as dask_switch

    report = dask_switch.verify(client)
    processes = [report["scheduler"], *report["workers"].values()]
    states = {p.get("listener_switched", False) for p in processes}
    states |= {w["switched"] for w in report["workers"].values()}
    check(states == {on}, f"switched should be {on} in every process: {report}")


@contextlib.contextmanager
def open_side(
    protocol: str,
    security: Any,
    args: argparse.Namespace,
    n_workers: int = 2,
    threads_per_worker: int = 1,
    **cluster_kwargs: Any,
) -> Iterator[Side]:
    """``protocol``'s cluster and client: a ``LocalCluster`` (or, for a mixed
    side, `open_mixed_side`'s ``SpecCluster``) with the scheduler in this
    process; or, in a ``--netpath`` driver, what it sets as ``args.remote_side``:
    ``(protocol, args)`` -> a side whose processes run across its path
    (`benchmarks.dask_netpath.open_side`, which imports this module)."""
    from distributed import Client, LocalCluster

    remote_side = getattr(args, "remote_side", None)
    if remote_side is not None:
        shape = (security, n_workers, threads_per_worker, cluster_kwargs)
        check(shape == (None, 2, 1, {}), f"a --netpath side is two one-thread workers on tcp, not {shape}")
        with remote_side(protocol, args) as side:
            yield side
        return
    kwargs: dict[str, Any] = {"security": security} if security is not None else {}
    env = side_env(protocol, args)
    if protocol in MIXED_ROLES:
        with environ(env), open_mixed_side(protocol, args, n_workers, threads_per_worker, **cluster_kwargs) as side:
            yield side
        return
    scheme = protocol.removesuffix(SWITCHED)
    on = protocol != scheme
    with contextlib.ExitStack() as opened:
        # This process's comms to the side's processes are switched (or
        # not) whenever they are made, until the side closes (`switchroutes`).
        name = opened.enter_context(switchroutes.routes.side(on))
        # LocalCluster starts (and spawns its workers) in __init__, and the
        # client connects in its own: both while the switch (if any) is on.
        with environ(env), switchroutes.routes.start(on):
            cluster = opened.enter_context(
                LocalCluster(
                    protocol=f"{scheme}://",
                    n_workers=n_workers,
                    threads_per_worker=threads_per_worker,
                    processes=True,
                    host="127.0.0.1",
                    dashboard_address=":0",  # None would mean the default port 8787
                    worker_dashboard_address=None,
                    **kwargs,
                    **cluster_kwargs,
                )
            )
            client = opened.enter_context(Client(cluster, timeout="60s", **kwargs))
            client.wait_for_workers(n_workers, timeout=120)
            name(switchroutes.side_addresses(client))
        workers = sorted(client.scheduler_info()["workers"])
        check(all(w.startswith(f"{scheme}://") for w in workers), f"workers not on {scheme}://: {workers}")
        check(client.scheduler.address.startswith(f"{scheme}://"), f"scheduler at {client.scheduler.address}")
        check_switched(client, on)
        yield Side(protocol, cluster, client, workers, worker_env=check_worker_env(client, env, args))


def check_worker_env(client: Any, env: Mapping[str, str], args: argparse.Namespace) -> dict[str, str | None]:
    """What every worker sees of the ``--env`` names (both sides say), checked
    to be the same in all of them and to hold ``env`` (the side's `side_env`)."""
    names = sorted(getattr(args, "env", None) or {})
    seen = list(client.run(environ_of, names).values()) if names else [{}]
    check(all(s == seen[0] for s in seen), f"the workers disagree on {names}: {seen}")
    check(all(seen[0][name] == value for name, value in env.items()), f"--env {env} not in the workers: {seen[0]}")
    return seen[0]


@contextlib.contextmanager
def open_mixed_side(
    protocol: str, args: argparse.Namespace, n_workers: int, threads_per_worker: int, **cluster_kwargs: Any
) -> Iterator[Side]:
    """A `MIXED_ROLES` side: two worker processes on ``tcp://`` under a stock
    scheduler (in this process, as `open_side`'s) and a stock client, the
    worker of the role (if any) switched by its own preload;
    ``Side.workers`` is (source, sink), the switched one in its role's place."""
    from distributed import Client, Nanny, Scheduler, SpecCluster

    from tornado_readinto.dask import switch as dask_switch

    check(n_workers == 2 and not cluster_kwargs, f"a mixed side has two workers, not {n_workers} {cluster_kwargs}")
    role = MIXED_ROLES[protocol]
    worker = {"nthreads": threads_per_worker, "host": "127.0.0.1", "dashboard": False}
    switched_worker = worker if role is None else {**worker, "preload": [dask_switch.PRELOAD]}
    workers = {"plain": {"cls": Nanny, "options": worker}, "other": {"cls": Nanny, "options": switched_worker}}
    scheduler = {"cls": Scheduler, "options": {"protocol": "tcp://", "host": "127.0.0.1", "dashboard_address": ":0"}}
    with SpecCluster(workers=workers, scheduler=scheduler) as cluster, Client(cluster, timeout="60s") as client:
        client.wait_for_workers(2, timeout=120)
        report = dask_switch.verify(client)
        states = {a: (w["switched"], w.get("listener_switched", False)) for a, w in report["workers"].items()}
        switched = [a for a, state in states.items() if state == (True, True)]
        plain = [a for a, state in states.items() if state == (False, False)]
        expected = (0, 2) if role is None else (1, 1)
        check((len(switched), len(plain)) == expected, f"{protocol}: not {expected} switched, stock workers: {report}")
        check(not report["scheduler"].get("listener_switched", False), f"{protocol}: a switched scheduler: {report}")
        roles = sorted(plain) if role is None else [*plain, *plain]
        if role is not None:
            roles[role] = switched[0]
        yield Side(protocol, cluster, client, roles)


def run_alternating(
    name: str,
    protocols: Sequence[str],
    args: argparse.Namespace,
    rep: Callable[[int, int, int], dict[str, Any]],
    record: Callable[[int, int, dict[str, Any]], str],
    fail: Callable[[int, str], None],
    progress: Callable[[str], None],
    failed: set[int] | None = None,
) -> None:
    """``--warmup`` untimed repetitions per protocol, then ``--repeat`` timed
    ones, the protocols alternating (`harness.alternation`): ``rep(side,
    repetition, n)`` measures (repetition < 0: warm-up), ``record(side,
    repetition, measured)`` keeps it and says its figures; an exception
    fails that side (``fail(side, why)``), which then runs no more (nor
    do the sides in ``failed`` at the start)."""
    plan = [(-1 - w, s) for w in range(args.warmup) for s in range(len(protocols))]
    plan += h.alternation(args.repeat, len(protocols))
    failed = set() if failed is None else set(failed)
    for n, (repetition, i) in enumerate(plan, 1):
        if i in failed:
            continue
        started = time.perf_counter()
        try:
            measured = rep(i, repetition, n)
        except Exception as exc:  # noqa: BLE001 - recorded, fails the run
            failed.add(i)
            fail(i, f"{type(exc).__name__}: {exc}")
            progress(f"{name} {protocols[i]}: FAILED {type(exc).__name__}: {exc}")
            continue
        figures = record(i, repetition, measured)
        label = f"rep {repetition + 1}/{args.repeat}" if repetition >= 0 else "warm-up"
        elapsed = time.perf_counter() - started
        progress(f"[{n}/{len(plan)}] {name:<8} {protocols[i]:<12} {label:<10} {figures} ({elapsed:.1f}s)")


def run_busy_worker(
    protocols: Sequence[str], security: Any, args: argparse.Namespace, progress: Callable[[str], None]
) -> list[Any]:
    """Every variant in turn, each with its own alternation of the protocols
    (fresh clusters every repetition)."""
    baseline = protocols[0]
    out: list[Any] = []
    for shape, interval_s in busy.variants(args):
        variant = busy.variant_name(shape, interval_s)
        rows = [busy.row_name(row, variant) for row in busy.BUSY_ROWS]
        results = {(row, p): DaskResult(row, p, baseline) for p in protocols for row in rows}
        config = busy.worker_config(interval_s)

        def rep(i: int, repetition: int, n: int, shape: str = shape, interval_s: float | None = interval_s,
                config: dict[str, Any] | None = config) -> dict[str, Any]:  # fmt: skip
            kwargs = {} if config is None else {"config": config}
            with open_side(protocols[i], security, args, n_workers=1, threads_per_worker=BUSY_WORKER_THREADS,
                           **kwargs) as side:  # fmt: skip
                return busy.rep_busy_worker(side, args, n, shape, interval_s)

        def record(i: int, repetition: int, measured: dict[str, Any], rows: list[str] = rows,
                   results: dict[Any, Any] = results) -> str:  # fmt: skip
            if repetition >= 0:
                for row, base in zip(rows, busy.BUSY_ROWS):
                    results[row, protocols[i]].repeats.append(measured[base])
            rpc = measured["busy-worker-rpc"]
            return (
                f"{h.format_rate(rpc['value'])} RPC/s ({rpc['switches_per_rpc']:.1f} switches/RPC),"
                f" fetch {h.format_seconds(measured['busy-worker-fetch']['value'])},"
                f" latency {h.format_seconds(measured['busy-worker-latency']['value'])},"
                f" heartbeat {busy.format_delay(measured['busy-worker-heartbeat']['value'])}"
            )

        def fail(i: int, why: str, rows: list[str] = rows, results: dict[Any, Any] = results) -> None:
            for row in rows:
                results[row, protocols[i]].error = why

        run_alternating(f"busy-worker {variant}", protocols, args, rep, record, fail, progress)
        out += [results[row, p] for row in rows for p in protocols]
    return out


def measure(workload: str, side: Side, args: argparse.Namespace, repetition: int) -> dict[str, Any]:
    """One repetition of ``workload`` on ``side``: its untimed set-up, if it
    has one per repetition, then its rep function (`REPS`)."""
    if workload in PREPARE_EACH_REP:
        PREPARE_EACH_REP[workload](side, args, repetition + args.warmup)
    if not side.processes:
        measured = REPS[workload](side, args)
        check_own_comms(side)
        return measured
    before = {role: h.process_cpu_s(p.pid) for role, p in side.processes.items()}
    measured = REPS[workload](side, args)
    after = {role: h.process_cpu_s(p.pid) for role, p in side.processes.items()}
    check_own_comms(side)
    cpu_s: dict[str, float | None] = {}
    for role, start in before.items():
        end = after[role]
        cpu_s[role] = None if start is None or end is None else end - start
    addresses = {role: p.address for role, p in side.processes.items()}
    return {**measured, **cpu_figures(workload, measured, cpu_s), "addresses": addresses}


def cpu_figures(workload: str, measured: dict[str, Any], cpu_s: Mapping[str, float | None]) -> dict[str, Any]:
    """``cpu_s`` (CPU seconds by role over a repetition's timed part) and the
    CPU of the two ends of the workload's bytes per unit of work
    (`CPU_METRICS`): scheduler and client per RPC, workers a and b per GB
    moved; None where a process could not be read."""
    ends = ("scheduler", "client") if workload == "rpc" else ("a", "b")
    spent = [cpu_s.get(role) for role in ends]
    total = None if None in spent else sum(s for s in spent if s is not None)
    units = measured["count"] / 1e6 if workload == "rpc" else measured["nbytes"] / GB
    return {"cpu_s": dict(cpu_s), CPU_METRICS[workload][0]: None if total is None else total / units}


def keep_in(
    results: Sequence[DaskResult],
) -> tuple[Callable[[int, int, dict[str, Any]], str], Callable[[int, str], None]]:
    """`run_alternating`'s ``record`` and ``fail`` for a workload of one row
    per protocol: the timed repeats and the error go to ``results[i]``."""

    def record(i: int, repetition: int, measured: dict[str, Any]) -> str:
        if repetition >= 0:
            results[i].repeats.append(measured)
        return f"{results[i].metric.fmt(measured['value'])} {results[i].metric.label}"

    def fail(i: int, why: str) -> None:
        results[i].error = why

    return record, fail


def run_workload(
    workload: str, sides: Sequence[Side], baseline: str, args: argparse.Namespace, progress: Callable[[str], None]
) -> list[DaskResult]:
    """``workload`` on the shared clusters ``sides``."""
    results = [DaskResult(workload, side.protocol, baseline) for side in sides]
    record, fail = keep_in(results)
    failed: set[int] = set()

    def rep(i: int, repetition: int, n: int) -> dict[str, Any]:
        measured = measure(workload, sides[i], args, repetition)
        _settle(sides[i].client, sides[i].state.get("keep", 0))
        return measured

    try:
        for i, side in enumerate(sides):
            if workload in PREPARE:
                try:
                    PREPARE[workload](side, args, -1)
                    side.state["keep"] = _steady_task_count(side.client)
                except Exception as exc:  # noqa: BLE001 - recorded, fails the run
                    failed.add(i)
                    fail(i, f"preparing: {type(exc).__name__}: {exc}")
                    progress(f"{workload} {side.protocol}: FAILED {results[i].error}")
        protocols = [side.protocol for side in sides]
        run_alternating(workload, protocols, args, rep, record, fail, progress, failed)
    finally:
        for side in sides:
            side.state.clear()
            with contextlib.suppress(Exception):
                _settle(side.client, 0, 10)
    return results


def run_fresh_workload(
    workload: str, protocols: Sequence[str], security: Any, args: argparse.Namespace, progress: Callable[[str], None]
) -> list[DaskResult]:
    """``workload`` on a fresh cluster of `open_side`'s shape for every
    repetition, warm-ups included; starting and closing it is not timed.
    The pseudo-protocol `BARE_FETCH` (``--floor``) runs
    `benchmarks.harness.barefetch` instead, in the same alternation."""
    results = [DaskResult(workload, p, protocols[0]) for p in protocols]

    def rep(i: int, repetition: int, n: int) -> dict[str, Any]:
        if protocols[i] == BARE_FETCH:
            return barefetch.run(args.cold_count, args.transfer_size, args.pretouch, args.timeout)
        with open_side(protocols[i], security, args) as side:
            return measure(workload, side, args, repetition)

    run_alternating(workload, protocols, args, rep, *keep_in(results), progress)
    return results


def run_user_workload(
    workload: str, pair: str, args: argparse.Namespace, progress: Callable[[str], None]
) -> list[DaskResult]:
    """A `benchmarks.dask_users` workload: stock against the README's block,
    each repetition a fresh driver process, alternating; then
    ``--user-profile`` sampled repetitions per side for the comm's share of
    the CPU (`users.comm_share`), recorded in each result's ``extra``."""
    scheme = users.PAIRS[pair]
    protocols = (scheme, scheme + SWITCHED)
    results = [DaskResult(workload, p, scheme) for p in protocols]

    def rep(i: int, repetition: int, n: int) -> dict[str, Any]:
        time.sleep(args.user_settle)  # (see --user-settle: the freed memory's state the same for both sides)
        return users.run_driver(users.spec_of(workload, scheme, i == 1, args), args.timeout)

    run_alternating(workload, protocols, args, rep, *keep_in(results), progress)
    for _, i in h.alternation(args.user_profile, 2):
        if not results[i].ok:
            continue
        try:
            measured = users.run_driver(users.spec_of(workload, scheme, i == 1, args, profile=True), args.timeout)
        except Exception as exc:  # noqa: BLE001 - recorded: the share is then unknown
            results[i].extra["profile_error"] = f"{type(exc).__name__}: {exc}"
            continue
        results[i].extra.setdefault("profiles", []).append({"samples": measured["samples"], "cpu_s": measured["cpu_s"]})
        share = users.comm_share(measured["samples"])
        progress(f"{workload} {protocols[i]}: sampled, comm share {'-' if share is None else f'{share:.0%}'}")
    for r in results:
        samples = [p["samples"] for p in r.extra.get("profiles", [])]
        merged: dict[str, Counter[str]] = {}
        for by_role in samples:
            for role, counts in by_role.items():
                merged.setdefault(role, Counter()).update(counts)
        r.extra["comm_share"] = users.comm_share(merged) if merged else None
    return results


def user_cpu(r: DaskResult) -> list[float]:
    """Per repetition of a `users.WORKLOADS` row: CPU seconds of the
    processes that matter (µs per task of the scheduler for scheduler-scale)."""
    if r.workload == "scheduler-scale":
        return [x for x in r.values("scheduler_us_per_task") if x is not None]
    spent = [rep.get("cpu_s") or {} for rep in r.repeats]
    return [sum(v for v in by_role.values() if v is not None) for by_role in spent if by_role]


def _user_cpu_cell(results: Sequence[DaskResult], r: DaskResult) -> str:
    values = user_cpu(r) if r.workload in users.WORKLOADS else []
    if not values:
        return ""
    unit = "us/task" if r.workload == "scheduler-scale" else "CPU s"
    share = r.extra.get("comm_share")
    return f"{h.format_spread(values, h.format_number)} {unit}" + ("" if share is None else f", comm {share:.0%}")


# -- the suite ------------------------------------------------------------------------------------


def run_clusters(args: argparse.Namespace, progress: Callable[[str], None]) -> list[DaskResult]:
    """Every pair's workloads: the shared clusters first, then the fresh ones of each
    `FRESH_CLUSTER_WORKLOADS` workload."""
    import dask

    results: list[DaskResult] = []
    config = {
        "distributed.admin.event-loop": args.event_loop,
        "distributed.p2p.storage.disk": False,
        "distributed.comm.timeouts.connect": "60s",
    }
    if args.busy_poll is not None:
        # Only this package's backend reads the key: the baseline is unaffected.
        config["distributed.comm.readinto.busy-poll"] = args.busy_poll
    with dask.config.set(config), tempfile.TemporaryDirectory(prefix="bench-dask-") as tmp:
        for pair in args.pair:
            first = len(results)
            results += _run_pair(pair, args, tmp, progress)
            for result in results[first:]:
                result.pair = pair
    return results


def _run_pair(pair: str, args: argparse.Namespace, tmp: str, progress: Callable[[str], None]) -> list[DaskResult]:
    """One ``--pair``'s workloads."""
    results: list[DaskResult] = []
    baseline, readinto = PAIRS[pair]
    workloads = [w for w in args.workload if w in PAIR_WORKLOADS[pair]]
    if not workloads:
        return results
    security = make_security(tmp) if baseline == "tls" else None
    runnable = []
    for workload in workloads:
        reason = shuffle_unavailable() if workload in ("shuffle", "p2p-shuffle") else None
        if reason is not None:
            results += [
                DaskResult(row, p, baseline, skipped=reason) for row in ROWS[workload] for p in (baseline, readinto)
            ]
        else:
            runnable.append(workload)
    shared = [w for w in runnable if w not in FRESH_CLUSTER_WORKLOADS and w not in users.WORKLOADS]
    if shared:
        started = time.perf_counter()
        with open_side(baseline, security, args) as a, open_side(readinto, security, args) as b:
            progress(f"{pair} pair: clusters up in {time.perf_counter() - started:.1f}s")
            for workload in shared:
                results += run_workload(workload, (a, b), baseline, args, progress)
    for workload in (w for w in runnable if w in users.WORKLOADS):  # fresh driver processes (`benchmarks.dask_users`)
        results += run_user_workload(workload, pair, args, progress)
    for workload in (w for w in runnable if w in FRESH_CLUSTER_WORKLOADS):  # the shared ones are gone
        if workload == "busy-worker":
            results += run_busy_worker((baseline, readinto), security, args, progress)
        else:
            floor = (BARE_FETCH,) if workload == "transfer-cold" and getattr(args, "floor", False) else ()
            results += run_fresh_workload(workload, (baseline, readinto, *floor), security, args, progress)
    return results


def _difference_cell(results: Sequence[DaskResult], r: DaskResult) -> str:
    d = difference(results, r)
    return "" if d is None else ("+" if d >= 0 else "-") + r.metric.fmt(abs(d))


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _cpu_cell(results: Sequence[DaskResult], r: DaskResult) -> str:
    """The CPU per unit of work, median (min-max), with its unit; blank without one."""
    key = cpu_metric(r)
    return "" if key is None else f"{h.format_spread(r.values(key), h.format_number)} {CPU_METRICS[r.workload][1]}"


def _switches_cell(r: DaskResult) -> str:
    """The busy worker's loop-thread voluntary context switches per RPC (median), or blank."""
    median = r.median("switches_per_rpc") if r.repeats else None
    return "" if median is None else f"{median:.1f}"


class DaskSuite(h.TableSuite[str, DaskResult]):
    name = "dask"
    summary = "end-to-end dask.distributed workloads on real clusters: readinto:// vs tcp://, readinto-tls:// vs tls://"
    description = __doc__ or ""
    result_type = DaskResult
    summaries = ("value",)
    repeat_default = 5
    rounds = False  # the protocols alternate repetition by repetition instead
    what = "workload"
    ratios = (h.Ratio("x baseline", "x_baseline", lambda results, r: h.one(ratio(results, r))),)
    columns = (
        h.field("workload", lambda r: r.workload),
        h.field("protocol", lambda r: r.protocol),
        h.field("metric", lambda r: r.metric.label),
        h.Column("median (min-max)", lambda results, r: h.format_spread(r.values("value"), r.metric.fmt)),
        h.Column("switches/RPC", lambda results, r: _switches_cell(r)),
        h.Column("- baseline", _difference_cell),
    )

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--workload",
            type=h.csv(h.choice("workload", WORKLOADS)),
            help=f"comma list (default: all but those users run ({','.join(users.WORKLOADS)}, which run on the"
            f" switch pairs only: alone, their default pairs are switch,switch-tls); with --netpath"
            f" {','.join(NETPATH_WORKLOADS)};"
            f" the tls pair runs {','.join(PAIR_WORKLOADS['tls'])})",
        )
        p.add_argument(
            "--pair",
            type=h.csv(h.choice("pair", PAIRS)),
            help="protocol pairs: tcp (tcp:// vs readinto://), tls (tls:// vs readinto-tls://), switch"
            " (stock tcp:// vs tcp:// with the switch on in every process), switch-tls (the same for tls://),"
            " switch-sink / switch-source (a stock scheduler and client with only the fetching / the serving worker"
            " switched, against the same cluster with neither switched, tcp+spec: transfers between a switched"
            f" and a stock process); default tcp,tls (with --netpath {','.join(NETPATH_DEFAULT_PAIRS)})",
        )
        netpath.add_argument(p)
        p.add_argument("--warmup", type=int, default=1, help="untimed repeats per protocol first (default: 1)")
        p.add_argument("--rpc", type=h.positive_int, default=2000, help="RPC round trips per repeat (default: 2000)")
        p.add_argument("--tasks", type=h.positive_int, default=20_000, help="trivial tasks per repeat (default: 20000)")
        p.add_argument(
            "--chain", type=h.positive_int, default=1000, help="tasks in the dependent chain (default: 1000)"
        )
        p.add_argument(
            "--transfer-size",
            type=h.parse_size,
            default=h.parse_size("64MiB"),
            help="bytes per transferred array (default: 64MiB)",
        )
        p.add_argument("--transfer-count", type=h.positive_int, default=8, help="arrays per repeat (default: 8)")
        p.add_argument(
            "--cold-count",
            type=h.positive_int,
            default=16,
            help="transfer-cold: arrays of --transfer-size per repeat, on a fresh cluster (default: 16)",
        )
        p.add_argument(
            "--pretouch",
            action="store_true",
            help="transfer-cold: the receiving worker first makes as much fresh memory resident and frees it"
            " (untimed, both protocols), so that a VM's page provisioning does not decide the time",
        )
        p.add_argument(
            "--floor",
            action="store_true",
            help=f"transfer-cold: also a {BARE_FETCH} row, the same fetches with no dask and no comm (a blocking"
            " recv_into over plain TCP): this machine's floor for the workload",
        )
        p.add_argument(
            "--full-size",
            type=h.parse_size,
            default=h.parse_size("1GiB"),
            help="the (x + x.T).sum() array, about (default: 1GiB)",
        )
        p.add_argument(
            "--full-chunk", type=h.parse_size, default=h.parse_size("64MiB"), help="its chunks, about (default: 64MiB)"
        )
        p.add_argument(
            "--rechunk-size",
            type=h.parse_size,
            default=h.parse_size("256MiB"),
            help="the P2P-rechunked array, about (default: 256MiB)",
        )
        p.add_argument(
            "--shuffle-rows", type=h.positive_int, default=2_000_000, help="rows shuffled (default: 2000000)"
        )
        p.add_argument("--shuffle-partitions", type=h.positive_int, default=16, help="partitions (default: 16)")
        p.add_argument(
            "--busy-rpc",
            type=h.positive_int,
            default=100,
            help="busy-worker: direct RPCs to the busy worker per repeat (default: 100)",
        )
        p.add_argument(
            "--busy-size",
            type=h.parse_size,
            default=h.parse_size("64MiB"),
            help="busy-worker: bytes of the array fetched from it (default: 64MiB)",
        )
        busy.add_arguments(p)
        p.add_argument(
            "--event-loop",
            choices=("asyncio", "tornado", "uvloop"),
            default="tornado",
            help="distributed.admin.event-loop for every process (default: tornado, dask's default)",
        )
        p.add_argument(
            "--busy-poll",
            metavar="DURATION",
            help="distributed.comm.readinto.busy-poll for the readinto side, e.g. 0 or 100us (default: the package's)",
        )
        p.add_argument(
            "--env",
            type=parse_env,
            action="append",
            metavar="NAME=VALUE",
            help="set NAME in the environment the readinto side's worker processes start with, in every cluster;"
            " repeatable; e.g. TORNADO_READINTO_HOLD_GIL=0 or TORNADO_READINTO_NO_EXTENSIONS=1 (the scheduler and"
            " the client share this process, which keeps its own)",
        )
        p.add_argument(
            "--user-shuffle-days", type=h.positive_int, default=240,
            help="p2p-shuffle: days of dask.datasets.timeseries at 1 row/s (default: 240, about 1 GB)",
        )  # fmt: skip
        p.add_argument(
            "--user-shuffle-partitions", type=h.positive_int, default=48, help="p2p-shuffle: partitions (default: 48)"
        )
        p.add_argument(
            "--user-rechunk-size", type=h.parse_size, default=h.parse_size("1GiB"),
            help="p2p-rechunk: the array, about (default: 1GiB), 8 row strips to 8 column strips",
        )  # fmt: skip
        p.add_argument(
            "--user-arrays", type=h.positive_int, default=8,
            help="gather, scatter: arrays of --transfer-size per repeat (default: 8)",
        )  # fmt: skip
        p.add_argument(
            "--scale-workers", type=h.positive_int, default=64, help="scheduler-scale: workers (default: 64)"
        )
        p.add_argument(
            "--scale-processes", type=h.positive_int, default=1,
            help="scheduler-scale: the processes the workers run in (default: 1)",
        )  # fmt: skip
        p.add_argument(
            "--scale-tasks", type=h.positive_int, default=10_000, help="scheduler-scale: tiny tasks (default: 10000)"
        )
        p.add_argument(
            "--user-profile", type=int, default=1,
            help="p2p-shuffle ... scheduler-scale: sampled (untimed) repeats per side for the comm's share of the"
            " CPU, with py-spy (default: 1; 0: none)",
        )  # fmt: skip
        p.add_argument(
            "--user-settle", type=float, default=5.0,
            help="p2p-shuffle ... scheduler-scale: seconds of pause before each fresh driver (default: 5), so that"
            " memory freed by the last repetition's processes is in the same state for both sides: a VM guest may"
            " hand free memory back to its host after about 2 s (virtio-balloon free page reporting), and the"
            " next first touch of it then costs far more; back to back, that cost follows the gap since the last"
            " repetition",
        )  # fmt: skip
        p.add_argument("--timeout", type=float, default=300.0, help="seconds per repeat before it fails (default: 300)")

    def check_arguments(self, args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
        if args.warmup < 0:
            p.error("--warmup must be >= 0")
        if args.transfer_size < 8 or args.full_size < 8 or args.rechunk_size < 64 or args.busy_size < 8:
            p.error("sizes too small")
        args.env = dict(args.env or ())
        if args.user_settle < 0:
            p.error("--user-settle must be >= 0")
        if args.user_profile < 0 or args.scale_processes > args.scale_workers:
            p.error("--user-profile must be >= 0 and --scale-processes at most --scale-workers")
        if args.netpath is None:
            # The workloads users run compare stock with the README's block: the switch pairs.
            only_users = bool(args.workload) and set(args.workload) <= set(users.WORKLOADS)
            args.workload = args.workload or list(DEFAULT_WORKLOADS)
            args.pair = args.pair or (["switch", "switch-tls"] if only_users else ["tcp", "tls"])
            return
        args.workload = args.workload or list(NETPATH_WORKLOADS)
        args.pair = args.pair or list(NETPATH_DEFAULT_PAIRS)
        for what, given, runnable, why in (
            ("workload", args.workload, NETPATH_WORKLOADS, "the others' bytes do not go one way across a path"),
            ("pair", args.pair, NETPATH_PAIRS, "the TLS pairs' throwaway certificate names 127.0.0.1"),
        ):
            refused = [name for name in given if name not in runnable]
            if refused:
                p.error(f"--netpath runs the {what}s {', '.join(runnable)} only, not {', '.join(refused)}: {why}")
        netpath.check_argument(args, p)

    def unavailable(self, args: argparse.Namespace) -> str | None:
        return None if args.netpath is None else netpath.refusal(args)

    def run_cases(self, args: argparse.Namespace) -> list[DaskResult]:
        # P2P logs every shuffle's start and end at WARNING from the scheduler (in
        # this process): one pair per rechunk/shuffle repetition, not news.
        logging.getLogger("distributed.shuffle._scheduler_plugin").setLevel(logging.ERROR)
        if args.netpath is not None:
            return self.run_paths(args, _progress)
        return run_clusters(args, _progress)

    def run_paths(self, args: argparse.Namespace, progress: Callable[[str], None]) -> list[DaskResult]:
        """``--netpath``: every pair's workloads across each path, by a driver
        process there.  `benchmarks.dask_netpath`'s suite does it (the one
        ``python -m benchmarks dask`` and ``python -m benchmarks.dask`` run);
        this module, below it, cannot.

        :raises CaseFailed: always.
        """
        raise h.CaseFailed("--netpath runs from benchmarks.dask_netpath.SUITE (python -m benchmarks dask)")

    def legend(self, nrepeats: int) -> str:
        repeats = f"{nrepeats} repeats" if nrepeats else "the repeats"
        return (
            f"median (min-max) over {repeats}, protocols alternating; x baseline: readinto's median over"
            " tcp's (tls's for readinto-tls)\nin the same workload, inverted for times, so >1 means readinto"
            " is faster.\n- baseline: for the heartbeat delay, which can be zero or negative, readinto's median minus"
            " its baseline's instead of a ratio.\nWith --netpath: path: loopback, or mtuN (a veth pair of MTU N between"
            " two network namespaces), @RATE: tc tbf on both ends;\nCPU: the CPU time of the two ends of the"
            " bytes (scheduler + client per RPC, workers a + b per GB moved), from /proc;\nCPU x base: the"
            " baseline's CPU over readinto's (>1: readinto spends less)."
        )

    def label(self, r: DaskResult) -> str:
        return f"{r.workload} {r.protocol}" + (f" over {r.path}" if r.path != netpath.LOOPBACK.name else "")

    def group(self, r: DaskResult) -> Hashable:
        return (r.workload, r.baseline, r.path)

    def skip_label(self, r: DaskResult) -> str:
        return r.workload

    def describe(self, r: DaskResult) -> dict[str, Any]:
        cpu = cpu_metric(r)
        return {"metric": r.metric.label, "higher_is_better": r.metric.higher_is_better,
                "compared_by": "difference" if r.metric.by_difference else "ratio",
                **({cpu: r.summary(cpu)} if cpu else {})}  # fmt: skip

    def table_columns(self, results: Sequence[DaskResult]) -> Sequence[h.Column[DaskResult]]:
        """With ``--netpath``: the path (off loopback) and the CPU per unit of work, and its ratio."""
        columns = netpath.with_column(self.columns, results, after="protocol")
        if any(r.workload in users.WORKLOADS for r in results):
            columns = [*columns, h.Column("CPU (share in the comm)", _user_cpu_cell)]
        if not any(cpu_metric(r) for r in results):
            return columns
        return [
            *columns,
            h.Column("CPU", _cpu_cell),
            h.Column("CPU x base", lambda rs, r: h.format_ratio(cpu_ratio(rs, r))),
        ]

    def meta(self, args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
        return {
            **super().meta(args, argv),
            "n_workers": 2,
            "threads_per_worker": 1,
            "warmup": args.warmup,
            "event_loop": args.event_loop,
            "busy_poll": args.busy_poll,
            "pretouch": args.pretouch,
            "floor": getattr(args, "floor", False),
            "env": args.env,  # --env: set in the readinto side's worker processes only
            "sizes": {
                "rpc": args.rpc,
                "tasks": args.tasks,
                "chain": args.chain,
                "transfer": f"{args.transfer_count} x {h.format_size(args.transfer_size)}",
                "transfer_cold": f"{args.cold_count} x {h.format_size(args.transfer_size)}",
                "full": h.format_size(args.full_size),
                "full_chunk": h.format_size(args.full_chunk),
                "rechunk": h.format_size(args.rechunk_size),
                "shuffle_rows": args.shuffle_rows,
                "busy_rpc": args.busy_rpc,
                "busy_size": h.format_size(args.busy_size),
                "busy_tasks": args.busy_tasks,
                "busy_heartbeats": args.busy_heartbeats,
                "user_shuffle": f"{args.user_shuffle_days} days at 1 row/s, {args.user_shuffle_partitions} partitions",
                "user_rechunk": h.format_size(args.user_rechunk_size),
                "user_arrays": f"{args.user_arrays} x {h.format_size(args.transfer_size)}",
                "scheduler_scale": f"{args.scale_workers} workers in {args.scale_processes} processes,"
                f" {args.scale_tasks} tasks",
            },
            "user_workloads": {
                "fresh_processes": True,
                "n_workers": 2,
                "threads_per_worker": 1,
                "switched_by": users.readme_switch_environment(),
                "profile_repeats": args.user_profile,
                "settle_s": args.user_settle,
            },
            "busy_shapes": args.busy_shape,
            "switch_intervals": args.switch_interval,
            "busy_count": args.busy_count,
            "busy_worker": {"n_workers": 1, "threads_per_worker": BUSY_WORKER_THREADS, "fresh_cluster": True},
            "transfer_cold": {"n_workers": 2, "threads_per_worker": 1, "fresh_cluster": True},
            "netpath": None if args.netpath is None else [spec.name for spec in args.netpath],
            "netpath_processes": None if args.netpath is None else NETPATH_PROCESSES,
        }

    def plot(self, results: Sequence[DaskResult], path: str) -> None:
        """One panel per workload and pair: a bar per protocol (median, min-max
        whiskers), the ratio in the title."""
        ok = [r for r in results if r.ok]
        panels = list(dict.fromkeys((r.workload, r.baseline, r.path) for r in ok))
        ncols = min(4, max(1, len(panels)))
        nrows = max(1, math.ceil(len(panels) / ncols))
        colours = {"tcp": "tab:gray", "tls": "tab:gray", "readinto": "tab:blue", "readinto-tls": "tab:blue"}
        with plots.figure(path, nrows, ncols, (3.4 * ncols, 3.2 * nrows)) as (fig, axes):
            for ax in axes.flat[len(panels) :]:
                ax.axis("off")
            for ax, (workload, baseline, path) in zip(axes.flat, panels):
                group = [r for r in ok if (r.workload, r.baseline, r.path) == (workload, baseline, path)]
                for x, r in enumerate(group):
                    plots.bars(ax, [(x, r)], "value", 0.8, color=colours.get(r.protocol, "tab:orange"))
                ax.set_xticks(range(len(group)))
                ax.set_xticklabels([r.protocol for r in group])
                ratios = [ratio(results, r) for r in group]
                title = workload + (f" over {path}" if path != netpath.LOOPBACK.name else "")
                ax.set_title(title + "".join(f"  {x:.2f}x" for x in ratios if x is not None))
                metric = metric_of(workload)
                ax.set_ylabel(metric.label + ("" if metric.higher_is_better else " (lower is better)"))
                ax.grid(axis="y", alpha=0.3)
            if not panels:
                plots.no_results(axes[0][0])


SUITE = DaskSuite()


if __name__ == "__main__":
    # The suite with --netpath (benchmarks.dask_netpath imports this module;
    # this module imports it only when run as a command).
    from benchmarks.dask_netpath import SUITE as _SUITE

    sys.exit(_SUITE.main())
