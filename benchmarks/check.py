"""The quick check of the defaults against the project's targets.

    python -m benchmarks check                    # all, about 16 minutes; JSON in a fresh temp dir
    python -m benchmarks check --only echo,dask --out /tmp/check
    python -m benchmarks check --from /tmp/check  # the summary of an earlier run, nothing runs
    python -m benchmarks check --dry-run          # the commands it would run

Runs, one after the other (never two at once), each as
``python -m benchmarks SUITE ... --json OUT/FILE`` (see `RUNS`): the load
benchmark at 64 connections saturated and below saturation (3000 msgs/s
offered), each server in three fresh processes in alternating rounds, about
4 minutes each; echo at 100 MiB, about 1 minute; dask's rpc,
transfer and transfer-cold (``--pretouch``) over tcp, about 4 minutes.  Then it reads the
JSON files and prints one table: each target of `TARGETS`, the measured
ratio (the median of the row's metric over the median of its baseline's,
with the min-max of the ratios repeat by repeat), the bound, and PASS or
MISS.  It is the check that catches a default that loses on a new machine:
what judges is what a user pays, CPU time per message (load) and wall-clock
rates (echo, dask); counts (syscalls, instructions) explain a result, they
do not judge it.  The exit status is 0 whether targets pass or miss (it is
a report), 1 if a run failed.  Busy polling (``readinto-spin``) is opt-in:
its rows are information, not targets.  So are ``bound-floor``'s: the
leanest readiness-callback (``add_reader``) stream in Python with a Future
per read (no Tornado; see ``benchmarks/impls/_bounds.py``), held to the
bounds ``readinto`` is held to.  Where the floor misses a bound too, no
stream of that design meets it on that machine.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import harness as h

ROOT = Path(__file__).resolve().parent.parent  # where ``python -m benchmarks`` imports from

#: Three fresh server processes per server and loop, in alternating rounds,
#: two windows each: at saturation on uvloop one process can run 1.3x
#: slower than the next of the same server for all its windows (both
#: ``readinto`` and ``asyncio-streams`` do; the CPU's caches, the client's
#: wake-ups), so one process per server measured which mode it fell in.
_LOAD = ("load", "--server", "readinto,readinto-spin,framed-pool,bound-floor,asyncio-protocol,asyncio-streams",
         "--loop", "asyncio,uvloop", "--clients", "64", "--repeat", "2", "--rounds", "3")  # fmt: skip
_ECHO = ("echo", "--impl", "readinto,framed-pool,threads", "--msize", "100MiB", "--repeat", "3", "--rounds", "2")
#: ``--pretouch``: on a VM whose balloon hands free pages back to the host,
#: a fresh worker's first touch of its memory costs up to 4 s of kernel time
#: per GiB for either protocol, at random (see `benchmarks.harness.cpu.pretouch`).
_DASK = ("dask", "--workload", "rpc,transfer,transfer-cold", "--pair", "tcp", "--repeat", "5", "--pretouch")
#: ``--only`` names -> (JSON file, ``python -m benchmarks`` arguments) of each run, in the order they run.
RUNS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "load": (("load.json", _LOAD), ("load-offered.json", (*_LOAD, "--offered", "3000"))),
    "echo": (("echo.json", _ECHO),),
    "dask": (("dask.json", _DASK),),
}


@dataclass(frozen=True)
class Target:
    """``metric`` of the row ``key == mine`` over that of ``key == base``,
    both rows also matching ``where``, in ``file``: at most (``<=``) or at
    least (``>=``) ``bound``.  ``info``: reported, not a target."""

    file: str
    where: Mapping[str, Any]
    key: str
    mine: str
    base: str
    metric: str
    op: str
    bound: float
    info: bool = False

    @property
    def label(self) -> str:
        where = [h.format_size(v) if k == "msize" else str(v) for k, v in self.where.items()]
        return f"{' '.join(where)}: {self.mine} / {self.base} {TITLES[self.metric]}"


TITLES = {"loop_cpu_us_per_msg": "loop us/msg", "msgs_per_s": "msgs/s", "value": "rate"}

#: Load: loop -> (server, baseline server, most loop us/msg relative to it), saturated and below.
LOAD_BOUNDS = {
    "uvloop": (("readinto", "asyncio-protocol", 1.5), ("readinto", "asyncio-streams", 1.0),
               ("framed-pool", "asyncio-protocol", 1.7), ("framed-pool", "asyncio-streams", 1.1)),
    "asyncio": (("readinto", "asyncio-protocol", 2.0), ("readinto", "asyncio-streams", 0.8),
                ("framed-pool", "asyncio-protocol", 2.3), ("framed-pool", "asyncio-streams", 0.9)),
}  # fmt: skip
#: The floor of a stream with a Future per read, information only: bound-floor
#: held to readinto's bounds (against the anchors) on each loop.
FLOOR = "bound-floor"
#: Busy polling, information only: readinto-spin relative to readinto on each loop.
SPIN_BOUNDS = (("loop_cpu_us_per_msg", "<=", 1.05), ("msgs_per_s", ">=", 1.0))

#: The targets (the project's issue), in the order of the summary.
TARGETS: tuple[Target, ...] = (
    *(target
      for file in ("load.json", "load-offered.json")
      for loop, bounds in LOAD_BOUNDS.items()
      for target in (
          *(Target(file, {"loop": loop}, "server", mine, base, "loop_cpu_us_per_msg", "<=", bound)
            for mine, base, bound in bounds),
          *(Target(file, {"loop": loop}, "server", FLOOR, base, "loop_cpu_us_per_msg", "<=", bound, info=True)
            for mine, base, bound in bounds if mine == "readinto"),
          *(Target(file, {"loop": loop}, "server", "readinto-spin", "readinto", metric, op, bound, info=True)
            for metric, op, bound in SPIN_BOUNDS),
      )),
    Target("echo.json", {"msize": 100 * h.MiB}, "impl", "readinto", "threads", "msgs_per_s", ">=", 1.0),
    Target("echo.json", {"msize": 100 * h.MiB}, "impl", "framed-pool", "threads", "msgs_per_s", ">=", 0.95),
    Target("dask.json", {"workload": "rpc"}, "protocol", "readinto", "tcp", "value", ">=", 1.5),
    Target("dask.json", {"workload": "transfer"}, "protocol", "readinto", "tcp", "value", ">=", 2.0),
    Target("dask.json", {"workload": "transfer-cold"}, "protocol", "readinto", "tcp", "value", ">=", 1.5),
)  # fmt: skip


@dataclass
class Row(h.Repeated):
    """One row of a suite's JSON, as the harness reads repeats."""

    repeats: list[dict[str, Any]] = field(default_factory=list)
    skipped: str | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Outcome(h.Repeated):
    """A target and what was measured: the ratio of medians and the ratios repeat by repeat."""

    target: Target
    ratio: float | None = None
    paired: list[float] = field(default_factory=list)
    repeats: list[dict[str, Any]] = field(default_factory=list)
    skipped: str | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        t = self.target
        if self.ratio is None:
            return "NO DATA"
        met = self.ratio <= t.bound if t.op == "<=" else self.ratio >= t.bound
        return ("PASS" if met else "MISS") + (" (info)" if t.info else "")


def find_row(results: Sequence[dict[str, Any]], where: Mapping[str, Any]) -> Row | None:
    """The first measured entry of a suite's JSON ``results`` matching ``where``."""
    for entry in results:
        if entry.get("status") == "ok" and all(entry.get(k) == v for k, v in where.items()):
            return Row(repeats=entry.get("repeats") or [])
    return None


def measure(target: Target, results: Sequence[dict[str, Any]]) -> Outcome:
    mine = find_row(results, {**target.where, target.key: target.mine})
    base = find_row(results, {**target.where, target.key: target.base})
    if mine is None or base is None:
        return Outcome(target)
    return Outcome(target, h.median_ratio(mine, base, target.metric), h.paired_ratios(mine, base, target.metric))


def summarise(out: Path, files: Sequence[str]) -> list[Outcome]:
    """Every target in ``files`` measured from the JSON in ``out`` (NO DATA where missing)."""
    loaded: dict[str, list[dict[str, Any]]] = {}
    for name in files:
        path = out / name
        loaded[name] = json.loads(path.read_text())["results"] if path.exists() else []
    return [measure(t, loaded[t.file]) for t in TARGETS if t.file in loaded]


def _ratio_cell(o: Outcome) -> str:
    spread = f" ({h.format_ratio(min(o.paired))}-{h.format_ratio(max(o.paired))})" if len(o.paired) > 1 else ""
    return h.format_ratio(o.ratio) + spread


COLUMNS: tuple[h.Column[Outcome], ...] = (
    h.field("file", lambda o: o.target.file),
    h.field("target", lambda o: o.target.label),
    h.Column("ratio", lambda results, o: _ratio_cell(o)),
    h.key_field("bound", lambda o: f"{o.target.op} {o.target.bound:.2f}x"),
    h.Column("result", lambda results, o: o.verdict, left=True),
)
LEGEND = (
    "ratio: the compared row's median over its baseline's, same file and loop (min-max: repeat by repeat);\n"
    "loop us/msg: CPU per message, lower is better; msgs/s and dask's rates: higher is better.\n"
    "(info): reported only: busy polling is opt-in; bound-floor is the leanest add_reader stream in Python with\n"
    "a Future per read (where it misses a bound too, no stream of that design meets it on this machine);\n"
    "NO DATA: a row is missing, skipped or failed."
)


def format_summary(outcomes: Sequence[Outcome]) -> str:
    return h.format_table(outcomes, COLUMNS, legend=LEGEND, group=lambda o: (o.target.file, o.target.where.get("loop")))


def commands(only: Sequence[str], out: str) -> list[list[str]]:
    """The command of each run of ``only``, in order, its JSON into ``out``."""
    return [[sys.executable, "-m", "benchmarks", *argv, "--json", str(Path(out) / file)]
            for name in only for file, argv in RUNS[name]]  # fmt: skip


class CheckSuite(h.Suite):
    name = "check"
    summary = "the quick check of the defaults: load, echo and dask against the project's targets (~16 min)"
    description = __doc__ or ""

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--only", type=h.csv(h.choice("run", RUNS)), help=f"comma list (default: {','.join(RUNS)})")
        p.add_argument("--out", metavar="DIR", help="where the JSON files go (default: a fresh temp dir)")
        p.add_argument("--from", dest="source", metavar="DIR", help="only summarise the JSON files in DIR")
        p.add_argument("--dry-run", action="store_true", help="print the commands (OUT: --out), run nothing")

    def check_arguments(self, args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
        args.only = [name for name in RUNS if name in (args.only or RUNS)]  # in RUNS's order
        if args.source and (args.out or args.dry_run):
            p.error("--from runs nothing: no --out or --dry-run with it")
        if args.source and not Path(args.source).is_dir():
            p.error(f"--from {args.source}: not a directory")

    def run(self, args: argparse.Namespace, argv: Sequence[str]) -> int:
        if args.dry_run:
            for cmd in commands(args.only, args.out or "OUT"):
                print(shlex.join(cmd))
            return 0
        out = args.source or args.out or tempfile.mkdtemp(prefix="benchmarks-check-")
        failed = []
        if not args.source:
            Path(out).mkdir(parents=True, exist_ok=True)
            print(f"JSON files in {out}", file=sys.stderr, flush=True)
            for cmd in commands(args.only, out):
                print(f"$ {shlex.join(cmd)}", file=sys.stderr, flush=True)
                if subprocess.run(cmd, cwd=ROOT).returncode != 0:
                    failed.append(shlex.join(cmd[1:]))
        print(format_summary(summarise(Path(out), [file for name in args.only for file, _ in RUNS[name]])))
        print(f"\nJSON files in {out}")
        print("".join(f"FAILED: {cmd}\n" for cmd in failed), end="", file=sys.stderr)
        return 1 if failed else 0


SUITE = CheckSuite()

if __name__ == "__main__":
    sys.exit(SUITE.main())
