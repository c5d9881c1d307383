"""``python -m benchmarks.publish``: render every published figure from the
result files in ``benchmarks/results/``.

One command writes, from named result files only:

* the tables of the documentation, ``docs/_generated/*.rst`` (each ends by
  naming its result file and the command that produced it), which the pages
  include;
* the headline table, ``docs/_generated/headline.rst`` (on the performance
  page), and into ``README.rst`` between ``.. published-table: headline``
  and ``.. end-published-table`` comments if the README holds that block
  (GitHub and PyPI do not process ``.. include::``); it does not now: the
  README gives one number per switch, in prose;
* the headline plot, ``docs/_generated/headline.png``, and the values it
  shows, ``docs/_generated/headline-plot.txt``.

``python -m benchmarks.publish --check`` writes nothing: it renders the same
things in memory and reports every published table, plot value or quoted
figure that no longer matches its result file (exit status 1).  Figures
quoted in prose (README, docs, CHANGELOG) are listed in `QUOTES`, each a
sentence with named figures of `FIGURES` in it; the check renders the
sentence and looks for it in the file.  ``--results DIR`` reads the result
files from another directory (the test suite checks that a changed result
file is reported).

Both refuse, naming each file and what it lacks, a cited result file that
does not record its run: the commit (and whether the tree was dirty), the
build, the machine, the Python and the command
(`benchmarks.harness.meta.REQUIRED`; every benchmark's ``--json`` writes
them).  A cited table or plot (``NAME.txt``, ``NAME.png``) is cited through
the result file of its run, ``NAME.json``.

* ``--cited`` lists the cited files: those publish renders from, those the
  README, the CHANGELOG and the docs name, and the other files of their
  runs; each with what cites it and whether publish refuses it.
* ``--uncited`` lists the files of the results directory nothing cites.
* ``--remake [FILE ...]`` re-makes every cited result file (or those named),
  the headline's first, one command after the other: the command the file
  records, or `REMAKE`'s where that one no longer runs or there is none; the
  table goes to ``NAME.txt``; a command this machine cannot run (its
  suite's ``unavailable``: ``--netpath`` without root or iproute2) is not
  run, and fails the re-make naming what is missing.  ``--remake --dry-run``
  prints the commands, each checked by its benchmark's parser and against
  the rows publish reads from its file (the same on any machine; the ones
  that cannot run here are marked ``not here``), and the files no command
  re-makes (made on another tree, or by benchmarks that are gone), and runs
  nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import functools
import importlib
import io
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness.meta import commit_meta, missing_meta

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
GENERATED = ROOT / "docs" / "_generated"

BEGIN_MARK = ".. published-table: {name}"
END_MARK = ".. end-published-table"


# ---------------------------------------------------------------- reading results


class ResultData(dict):  # type: ignore[type-arg]
    """A result file's JSON object, which remembers the rows `pick` asked of
    it (``picked``: the fields of each), so that ``--remake --dry-run`` can
    say which of them a command would not make."""

    def __init__(self, data: dict[str, Any], name: str) -> None:
        super().__init__(data)
        self.name = name
        self.picked: list[dict[str, Any]] = []


class Results:
    """The result files of one directory, read on first use; ``read`` lists
    the names asked for, in order (what publish renders from)."""

    def __init__(self, directory: Path = RESULTS) -> None:
        self.directory = Path(directory)
        self._cache: dict[str, Any] = {}
        self.read: list[str] = []

    def json(self, name: str) -> Any:
        if name not in self.read:
            self.read.append(name)
        if name not in self._cache:
            data = json.loads((self.directory / name).read_text(encoding="utf-8"))
            self._cache[name] = ResultData(data, name) if isinstance(data, dict) else data
        return self._cache[name]


def pick(data: Any, **fields: Any) -> dict[str, Any]:
    """The one result of a suite's JSON whose fields equal ``fields``."""
    if isinstance(data, ResultData):
        data.picked.append(fields)
    found = [e for e in data["results"] if all(e.get(k) == v for k, v in fields.items())]
    if len(found) != 1:
        raise LookupError(f"{len(found)} results match {fields}")
    return found[0]


def values(entry: dict[str, Any], metric: str) -> list[float]:
    return [r[metric] for r in entry["repeats"] if r.get(metric) is not None]


@dataclass(frozen=True)
class Figure:
    """A measured figure: its value, the spread (min, max) behind it, its
    result file, and how it is written."""

    value: float
    spread: tuple[float, float] | None
    source: str
    unit: str = "x"  # "x" (a ratio), "us", "GB/s", "count", ...

    def fmt(self, v: float) -> str:
        if self.unit == "x":
            return f"{v:.0f}x" if v >= 10 else f"{v:.2f}x"
        if self.unit == "count":
            return f"{v:.0f}"
        if self.unit == "%":
            return f"{v:.0f}%"
        if self.unit == "us":
            return f"{v:.1f} us" if v < 100 else f"{v:.0f} us"
        return number(v) if not self.unit else f"{number(v)} {self.unit}"

    @property
    def text(self) -> str:
        return self.fmt(self.value)

    @property
    def bare(self) -> str:
        """The value without its unit (``2.38``, ``31.2``)."""
        return self.text.rstrip("x").split(" ")[0]

    @property
    def with_spread(self) -> str:
        if self.spread is None:
            return self.text
        lo, hi = (self.fmt(v).rstrip("x").split(" ")[0] for v in self.spread)
        return f"{self.text} ({lo}-{hi})"


def number(v: float) -> str:
    """3 significant figures, k for thousands: 2.95k, 548, 0.97, 6.56."""
    if v >= 1000:
        return f"{v / 1000:.3g}k"
    return f"{v:.3g}"


def ratio(mine: dict[str, Any], base: dict[str, Any], metric: str, source: str, *,
          lower_is_better: bool = False, value: float | None = None) -> Figure:
    """``mine`` against ``base`` in ``metric``: the ratio of the medians
    (inverted when lower is better, so above 1 is better), or ``value`` when
    the suite stored its own ratio; the spread is the ratios repeat by repeat
    (repeat i of each ran side by side)."""
    a, b = values(mine, metric), values(base, metric)
    if value is None:
        ma, mb = statistics.median(a), statistics.median(b)
        value = mb / ma if lower_is_better else ma / mb
    pairs = [(y / x if lower_is_better else x / y) for x, y in zip(a, b) if x and y]
    return Figure(value, (min(pairs), max(pairs)) if len(pairs) > 1 else None, source)


def measured(entry: dict[str, Any], metric: str, source: str, unit: str) -> Figure:
    v = values(entry, metric)
    return Figure(statistics.median(v), (min(v), max(v)), source, unit)


# ---------------------------------------------------------------- the figures

# The evidence set: every file publish renders from, each made by one command
# of the current tree (its ``meta.command``).  dask.json, dask-busy.json,
# dask-switch.json: one entry per (pair, workload, protocol), "value" per repeat.


#: The task shape of busy-worker rows named without one: a result file
#: written before the workload had shapes ran this one.
BUSY_SHAPE = "arith"


def dask_entries(data: Any, workload: str, protocol: str, **where: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The row of ``protocol`` and the row of its baseline, in the same pair,
    both also matching ``where`` (a ``path``, say)."""
    name = workload
    if name.startswith("busy-worker-") and not any(e.get("workload") == name for e in data["results"]):
        name = f"{name}[{BUSY_SHAPE}]"  # the workload names each row after its task shape
    mine = pick(data, workload=name, protocol=protocol, **where)
    more = {"pair": mine["pair"]} if "pair" in mine else {}
    return mine, pick(data, workload=name, protocol=mine["baseline"], **more, **where)


def dask_ratio(file: str, workload: str, protocol: str = "readinto") -> Callable[[Results], Figure]:
    def get(res: Results) -> Figure:
        mine, base = dask_entries(res.json(file), workload, protocol)
        return ratio(mine, base, "value", file, lower_is_better=not mine["higher_is_better"],
                     value=mine["x_baseline"])
    return get


# http.json: a round per repeat of each {impl, case}.


def http_rows(data: Any) -> list[dict[str, Any]]:
    """Every round of an HTTP result file as ``{impl, case, requests, seconds, round, ...}``."""
    return [{"impl": e["impl"], "case": e["case"], **r} for e in data["results"] for r in e["repeats"]]


def http_ratio(file: str, case: str) -> Callable[[Results], Figure]:
    def get(res: Results) -> Figure:
        rows = http_rows(res.json(file))
        rate = {(r["impl"], r["round"]): r["requests"] / r["seconds"] for r in rows if r["case"] == case}
        rounds = sorted({rnd for _, rnd in rate})
        ratios = [rate["readinto", rnd] / rate["stock", rnd] for rnd in rounds]
        return Figure(statistics.median(ratios), (min(ratios), max(ratios)), file)
    return get


# load-*.json: one entry per (server, loop, gil_thread, tls, clients).


def load_entry(res: Results, file: str, server: str, loop: str, **more: Any) -> dict[str, Any]:
    return pick(res.json(file), server=server, loop=loop, **more)


def load_ratio(file: str, server: str, loop: str, base: str, *, metric: str = "loop_cpu_us_per_msg",
               **more: Any) -> Callable[[Results], Figure]:
    """Loop CPU per message against ``base`` (below 1: cheaper), or msgs/s
    against it (above 1: faster) with ``metric="msgs_per_s"``."""
    def get(res: Results) -> Figure:
        mine = load_entry(res, file, server, loop, **more)
        theirs = load_entry(res, file, base, loop, **more)
        a, b = values(mine, metric), values(theirs, metric)
        value = statistics.median(a) / statistics.median(b)
        pairs = [x / y for x, y in zip(a, b) if x and y]
        return Figure(value, (min(pairs), max(pairs)), file)
    return get


def load_value(file: str, server: str, loop: str, metric: str, unit: str, **more: Any) -> Callable[[Results], Figure]:
    def get(res: Results) -> Figure:
        return measured(load_entry(res, file, server, loop, **more), metric, file, unit)
    return get


# echo-*.json: one entry per (impl, msize_text, nframes, mode, clients, path).


def echo_entry(res: Results, file: str, impl: str, msize: str, path: str = "loopback") -> dict[str, Any]:
    return pick(res.json(file), impl=impl, msize_text=msize, mode="pingpong", nframes=1, clients=1, path=path)


def echo_ratio(file: str, impl: str, base: str, msize: str, path: str = "loopback") -> Callable[[Results], Figure]:
    def get(res: Results) -> Figure:
        mine, theirs = (echo_entry(res, file, i, msize, path) for i in (impl, base))
        return ratio(mine, theirs, "msgs_per_s", file)
    return get


def echo_value(file: str, impl: str, msize: str, path: str, metric: str, unit: str) -> Callable[[Results], Figure]:
    def get(res: Results) -> Figure:
        return measured(echo_entry(res, file, impl, msize, path), metric, file, unit)
    return get


# idle-10k.json: one entry per kind; per repeat "per_connection" (bytes) and
# "gc_objects_per_connection" (objects the cyclic GC tracks).


def idle_value(file: str, kind: str, metric: str, unit: str, scale: float = 1.0) -> Callable[[Results], Figure]:
    """The median of ``metric`` over the repeats of ``kind``, divided by ``scale``."""
    def get(res: Results) -> Figure:
        v = [x / scale for x in values(pick(res.json(file), kind=kind), metric)]
        return Figure(statistics.median(v), None, file, unit)
    return get


LOAD = "load-hotpath.json"
TLS = "load-tls.json"
TENK = "load-10k.json"
IDLE = "idle-10k.json"
NETPATH = "echo-netpath.json"
SWITCH = "dask-switch.json"
LOOPS = ("asyncio", "uvloop")
#: The servers of the 10,000-connection table, asyncio Streams (the reference) last.
TENK_SERVERS = ("readinto", "framed", "framed-pool", "asyncio-streams")

#: Every named figure: name -> how to get it from the result files.
FIGURES: dict[str, Callable[[Results], Figure]] = {
    # dask: python -m benchmarks.dask --workload rpc,tasks,chain,transfer --pair tcp,tls
    **{f"dask.{wl}": dask_ratio("dask.json", wl) for wl in ("rpc", "tasks", "chain", "transfer")},
    **{f"dask.tls-{wl}": dask_ratio("dask.json", wl, "readinto-tls") for wl in ("rpc", "transfer")},
    # dask, a worker whose task threads run Python
    "busy.rpc": dask_ratio("dask-busy.json", "busy-worker-rpc"),
    "busy.fetch": dask_ratio("dask-busy.json", "busy-worker-fetch"),
    "busy.idle-rpc": dask_ratio("dask-busy.json", "rpc"),
    # tcp:// switched in place (the switch) against stock tcp://, both sides switched.  (The mixed
    # pairs, switch-sink and switch-source, are not published from this file: it was made while
    # their baseline was a LocalCluster beside their SpecCluster, two cluster shapes.)
    **{f"switch.{pair}.{wl}": dask_ratio(SWITCH, wl, protocol)
       for pair, protocol in (("tcp", "tcp+switch"), ("tls", "tls+switch"))
       for wl in ("rpc", "transfer", "transfer-cold")},
    # HTTP, python -m benchmarks.http --rounds 5
    **{f"http.{case}": http_ratio("http.json", case) for case in ("hello", "post", "put", "download")},
    # streams under load, 64 connections, 1 KiB: loop CPU per message, and msgs/s with a GIL-holding thread
    **{f"load.{server}.{loop}.x-stock": load_ratio(LOAD, server, loop, "stock", gil_thread=False)
       for server in ("readinto", "framed-pool") for loop in LOOPS},
    **{f"load.{server}.{loop}.x-streams": load_ratio(LOAD, server, loop, "asyncio-streams", gil_thread=False)
       for server in ("stock", "readinto", "framed-pool", "asyncio-protocol") for loop in LOOPS},
    **{f"load.{server}.{loop}.us": load_value(LOAD, server, loop, "loop_cpu_us_per_msg", "us", gil_thread=False)
       for server in ("stock", "readinto", "framed-pool", "asyncio-streams", "asyncio-protocol") for loop in LOOPS},
    **{f"gil.{server}.{loop}.x-stock": load_ratio(LOAD, server, loop, "stock", metric="msgs_per_s", gil_thread=True)
       for server in ("readinto", "framed-pool", "asyncio-streams", "asyncio-protocol") for loop in LOOPS},
    # the same over TLS
    **{f"tls.{server}.{loop}.x-stock": load_ratio(TLS, server, loop, "stock")
       for server in ("readinto", "framed-pool", "asyncio-streams") for loop in LOOPS},
    **{f"tls.{server}.{loop}.msgs-x-stock": load_ratio(TLS, server, loop, "stock", metric="msgs_per_s")
       for server in ("readinto", "framed-pool", "asyncio-streams") for loop in LOOPS},
    # 10,000 connections
    **{f"10k.{server}.{loop}.msgs": load_value(TENK, server, loop, "msgs_per_s", "")
       for server in TENK_SERVERS for loop in LOOPS},
    **{f"10k.{server}.{loop}.x-streams": load_ratio(TENK, server, loop, "asyncio-streams", metric="msgs_per_s")
       for server in TENK_SERVERS[:-1] for loop in LOOPS},
    **{f"idle.{kind}": idle_value(IDLE, kind, "per_connection", "KiB", scale=1024)
       for kind in ("stock", "asyncio", "readinto", "framed")},
    **{f"idle.{kind}.gc": idle_value(IDLE, kind, "gc_objects_per_connection", "")
       for kind in ("stock", "asyncio", "readinto", "framed")},
    # one connection, 1 KiB ping-pong, two CPUs and one (taskset)
    **{f"echo.{cpus}.{impl}": echo_ratio(f"echo-{cpus}.json", impl, "stock-read_bytes", "1KiB")
       for cpus in ("twocpu", "onecpu") for impl in ("readinto", "readinto-spin", "threads")},
    **{f"echo.{cpus}.spin-x-readinto": echo_ratio(f"echo-{cpus}.json", "readinto-spin", "readinto", "1KiB")
       for cpus in ("twocpu", "onecpu")},
}

#: The network paths and implementations of echo-netpath.json.
NETPATHS = ("loopback", "mtu1500", "mtu9000", "mtu9000@1gbit")
NETPATH_IMPLS = ("readinto", "framed-pool", "stock-read_bytes", "asyncio-streams", "uvloop-streams", "threads")
NETPATH_SIZES = ("1KiB", "1MiB", "100MiB")
FIGURES.update({
    f"netpath.{path}.{size}.{impl}.{key}": echo_value(NETPATH, impl, size, path, metric, unit)
    for path in NETPATHS for size in NETPATH_SIZES for impl in NETPATH_IMPLS
    for key, metric, unit in (("mib", "mib_per_s", "MiB/s"), ("cpu", "server_cpu_s_per_gib", "s/GiB"))
})


def figure(res: Results, name: str) -> Figure:
    return FIGURES[name](res)


# ---------------------------------------------------------------- commands


def command(res: Results, file: str) -> str:
    """The command that wrote ``file`` (its ``meta.command``), its output
    paths pointed at ``benchmarks/results/``."""
    recorded = res.json(file).get("meta", {}).get("command")
    if not recorded:
        raise LookupError(f"{file}: records no command")
    return shlex.join(outputs_in(shlex.split(recorded), file, "benchmarks/results"))


def outputs_in(words: Sequence[str], file: str, directory: str) -> list[str]:
    """``words`` (a command) with the value of each ``--json`` and ``--plot``
    pointed at ``directory``, named after ``file``: ``DIR/STEM.json``,
    ``DIR/STEM.png`` (the suffix the command gave)."""
    out = list(words)
    for i in range(1, len(out)):
        if out[i - 1] in ("--json", "--plot"):
            out[i] = f"{directory}/{Path(file).stem}{Path(out[i]).suffix}"
    return out


#: How a result file's run differed from its command alone (a command
#: recorded by the harness names ``taskset`` and ``TORNADO_READINTO_*``).
COMMAND_NOTES: dict[str, str] = {}


def source_line(*pairs: tuple[str, str]) -> str:
    """The closing line of a generated table: its files and commands."""
    parts = [f"``benchmarks/results/{file}`` (``{cmd}``"
             + (f", {COMMAND_NOTES[file]}" if file in COMMAND_NOTES else "") + ")" for file, cmd in pairs]
    return "Result file" + ("s" if len(parts) > 1 else "") + ": " + "; ".join(parts) + "."


# ---------------------------------------------------------------- tables


def simple_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A reST simple table (first column left, the others as given)."""
    cols = list(zip(header, *rows))
    widths = [max(len(c) for c in col) for col in cols]
    rule = "  ".join("=" * w for w in widths)

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    return "\n".join([rule, line(header), rule, *(line(r) for r in rows), rule]) + "\n"


#: The headline: (who, case, figure name, how to read it), in order.
HEADLINE: list[tuple[str, str, str]] = [
    ("dask", "8 x 64 MiB worker-to-worker transfers, GB/s", "dask.transfer"),
    ("dask", "client-scheduler RPCs/s", "dask.rpc"),
    ("dask", "RPCs/s to a worker whose task threads run Python", "busy.rpc"),
    ("dask", "20,000 trivial tasks, tasks/s", "dask.tasks"),
    ("dask", "a chain of 1,000 dependent tasks", "dask.chain"),
    ("Tornado", "HTTP hello-world GET, requests/s", "http.hello"),
    ("Tornado", "HTTP 256 MiB POST, requests/s", "http.post"),
    ("Tornado", "1 KiB echo, one connection, messages/s", "echo.twocpu.readinto"),
    ("Tornado", "1 KiB echo, 64 connections, messages/s", "load.readinto.asyncio.x-stock"),
]

# The 64-connection row is a CPU ratio in the file (loop CPU per message,
# lower is cheaper); the headline shows its inverse, messages per CPU second.
INVERTED = {"load.readinto.asyncio.x-stock"}


def headline_rows(res: Results) -> list[tuple[str, str, Figure]]:
    rows = []
    for who, case, name in HEADLINE:
        f = figure(res, name)
        if name in INVERTED:
            lo_hi = (1 / f.spread[1], 1 / f.spread[0]) if f.spread else None
            f = Figure(1 / f.value, lo_hi, f.source)
            case = "1 KiB echo, 64 connections, messages per CPU second (asyncio's loop)"
        rows.append((who, case, f))
    return rows


def headline_table(res: Results) -> str:
    rows = [(who, case, f.with_spread, f"``{f.source}``") for who, case, f in headline_rows(res)]
    against = "tornado_readinto (dask: readinto://) against tcp:// or stock Tornado"
    return simple_table(("for", against, "ratio (spread)", "result file"), rows)


def with_source(table: str, res: Results, *files: str) -> str:
    """A generated include: ``table`` and the line naming its files and commands."""
    return table + "\n" + source_line(*((f, command(res, f)) for f in files)) + "\n"


DASK_WORKLOADS = {
    "rpc": "client-scheduler RPC", "tasks": "20,000 trivial tasks", "chain": "dependent chain, 1,000 tasks",
    "transfer": "8 x 64 MiB, worker to worker", "transfer-cold": "16 x 64 MiB, worker to worker, fresh cluster",
}


def dask_table(res: Results) -> str:
    file = "dask.json"
    data = res.json(file)
    rows = []
    for e in data["results"]:
        if e["protocol"] == e["baseline"]:
            continue
        base = dask_entries(data, e["workload"], e["protocol"])[1]
        tls = e["protocol"].endswith("tls")
        x = figure(res, f"dask.tls-{e['workload']}" if tls else f"dask.{e['workload']}")
        rows.append((DASK_WORKLOADS[e["workload"]] + (" (TLS)" if tls else ""), e["metric"],
                     measured(base, "value", file, "").with_spread, measured(e, "value", file, "").with_spread,
                     x.with_spread))
    return with_source(simple_table(("workload", "metric", "``tcp://`` / ``tls://``",
                                     "``readinto://`` / ``-tls://``", "x (spread)"), rows), res, file)


BUSY_SHAPES = ("arith", "builtins", "dictlist", "numpy")


def dask_busy_table(res: Results) -> str:
    """RPCs to an idle worker, then per task shape the RPCs to the busy
    worker and a 64 MiB fetch from it (the headline's busy row: ``arith``)."""
    file = "dask-busy.json"
    data = res.json(file)
    rows = []
    cases: list[tuple[str, str, str | None]] = [("rpc", "RPCs/s to an idle worker", "busy.idle-rpc")]
    for shape in BUSY_SHAPES:
        cases += [(f"busy-worker-rpc[{shape}]", f"RPCs/s to the busy worker, {shape}", None),
                  (f"busy-worker-fetch[{shape}]", f"a 64 MiB fetch from it, {shape}, s", None)]
    for wl, label, key in cases:
        m, b = dask_entries(data, wl, "readinto")
        x = figure(res, key) if key else dask_ratio(file, wl)(res)
        rows.append((label, measured(b, "value", file, "").with_spread,
                     measured(m, "value", file, "").with_spread, x.with_spread))
    return with_source(simple_table(("workload", "``tcp://``", "``readinto://``", "x (spread)"), rows), res, file)


def switch_table(res: Results) -> str:
    """``tcp://`` and ``tls://`` switched in place (``dask-tcp-switch``) in
    every process of a cluster, against stock."""
    file = SWITCH
    data = res.json(file)
    labels = {"tcp": "``tcp://``", "tls": "``tls://``"}
    protocols = {"tcp": "tcp+switch", "tls": "tls+switch"}
    rows = []
    for key, label in labels.items():
        for wl in ("rpc", "transfer", "transfer-cold"):
            name = f"switch.{key}.{wl}"
            if name not in FIGURES:
                continue
            m, b = dask_entries(data, wl, protocols[key])
            rows.append((label, f"{DASK_WORKLOADS[wl]}, {m['metric']}", measured(b, "value", file, "").with_spread,
                         measured(m, "value", file, "").with_spread, figure(res, name).with_spread))
    return with_source(simple_table(("scheme", "workload", "stock", "switched", "x (spread)"), rows), res, file)


def http_table(res: Results) -> str:
    labels = {"hello": "hello-world GET, 32 connections", "post": "256 MiB POST",
              "put": "streaming 256 MiB PUT", "download": "8 MiB GET response"}
    rows = [(labels[c], figure(res, f"http.{c}").with_spread) for c in labels]
    return with_source(simple_table(("requests/s against stock Tornado", "x (spread)"), rows), res, "http.json")


SERVER_NAMES = {
    "stock": "stock ``IOStream``", "readinto": "``ReadIntoIOStream``",
    "framed-pool": "``FramedStream`` + ``BufferPool``", "framed": "``FramedStream``",
    "asyncio-streams": "asyncio Streams",
    "asyncio-protocol": "``BufferedProtocol`` echo",
}


def load_table(res: Results) -> str:
    """Loop CPU per message and its ratio to asyncio Streams, 64 connections."""
    rows = []
    for server in ("readinto", "framed-pool", "stock", "asyncio-streams", "asyncio-protocol"):
        cells = [SERVER_NAMES[server]]
        for loop in LOOPS:
            us = figure(res, f"load.{server}.{loop}.us")
            x = "1.00x" if server == "asyncio-streams" else figure(res, f"load.{server}.{loop}.x-streams").with_spread
            cells += [us.with_spread, x]
        rows.append(cells)
    return with_source(simple_table(("loop CPU per message", "asyncio (us)", "x Streams", "uvloop (us)",
                                     "x Streams"), rows), res, LOAD)


def stock_table(res: Results) -> str:
    """Against stock Tornado: CPU per message, over TLS, and msgs/s with a GIL thread."""
    rows = []
    for server in ("readinto", "framed-pool", "asyncio-streams", "asyncio-protocol"):
        cpu = [figure(res, f"load.{server}.{loop}.x-stock").with_spread if server in ("readinto", "framed-pool")
               else "" for loop in LOOPS]
        tls = [figure(res, f"tls.{server}.{loop}.x-stock").with_spread if server != "asyncio-protocol" else ""
               for loop in LOOPS]
        gil = [figure(res, f"gil.{server}.{loop}.x-stock").with_spread for loop in LOOPS]
        rows.append((SERVER_NAMES[server], *cpu, *tls, *gil))
    return with_source(simple_table(("x stock Tornado", "CPU, asyncio", "CPU, uvloop", "CPU, TLS, asyncio",
                                     "CPU, TLS, uvloop", "msgs/s, GIL thread, asyncio",
                                     "msgs/s, GIL thread, uvloop"), rows), res, LOAD, TLS)


def echo_table(res: Results) -> str:
    rows = []
    for cpus, label in (("twocpu", "two CPUs"), ("onecpu", "one CPU (``taskset``)")):
        rows.append((f"1 KiB ping-pong, {label}",
                     *(figure(res, f"echo.{cpus}.{impl}").with_spread for impl in ("readinto", "readinto-spin",
                                                                                    "threads"))))
    return with_source(simple_table(("msgs/s against stock ``read_bytes``", "``readinto`` (default)",
                                     "``readinto-spin`` (busy polling)", "blocking threads"), rows),
                       res, "echo-twocpu.json", "echo-onecpu.json")


DASK_NETPATH = "dask-netpath.json"
DASK_NETPATHS = ("loopback", "mtu1500", "mtu9000", "mtu1500@1gbit")
DASK_NETPATH_WORKLOADS = {"rpc": ("client-scheduler RPC", "cpu_us_per_rpc"),
                          "transfer": ("8 x 64 MiB, worker to worker", "cpu_s_per_gb")}


def dask_path_ratio(workload: str, path: str, metric: str) -> Callable[[Results], Figure]:
    """The switch against stock tcp:// on ``path``: the rate (``value``,
    above 1: faster) or the CPU per unit of work (above 1: cheaper)."""
    def get(res: Results) -> Figure:
        mine, base = dask_entries(res.json(DASK_NETPATH), workload, "tcp+switch", path=path)
        return ratio(mine, base, metric, DASK_NETPATH, lower_is_better=metric != "value")
    return get


FIGURES.update({
    f"dasknet.{path}.{wl}.{key}": dask_path_ratio(wl, path, metric)
    for path in DASK_NETPATHS for wl, (_, cpu) in DASK_NETPATH_WORKLOADS.items()
    for key, metric in (("rate", "value"), ("cpu", cpu))
})


def dask_netpath_table(res: Results) -> str:
    """dask over the switch against stock tcp:// per network path: the
    rate, and the CPU per unit of work of the processes at the ends."""
    rows = []
    for wl, (label, _) in DASK_NETPATH_WORKLOADS.items():
        for key, what in (("rate", "rate"), ("cpu", "CPU saved")):
            cells = [f"{label}, {what}"]
            cells += [figure(res, f"dasknet.{path}.{wl}.{key}").with_spread for path in DASK_NETPATHS]
            rows.append(cells)
    header = ("tcp:// switched against stock", *DASK_NETPATHS)
    return with_source(simple_table(header, rows), res, DASK_NETPATH)


USERS = "dask-users.json"
#: The workloads users run (`benchmarks.dask_users`), in the table's order.
USER_WORKLOADS = ("p2p-shuffle", "p2p-rechunk", "gather", "scatter", "scheduler-scale")
USER_SCHEMES = {"tcp": "tcp+switch", "tls": "tls+switch"}


def user_cpu(entry: dict[str, Any]) -> list[float]:
    """Per repeat: CPU seconds of the processes that matter (``cpu_s``), or
    the scheduler's us per task for ``scheduler-scale``."""
    if entry["workload"] == "scheduler-scale":
        return values(entry, "scheduler_us_per_task")
    return [sum(v for v in r["cpu_s"].values() if v is not None) for r in entry["repeats"] if r.get("cpu_s")]


def user_cpu_ratio(workload: str, scheme: str) -> Callable[[Results], Figure]:
    """The stock side's CPU (`user_cpu`) over the switched side's (above 1: the switched side spends less)."""
    def get(res: Results) -> Figure:
        mine, base = dask_entries(res.json(USERS), workload, USER_SCHEMES[scheme])
        a, b = user_cpu(mine), user_cpu(base)
        pairs = [y / x for x, y in zip(a, b) if x and y]
        return Figure(statistics.median(b) / statistics.median(a), (min(pairs), max(pairs)), USERS)
    return get


def user_share(workload: str, scheme: str, protocol: str) -> Callable[[Results], Figure]:
    """The comm's share of the sampled processes' busy samples, in percent."""
    def get(res: Results) -> Figure:
        entry = pick(res.json(USERS), workload=workload, protocol=protocol)
        return Figure(100 * entry["comm_share"], None, USERS, "%")
    return get


def user_floor(workload: str, protocol: str) -> Callable[[Results], Figure]:
    """The share (percent) of the sampled processes' busy samples in
    distributed's serialization and the socket calls: what the switch
    leaves as stock's."""
    def get(res: Results) -> Figure:
        entry = pick(res.json(USERS), workload=workload, protocol=protocol)
        total: dict[str, int] = {}
        for profile in entry["profiles"]:
            for counts in profile["samples"].values():
                for category, n in counts.items():
                    total[category] = total.get(category, 0) + n
        floor = total.get("serialization", 0) + total.get("syscalls", 0)
        return Figure(100 * floor / sum(total.values()), None, USERS, "%")
    return get


FIGURES.update({
    **{f"users.{scheme}.scheduler-scale.floor": user_floor("scheduler-scale", protocol)
       for scheme, protocol in USER_SCHEMES.items()},
    **{f"users.{scheme}.{wl}": dask_ratio(USERS, wl, protocol)
       for scheme, protocol in USER_SCHEMES.items() for wl in USER_WORKLOADS},
    **{f"users.{scheme}.{wl}.cpu": user_cpu_ratio(wl, scheme) for scheme in USER_SCHEMES for wl in USER_WORKLOADS},
    **{f"users.{scheme}.{wl}.share.{side}": user_share(wl, scheme, protocol)
       for scheme, switched in USER_SCHEMES.items() for wl in USER_WORKLOADS
       for side, protocol in (("stock", scheme), ("switched", switched))},
})


#: The longer run of the two rows that lost (9 settled repetitions, tcp:// only).
USERS_LONGER = "dask-users-gather.json"
FIGURES.update({f"userslong.tcp.{wl}": dask_ratio(USERS_LONGER, wl, "tcp+switch") for wl in ("gather", "p2p-rechunk")})


#: Fresh clusters' 16 x 64 MiB worker-to-worker transfers over tls://, as
#: they are and with one heuristic off (``--env``, ``--busy-poll``).
COLD_TLS = {"default": "dask-cold-tls.json", "nohold": "dask-cold-tls-nohold.json",
            "nobusy": "dask-cold-tls-nobusy.json"}


def cold_sink(protocol: str, metric: str) -> Callable[[Results], Figure]:
    """The receiving worker's ``metric`` per GiB in `COLD_TLS`'s default run."""
    def get(res: Results) -> Figure:
        file = COLD_TLS["default"]
        return measured(pick(res.json(file), workload="transfer-cold", protocol=protocol), metric, file, "")
    return get


FIGURES.update({
    **{f"coldtls.{name}": dask_ratio(file, "transfer-cold", "tls+switch") for name, file in COLD_TLS.items()},
    **{f"coldtls.{side}.{key}": cold_sink(protocol, metric)
       for side, protocol in (("stock", "tls"), ("switched", "tls+switch"))
       for key, metric in (("faults", "sink_minflt_per_gib"), ("sys", "sink_sys_s_per_gib"))},
})


def user_label(data: Any, workload: str) -> str:
    """What a row of the workloads users run did, from the sizes its file records."""
    sizes = data["meta"]["sizes"]
    return {
        "p2p-shuffle": f"P2P shuffle, dask.datasets.timeseries, {sizes['user_shuffle']}",
        "p2p-rechunk": f"P2P rechunk, {sizes['user_rechunk']} float64, row strips to column strips",
        "gather": f"client.gather, {sizes['user_arrays']} from the workers",
        "scatter": f"client.scatter, {sizes['user_arrays']} to the workers",
        "scheduler-scale": f"dask scheduler, {sizes['scheduler_scale']}",
    }[workload]


def users_table(res: Results) -> str:
    """Stock against the README's block, fresh processes every repetition:
    seconds, the ratio, the CPU of the processes that matter and the comm's
    share of their samples."""
    data = res.json(USERS)
    rows = []
    for scheme, switched in USER_SCHEMES.items():
        for wl in USER_WORKLOADS:
            mine, base = dask_entries(data, wl, switched)
            unit = "us/task" if wl == "scheduler-scale" else "s"
            cpu = [statistics.median(user_cpu(e)) for e in (base, mine)]
            shares = [figure(res, f"users.{scheme}.{wl}.share.{side}").text for side in ("stock", "switched")]
            walls = [measured(e, "value", USERS, "s").with_spread for e in (base, mine)]
            x = figure(res, f"users.{scheme}.{wl}").with_spread
            rows.append((f"``{scheme}://``", user_label(data, wl), *walls, x,
                         f"{number(cpu[0])} / {number(cpu[1])} {unit}", " / ".join(shares)))
    header = ("scheme", "workload", "stock, wall", "switched, wall", "x (spread)", "CPU, stock / switched",
              "comm share, stock / switched")
    return with_source(simple_table(header, rows), res, USERS)


LOAD_NETPATH = "load-netpath.json"
LOAD_NETPATHS = ("loopback", "mtu1500", "mtu9000")
LOAD_NETPATH_SERVERS = ("stock", "readinto", "framed-pool", "asyncio-streams", "asyncio-protocol")
FIGURES.update({
    f"loadpath.{path}.{server}.{loop}.us":
        load_value(LOAD_NETPATH, server, loop, "loop_cpu_us_per_msg", "us", path=path)
    for path in LOAD_NETPATHS for server in LOAD_NETPATH_SERVERS for loop in LOOPS
})
FIGURES.update({
    f"loadpath.{path}.{server}.{loop}.x-streams":
        load_ratio(LOAD_NETPATH, server, loop, "asyncio-streams", path=path)
    for path in LOAD_NETPATHS for server in LOAD_NETPATH_SERVERS for loop in LOOPS
})


def load_netpath_table(res: Results) -> str:
    """64 connections of 1 KiB messages, the server saturated, per network
    path: the loop thread's CPU microseconds per message, and that against
    asyncio Streams on the same loop and path."""
    rows = []
    for server in LOAD_NETPATH_SERVERS:
        for loop in LOOPS:
            cells = [f"{SERVER_NAMES[server]}, {loop}"]
            for path in LOAD_NETPATHS:
                key = f"loadpath.{path}.{server}.{loop}"
                us = figure(res, f"{key}.us").bare
                x = "1.00x" if server == "asyncio-streams" else figure(res, f"{key}.x-streams").bare
                cells.append(f"{us} ({x}x)" if not x.endswith("x") else f"{us} ({x})")
            rows.append(cells)
    header = ("64 connections, 1 KiB: loop us/msg (x Streams)", *LOAD_NETPATHS)
    return with_source(simple_table(header, rows), res, LOAD_NETPATH)


NETPATH_NAMES = {"readinto": "``ReadIntoIOStream``", "framed-pool": "``FramedStream`` + ``BufferPool``",
                 "stock-read_bytes": "stock ``read_bytes``", "asyncio-streams": "asyncio Streams",
                 "uvloop-streams": "uvloop Streams", "threads": "blocking threads"}


def netpath_table(res: Results) -> str:
    """Ping-pong throughput (MiB/s) and the server's CPU seconds per GiB
    echoed, per network path: loopback, and a veth pair between two network
    namespaces at MTU 1500, 9000, and 9000 limited to 1 Gbit/s."""
    rows = []
    for size in NETPATH_SIZES:
        for impl in NETPATH_IMPLS:
            cells = [f"{size[:-3]} {size[-3:]}, {NETPATH_NAMES[impl]}"]
            for path in NETPATHS:
                mib = figure(res, f"netpath.{path}.{size}.{impl}.mib")
                cpu = figure(res, f"netpath.{path}.{size}.{impl}.cpu")
                cells.append(f"{mib.bare} / {cpu.bare}")
            rows.append(cells)
    return with_source(simple_table(("MiB/s / server CPU s per GiB", *NETPATHS), rows), res, NETPATH)


def tenk_table(res: Results) -> str:
    """10,000 connections: messages per second against asyncio Streams, and
    the server's memory per idle connection."""
    rows = []
    for server in TENK_SERVERS:
        cells = [SERVER_NAMES[server]]
        for loop in LOOPS:
            x = "1.00x" if server == "asyncio-streams" else figure(res, f"10k.{server}.{loop}.x-streams").with_spread
            cells += [figure(res, f"10k.{server}.{loop}.msgs").with_spread, x]
        rows.append(cells)
    load = with_source(simple_table(("10,000 connections, 1 KiB", "msgs/s, asyncio", "x Streams", "msgs/s, uvloop",
                                     "x Streams"), rows), res, TENK)
    kinds = {"stock": "stock ``IOStream``", "asyncio": "asyncio Streams", "readinto": "``ReadIntoIOStream``",
             "framed": "``FramedStream``"}
    idle = with_source(simple_table(("10,000 idle connections", "KiB per connection",
                                     "GC-tracked objects per connection"),
                                    [(label, figure(res, f"idle.{kind}").bare, figure(res, f"idle.{kind}.gc").bare)
                                     for kind, label in kinds.items()]),
                       res, IDLE)
    return load + "\n" + idle


#: Every generated include: file name in docs/_generated -> renderer.
TABLES: dict[str, Callable[[Results], str]] = {
    "headline.rst": lambda res: headline_table(res) + "\n" + headline_sources(res) + "\n",
    "dask.rst": dask_table,
    "dask-busy.rst": dask_busy_table,
    "dask-switch.rst": switch_table,
    "dask-users.rst": users_table,
    "http.rst": http_table,
    "load.rst": load_table,
    "stock.rst": stock_table,
    "echo.rst": echo_table,
    "netpath.rst": netpath_table,
    "load-netpath.rst": load_netpath_table,
    "dask-netpath.rst": dask_netpath_table,
    "10k.rst": tenk_table,
}


def headline_sources(res: Results) -> str:
    files = []
    for _, _, f in headline_rows(res):
        if f.source not in files:
            files.append(f.source)
    return source_line(*((file, command(res, file)) for file in files))


# ---------------------------------------------------------------- the plot


def plot_rows(res: Results) -> list[tuple[str, Figure]]:
    return [(f"{who}: {case}", f) for who, case, f in headline_rows(res)]


def plot_text(res: Results) -> str:
    """The values the plot shows, one line each (checked like a table)."""
    lines = ["# docs/_generated/headline.png shows these values (python -m benchmarks.publish)"]
    lines += [f"{label}: {f.with_spread} [{f.source}]" for label, f in plot_rows(res)]
    return "\n".join(lines) + "\n"


def draw_plot(res: Results, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = plot_rows(res)[::-1]
    fig, ax = plt.subplots(figsize=(8.5, 0.42 * len(rows) + 1.2))
    ys = range(len(rows))
    vals = [f.value for _, f in rows]
    lo = [f.value - (f.spread[0] if f.spread else f.value) for _, f in rows]
    hi = [(f.spread[1] if f.spread else f.value) - f.value for _, f in rows]
    colours = ["#4c72b0" if label.startswith("dask") else "#dd8452" for label, _ in rows]
    ax.barh(list(ys), vals, xerr=[lo, hi], color=colours, capsize=3, height=0.6)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(list(ys), [label for label, _ in rows], fontsize=8)
    for y, v in zip(ys, vals):
        ax.text(0.03, y, f"{v:.2f}x", va="center", ha="left", fontsize=8, color="white", fontweight="bold")
    ax.set_xlabel("times the baseline (median; whiskers: spread); 1.0 = no change")
    ax.set_title("tornado_readinto against dask's tcp:// and stock Tornado", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)


# ---------------------------------------------------------------- quoted figures


@dataclass(frozen=True)
class Quote:
    """A sentence of ``path`` that quotes figures: ``{name}`` is a figure of
    `FIGURES` as written (``2.38x``), ``{name:spread}`` with its spread,
    ``{name:bare}`` without its unit."""

    path: str
    text: str

    def render(self, res: Results) -> str:
        def sub(m: re.Match[str]) -> str:
            name, _, style = m.group(1).partition(":")
            f = figure(res, name)
            return {"": f.text, "spread": f.with_spread, "bare": f.bare}[style]
        return re.sub(r"\{([\w.:-]+)\}", sub, self.text)

    def names(self) -> list[str]:
        return [m.partition(":")[0] for m in re.findall(r"\{([\w.:-]+)\}", self.text)]


def normalize(text: str) -> str:
    """Text as read: markup and line breaks do not matter."""
    text = text.replace("``", "").replace("\\ ", "")
    return re.sub(r"\s+", " ", text)


#: Every figure quoted in prose.  Add the sentence here when a page quotes a
#: measured figure outside a generated table.
QUOTES: list[Quote] = [
    # README
    Quote("README.rst", "64 MiB worker-to-worker transfers run at {switch.tcp.transfer:spread} stock tcp:// on a "
                        "warm cluster and at {switch.tcp.transfer-cold:spread} on a fresh one"),
    Quote("README.rst", "hello-world GET at {http.hello:spread} the requests/s of stock Tornado"),
    Quote("README.rst", "Client-scheduler RPCs gain most: {switch.tcp.rpc:spread} stock tcp://, and "
                        "{switch.tls.rpc:spread} over tls://"),
    Quote("README.rst", "a P2P dataframe shuffle of about 1 GB at {users.tcp.p2p-shuffle:spread} stock over tcp:// "
                        "and {users.tls.p2p-shuffle:spread} over tls://, the comm {users.tcp.p2p-shuffle.share.stock} "
                        "of the workers' CPU"),
    Quote("README.rst", "a 1 GiB P2P rechunk at {users.tcp.p2p-rechunk:spread} and {users.tls.p2p-rechunk:spread}, "
                        "{userslong.tcp.p2p-rechunk:spread} over 9 settled repetitions"),
    Quote("README.rst", "the client gathering 8 x 64 MiB at {users.tcp.gather:spread} and {users.tls.gather:spread}, "
                        "{userslong.tcp.gather:spread} over 9 settled repetitions"),
    Quote("README.rst", "the client scattering 8 x 64 MiB at {users.tcp.scatter:spread} and "
                        "{users.tls.scatter:spread}"),
    Quote("README.rst", "a dask scheduler with 64 workers and 10,000 tiny tasks at "
                        "{users.tcp.scheduler-scale:spread} and {users.tls.scheduler-scale:spread}, with "
                        "{users.tcp.scheduler-scale.cpu} less CPU per task over tcp://"),
    # docs/performance.rst, the workloads users run
    Quote("docs/performance.rst", "over 9 settled repetitions (benchmarks/results/dask-users-gather.json, python -m "
                                  "benchmarks.dask --workload gather,p2p-rechunk --pair switch --repeat 9 --warmup 0 "
                                  "--user-profile 0) the gather runs at {userslong.tcp.gather:spread} stock and the "
                                  "rechunk at {userslong.tcp.p2p-rechunk:spread}"),
    Quote("docs/performance.rst", "about a third of its CPU either way, and distributed's serialization and the "
                                  "socket calls alone, which the switch leaves as stock's, are "
                                  "{users.tcp.scheduler-scale.floor} of it over tcp://"),
    Quote("docs/performance.rst", "The P2P rechunk over tcp:// runs at {users.tcp.p2p-rechunk} in the "
                                  "five-repetition run, within its spread, and at {userslong.tcp.p2p-rechunk} over 9"),
    Quote("docs/performance.rst", "runs at {coldtls.default:spread}, the switched receiver taking fewer page faults "
                                  "({coldtls.switched.faults} against {coldtls.stock.faults} per GiB) and less kernel "
                                  "time ({coldtls.switched.sys} against {coldtls.stock.sys} s per GiB); with the GIL "
                                  "hold off {coldtls.nohold:spread}, with busy polling off {coldtls.nobusy:spread}"),
    # CHANGELOG.rst
    Quote("CHANGELOG.rst", "the gather runs at {users.tcp.gather} stock ({userslong.tcp.gather} over 9 settled "
                           "repetitions"),
    # docs/guides/dask.rst
    Quote("docs/guides/dask.rst", "64 MiB worker-to-worker transfers at {dask.transfer} tcp://"),
    Quote("docs/guides/dask.rst", "RPCs at {dask.rpc}"),
    Quote("docs/guides/dask.rst", "trivial tasks at {dask.tasks}"),
    Quote("docs/guides/dask.rst", "Switched in place, tcp:// moved them at {switch.tcp.transfer} stock tcp:// and "
                                  "answered RPCs at {switch.tcp.rpc}"),
    # docs/guides/tornado.rst
    Quote("docs/guides/tornado.rst", "a hello-world GET at {http.hello} stock Tornado's requests/s"),
    Quote("docs/guides/tornado.rst", "a 256 MiB POST at {http.post}"),
    # docs/performance.rst
    Quote("docs/performance.rst", "{dask.transfer} for 64 MiB worker-to-worker transfers"),
    Quote("docs/performance.rst", "ReadIntoIOStream serves {10k.readinto.asyncio.x-streams} (asyncio) and "
                                  "{10k.readinto.uvloop.x-streams} (uvloop) the messages per second of asyncio "
                                  "Streams, and FramedStream {10k.framed.asyncio.x-streams} and "
                                  "{10k.framed.uvloop.x-streams}"),
    # CHANGELOG
    Quote("CHANGELOG.rst", "answers RPCs at {busy.rpc} tcp://"),
    Quote("CHANGELOG.rst", "a server costs {idle.readinto} of RSS per idle ReadIntoIOStream connection and "
                           "{idle.framed} per FramedStream one at 10,000 connections, against {idle.stock} for "
                           "stock IOStream and {idle.asyncio} for asyncio Streams"),
    Quote("CHANGELOG.rst", "readinto serves {tls.readinto.asyncio.msgs-x-stock:spread} stock SSLIOStream's messages "
                           "per second on asyncio's loop and {tls.readinto.uvloop.msgs-x-stock:spread} on uvloop"),
    Quote("CHANGELOG.rst", "{gil.readinto.asyncio.x-stock} (asyncio) and {gil.readinto.uvloop.x-stock} (uvloop) "
                           "stock Tornado's messages per second"),
]


# ---------------------------------------------------------------- what publish cites


def pages(root: Path = ROOT) -> list[Path]:
    """The pages that cite result files: the README, the CHANGELOG, the
    benchmarks' README and the documentation (its generated includes aside:
    they cite what publish renders from, `rendered_files`)."""
    top = [root / "README.rst", root / "CHANGELOG.rst", root / "benchmarks" / "README.rst"]
    docs = sorted(p for p in (root / "docs").rglob("*.rst") if "_generated" not in p.parts and "_build" not in p.parts)
    return [p for p in top if p.exists()] + docs


# A file name in a page: ``benchmarks/results/NAME.json``, ``NAME.txt``,
# ``NAME*.json`` (every file the pattern matches).
_FILE_NAME = re.compile(r"(?<![\w*.-])((?:benchmarks/)?results/)?([\w*.-]+\.(?:json|txt|png))\b")


def named_files(directory: Path, root: Path = ROOT) -> dict[str, list[str]]:
    """The files of ``directory`` that the pages name (a name after
    ``results/`` counts even when no such file exists: the page cites a
    missing file), each with the pages naming it.  A README headline block,
    if there is one, is left out: publish writes it (`rendered_files`)."""
    listing = sorted(p.name for p in directory.iterdir() if p.is_file()) if directory.is_dir() else []
    found: dict[str, list[str]] = {}
    for page in pages(root):
        text = page.read_text(encoding="utf-8")
        block = published_block(text, "headline")
        if block is not None:
            text = text.replace(block, "")
        for m in _FILE_NAME.finditer(text):
            prefixed, name = m.group(1), m.group(2)
            if "*" in name:
                names = fnmatch.filter(listing, name)
            else:
                names = [name] if prefixed or name in listing else []
            for n in names:
                where = found.setdefault(n, [])
                if page.relative_to(root).as_posix() not in where:
                    where.append(page.relative_to(root).as_posix())
    return found


def rendered_files(directory: Path) -> Results:
    """Render every table, the plot's values and every quoted figure from
    ``directory`` in memory: the `Results` they read (``.read``: the file
    names, in order, the headline's first; ``.json(name).picked``: the rows
    asked of each).  A renderer that fails (a missing file or row, no
    recorded command) is passed over: what it read so far is kept."""
    res = Results(directory)
    renderers: list[Callable[[Results], object]] = [*TABLES.values(), plot_text]
    renderers += [functools.partial(figure, name=name) for quote in QUOTES for name in quote.names()]
    for render in renderers:
        try:
            render(res)
        except Exception:  # noqa: BLE001 - listing what is read, not rendering (check and render raise)
            pass
    return res


def run_files(directory: Path, name: str) -> list[str]:
    """The other files of ``name``'s run in ``directory``: ``STEM.json`` (the
    result file), ``STEM.txt`` (its table), ``STEM.png`` (its plot)."""
    stem = Path(name).stem
    return [f"{stem}{ext}" for ext in (".json", ".txt", ".png")
            if f"{stem}{ext}" != name and (directory / f"{stem}{ext}").exists()]  # fmt: skip


def cited(directory: Path = RESULTS, root: Path = ROOT) -> dict[str, list[str]]:
    """Every result file publish cites, with what cites it: the files
    publish renders from (``"publish"``), the files the pages name, and the
    other files of their runs (``"the run of NAME"``).  The headline's files
    come first."""
    found: dict[str, list[str]] = {name: ["publish"] for name in rendered_files(directory).read}
    for name, where in named_files(directory, root).items():
        found.setdefault(name, []).extend(where)
    for name in list(found):
        for other in run_files(directory, name):
            found.setdefault(other, [f"the run of {name}"])
    return found


def uncited(directory: Path = RESULTS, root: Path = ROOT) -> list[str]:
    """The files of ``directory`` that nothing cites (`cited`)."""
    names = cited(directory, root)
    return sorted(p.name for p in directory.iterdir() if p.is_file() and p.name not in names)


def refusal(directory: Path, name: str) -> str | None:
    """Why publish may not cite ``name``, or None: a result file (JSON) must
    record its run (`benchmarks.harness.meta.REQUIRED`); a table or plot is
    cited through the result file of its run, ``STEM.json``."""
    path = directory / name
    if name.endswith(".json"):
        if not path.exists():
            return "missing"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            return f"not JSON ({exc})"
        missing = missing_meta(data)
        return f"records no {', '.join(missing)} (the run's metadata)" if missing else None
    carrier = f"{Path(name).stem}.json"
    if (directory / carrier).exists():
        return None  # refused or not as a result file of its own
    if not path.exists():
        return "missing"
    return f"a table or plot with no result file beside it ({carrier}): nothing records its run"


def shown(path: Path) -> str:
    """``path`` relative to the checkout where it is inside it."""
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def refusals(directory: Path = RESULTS, root: Path = ROOT) -> list[str]:
    """Every cited file publish refuses: ``PATH: why``, one line each (a
    table or plot whose result file is cited: that file's line)."""
    names = cited(directory, root)
    found = ((name, refusal(directory, name)) for name in names
             if name.endswith(".json") or f"{Path(name).stem}.json" not in names)  # fmt: skip
    return [f"{shown(directory / name)}: {why}" for name, why in found if why is not None]


class Refused(Exception):
    """Cited result files that do not record their run (`refusals`)."""

    def __init__(self, lines: Sequence[str]) -> None:
        super().__init__(f"{len(lines)} cited result files refused:\n" + "\n".join(lines))
        self.lines = list(lines)


REFUSED_HINT = ("publish refuses a result file that does not record its run (commit, build, machine, python, "
                "command): re-make the cited files on a quiet machine with python -m benchmarks.publish --remake "
                "(--dry-run: the commands), then run python -m benchmarks.publish")


# ---------------------------------------------------------------- render / check


def published_block(text: str, name: str) -> str | None:
    """The text between ``.. published-table: NAME`` and the end mark, or None."""
    begin = BEGIN_MARK.format(name=name)
    lines = text.splitlines(keepends=True)
    try:
        start = next(i for i, line in enumerate(lines) if line.rstrip() == begin)
        end = next(i for i in range(start + 1, len(lines)) if lines[i].rstrip() == END_MARK)
    except StopIteration:
        return None
    return "".join(lines[start + 1:end]).strip("\n") + "\n"


def replace_block(text: str, name: str, body: str) -> str:
    begin = BEGIN_MARK.format(name=name)
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.rstrip() == begin)
    end = next(i for i in range(start + 1, len(lines)) if lines[i].rstrip() == END_MARK)
    return "".join(lines[: start + 1]) + "\n" + body + "\n" + "".join(lines[end:])


def readme_block(res: Results) -> str:
    return headline_table(res) + "\n" + headline_sources(res) + "\n"


def check(res: Results, root: Path = ROOT) -> list[str]:
    """Every cited result file publish refuses (`refusals`), or else every
    published figure that does not match ``res``: one line each."""
    refused = refusals(res.directory, root)
    if refused:
        return refused
    problems = []
    for name, render in TABLES.items():
        path = root / "docs" / "_generated" / name
        if not path.exists() or path.read_text(encoding="utf-8") != render(res):
            problems.append(f"docs/_generated/{name}: does not match its result file")
    plot = root / "docs" / "_generated" / "headline-plot.txt"
    if not plot.exists() or plot.read_text(encoding="utf-8") != plot_text(res):
        problems.append("docs/_generated/headline-plot.txt (the plot): does not match its result files")
    if not (root / "docs" / "_generated" / "headline.png").exists():
        problems.append("docs/_generated/headline.png: missing")
    block = published_block((root / "README.rst").read_text(encoding="utf-8"), "headline")
    if block is not None and block != readme_block(res):
        problems.append("README.rst: the headline table does not match its result files")
    texts: dict[str, str] = {}
    for quote in QUOTES:
        if quote.path not in texts:
            texts[quote.path] = normalize((root / quote.path).read_text(encoding="utf-8"))
        rendered = quote.render(res)
        if normalize(rendered) not in texts[quote.path]:
            problems.append(f"{quote.path}: no longer says {rendered!r} (figures {', '.join(quote.names())})")
    return problems


def render_all(res: Results, root: Path = ROOT, plot: bool = True) -> list[Path]:
    """Write every table, the plot, and a README headline block if one is present, from ``res``.

    :raises Refused: a cited result file does not record its run (nothing is written).
    """
    refused = refusals(res.directory, root)
    if refused:
        raise Refused(refused)
    out = root / "docs" / "_generated"
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, render in TABLES.items():
        (out / name).write_text(render(res), encoding="utf-8")
        written.append(out / name)
    (out / "headline-plot.txt").write_text(plot_text(res), encoding="utf-8")
    written.append(out / "headline-plot.txt")
    if plot:
        draw_plot(res, out / "headline.png")
        written.append(out / "headline.png")
    readme = root / "README.rst"
    text = readme.read_text(encoding="utf-8")
    if published_block(text, "headline") is not None:
        readme.write_text(replace_block(text, "headline", readme_block(res)), encoding="utf-8")
        written.append(readme)
    return written


# ---------------------------------------------------------------- re-making the cited files


#: The module that writes a result file, by the start of the file's name.
MODULES = (("dask-profile", "dask_profile"), ("dask", "dask"), ("bench-full", "echo"), ("echo", "echo"),
           ("http", "http"), ("idle", "idle"), ("instructions", "instructions"), ("load", "load"),
           ("opcodes", "opcodes"))  # fmt: skip


def module_of(file: str) -> str | None:
    """``load`` for ``load-bounds.json``: the benchmark that writes ``file``."""
    return next((module for prefix, module in MODULES if file.startswith(prefix)), None)


@dataclass(frozen=True)
class Remake:
    """How one result file is re-made: ``command`` (``VAR=VALUE`` words set
    the environment; ``python`` is the interpreter running publish; the
    output paths are pointed at the results directory when it runs), or
    None when this tree cannot re-make it; ``note``: why the command is not
    the recorded one, or why there is none; ``needs``: why it cannot run
    here and now (None: it can)."""

    file: str
    command: str | None
    note: str = ""
    needs: Callable[[], str | None] | None = None


#: Result files whose recorded command does not re-make them today, or that
#: record none: the command that does (checked by ``--remake --dry-run``),
#: and why.  Every file of the evidence set records the command that made it
#: (``taskset`` and ``TORNADO_READINTO_*`` included), so this is empty.
REMAKE: dict[str, Remake] = {}

# A file made on another tree, as the baseline of a comparison across trees.
_BEFORE = re.compile(r"-before(?:-\d+)?$")


def recorded_command(data: Any, file: str) -> str | None:
    """The command ``data`` (a result file's JSON) records: ``meta.command``,
    or for files written before there was one, ``python -m MODULE`` and
    ``meta.argv`` (or ``argv``); None if it records neither."""
    if not isinstance(data, dict):
        return None
    meta = data["meta"] if isinstance(data.get("meta"), dict) else {}
    if isinstance(meta.get("command"), str) and meta["command"]:
        return str(meta["command"])
    argv = meta.get("argv", data.get("argv"))
    module = module_of(file)
    if isinstance(argv, list) and module is not None:
        return shlex.join(["python", "-m", f"benchmarks.{module}", *map(str, argv)])
    return None


def remake_plan(directory: Path = RESULTS, root: Path = ROOT, only: Sequence[str] = ()) -> list[Remake]:
    """How each cited result file is re-made (``only``: those named), the
    headline's first: `REMAKE`, else the recorded command; None for a file
    made on another tree (``NAME-before.json``) or that records no command."""
    files: list[str] = []
    for name in cited(directory, root):
        file = f"{Path(name).stem}.json"
        if file not in files and (not only or file in only or name in only):
            files.append(file)
    plans = []
    for file in files:
        if file in REMAKE:
            plans.append(REMAKE[file])
        elif _BEFORE.search(Path(file).stem):
            plans.append(Remake(file, None, "made on an earlier tree, the baseline of a comparison across trees: "
                                            "this tree cannot re-make it (re-make it on that tree, or cite it no "
                                            "more)"))
        else:
            path = directory / file
            data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
            recorded = recorded_command(data, file)
            if recorded is None:
                plans.append(Remake(file, None, "records no command" if path.exists() else "missing"))
            else:
                meta = data.get("meta") if isinstance(data, dict) else None
                by_argv = not (isinstance(meta, dict) and meta.get("command"))
                plans.append(Remake(file, recorded, "the command recorded in its argv" if by_argv else ""))
    return plans


def remake_words(plan: Remake, directory: Path) -> list[str]:
    """``plan``'s command as words, writing its JSON (and plot) into ``directory``."""
    assert plan.command is not None
    words = outputs_in(shlex.split(plan.command), plan.file, shown(directory))
    if "--json" not in words:
        words += ["--json", f"{shown(directory)}/{plan.file}"]
    return words


def _module_and_argv(words: Sequence[str]) -> tuple[str, list[str]]:
    i = list(words).index("-m")
    return words[i + 1], list(words[i + 2:])


def parse_command(words: Sequence[str]) -> argparse.Namespace:
    """The arguments of ``python -m benchmarks.X ARGV`` as X's parser reads them.

    :raises ValueError: X refuses them (with its message) or is no benchmark.
    """
    module, argv = _module_and_argv(words)
    name = module.removeprefix("benchmarks.")
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            if name in ("instructions", "opcodes"):
                bench = importlib.import_module(module)
                args = bench.parser().parse_args(argv)
                listed = args.server if name == "instructions" else args.impl
                unknown = bench.unknown_servers(listed) if name == "instructions" else \
                    [i for i in listed.split(",") if i not in importlib.import_module("benchmarks.impls").IMPLS]
                if unknown:
                    raise ValueError(f"unknown {'servers' if name == 'instructions' else 'implementations'}: "
                                     f"{', '.join(unknown)}")
                return args
            from benchmarks.__main__ import SUITES, suite

            if name not in SUITES:
                raise ValueError(f"{module} is not a benchmark")
            return suite(name).parse_args(argv)
    except SystemExit:
        lines = errors.getvalue().strip().splitlines()
        raise ValueError(lines[-1] if lines else "its parser exits") from None


def unavailable_here(words: Sequence[str]) -> str | None:
    """What this machine lacks to run ``python -m benchmarks.X ARGV`` (its
    suite's ``unavailable``: a tool, root), or None; None too for a command
    X refuses (`check_remake` reports that) or that is no suite's."""
    module, _ = _module_and_argv(words)
    name = module.removeprefix("benchmarks.")
    from benchmarks.__main__ import SUITES, suite

    if name not in SUITES:
        return None
    try:
        args = parse_command(words)
    except ValueError:
        return None
    return suite(name).unavailable(args)


def _cases(module: str, args: argparse.Namespace) -> list[Any] | None:
    """What ``python -m module`` runs with ``args``, as objects whose fields
    name a result's row (None: not known here)."""
    name = module.removeprefix("benchmarks.")
    if name in ("echo", "load"):
        from benchmarks.__main__ import suite

        return list(suite(name).cases(args))  # type: ignore[attr-defined]
    if name == "instructions":
        return [argparse.Namespace(server=s, loop=lo) for lo in args.loop.split(",") for s in args.server.split(",")]
    if name == "opcodes":
        return [argparse.Namespace(impl=i, loop=lo) for lo in args.loop.split(",") for i in args.impl.split(",")]
    return None


def _makes(case: Any, fields: dict[str, Any]) -> bool:
    """Whether ``case`` makes the row with ``fields`` (fields it has not: any)."""
    from benchmarks.harness.units import format_size

    for key, value in fields.items():
        if key == "msize_text" and hasattr(case, "msize"):
            if format_size(case.msize) != value:
                return False
        elif hasattr(case, key) and getattr(getattr(case, key), "name", getattr(case, key)) != value:
            return False  # (a network path is a PathSpec, named in the result's row)
    return True


def check_remake(plan: Remake, directory: Path, res: Results) -> list[str]:
    """What is wrong with ``plan`` (as `rendered_files` read ``res``): its
    benchmark refuses its command, or it would not make a row that publish
    reads from the file."""
    if plan.command is None:
        return []
    words = remake_words(plan, directory)
    try:
        args = parse_command(words)
    except ValueError as exc:
        return [f"{plan.file}: python -m {_module_and_argv(words)[0]} refuses the command: {exc}"]
    data = res.json(plan.file) if plan.file in res.read and (directory / plan.file).exists() else None
    picked = data.picked if isinstance(data, ResultData) else []
    cases = _cases(_module_and_argv(words)[0], args)
    if cases is None:
        return []
    wanted = list(dict.fromkeys(tuple(sorted(f.items())) for f in picked))
    return [f"{plan.file}: publish reads the row {dict(fields)} of it, which the command does not make"
            for fields in wanted if not any(_makes(case, dict(fields)) for case in cases)]


def remake(plans: Sequence[Remake], directory: Path, res: Results, dry_run: bool = False) -> int:
    """Print (``dry_run``) or run each plan's command, its table into
    ``STEM.txt`` beside its JSON; the exit status (1: a command was refused
    or failed, or a file could not be re-made)."""
    problems = [line for plan in plans for line in check_remake(plan, directory, res)]
    runnable = [p for p in plans if p.command is not None]
    tree = commit_meta()
    if tree["dirty"]:
        print(f"# the checkout differs from its commit ({', '.join(tree['changed'])}): every file re-made "
              "records commit.dirty true")
    print(f"# {len(runnable)} of the {len(plans)} cited result files re-made by a command each, the headline's "
          f"first ({'dry run: nothing runs' if dry_run else 'one after the other'}):")
    failed: list[str] = []
    for plan in runnable:
        words = remake_words(plan, directory)
        needs = (plan.needs() if plan.needs else None) or unavailable_here(words)
        print(shlex.join(words) + (f"  # {plan.note}" if plan.note else ""))
        if needs:
            print(f"#   not here: {needs}")
        if dry_run or needs or any(line.startswith(f"{plan.file}: python -m") for line in problems):
            if needs and not dry_run:
                failed.append(f"{plan.file}: {needs}")
            continue
        env = dict(os.environ)
        while words and re.fullmatch(r"[A-Za-z_]\w*=.*", words[0]):
            key, _, value = words.pop(0).partition("=")
            env[key] = value
        words = [sys.executable if w == "python" else w for w in words]
        table = directory / f"{Path(plan.file).stem}.txt"
        with open(table, "w", encoding="utf-8") as out:
            status = subprocess.run(words, cwd=ROOT, env=env, stdout=out).returncode
        print(table.read_text(encoding="utf-8"), end="")
        if status != 0:
            failed.append(f"{plan.file}: exit status {status}")
    cannot = [p for p in plans if p.command is None]
    if cannot:
        print("# not re-made by a command (publish refuses them until they are re-made or no longer cited):")
        print("".join(f"#   {p.file}: {p.note}\n" for p in cannot), end="")
    if problems:
        print("# problems:")
        print("".join(f"#   {line}\n" for line in problems), end="")
    if failed:
        print("# failed:")
        print("".join(f"#   {line}\n" for line in failed), end="")
    if not dry_run:
        print("# then: python -m benchmarks.publish (the tables and plot), --check, --uncited")
    return 1 if problems or failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.publish", description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="write nothing; report what no longer matches")
    p.add_argument("--results", type=Path, default=RESULTS, help="the result files' directory")
    p.add_argument("--no-plot", action="store_true", help="do not draw the PNG")
    p.add_argument("--cited", action="store_true",
                   help="list the result files publish cites (renders from, or the pages name), with what cites "
                        "each and whether publish refuses it")
    p.add_argument("--uncited", action="store_true", help="list the files of the results directory nothing cites")
    p.add_argument("--remake", nargs="*", metavar="FILE",
                   help="re-make every cited result file (or only FILE ...) by its command, one after the other, "
                        "into the results directory")
    p.add_argument("--dry-run", action="store_true",
                   help="with --remake: print the commands, each checked by its benchmark's parser, and run nothing")
    args = p.parse_args(argv)
    if args.dry_run and args.remake is None:
        p.error("--dry-run goes with --remake")
    directory = args.results
    if args.cited:
        for name, where in cited(directory).items():
            why = refusal(directory, name)
            carrier = f"{Path(name).stem}.json"
            status = f"REFUSED: {why}" if why else "ok" if name == carrier else f"with {carrier}"
            print(f"{name}  {status}  [{', '.join(where)}]")
        return 0
    if args.uncited:
        print("".join(f"{name}\n" for name in uncited(directory)), end="")
        return 0
    if args.remake is not None:
        plans = remake_plan(directory, only=args.remake)
        unknown = [f for f in args.remake if not any(f in (plan.file, f"{Path(plan.file).stem}.txt") for plan in plans)]
        if unknown:
            p.error(f"not cited: {', '.join(unknown)} (python -m benchmarks.publish --cited)")
        return remake(plans, directory, rendered_files(directory), dry_run=args.dry_run)
    res = Results(directory)
    if args.check:
        problems = check(res)
        for line in problems:
            print(line)
        if problems and problems == refusals(directory):
            print(REFUSED_HINT)
        if not problems:
            print(f"every published figure matches {directory}")
        return 1 if problems else 0
    try:
        written = render_all(res, plot=not args.no_plot)
    except Refused as exc:
        print("\n".join(exc.lines))
        print(REFUSED_HINT)
        return 1
    for path in written:
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
