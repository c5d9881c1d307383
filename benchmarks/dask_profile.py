"""Where a dask message spends its time: a profile-backed breakdown of one
small RPC and of one large worker-to-worker transfer, for ``tcp://`` and
``readinto://`` (or ``tls://`` and ``readinto-tls://``).

    python -m benchmarks dask_profile                         # tcp pair, 64 MiB
    python -m benchmarks dask_profile --pair tls --json profile.json

(``python -m benchmarks.dask_profile`` runs the same.)

Each protocol gets its own ``LocalCluster`` (``n_workers=2,
threads_per_worker=1, processes=True``, as in ``benchmarks.dask``), in turn.

* **RPC**: ``client.scheduler.identity()`` round trips.  Client and scheduler
  share one process, as ``LocalCluster`` runs them, so "each side" is that
  one process.  Reported per RPC: wall time (an unsampled loop), the process's
  CPU time and context switches (``harness.cpu.process_usage``), syscalls by name
  (``strace -c``, when ``strace`` is installed; a separate, slowed-down loop
  whose counts, not times, are used), and py-spy's native samples split into
  the categories below.
* **Transfer**: ``--count`` arrays of ``--size`` bytes made on worker a and
  kept there, then one consuming task each on worker b (as ``benchmarks.dask``'s
  transfer workload), so every array crosses a -> b once and b keeps it.
  Reported per transfer and per side: wall time and bandwidth from b's
  ``transfer_incoming_log``, CPU user/sys, minor page faults, context
  switches, syscalls and the sampled split.
* **Chain hop**: a chain of ``--hops`` dependent tasks alternating between
  the workers, each hop cut into segments from dask's own logs (the
  scheduler's ``transition_log``, each worker's ``state.log``): the result
  reported to the scheduler, the next task assigned, its input fetched from
  the other worker, the task run.  Medians over the hops.
* **Trivial tasks**: ``client.map`` of ``--tasks`` tiny tasks: tasks/s, and
  the sampled split of each process (scheduler and client, both workers).
* **First touch**: the cost of faulting in a fresh ``--size`` buffer in a
  worker (``np.empty`` then one write pass, against a second pass over the
  same pages), and the worker's ``MALLOC_TRIM_THRESHOLD_``.

Sample categories, from py-spy's ``--native`` stacks (leaf first): socket
syscalls (the kernel's copy and the page faults it takes, attributed to the
libc call), TLS (libssl/libcrypto), serialization (``to_frames`` /
``from_frames``, pickle, msgpack), libc (unnamed libc code under Python
outside the above: ``memcpy``, ``malloc``, other syscalls), comm in Python (this package,
Tornado's iostream, ``distributed.comm``), the event loop, the task itself
(numpy), and dask's own scheduling and worker state machine.  Idle samples
(threads blocked in ``epoll_wait`` and the like) are left out.  The sampler
needs ``py-spy`` (in the ``bench`` extra) and ptrace rights on the workers.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

if __package__ in (None, ""):  # pragma: no cover - see benchmarks.dask
    sys.exit("run this benchmark as a module: python -m benchmarks dask_profile")

from benchmarks import harness as h
from benchmarks.dask import PAIRS, make_security, open_side
from benchmarks.dask_tasks import checksum, make_array
from benchmarks.harness import check
from benchmarks.harness.cpu import process_usage

#: Sample categories, in the order of the tables.
CATEGORIES = ("syscalls", "tls", "serialization", "libc", "comm (Python)", "event loop", "task", "dask")
_SYSCALL_LEAVES = frozenset({"send", "sendmsg", "sendto", "recv", "recvmsg", "recvfrom", "read", "write", "writev"})
_SERIALIZATION = ("distributed/protocol/", "pickle", "msgpack", "cloudpickle", "_to_frames", "_from_frames")
_COMM = ("tornado_readinto/", "tornado/iostream", "distributed/comm/", "distributed/batched")
_LOOP = ("asyncio/", "selectors", "tornado/ioloop", "tornado/gen", "uvloop", "threading", "concurrent/futures")


def _frame_parts(frame: str) -> tuple[str, str]:
    """(function, location) of one py-spy frame ``"name (file:line)"``."""
    name, _, where = frame.partition(" (")
    return name, where.rstrip(")")


_IDLE_LEAVES = frozenset({"epoll_wait", "wait4", "select", "poll", "nanosleep", "clock_nanosleep", "accept4"})
_IDLE_FRAMES = ("PyThread_acquire_lock", "pthread_cond_", "sem_wait", "sem_clockwait", "sem_timedwait")
_TASK_FUNCTIONS = frozenset({"checksum", "make_array", "first_touch"})


def categorize(frames: Sequence[str]) -> str | None:
    """The category of one sampled stack (root first, as py-spy writes it);
    None for a thread blocked waiting (idle)."""
    leaf_name, leaf_where = _frame_parts(frames[-1])
    names = [_frame_parts(f)[0] for f in frames]
    if leaf_name in _IDLE_LEAVES or any(n.startswith(_IDLE_FRAMES) for n in names):
        return None
    if "libc" in leaf_where and (leaf_name in _SYSCALL_LEAVES or leaf_name.startswith(("__libc_send", "__libc_recv"))):
        return "syscalls"
    wheres = [_frame_parts(f)[1] for f in frames]
    if any("libssl" in w or "libcrypto" in w or "_ssl.c" in w for w in wheres):
        return "tls"
    if any(any(s in f for s in _SERIALIZATION) for f in frames):
        return "serialization"
    python = [w for w in wheres if ".py:" in w]
    if "libc.so" in leaf_where or leaf_name.startswith(("__memmove", "__memcpy", "memcpy", "malloc", "_int_")):
        return "libc"
    last_py = python[-1] if python else ""
    if any(s in last_py for s in _COMM):
        return "comm (Python)"
    if any(s in last_py for s in _LOOP):
        return "event loop"
    if "numpy" in last_py or _TASK_FUNCTIONS.intersection(names):
        return "task"
    return "dask"


def split_samples(raw: str, pid: int | None = None) -> Counter[str]:
    """Samples per category of a py-spy ``--format raw`` file (only the
    lines of process ``pid`` when py-spy followed subprocesses)."""
    counts: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = stack.split(";")
        if pid is not None and frames[0].startswith("process ") and not frames[0].startswith(f"process {pid}:"):
            continue
        frames = [f for f in frames if not f.startswith(("process ", "thread "))]
        category = categorize(frames) if frames else None
        if category is not None:
            counts[category] += int(n)
    return counts


@contextlib.contextmanager
def _attached(pids: Sequence[int], argv: Callable[[int, str], list[str]]) -> Iterator[dict[int, str]]:
    """Run the tracer ``argv(pid, output_path)`` on each pid for the duration
    of the block (stopped with SIGINT, as at a terminal); afterwards the dict
    maps each pid to what its tracer wrote ("" when it wrote nothing)."""
    out: dict[int, str] = {pid: "" for pid in pids}
    with tempfile.TemporaryDirectory() as tmp:
        procs = {
            pid: subprocess.Popen(argv(pid, f"{tmp}/{pid}.out"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for pid in pids
        }
        time.sleep(0.5)  # attached
        try:
            yield out
        finally:
            for proc in procs.values():
                proc.send_signal(signal.SIGINT)
            for pid, proc in procs.items():
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=30)
                with contextlib.suppress(OSError):
                    with open(f"{tmp}/{pid}.out") as f:
                        out[pid] = f.read()


@contextlib.contextmanager
def sampled(pids: Sequence[int], rate: int) -> Iterator[dict[int, Counter[str]]]:
    """py-spy ``record --native`` on each pid for the duration of the block;
    afterwards the dict maps each pid to its samples per category (empty
    when py-spy is missing or failed).  Native stacks need py-spy to pause
    the process for each sample: time the work in an unsampled run."""
    out: dict[int, Counter[str]] = {pid: Counter() for pid in pids}
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(spy):
        yield out
        return
    argv = lambda pid, path: [spy, "record", "--native", "-r", str(rate), "-f", "raw", "-p", str(pid), "-o", path]  # noqa: E731
    with _attached(pids, argv) as raw:
        yield out
    for pid, text in raw.items():
        out[pid].update(split_samples(text))


_STRACE_LINE = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$")


@contextlib.contextmanager
def syscalls_counted(pids: Sequence[int]) -> Iterator[dict[int, Counter[str]]]:
    """``strace -c -f`` on each pid for the duration of the block: calls per
    syscall name (empty when strace is missing).  strace slows the traced
    process down a lot: use the counts, never the timings."""
    out: dict[int, Counter[str]] = {pid: Counter() for pid in pids}
    strace = shutil.which("strace")
    if strace is None:
        yield out
        return
    with _attached(pids, lambda pid, path: [strace, "-c", "-f", "-p", str(pid), "-o", path]) as reports:
        yield out
    for pid, text in reports.items():
        for line in text.splitlines():
            m = _STRACE_LINE.match(line)
            if m and m.group(2) != "total":
                out[pid][m.group(2)] += int(m.group(1))


def _delta(after: dict[str, float], before: dict[str, float], n: int) -> dict[str, float]:
    return {k: (after[k] - before[k]) / n for k in after}


def first_touch(nbytes: int) -> dict[str, Any]:
    """In a worker: ms to write a fresh buffer once (page faults + kernel
    zeroing + the write) and a second time (the write alone)."""
    import numpy as np

    before = process_usage()["minflt"]
    buf = np.empty(nbytes, dtype=np.uint8)
    started = time.perf_counter()
    buf.fill(1)
    first = time.perf_counter() - started
    faults = process_usage()["minflt"] - before
    started = time.perf_counter()
    buf.fill(2)
    second = time.perf_counter() - started
    return {"first_ms": first * 1e3, "again_ms": second * 1e3, "minflt": faults,
            "MALLOC_TRIM_THRESHOLD_": os.environ.get("MALLOC_TRIM_THRESHOLD_")}  # fmt: skip


def profile_rpc(side: Any, args: argparse.Namespace) -> dict[str, Any]:
    client = side.client

    async def loop(n: int) -> float:
        started = time.perf_counter()
        for _ in range(n):
            await client.scheduler.identity()
        return time.perf_counter() - started

    client.sync(loop, 200)  # warm
    walls = [client.sync(loop, args.rpc) / args.rpc for _ in range(3)]
    before = process_usage()
    client.sync(loop, args.rpc)
    cpu = _delta(process_usage(), before, args.rpc)
    with sampled([os.getpid()], args.rate) as samples:
        client.sync(loop, args.rpc)
    with syscalls_counted([os.getpid()]) as calls:
        client.sync(loop, args.strace_rpc)
    return {
        "wall_us": sorted(walls)[1] * 1e6,
        "cpu_us": (cpu["user"] + cpu["sys"]) * 1e6,
        "sys_us": cpu["sys"] * 1e6,
        "csw": cpu["nvcsw"] + cpu["nivcsw"],
        "samples": dict(samples[os.getpid()]),
        "syscalls": {k: v / args.strace_rpc for k, v in calls[os.getpid()].items()},
    }


def profile_transfer(side: Any, args: argparse.Namespace) -> dict[str, Any]:
    from distributed import wait

    client, (source, sink) = side.client, side.workers
    pids = client.run(os.getpid)
    size, count = args.size, args.count

    def make_arrays(first: int) -> list[Any]:
        """``count`` arrays on a, made and kept there (nothing crosses yet)."""
        arrays = [client.submit(make_array, first + i, size, workers=[source], allow_other_workers=False, pure=False)
                  for i in range(count)]  # fmt: skip
        wait(arrays, timeout=args.timeout)
        return arrays

    def consume(arrays: list[Any]) -> list[Any]:
        """One task per array on b: every array crosses a -> b once."""
        return client.gather(client.map(checksum, arrays, workers=[sink], allow_other_workers=False, pure=False))

    consume(make_arrays(1000))  # warm-up: connections made, code paths hot
    arrays = make_arrays(0)
    before = client.run(process_usage)
    started = time.perf_counter()
    values = consume(arrays)
    elapsed = time.perf_counter() - started
    after = client.run(process_usage)
    n = size // 8
    for i, (shape, total) in enumerate(values):
        check(shape == (n,) and total == float(i) * n, f"array {i}: shape {shape}, sum {total}")
    keys = {str(a.key) for a in arrays}
    log = client.run(lambda dask_worker: list(dask_worker.transfer_incoming_log), workers=[sink])[sink]
    mine = [e for e in log if keys & {str(k) for k in e["keys"]}]
    check(sum(len(e["keys"]) for e in mine) >= count, f"worker b logged {len(mine)} transfers of {count}")
    durations = sorted(e["duration"] / len(e["keys"]) for e in mine for _ in e["keys"])
    del values, arrays
    arrays = make_arrays(2000)  # sampled (paused for each sample: no timing)
    with sampled([pids[source], pids[sink]], args.rate) as samples:
        consume(arrays)
    arrays = make_arrays(3000)  # counted under strace (slowed down: counts only)
    with syscalls_counted([pids[source], pids[sink]]) as calls:
        consume(arrays)
    del arrays
    sides = {}
    for role, address in (("a (sends)", source), ("b (receives)", sink)):
        d = _delta(after[address], before[address], count)
        sides[role] = {
            "cpu_ms": (d["user"] + d["sys"]) * 1e3,
            "sys_ms": d["sys"] * 1e3,
            "minflt": d["minflt"],
            "csw": d["nvcsw"] + d["nivcsw"],
            "samples": dict(samples[pids[address]]),
            "syscalls": {k: v / count for k, v in calls[pids[address]].items()},
        }
    return {
        "round_gbps": count * size / elapsed / 1e9,
        "wall_ms": durations[len(durations) // 2] * 1e3,
        "wall_ms_range": [durations[0] * 1e3, durations[-1] * 1e3],
        "gbps": size / durations[len(durations) // 2] / 1e9,
        "sides": sides,
        "first_touch": client.run(first_touch, size, workers=[sink])[sink],
    }


#: Segments of one hop of the dependent chain, in order (see `profile_chain`).
HOP_SEGMENTS = (
    ("report", "previous task's result reported: worker -> scheduler"),
    ("schedule", "scheduler: result in, next task assigned"),
    ("assign", "assignment: scheduler -> next worker"),
    ("prepare", "next worker: until it starts fetching the input"),
    ("fetch", "the input fetched from the other worker (get_data)"),
    ("ready", "next worker: input in, task started"),
    ("compute", "the task (x + 1)"),
)


def _hop_events(client: Any, prefix: str) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, dict[str, float]]]]:
    """Timestamps of the chain's keys from the scheduler's transition log and
    each worker's state log (dask's own records, one clock: same machine)."""

    def scheduler_side(dask_scheduler: Any) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for key, start, finish, *_, ts in dask_scheduler.transition_log:
            if str(key).startswith(prefix):
                out.setdefault(str(key), {}).setdefault(f"{start}>{finish}", ts)
        return out

    def worker_side(dask_worker: Any) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for record in dask_worker.state.log:
            key, what = str(record[0]), record[1]
            if not key.startswith(prefix):
                continue
            event = what if what == "compute-task" else f"{what}>{record[2]}"
            out.setdefault(key, {}).setdefault(event, record[-1])
        return out

    return client.run_on_scheduler(scheduler_side), client.run(worker_side)


def profile_chain(side: Any, args: argparse.Namespace) -> dict[str, Any]:
    """A dependent chain alternating between the two workers (as
    ``benchmarks.dask``'s chain workload), cut into `HOP_SEGMENTS` from
    dask's own logs: median ms per segment over the hops, and the means,
    which add up (each hop is its segments end to end, and means are
    additive where medians are not)."""
    from benchmarks.dask_tasks import inc

    client, workers = side.client, side.workers
    prefix = f"hop-{side.protocol}-"
    future = client.submit(inc, 0, key=f"{prefix}0", workers=[workers[0]], allow_other_workers=False, pure=False)
    for i in range(1, args.hops):
        future = client.submit(inc, future, key=f"{prefix}{i}", workers=[workers[i % 2]], allow_other_workers=False)
    check(future.result(timeout=args.timeout) == args.hops, "wrong chain result")
    sched, by_worker = _hop_events(client, prefix)
    segments: dict[str, list[float]] = {name: [] for name, _ in HOP_SEGMENTS}
    hops = []
    for i in range(10, args.hops):  # the first hops overlap with the submissions
        prev, key = f"{prefix}{i - 1}", f"{prefix}{i}"
        here, there = by_worker[workers[i % 2]], by_worker[workers[(i - 1) % 2]]
        try:
            t = [
                there[prev]["executing>memory"],
                sched[prev]["processing>memory"],
                sched[key]["waiting>processing"],
                here[key]["compute-task"],
                here[prev]["fetch>flight"],
                here[prev]["flight>memory"],
                here[key]["ready>executing"],
                here[key]["executing>memory"],
            ]
        except KeyError:  # a transition dask took another way (e.g. stolen): not a clean hop
            continue
        hops.append((t[-1] - t[0]) * 1e3)
        for (name, _), start, end in zip(HOP_SEGMENTS, t, t[1:]):
            segments[name].append((end - start) * 1e3)
    # Worker logs keep their last distributed.admin.low-level-log-length
    # records (1000 by default: about the last 100 hops).
    check(len(hops) >= min(50, args.hops // 4), f"only {len(hops)} clean hops in the logs")
    return {
        "hops": len(hops),
        "hop_ms": _median(hops),
        "segments_ms": {name: _median(values) for name, values in segments.items()},
        "hop_mean_ms": _mean(hops),
        "segments_mean_ms": {name: _mean(values) for name, values in segments.items()},
    }


def profile_tasks(side: Any, args: argparse.Namespace) -> dict[str, Any]:
    """``client.map`` of ``--tasks`` trivial tasks (as ``benchmarks.dask``'s
    tasks workload): tasks/s from an unsampled run, then where each process
    spends its CPU, sampled over a second run."""
    from distributed import wait

    from benchmarks.dask_tasks import inc

    client = side.client
    pids = {"scheduler + client": os.getpid(), **dict(zip(("worker a", "worker b"), client.run(os.getpid).values()))}

    def one_run() -> float:
        started = time.perf_counter()
        futures = client.map(inc, range(args.tasks), pure=False)
        wait(futures, timeout=args.timeout)
        elapsed = time.perf_counter() - started
        check(sum(client.gather(futures)) == args.tasks * (args.tasks + 1) // 2, "wrong task results")
        return elapsed

    one_run()  # warm
    elapsed = one_run()
    with sampled(list(pids.values()), args.rate) as samples:
        one_run()
    return {"tasks_per_s": args.tasks / elapsed, "samples": {name: dict(samples[pid]) for name, pid in pids.items()}}


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else float("nan")


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


# -- output ------------------------------------------------------------------------------------------


def _split(samples: dict[str, int], total_ms: float) -> str:
    n = sum(samples.values())
    if not n:
        return "(no samples)"
    return "  ".join(f"{c} {samples.get(c, 0) / n * total_ms:.3g}" for c in CATEGORIES if samples.get(c))


def _shares(samples: dict[str, int]) -> str:
    n = sum(samples.values())
    if not n:
        return "(no samples)"
    return "  ".join(f"{c} {samples.get(c, 0) / n:.0%}" for c in CATEGORIES if samples.get(c))


def _calls(calls: dict[str, float], top: int = 5) -> str:
    if not calls:
        return "(strace not installed)"
    return ", ".join(f"{name} {n:.3g}" for name, n in sorted(calls.items(), key=lambda kv: -kv[1])[:top])


def format_report(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    lines = ["RPC: client.scheduler.identity(), client and scheduler in one process; per RPC"]
    for protocol, r in results.items():
        rpc = r["rpc"]
        lines += [
            f"  {protocol:<13} wall {rpc['wall_us']:.0f} us   CPU {rpc['cpu_us']:.0f} us (sys {rpc['sys_us']:.0f})"
            f"   context switches {rpc['csw']:.2f}",
            f"  {'':<13} sampled CPU split, us: {_split(rpc['samples'], rpc['cpu_us'])}",
            f"  {'':<13} syscalls: {_calls(rpc['syscalls'])}",
        ]
    size = args.size / (1 << 20)
    lines.append(f"\nTransfer: {args.count} x {size:g} MiB arrays, worker a -> worker b (b keeps them); per transfer")
    for protocol, r in results.items():
        t, touch = r["transfer"], r["transfer"]["first_touch"]
        lo, hi = t["wall_ms_range"]
        lines.append(
            f"  {protocol:<13} {t['round_gbps']:.2f} GB/s over the round; per transfer (b's log)"
            f" {t['wall_ms']:.1f} ms ({lo:.1f}-{hi:.1f}), {t['gbps']:.2f} GB/s"
        )
        for role, s in t["sides"].items():
            lines += [
                f"    {role:<13} CPU {s['cpu_ms']:.1f} ms (sys {s['sys_ms']:.1f})   minor faults {s['minflt']:.0f}"
                f"   context switches {s['csw']:.0f}",
                f"    {'':<13} sampled CPU split, ms: {_split(s['samples'], s['cpu_ms'])}",
                f"    {'':<13} syscalls: {_calls(s['syscalls'])}",
            ]
        lines.append(
            f"    first touch of a fresh {size:g} MiB buffer in b: {touch['first_ms']:.1f} ms"
            f" ({touch['minflt']:.0f} faults), again {touch['again_ms']:.1f} ms;"
            f" MALLOC_TRIM_THRESHOLD_={touch['MALLOC_TRIM_THRESHOLD_']}"
        )
    lines.append("\nDependent chain, one hop = one task on the other worker; median ms per hop from dask's logs")
    for protocol, r in results.items():
        c = r["chain"]
        split = "  ".join(f"{name} {ms:.2f}" for name, ms in c["segments_ms"].items())
        lines.append(f"  {protocol:<13} hop {c['hop_ms']:.2f} ms ({c['hops']} hops): {split}")
    lines += [f"    {name}: {what}" for name, what in HOP_SEGMENTS]
    lines.append(f"\nTrivial tasks: client.map of {args.tasks} tasks; share of each process's sampled CPU")
    for protocol, r in results.items():
        lines.append(f"  {protocol:<13} {r['tasks']['tasks_per_s']:.0f} tasks/s")
        for name, samples in r["tasks"]["samples"].items():
            lines.append(f"    {name:<19} {_shares(samples)}")
    return "\n".join(lines)


class DaskProfileSuite(h.Suite):
    """Not a table of cases: one profile report per protocol of a pair."""

    name = "dask_profile"
    summary = "where a dask message spends its time: py-spy, strace and dask's own logs, tcp:// vs readinto://"
    description = __doc__ or ""

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--pair", choices=sorted(PAIRS), default="tcp", help="a pair of benchmarks.dask (default: tcp)")
        p.add_argument("--rpc", type=int, default=3000, help="RPC round trips per measurement (default: 3000)")
        p.add_argument(
            "--strace-rpc", type=int, default=300, help="RPC round trips counted under strace (default: 300)"
        )
        p.add_argument(
            "--size", type=h.parse_size, default=64 << 20, help="bytes per transferred array (default: 64MiB)"
        )
        p.add_argument("--count", type=int, default=8, help="arrays transferred (default: 8)")
        p.add_argument("--tasks", type=int, default=5000, help="trivial tasks (default: 5000)")
        p.add_argument("--hops", type=int, default=300, help="tasks in the dependent chain (default: 300)")
        p.add_argument("--rate", type=int, default=250, help="py-spy samples per second (default: 250)")
        p.add_argument("--timeout", type=float, default=300.0, help="seconds per step (default: 300)")
        p.add_argument("--json", metavar="PATH", help="write the figures as JSON")

    def run(self, args: argparse.Namespace, argv: Sequence[str]) -> int:
        results: dict[str, dict[str, Any]] = {}
        with tempfile.TemporaryDirectory() as tmp:
            security = make_security(tmp) if PAIRS[args.pair][0] == "tls" else None
            for protocol in PAIRS[args.pair]:
                with open_side(protocol, security, args) as side:
                    steps = {"rpc": profile_rpc, "transfer": profile_transfer, "chain": profile_chain,
                             "tasks": profile_tasks}  # fmt: skip
                    results[protocol] = {}
                    for step, profile in steps.items():
                        print(f"{protocol}: {step}...", file=sys.stderr, flush=True)
                        results[protocol][step] = profile(side, args)
        print(format_report(results, args))
        if args.json:
            settings = {k: v for k, v in vars(args).items() if k != "json"}
            h.write_json(args.json, {"meta": {**h.run_meta(self.module, argv), "args": settings}, "results": results})
        return 0


SUITE = DaskProfileSuite()


if __name__ == "__main__":
    sys.exit(SUITE.main())
