"""Many-connection load benchmark: server CPU time per message.

    python -m benchmarks.load                        # 64 connections, 1 KiB, all servers, both loops
    python -m benchmarks.load --full --json load.json --plot load.png
    python -m benchmarks.load --server readinto,asyncio-streams --rate 200
    python -m benchmarks.load --gil-thread --clients 8,64  # a GIL-holding thread in each server
    python -m benchmarks.load --list

Each case (server x event loop x connections x message size x rate) runs one
fresh server process (``python -m benchmarks.impls server --loop LOOP``) and
one fresh, cheap client process (``python -m benchmarks.impls load-client``):
an asyncio/uvloop ``BufferedProtocol`` per connection, no coroutine per
message, each connection ping-ponging one message as fast as it can (or
``--rate`` per second).  At every window boundary the client reads the
server's CPU time from ``/proc/<pid>/stat``, that of the server's event-loop
thread from ``/proc/<pid>/task/<tid>/schedstat``, and its own; the main metric is
the loop thread's CPU microseconds per echoed message.  ``--gil-thread``
runs, beside each server's event loop, a thread that holds the GIL (as a
dask worker's task thread running pure Python does); the loop thread's CPU
leaves that thread out.  Every echo is checked
(header, sequence stamp), the first and last of each connection byte for
byte, and the server's message count against the client's; a failed check
fails the case and makes the exit status non-zero.  See benchmarks/README.rst.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: python benchmarks/load.py
    # The root instead of the script's directory, whose dask.py would shadow the dask package.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks.echo import (  # noqa: E402
    STARTUP_TIMEOUT_S,
    CaseFailed,
    _choice,
    _csv,
    _positive_int,
    _Process,
    case_timeout_s,
    run_meta,
    verify_counts,
)
from benchmarks.impls import EVENT_LOOPS, IMPLS, availability  # noqa: E402
from benchmarks.impls._loadclient import default_client_loop  # noqa: E402
from benchmarks.report import (  # noqa: E402
    RepeatedMixin,
    _format_ratio,
    _with_spread,
    finish_run,
    format_rate,
    format_seconds,
    format_size,
    parse_size,
)

#: ``--server`` names -> (echo implementation in ``benchmarks.impls.IMPLS``, wire
#: format the load client speaks to it).  Each runs on every ``--loop``.
LOAD_SERVERS: dict[str, tuple[str, str]] = {
    "stock": ("stock-read_bytes", "framed"),
    "readinto": ("readinto", "framed"),
    "readinto-nospin": ("readinto-nospin", "framed"),
    "framed": ("framed-bytearray", "framed"),
    "framed-pool": ("framed-pool", "framed"),
    "framed-pool-nospin": ("framed-pool-nospin", "framed"),
    "comm": ("comm-readinto", "comm"),
    "asyncio-streams": ("asyncio-streams", "framed"),
    "asyncio-protocol": ("asyncio-protocol", "framed"),
    "asyncio-streams-3reads": ("asyncio-streams-3reads", "framed"),
    "asyncio-protocol-exact": ("asyncio-protocol-exact", "framed"),
}

#: The ratio columns: loop-thread CPU per message relative to these servers,
#: same loop and same case (GIL thread or not included).
BASELINES = ("asyncio-streams", "stock")

#: The server whose msgs/s the ``msgs/s x stock`` column divides by.
THROUGHPUT_BASELINE = "stock"

#: Metrics stored per repeat (see ``impls._loadclient.window_metrics``).
METRICS = (
    "msgs_per_s",
    "loop_cpu_us_per_msg",
    "server_cpu_us_per_msg",
    "client_cpu_us_per_msg",
    "loop_cpu_pct",
    "server_cpu_pct",
    "client_cpu_pct",
    "p50_s",
    "p99_s",
)

DEFAULT_CLIENTS = (64,)
#: ``--clients`` default with ``--gil-thread``.
GIL_THREAD_CLIENTS = (8, 64)
#: ``--gil-thread`` values -> the conditions run (False: without the thread).
GIL_THREAD_MODES = {"off": (False,), "on": (True,), "both": (False, True)}
FULL_CLIENTS = (1, 16, 64, 256)
DEFAULT_MSIZE = "1KiB"


def uvloop_version() -> str | None:
    try:
        import uvloop
    except ImportError:
        return None
    return str(uvloop.__version__)


def default_loops() -> list[str]:
    """Both loops when uvloop imports, else asyncio alone."""
    return list(EVENT_LOOPS) if uvloop_version() is not None else ["asyncio"]


@dataclass(frozen=True)
class LoadCase:
    server: str
    loop: str
    clients: int
    msize: int
    rate: float  # messages/s per connection, 0 = as fast as possible
    gil_thread: bool = False  # a GIL-holding thread beside the server's loop


@dataclass
class LoadResult(RepeatedMixin):
    """One server on one loop in one case: its repeats, or why it has none."""

    server: str
    loop: str
    clients: int
    msize: int = 1024
    rate: float = 0.0
    gil_thread: bool = False
    repeats: list[dict[str, Any]] = field(default_factory=list)  # METRICS and counts, one dict per repeat
    client_loop: str | None = None
    verified_messages: int = 0
    skipped: str | None = None  # why the server cannot run here
    error: str | None = None  # why the case failed
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def group(self) -> tuple[bool, int, int, float]:
        """What a baseline must share besides the loop: the GIL thread, connections, size, rate."""
        return (self.gil_thread, self.clients, self.msize, self.rate)


# -- results: ratios, table, JSON, plot ----------------------------------------------


def cpu_metric(*results: LoadResult) -> str:
    """The CPU per message to compare: the loop thread's when every result
    has it, else the whole server process's (no /proc/<pid>/task, older JSON)."""
    if all(r.median("loop_cpu_us_per_msg") is not None for r in results):
        return "loop_cpu_us_per_msg"
    return "server_cpu_us_per_msg"


def ratio(results: Sequence[LoadResult], result: LoadResult, baseline: str, metric: str | None = None) -> float | None:
    """Median ``metric`` (default: `cpu_metric`) of ``result`` over that of
    ``baseline`` on the same loop in the same case."""
    if not result.ok:
        return None
    for other in results:
        if other.server == baseline and other.loop == result.loop and other.group == result.group and other.ok:
            name = metric or cpu_metric(result, other)
            mine, theirs = result.median(name), other.median(name)
            if mine is not None and theirs:
                return mine / theirs
    return None


def _format_us(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _format_pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def format_rate_limit(rate: float) -> str:
    return "max" if not rate else f"{format_rate(rate)}/s"


COLUMNS = (
    "server",
    "loop",
    "gil-thread",
    "clients",
    "msize",
    "rate",
    "msgs/s",
    "loop us/msg",
    "srv us/msg",
    "cli us/msg",
    "p99",
    "srv CPU",
    *(f"x {b}" for b in BASELINES),
    f"msgs/s x {THROUGHPUT_BASELINE}",
)
_LEFT = {"server", "loop"}
_NHEAD = 6  # the columns that name the case, also on failed rows


def _row(results: Sequence[LoadResult], r: LoadResult) -> list[str]:
    head = [
        r.server,
        r.loop,
        "yes" if r.gil_thread else "no",
        str(r.clients),
        format_size(r.msize),
        format_rate_limit(r.rate),
    ]
    if r.error is not None:
        first_line = r.error.strip().splitlines()[0] if r.error.strip() else ""
        return head + [f"FAILED: {first_line}"]
    return head + [
        _with_spread(r, "msgs_per_s"),
        _with_spread(r, "loop_cpu_us_per_msg", _format_us),
        _with_spread(r, "server_cpu_us_per_msg", _format_us),
        _format_us(r.median("client_cpu_us_per_msg")),
        format_seconds(r.median("p99_s")),
        _format_pct(r.median("server_cpu_pct")),
        *(_format_ratio(ratio(results, r, b)) for b in BASELINES),
        _format_ratio(ratio(results, r, THROUGHPUT_BASELINE, "msgs_per_s")),
    ]


def table_header(nrepeats: int | None = None) -> str:
    repeats = f"median of {nrepeats} repeats" if nrepeats else "median of the repeats"
    return (
        f"loop us/msg: CPU time (user+system) of the server's event-loop thread per echoed message in\n"
        f"microseconds, {repeats} (min-max); srv us/msg: the same for the whole server process (with a\n"
        "GIL thread: that thread's CPU included); cli us/msg: the load client's; msgs/s: all connections\n"
        "together; p99: round trip; srv CPU: server CPU time per wall-clock second (100% = one core busy);\n"
        "gil-thread: yes = a thread holding the GIL ran beside the server's loop; rate: offered\n"
        "messages/s per connection (max: next message as soon as the echo is back);\n"
        "x asyncio-streams / x stock: loop us/msg relative to that server on the same loop in the same\n"
        "case of this run (lower is cheaper); msgs/s x stock: msgs/s relative to stock's (higher is faster)."
    )


def format_table(results: Sequence[LoadResult]) -> str:
    """The results as an aligned text table, a blank line between groups of
    the same case and loop; failures inline, skipped servers listed at the end."""
    measured = [r for r in results if r.skipped is None]
    rows = [_row(results, r) for r in measured]
    full = [list(COLUMNS)] + [row for row in rows if len(row) == len(COLUMNS)]
    widths = [max(len(row[i]) for row in full) for i in range(len(COLUMNS))]
    for row in rows:  # failed rows share the first columns
        for i, cell in enumerate(row[:_NHEAD]):
            widths[i] = max(widths[i], len(cell))

    def align(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if COLUMNS[i] in _LEFT else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
        )

    header = align(COLUMNS)
    lines = [header, "-" * len(header)]
    for n, (r, row) in enumerate(zip(measured, rows)):
        previous = measured[n - 1] if n else None
        if previous is not None and (previous.group, previous.loop) != (r.group, r.loop):
            lines.append("")
        lines.append(align(row) if len(row) == len(COLUMNS) else align(row[:_NHEAD]) + "  " + row[_NHEAD])
    skipped: dict[tuple[str, str], str] = {}
    for r in results:
        if r.skipped is not None:
            skipped.setdefault((r.server, r.loop), r.skipped)
    if skipped:
        lines.append("")
    lines += [f"SKIPPED {server} on {loop}: {reason}" for (server, loop), reason in skipped.items()]
    nrepeats = max((len(r.repeats) for r in measured), default=0)
    return table_header(nrepeats) + "\n\n" + "\n".join(line.rstrip() for line in lines)


def to_json(results: Sequence[LoadResult], meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """A JSON-ready dict: every result with its repeats, median/min/max of
    each metric, and the ratios to the baselines."""
    out = []
    for r in results:
        impl, wire = LOAD_SERVERS.get(r.server, (None, None))
        entry: dict[str, Any] = {
            "server": r.server,
            "impl": impl,
            "wire": wire,
            "loop": r.loop,
            "client_loop": r.client_loop,
            "clients": r.clients,
            "msize": r.msize,
            "msize_text": format_size(r.msize),
            "rate": r.rate,
            "gil_thread": r.gil_thread,
            "status": "skipped" if r.skipped is not None else "failed" if r.error is not None else "ok",
            "skipped": r.skipped,
            "error": r.error,
            "repeats": r.repeats,
            "verified_messages": r.verified_messages,
            **r.extra,
        }
        for metric in METRICS:
            entry[metric] = r.summary(metric)
        for baseline in BASELINES:
            entry[f"x_{baseline}"] = ratio(results, r, baseline)
        entry[f"msgs_per_s_x_{THROUGHPUT_BASELINE}"] = ratio(results, r, THROUGHPUT_BASELINE, "msgs_per_s")
        out.append(entry)
    return {"meta": dict(meta or {}), "results": out}


def result_from_json(entry: dict[str, Any]) -> LoadResult:
    """The inverse of one `to_json` entry (for re-plotting saved runs)."""
    known = {"server", "loop", "clients", "msize", "rate", "gil_thread", "repeats", "client_loop",
             "verified_messages", "skipped", "error"}  # fmt: skip
    derived = {"impl", "wire", "msize_text", "status", *METRICS, *(f"x_{b}" for b in BASELINES),
               f"msgs_per_s_x_{THROUGHPUT_BASELINE}"}  # fmt: skip
    extra = {k: v for k, v in entry.items() if k not in known | derived}
    return LoadResult(**{k: entry[k] for k in known if k in entry}, extra=extra)


def plot(results: Sequence[LoadResult], path: str, metric: str | None = None) -> None:
    """Grouped bars (x = server, colour = loop, min-max whiskers) of
    ``metric`` (default: `cpu_metric`), one panel per GIL-thread/connections/
    size/rate case."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metric = metric or cpu_metric(*(r for r in results if r.ok))
    ok = [r for r in results if r.ok and r.median(metric) is not None]
    groups = sorted({r.group for r in ok})
    servers = list(dict.fromkeys(r.server for r in ok))
    loops = list(dict.fromkeys(r.loop for r in ok))
    colours = plt.get_cmap("tab10")
    label = {
        "loop_cpu_us_per_msg": "loop-thread CPU per message (us)",
        "server_cpu_us_per_msg": "server CPU per message (us)",
        "client_cpu_us_per_msg": "client CPU per message (us)",
        "msgs_per_s": "messages/s",
    }.get(metric, metric)
    ncols = max(1, len(groups))
    fig, axes = plt.subplots(1, ncols, figsize=(max(7.0, 0.9 * len(servers) * ncols + 2), 4.5), squeeze=False)
    width = 0.8 / max(1, len(loops))
    for col, group in enumerate(groups):
        ax = axes[0][col]
        for i, loop in enumerate(loops):
            xs, ys, lo, hi = [], [], [], []
            for x, server in enumerate(servers):
                r = next((r for r in ok if r.group == group and r.server == server and r.loop == loop), None)
                median = r.median(metric) if r is not None else None
                spread = r.spread(metric) if r is not None else None
                if median is None or spread is None:
                    continue
                xs.append(x + (i - (len(loops) - 1) / 2) * width)
                ys.append(median)
                lo.append(median - spread[0])
                hi.append(spread[1] - median)
            if xs:
                ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, color=colours(i), label=loop)
        gil_thread, clients, msize, rate = group
        title = f"{clients} connections, {format_size(msize)}, rate {format_rate_limit(rate)}"
        ax.set_title(title + (", GIL thread" if gil_thread else ""))
        ax.set_ylabel(label)
        ax.set_xticks(range(len(servers)))
        ax.set_xticklabels(servers, rotation=30, ha="right")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(title="loop", fontsize="small")
    if not groups:
        axes[0][0].text(0.5, 0.5, "no results", ha="center", va="center")
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


# -- command line --------------------------------------------------------------------


_server_name = _choice("server", LOAD_SERVERS)
_loop_name = _choice("loop", EVENT_LOOPS)


def _rate(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise ValueError(f"rate must be >= 0, not {text}")
    return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.load",
        description="Many connections ping-ponging small messages: the server loop thread's CPU time per message.",
    )
    p.add_argument("--server", type=_csv(_server_name), help=f"comma list (default: all: {','.join(LOAD_SERVERS)})")
    p.add_argument("--loop", type=_csv(_loop_name), help="server event loops (default: asyncio,uvloop if installed)")
    p.add_argument(
        "--clients",
        type=_csv(_positive_int),
        help="comma list of connection counts (default: 64; with --gil-thread: 8,64)",
    )
    p.add_argument("--msize", type=_csv(parse_size), help=f"payload per message (default: {DEFAULT_MSIZE})")
    p.add_argument("--rate", type=_csv(_rate), help="messages/s per connection; 0 = as fast as possible (default: 0)")
    p.add_argument("--duration", type=float, default=2.0, help="seconds per repeat (default: 2)")
    p.add_argument("--repeat", type=_positive_int, default=3, help="repeats per case and round (default: 3)")
    p.add_argument(
        "--rounds",
        type=_positive_int,
        default=1,
        help="run every case this many times in fresh processes, in alternating order "
        "(A B C, C B A, ...), and pool their repeats: slow spells of a shared machine "
        "then hit every server alike (default: 1)",
    )
    p.add_argument("--warmup", type=float, default=0.5, help="seconds of warm-up per case (default: 0.5)")
    p.add_argument(
        "--gil-thread",
        nargs="?",
        const="on",
        default="off",
        choices=tuple(GIL_THREAD_MODES),
        help="run a thread that holds the GIL (pure-Python busy loop) beside every server's event loop: "
        "on (the flag alone), off (default) or both (each case without, then with)",
    )
    p.add_argument("--client-loop", type=_loop_name, help="the load client's event loop (default: uvloop if installed)")
    p.add_argument("--json", metavar="PATH", help="write all results as JSON")
    p.add_argument("--plot", metavar="PATH", help="write a PNG plot (needs matplotlib)")
    p.add_argument("--full", action="store_true", help="connections 1,16,64,256 (all servers, both loops)")
    p.add_argument("--list", action="store_true", help="list the servers and whether each can run")
    args = p.parse_args(argv)
    args.server = args.server or list(LOAD_SERVERS)
    args.loop = args.loop or default_loops()
    gil_thread_default = GIL_THREAD_CLIENTS if args.gil_thread != "off" else DEFAULT_CLIENTS
    args.clients = args.clients or list(FULL_CLIENTS if args.full else gil_thread_default)
    args.msize = args.msize or [parse_size(DEFAULT_MSIZE)]
    args.rate = args.rate or [0.0]
    for msize in args.msize:
        if msize < 8:
            p.error(f"--msize {format_size(msize)}: need at least 8 bytes for the sequence stamp")
    if args.duration <= 0 or args.warmup < 0:
        p.error("--duration must be > 0 and --warmup >= 0")
    return args


def plan_cases(args: argparse.Namespace) -> list[LoadCase]:
    """Servers innermost, so the ones compared (same loop, same case) run back to back."""
    return [
        LoadCase(server, loop, clients, msize, rate, gil_thread)
        for msize in args.msize
        for rate in args.rate
        for clients in args.clients
        for gil_thread in GIL_THREAD_MODES[args.gil_thread]
        for loop in args.loop
        for server in args.server
    ]


# -- one case --------------------------------------------------------------------------


def load_timeout_s(args: argparse.Namespace, rate: float) -> float:
    """echo's budget, plus the wait before each connection's last message at a low ``rate``."""
    return case_timeout_s(args) + (2.0 / rate if rate else 0.0)


def run_case(case: LoadCase, args: argparse.Namespace) -> LoadResult:
    """Run one case in a fresh server process and a fresh load-client process."""
    result = LoadResult(case.server, case.loop, case.clients, case.msize, case.rate, case.gil_thread)
    impl, wire = LOAD_SERVERS[case.server]
    reason = availability(IMPLS[impl], case.loop)
    if reason is not None:
        result.skipped = reason
        return result
    timeout = load_timeout_s(args, case.rate)
    common = ["--clients", str(case.clients), "--timeout", f"{timeout:g}"]
    processes: list[_Process] = []
    with tempfile.TemporaryFile() as server_err, tempfile.TemporaryFile() as client_err:
        try:
            gil_thread = ["--gil-thread"] if case.gil_thread else []
            server = _Process(["server", "--impl", impl, "--loop", case.loop, *gil_thread, *common], server_err)
            processes.append(server)
            started = server.read_json_line(STARTUP_TIMEOUT_S)
            port, loop_tid = started["port"], started["loop_tid"]
            client_argv = [
                "load-client", *common, "--port", str(port), "--server-pid", str(server.proc.pid),
                "--server-tid", str(loop_tid),
                "--msize", str(case.msize), "--wire", wire, "--rate", f"{case.rate:g}",
                "--warmup", f"{args.warmup:g}", "--duration", f"{args.duration:g}", "--repeat", str(args.repeat),
            ]  # fmt: skip
            if args.client_loop:
                client_argv += ["--loop", args.client_loop]
            client = _Process(client_argv, client_err)
            processes.append(client)
            client_out = client.finish(timeout + STARTUP_TIMEOUT_S)
            server_out = server.finish(STARTUP_TIMEOUT_S)
            _fill(result, client_out, server_out, args.repeat)
        except CaseFailed as exc:
            result.error = str(exc)
        finally:
            for process in processes:
                process.kill()
    return result


def _fill(result: LoadResult, client: dict[str, Any], server: dict[str, Any], nrepeats: int) -> None:
    """Copy the processes' JSON into ``result``; raise `CaseFailed` if the counts disagree."""
    result.repeats = client["repeats"]
    result.client_loop = client["loop"]
    result.verified_messages = client["verified_messages"]
    result.extra = {
        "messages_sent": client["messages_sent"],
        "messages_echoed_by_server": server["messages"],
        "full_compares": client["full_compares"],
        "connect_s": client["connect_s"],
        "server_cpu_s": server["cpu_s"],
        "client_cpu_s": client["cpu_s"],
        "server_rss_bytes": server["rss_bytes"],
        "client_rss_bytes": client["rss_bytes"],
        "loop_tid": server["loop_tid"],
        "loop_thread_cpu_s": server["loop_thread_cpu_s"],
        "gil_thread_tid": server["gil_thread_tid"],
        "gil_thread_cpu_s": server["gil_thread_cpu_s"],
    }
    verify_counts(client, server, clients=result.clients, nrepeats=nrepeats)
    if result.gil_thread and not (server["gil_thread_tid"] and server["gil_thread_cpu_s"]):
        raise CaseFailed(f"the server ran no GIL thread: {server}")
    if server["gil_thread_tid"] is not None and server["gil_thread_tid"] == server["loop_tid"]:
        raise CaseFailed("the GIL thread and the event loop share a thread id")


# -- main --------------------------------------------------------------------------------


def merge_rounds(result: LoadResult, later: LoadResult) -> None:
    """Add a later round's repeats of the same case to ``result`` (a failure
    in any round fails the case)."""
    result.repeats.extend(later.repeats)
    result.verified_messages += later.verified_messages
    if later.error is not None and result.error is None:
        result.error = later.error


def _progress(n: int, total: int, case: LoadCase, result: LoadResult, elapsed_s: float) -> str:
    name = f"[{n}/{total}] {case.server} on {case.loop}, {case.clients} clients, {format_size(case.msize)}"
    if case.rate:
        name += f", rate {format_rate_limit(case.rate)}"
    if case.gil_thread:
        name += ", GIL thread"
    if result.skipped is not None:
        return f"{name}: SKIPPED ({result.skipped})"
    if result.error is not None:
        return f"{name}: FAILED {result.error}"
    return (
        f"{name}: {format_rate(result.median('msgs_per_s'))} msgs/s, "
        f"loop thread {_format_us(result.median('loop_cpu_us_per_msg'))} us/msg, "
        f"server {_format_us(result.median('server_cpu_us_per_msg'))} us/msg "
        f"({_format_pct(result.median('server_cpu_pct'))} CPU), "
        f"client {_format_us(result.median('client_cpu_us_per_msg'))} us/msg ({elapsed_s:.1f}s)"
    )


def list_servers() -> str:
    width = max(map(len, LOAD_SERVERS))
    lines = []
    for name, (impl, wire) in LOAD_SERVERS.items():
        spec = IMPLS[impl]
        status = ", ".join(
            f"{loop}: {'available' if reason is None else 'UNAVAILABLE: ' + reason}"
            for loop, reason in ((loop, availability(spec, loop)) for loop in EVENT_LOOPS)
        )
        lines.append(f"{name:<{width}}  {spec.summary} ({impl}, {wire} wire)  [{status}]")
    return "\n".join(lines)


def _meta(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    try:
        import msgpack

        msgpack_version: str | None = ".".join(map(str, msgpack.version))
    except ImportError:
        msgpack_version = None
    return {
        **run_meta(argv),
        "uvloop": uvloop_version(),
        "msgpack": msgpack_version,
        "client_loop": args.client_loop or default_client_loop(),
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "repeat": args.repeat,
        "rounds": args.rounds,
        "gil_thread": args.gil_thread,
        "switch_interval_s": sys.getswitchinterval(),
        "clk_tck": os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else None,
    }


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.list:
        print(list_servers())
        return 0
    cases = plan_cases(args)
    by_case: dict[LoadCase, LoadResult] = {}
    total = len(cases) * args.rounds
    n = 0
    for round_index in range(args.rounds):
        for case in cases if round_index % 2 == 0 else cases[::-1]:
            n += 1
            started = time.perf_counter()
            result = run_case(case, args)
            print(_progress(n, total, case, result, time.perf_counter() - started), file=sys.stderr, flush=True)
            if case in by_case:
                merge_rounds(by_case[case], result)
            else:
                by_case[case] = result
    results = [by_case[case] for case in cases]
    return finish_run(
        results,
        format_table(results),
        json_path=args.json,
        to_json=lambda: to_json(results, _meta(args, argv)),
        plot_path=args.plot,
        plot=plot,
    )


if __name__ == "__main__":
    sys.exit(main())
