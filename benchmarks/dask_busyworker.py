"""The ``busy-worker`` workload of ``python -m benchmarks dask``: a dask
worker whose two threads compute while the client talks to it.

One *variant* is a task shape (`benchmarks.dask_busy.SHAPES`) and, with
``--switch-interval``, the worker's switch interval.  Every repetition of a
variant starts a fresh ``LocalCluster(n_workers=1, threads_per_worker=2)``
of the protocol whose turn it is (the protocols alternate), then:

1. makes the ``--busy-size`` array on the worker (untimed);
2. sets the switch interval where asked: for ``readinto://`` through the
   worker's dask config (``distributed.comm.readinto.switch-interval``, as a
   user opts in; the Nanny passes it to the worker process), for ``tcp://``
   with ``sys.setswitchinterval`` through ``client.run``; checked in both;
3. with one spinner task running (one thread busy, one free): ``--busy-tasks``
   trivial tasks one after another, each timed from submit to result
   (*task latency*);
4. with both threads spinning: ``--busy-rpc`` direct RPCs (``identity``) to
   the worker (*RPC/s*), counting the worker's event-loop thread's context
   switches from ``/proc`` around them (*switches per RPC*), and with
   ``--busy-count`` its GIL-releasing calls by origin
   (`tornado_readinto.diagnostics.gilcount.ReleaseCounter`: a profile hook that slows the
   loop thread, so such a run's times are not results);
5. waits for ``--busy-heartbeats`` heartbeats of the worker at the scheduler
   (in this process) and reports how much later than the worker's own
   interval they came (*heartbeat delay*, median);
6. fetches the array (*fetch time*);
7. stops the spinners; their rounds per second, summed, are the *busy-task
   throughput*.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks import harness as h
from benchmarks.harness import check
from tornado_readinto.diagnostics.gilcount import thread_switches

#: The busy worker: one worker process, two threads.
BUSY_WORKER_THREADS = 2

#: Rows of one variant, in table order (suffixed with ``[variant]``).
BUSY_ROWS = ("busy-worker-rpc", "busy-worker-fetch", "busy-worker-task", "busy-worker-latency",
             "busy-worker-heartbeat")  # fmt: skip

#: The dask config key the readinto backend reads (see tornado_readinto.dask.backend).
SWITCH_INTERVAL_KEY = "distributed.comm.readinto.switch-interval"


def variant_name(shape: str, interval_s: float | None) -> str:
    """``arith`` or ``arith@1ms``."""
    return shape if interval_s is None else f"{shape}@{format_interval(interval_s)}"


def format_interval(seconds: float) -> str:
    us = round(seconds * 1e6)
    return f"{us // 1000}ms" if us % 1000 == 0 else f"{us}us"


def row_name(row: str, variant: str) -> str:
    return f"{row}[{variant}]"


def base_row(name: str) -> str:
    """``busy-worker-rpc[arith@1ms]`` -> ``busy-worker-rpc``."""
    return name.split("[", 1)[0]


def variants(args: argparse.Namespace) -> list[tuple[str, float | None]]:
    intervals: list[float | None] = list(args.switch_interval) if args.switch_interval else [None]
    return [(shape, interval) for interval in intervals for shape in args.busy_shape]


def worker_config(interval_s: float | None) -> dict[str, Any] | None:
    """The whole dask config for the worker processes (the Nanny merges it
    shallowly over its own), with the opt-in key set; None without one."""
    if interval_s is None:
        return None
    import dask
    import distributed  # noqa: F401 - its defaults join dask's config on import; the workers need them

    opt_in = {"switch-interval": f"{interval_s * 1e6:.0f}us"}
    return dask.config.merge(dask.config.config, {"distributed": {"comm": {"readinto": opt_in}}})


def _wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout_s:.0f}s")
        time.sleep(0.01)


def _heartbeat_gaps(scheduler: Any, worker: str, count: int, timeout_s: float) -> list[float]:
    """Seconds between ``count + 1`` consecutive heartbeats of ``worker`` as
    the scheduler (in this process) recorded their arrivals (``last_seen``,
    polled every 5 ms; the first is the last one before the call)."""
    seen: list[float] = []
    deadline = time.monotonic() + timeout_s
    while len(seen) < count + 1:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(seen)} heartbeats of {count + 1} within {timeout_s:.0f}s")
        ws = scheduler.workers.get(worker)
        last = None if ws is None else ws.last_seen
        if last is not None and (not seen or last != seen[-1]):
            seen.append(last)
        time.sleep(0.005)
    return [b - a for a, b in zip(seen, seen[1:])]


def rep_busy_worker(
    side: Any, args: argparse.Namespace, fill: int, shape: str, interval_s: float | None
) -> dict[str, dict[str, Any]]:
    """One repetition of one variant on a fresh one-worker cluster (see the
    module docstring); one result per row."""
    from distributed import wait

    from benchmarks import dask_busy
    from benchmarks.dask_tasks import inc, make_array

    client, (worker,) = side.client, side.workers
    n = args.busy_size // 8
    array = client.submit(make_array, fill, n * 8, workers=[worker], allow_other_workers=False, pure=False)
    wait([array], timeout=args.timeout)

    async def identity() -> Any:
        return await client.rpc(worker).identity()

    client.sync(identity)  # untimed: opens the client's pooled connection to the worker
    if interval_s is not None:
        if not side.protocol.startswith("readinto"):
            client.run(dask_busy.set_switch_interval, interval_s, workers=[worker])
        now = client.run(dask_busy.switch_interval, workers=[worker])[worker]
        check(abs(now - interval_s) < 1e-9, f"the worker's switch interval is {now}, not {interval_s}")
    pid, tid = client.run(dask_busy.loop_thread, workers=[worker])[worker]

    def start_spinner() -> Any:
        return client.submit(dask_busy.spin, args.timeout, shape, workers=[worker], allow_other_workers=False,
                             pure=False)  # fmt: skip

    def spinning(count: int) -> None:
        _wait_until(
            lambda: client.run(dask_busy.spinning, workers=[worker])[worker] == count,
            args.timeout,
            f"{count} spinners did not start",
        )

    spinners = [start_spinner()]
    counted: dict[str, Any] = {}
    try:
        spinning(1)
        latencies = []
        for i in range(args.busy_tasks):
            started = time.perf_counter()
            value = client.submit(inc, i, workers=[worker], allow_other_workers=False, pure=False).result(
                timeout=args.timeout
            )
            latencies.append(time.perf_counter() - started)
            check(value == i + 1, f"inc({i}) gave {value}")
        spinners.append(start_spinner())
        spinning(BUSY_WORKER_THREADS)

        async def rpcs(count: int) -> tuple[float, Any]:
            started = time.perf_counter()
            answer = None
            for _ in range(count):
                answer = await client.rpc(worker).identity()
            return time.perf_counter() - started, answer

        if args.busy_count:
            client.run(dask_busy.count_releases, workers=[worker])
        switches_before = thread_switches(tid, pid)
        rpc_s, answer = client.sync(rpcs, args.busy_rpc)
        switches_after = thread_switches(tid, pid)
        if args.busy_count:
            counted = client.run(dask_busy.released, workers=[worker])[worker]
        gaps = _heartbeat_gaps(side.cluster.scheduler, worker, args.busy_heartbeats, args.timeout) if (
            args.busy_heartbeats) else []  # fmt: skip
        started = time.perf_counter()
        data = client.gather(array, direct=True)
        fetch_s = time.perf_counter() - started
        nominal_s = client.run(
            lambda dask_worker: dask_worker.periodic_callbacks["heartbeat"].callback_time / 1000, workers=[worker]
        )[worker]
    finally:
        client.run(dask_busy.stop_spinning, workers=[worker])
    spun = client.gather(spinners)
    check(answer is not None and answer["type"] == "Worker", f"not a worker identity: {answer!r}")
    check(answer["scheduler"] == side.cluster.scheduler_address, f"wrong scheduler: {answer['scheduler']}")
    check(answer["nthreads"] == BUSY_WORKER_THREADS, f"the worker has {answer['nthreads']} threads")
    check(data.shape == (n,) and float(data.sum()) == float(fill) * n, f"array: shape {data.shape}, sum {data.sum()}")
    check(all(s["stopped"] for s in spun), f"a spinner stopped at its deadline, before the measurements ended: {spun}")
    check(all(s["shape"] == shape for s in spun), f"spinners of the wrong shape: {spun}")
    voluntary = (switches_after[0] - switches_before[0]) / args.busy_rpc
    involuntary = (switches_after[1] - switches_before[1]) / args.busy_rpc
    per_rpc = {"switches_per_rpc": voluntary, "involuntary_per_rpc": involuntary}
    if counted:
        per_rpc["releases_per_rpc"] = {k: v / args.busy_rpc for k, v in counted["calls"].items()}
        per_rpc["polls_per_rpc"] = {k: v / args.busy_rpc for k, v in counted["polls"].items()}
        per_rpc["entries_per_rpc"] = counted["entries"] / args.busy_rpc
    spinners_extra = {"spinner_rounds": [s["rounds"] for s in spun], "spinner_s": [s["spun_s"] for s in spun]}
    throughput = sum(s["rounds"] / s["spun_s"] for s in spun if s["spun_s"] > 0)
    return {
        "busy-worker-rpc": {"value": args.busy_rpc / rpc_s, "elapsed_s": rpc_s, "count": args.busy_rpc, **per_rpc,
                            **spinners_extra},
        "busy-worker-fetch": {"value": fetch_s, "nbytes": data.nbytes, "gbps": data.nbytes / fetch_s / GB,
                              **spinners_extra},
        "busy-worker-task": {"value": throughput, **spinners_extra},
        "busy-worker-latency": {"value": statistics.median(latencies) if latencies else None,
                                "latencies_s": latencies},
        "busy-worker-heartbeat": {"value": statistics.median(gaps) - nominal_s if gaps else None,
                                  "max_s": max(gaps) - nominal_s if gaps else None, "gaps_s": gaps,
                                  "interval_s": nominal_s},
    }  # fmt: skip


GB = 1e9  # bytes


def format_delay(seconds: float | None) -> str:
    """A delay that may be negative: "+1.2ms", "-2.07ms"."""
    if seconds is None:
        return h.format_seconds(None)
    return ("-" if seconds < 0 else "+") + h.format_seconds(abs(seconds))


def add_arguments(p: argparse.ArgumentParser) -> None:
    from benchmarks.dask_busy import SHAPES

    p.add_argument(
        "--busy-shape",
        type=h.csv(h.choice("task shape", SHAPES)),
        default=list(SHAPES),
        help=f"busy-worker: task shapes, comma list (default: all: {','.join(SHAPES)})",
    )
    p.add_argument(
        "--switch-interval",
        type=h.csv(parse_interval),
        default=None,
        metavar="DURATIONS",
        help="busy-worker: the worker's switch interval, comma list such as 5ms,1ms,500us (readinto:// through"
        " distributed.comm.readinto.switch-interval, tcp:// through sys.setswitchinterval; default: not set)",
    )
    p.add_argument("--busy-tasks", type=int, default=20, help="busy-worker: tasks timed for the latency (default: 20)")
    p.add_argument(
        "--busy-heartbeats",
        type=int,
        default=4,
        help="busy-worker: worker heartbeats timed for their delay; 0: none (default: 4, about 2 s)",
    )
    p.add_argument(
        "--busy-count",
        action="store_true",
        help="busy-worker: also count the loop thread's GIL-releasing calls (a profile hook: slows it; counts only)",
    )


def parse_interval(text: str) -> float:
    from dask.utils import parse_timedelta

    try:
        seconds = parse_timedelta(text, default="seconds")
    except (ValueError, TypeError, KeyError) as exc:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r}") from exc
    if seconds is None or not 50e-6 <= seconds <= 1.0:
        raise argparse.ArgumentTypeError(f"a switch interval from 50us to 1s, got {text!r}")
    return float(seconds)


#: Row -> `benchmarks.dask.Metric` fields.  The heartbeat's lateness can be
#: zero or negative, so it is compared by difference, not by ratio.
METRICS_BY_ROW: dict[str, tuple[Any, ...]] = {
    "busy-worker-rpc": ("RPC/s", True, h.format_rate),
    "busy-worker-fetch": ("s per fetch", False, h.format_seconds),
    "busy-worker-task": ("rounds/s", True, h.format_rate),
    "busy-worker-latency": ("s per task", False, h.format_seconds),
    "busy-worker-heartbeat": ("s late", False, h.format_seconds, True),
}
