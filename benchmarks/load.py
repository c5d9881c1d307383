"""Many-connection load benchmark: server CPU time per message.

    python -m benchmarks load                        # 64 connections, 1 KiB, all servers, both loops
    python -m benchmarks load --full --json load.json --plot load.png
    python -m benchmarks load --offered              # below saturation: 1000 msgs/s offered in all
    python -m benchmarks load --server readinto,asyncio-protocol --offered 500,2000
    python -m benchmarks load --server readinto,asyncio-streams --rate 200
    python -m benchmarks load --gil-thread --clients 8,64  # a GIL-holding thread in each server
    python -m benchmarks load --tls both             # each case over plain TCP, then over TLS
    python -m benchmarks load --count-syscalls       # also the server's syscalls per message (perf)
    python -m benchmarks load --list

(``python -m benchmarks.load`` runs the same.)  Each case (server x event
loop x connections x message size x offered load) runs one fresh server
process (``python -m benchmarks.impls server --loop LOOP``) and one fresh,
cheap client process (``python -m benchmarks.impls load-client``): an
asyncio/uvloop ``BufferedProtocol`` per connection, no coroutine per
message, each connection ping-ponging one message.  By default as fast as
it can: the server saturates (about 100% CPU) and messages queue up, so one
wake-up of its loop serves several.  ``--offered TOTAL`` runs below
saturation instead, as RPC users mostly do: the connections together offer
TOTAL messages/s (each ``TOTAL / connections``, on a fixed timetable with
the connections' sends spread over the period, see
``benchmarks.impls._loadclient``), the same for every server and below
every server's capacity, so that each message pays its own wake-up of the
server; the table's ``offered`` column says which mode ran (``max``: as
fast as possible), and a server whose msgs/s falls short of it could not
keep up (the progress line says so).  ``--rate`` offers the same per
connection instead.  At every window boundary the client reads the
server's CPU time and that of the server's event-loop thread (see
``benchmarks.harness.cpu``), and its own; the main metric is the loop
thread's CPU microseconds per echoed message.  ``--gil-thread`` runs,
beside each server's event loop, a thread that holds the GIL (as a dask
worker's task thread running pure Python does); the loop thread's CPU
leaves that thread out.  ``--tls`` runs every server and the client over
TLS (a throwaway CA and certificate per case, made by trustme): stock
``SSLIOStream``, ``SSLReadIntoIOStream``, and the asyncio anchors on the
loop's SSL transport.  Every echo is checked (header, sequence stamp),
the first and last of each connection byte for byte, and the server's
message count against the client's; a failed check fails the case and
makes the exit status non-zero.  ``--netpath mtu1500`` (``mtu9000``,
``mtu1500@1gbit``...; root) runs the server and the client in two network
namespaces joined by a veth pair of that MTU, optionally rate-limited, instead
of over 127.0.0.1 (see ``benchmarks.harness.netpath``); the server's CPU time
is read from /proc as on loopback.  ``--count-syscalls`` also counts the
server's system calls by name over the measured windows (``perf stat`` on
the syscall tracepoints, see ``benchmarks.harness.syscounts``) and reports them
per echoed message: CPU per message moves with what a syscall costs on the
machine, the count does not.  See benchmarks/README.rst.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import ssl
import sys
import tempfile
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: python benchmarks/load.py
    # The root instead of the script's directory, whose dask.py would shadow the dask package.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks import harness as h  # noqa: E402
from benchmarks.harness import netpath, syscounts  # noqa: E402
from benchmarks.harness import plot as plots  # noqa: E402
from benchmarks.impls import EVENT_LOOPS, IMPLS, _tls, availability  # noqa: E402
from benchmarks.impls._loadclient import default_client_loop  # noqa: E402

#: ``--server`` names -> (echo implementation in ``benchmarks.impls.IMPLS``, wire
#: format the load client speaks to it).  Each runs on every ``--loop``.
LOAD_SERVERS: dict[str, tuple[str, str]] = {
    "stock": ("stock-read_bytes", "framed"),
    "readinto": ("readinto", "framed"),
    "readinto-spin": ("readinto-spin", "framed"),
    "framed": ("framed-bytearray", "framed"),
    "framed-pool": ("framed-pool", "framed"),
    "framed-pool-spin": ("framed-pool-spin", "framed"),
    "comm": ("comm-readinto", "comm"),
    "asyncio-streams": ("asyncio-streams", "framed"),
    "asyncio-protocol": ("asyncio-protocol", "framed"),
    "asyncio-streams-3reads": ("asyncio-streams-3reads", "framed"),
    "readinto-3reads": ("readinto-3reads", "framed"),
    "asyncio-protocol-exact": ("asyncio-protocol-exact", "framed"),
}

#: Lower bounds (``benchmarks/impls/_bounds.py``), not products: accepted by
#: ``--server``, not run by default, plain TCP only.
BOUND_SERVERS: dict[str, tuple[str, str]] = {
    "bound-floor": ("bound-floor", "framed"),
    "bound-raw": ("bound-raw", "framed"),
    "bound-tornado": ("bound-tornado", "framed"),
}

#: The pure-Python build of the package's servers, for a side-by-side A/B
#: against the compiled build in one run: the same echo servers, run with
#: ``TORNADO_READINTO_NO_EXTENSIONS=1`` (`PURE_BUILD_ENV`).  Accepted by
#: ``--server``, not run by default.
PURE_SERVERS: dict[str, tuple[str, str]] = {
    "readinto-pure": ("readinto", "framed"),
    "framed-pool-pure": ("framed-pool", "framed"),
}
PURE_BUILD_ENV = {"TORNADO_READINTO_NO_EXTENSIONS": "1"}


def pin_cpus() -> tuple[set[int], set[int]]:
    """``--pin``: the server's CPU and the client's, the first two this
    process may use.

    :raises CaseFailed: fewer than two.
    """
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise h.CaseFailed(f"--pin needs two usable CPUs, this process has {cpus}")
    return {cpus[0]}, {cpus[1]}


def _all_servers() -> dict[str, tuple[str, str]]:
    """Every name ``--server`` takes: the load servers, the pure builds, the
    bounds."""
    return {**LOAD_SERVERS, **PURE_SERVERS, **BOUND_SERVERS}


#: The ratio columns: loop-thread CPU per message relative to these servers,
#: same loop and same case (GIL thread or not, TLS or not included).
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
#: ``--gil-thread`` and ``--tls`` values -> the conditions run (False:
#: without the thread / over plain TCP).
CONDITION_MODES = {"off": (False,), "on": (True,), "both": (False, True)}
FULL_CLIENTS = (1, 16, 64, 256)
DEFAULT_MSIZE = "1KiB"
#: ``--offered`` alone: messages/s offered by all connections together, below
#: saturation.  About a seventh of the slowest default server's capacity at
#: 64 connections on the 2-core development machine (comm over TLS: 7.4k
#: msgs/s), and at most one message per millisecond, the load client's timer
#: resolution on uvloop (see ``benchmarks.impls._loadclient``).
DEFAULT_OFFERED = 1000.0  # messages/s
#: A paced case whose msgs/s is below this fraction of the offered load did
#: not run below saturation: the server (or the machine) could not keep up.
KEPT_UP_FRACTION = 0.9


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
    tls: bool = False  # server and client over TLS
    path: netpath.PathSpec = netpath.LOOPBACK  # the network path between them (--netpath)


@dataclass
class LoadResult(h.Repeated):
    """One server on one loop in one case: its repeats, or why it has none."""

    server: str
    loop: str
    clients: int
    msize: int = 1024
    rate: float = 0.0
    gil_thread: bool = False
    tls: bool = False
    repeats: list[dict[str, Any]] = field(default_factory=list)  # METRICS and counts, one dict per repeat
    client_loop: str | None = None
    verified_messages: int = 0
    skipped: str | None = None  # why the server cannot run here
    error: str | None = None  # why the case failed
    extra: dict[str, Any] = field(default_factory=dict)
    path: str = netpath.LOOPBACK.name  # the network path (--netpath), its details in extra["netpath"]

    #: Counts added up over rounds: with them the checks agree after ``--rounds``.
    summed = ("verified_messages", "messages_sent", "messages_echoed_by_server", "full_compares")

    @property
    def group(self) -> tuple[str, bool, bool, int, int, float]:
        """What a baseline must share besides the loop: the path, the GIL
        thread, TLS, connections, size, rate."""
        return (self.path, self.gil_thread, self.tls, self.clients, self.msize, self.rate)


def cpu_metric(*results: LoadResult) -> str:
    """The CPU per message to compare: the loop thread's when every result
    has it, else the whole server process's (no /proc/<pid>/task, older JSON)."""
    if all(r.median("loop_cpu_us_per_msg") is not None for r in results):
        return "loop_cpu_us_per_msg"
    return "server_cpu_us_per_msg"


def ratio(results: Sequence[LoadResult], result: LoadResult, baseline: str, metric: str | None = None) -> float | None:
    """Median ``metric`` (default: `cpu_metric`) of ``result`` over that of
    ``baseline`` on the same loop in the same case."""
    theirs = h.find_baseline(results, result, lambda r: r.server == baseline, lambda r: (r.loop, r.group))
    if theirs is None:
        return None
    return h.median_ratio(result, theirs, metric or cpu_metric(result, theirs))


def format_rate_limit(rate: float) -> str:
    return "max" if not rate else f"{h.format_rate(rate)}/s"


def offered_msgs_per_s(r: LoadResult | LoadCase) -> float:
    """Messages/s offered by all connections together; 0: as fast as possible."""
    return r.rate * r.clients


def kept_up(r: LoadResult) -> bool | None:
    """Whether a paced case ran below saturation (its msgs/s near the
    offered load); None when not paced or not measured."""
    achieved = r.median("msgs_per_s")
    if not r.rate or achieved is None:
        return None
    return achieved >= KEPT_UP_FRACTION * offered_msgs_per_s(r)


def _ratios() -> tuple[h.Ratio[LoadResult], ...]:
    cpu = tuple(
        h.Ratio(f"x {b}", f"x_{b}", lambda results, r, b=b: h.one(ratio(results, r, b)))  # type: ignore[misc]
        for b in BASELINES
    )
    speed: h.Ratio[LoadResult] = h.Ratio(
        f"msgs/s x {THROUGHPUT_BASELINE}",
        f"msgs_per_s_x_{THROUGHPUT_BASELINE}",
        lambda results, r: h.one(ratio(results, r, THROUGHPUT_BASELINE, "msgs_per_s")),
    )
    return (*cpu, speed)


class LoadSuite(h.TableSuite[LoadCase, LoadResult]):
    name = "load"
    summary = "many connections ping-ponging small messages: the server loop thread's CPU time per message"
    description = __doc__ or ""
    result_type = LoadResult
    summaries = METRICS
    ratios = _ratios()
    columns = (
        h.field("server", lambda r: r.server),
        h.field("loop", lambda r: r.loop),
        h.key_field("gil-thread", lambda r: "yes" if r.gil_thread else "no"),
        h.key_field("tls", lambda r: "yes" if r.tls else "no"),
        h.key_field("clients", lambda r: str(r.clients)),
        h.key_field("msize", lambda r: h.format_size(r.msize)),
        h.key_field("offered", lambda r: format_rate_limit(offered_msgs_per_s(r))),
        h.metric("msgs/s", "msgs_per_s", h.format_rate),
        h.metric("loop us/msg", "loop_cpu_us_per_msg", h.format_number),
        h.metric("srv us/msg", "server_cpu_us_per_msg", h.format_number),
        h.metric("cli us/msg", "client_cpu_us_per_msg", h.format_number, spread=False),
        h.metric("p99", "p99_s", h.format_seconds, spread=False),
        h.metric("srv CPU", "server_cpu_pct", h.format_pct, spread=False),
        h.Column("sysc/msg", lambda results, r: _format_syscalls(r)),
    )

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        server, loop = h.choice("server", _all_servers()), h.choice("loop", EVENT_LOOPS)
        p.add_argument(
            "--server",
            type=h.csv(server),
            help=f"comma list (default: all: {','.join(LOAD_SERVERS)}; "
            f"also the lower bounds: {','.join(BOUND_SERVERS)})",
        )
        p.add_argument("--loop", type=h.csv(loop), help="server event loops (default: asyncio,uvloop if installed)")
        p.add_argument(
            "--clients",
            type=h.csv(h.positive_int),
            help="comma list of connection counts (default: 64; with --gil-thread: 8,64)",
        )
        p.add_argument("--msize", type=h.csv(h.parse_size), help=f"payload per message (default: {DEFAULT_MSIZE})")
        offered_or_rate = p.add_mutually_exclusive_group()
        offered_or_rate.add_argument(
            "--offered",
            type=h.csv(h.positive),
            nargs="?",
            const=[DEFAULT_OFFERED],
            help="below saturation: comma list of messages/s offered by all connections together, each "
            f"connection sending on a fixed timetable (the flag alone: {DEFAULT_OFFERED:g}); the same load for "
            "every server, so that each message pays its own wake-up (default: as fast as possible)",
        )
        offered_or_rate.add_argument(
            "--rate",
            type=h.csv(h.non_negative),
            help="messages/s per connection on a fixed timetable; 0 = as fast as possible (default: 0)",
        )
        p.add_argument("--duration", type=h.positive, default=2.0, help="seconds per repeat (default: 2)")
        p.add_argument("--warmup", type=h.non_negative, default=0.5, help="seconds of warm-up per case (default: 0.5)")
        _add_condition(
            p,
            "--gil-thread",
            "run a thread that holds the GIL (pure-Python busy loop) beside every server's event loop: "
            "on (the flag alone), off (default) or both (each case without, then with)",
        )
        _add_condition(
            p,
            "--tls",
            "run every server and the load client over TLS (a throwaway CA and certificate, needs trustme): "
            "on (the flag alone), off (default) or both (each case over plain TCP, then over TLS)",
        )
        p.add_argument("--client-loop", type=loop, help="the load client's event loop (default: uvloop if installed)")
        p.add_argument("--full", action="store_true", help="connections 1,16,64,256 (all servers, both loops)")
        p.add_argument(
            "--pin",
            action="store_true",
            help="pin the server process to one CPU and the load client to another (their affinity), so that "
            "neither preempts the other; needs two usable CPUs",
        )
        p.add_argument(
            "--count-syscalls",
            action="store_true",
            help="count the server's system calls by name over the measured windows (perf stat on the syscall "
            "tracepoints; needs perf and root) and report them per echoed message (sysc/msg column, "
            "progress line, JSON 'syscalls'); tracing adds a little server CPU",
        )
        netpath.add_argument(p)

    def check_arguments(self, args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
        args.server = args.server or list(LOAD_SERVERS)
        args.loop = args.loop or default_loops()
        gil_thread_default = GIL_THREAD_CLIENTS if args.gil_thread != "off" else DEFAULT_CLIENTS
        args.clients = args.clients or list(FULL_CLIENTS if args.full else gil_thread_default)
        args.msize = args.msize or [h.parse_size(DEFAULT_MSIZE)]
        args.offered = args.offered or []
        args.rate = args.rate or [0.0]
        for msize in args.msize:
            if msize < 8:
                p.error(f"--msize {h.format_size(msize)}: need at least 8 bytes for the sequence stamp")
        netpath.check_argument(args, p)

    def unavailable(self, args: argparse.Namespace) -> str | None:
        if args.count_syscalls:
            reason = syscounts.unavailable()
            if reason is not None:
                return f"--count-syscalls: {reason}"
        return netpath.refusal(args)

    def cases(self, args: argparse.Namespace) -> list[LoadCase]:
        """Servers innermost, so the ones compared (same loop, same case) run
        back to back, then loops, then paths.  ``--offered`` becomes each
        connection's rate."""
        loads = [(total, True) for total in args.offered] or [(rate, False) for rate in args.rate]
        return [
            LoadCase(server, loop, clients, msize, value / clients if total else value, gil_thread, tls, path)
            for msize in args.msize
            for value, total in loads
            for clients in args.clients
            for gil_thread in CONDITION_MODES[args.gil_thread]
            for tls in CONDITION_MODES[args.tls]
            for path in args.netpath
            for loop in args.loop
            for server in args.server
        ]

    def run_case(self, case: LoadCase, args: argparse.Namespace, round_index: int = 0) -> list[LoadResult]:
        """Run one case in a fresh server process and a fresh load-client
        process, on a fresh path (`netpath.open_path`: nothing to do for loopback)."""
        result = LoadResult(
            case.server, case.loop, case.clients, case.msize, case.rate, case.gil_thread, case.tls, path=case.path.name
        )
        impl, wire = _all_servers()[case.server]
        reason = availability(IMPLS[impl], case.loop, tls=case.tls) or (_tls.unavailable() if case.tls else None)
        if reason is not None:
            result.skipped = reason
            return [result]
        # the echo budget, plus the wait before each connection's last message at a low rate
        timeout = h.case_timeout_s(args.warmup, args.repeat, args.duration) + (2.0 / case.rate if case.rate else 0.0)
        common = ["--clients", str(case.clients), "--timeout", f"{timeout:g}"]
        gil_thread = ["--gil-thread"] if case.gil_thread else []
        counters: list[syscounts.SyscallCounter] = []
        first_line: dict[str, Any] = {}  # the server's: its port, its build, its CPUs...
        host = netpath.NetPath(case.path).server_host
        with _cert_files(case.tls, host) as (cert_file, ca_file):
            tls_server = ["--tls-cert", cert_file] if cert_file else []
            tls_client = ["--tls-ca", ca_file] if ca_file else []

            def client_argv(started: dict[str, Any], server_pid: int) -> list[str]:
                first_line.update(started)
                argv = [
                    "load-client", *common, "--port", str(started["port"]), "--server-pid", str(server_pid),
                    "--server-tid", str(started["loop_tid"]),
                    "--msize", str(case.msize), "--wire", wire, "--rate", repr(case.rate),
                    "--warmup", f"{args.warmup:g}", "--duration", f"{args.duration:g}", "--repeat", str(args.repeat),
                    "--host", host, *tls_client,
                ]  # fmt: skip
                if getattr(args, "count_syscalls", False):  # over the measured windows only
                    counters.append(syscounts.SyscallCounter(server_pid, windowed=True))
                    argv += ["--syscalls-control", counters[-1].control]
                return argv + (["--loop", args.client_loop] if args.client_loop else [])

            server_argv = ["server", "--impl", impl, "--loop", case.loop, *gil_thread, *tls_server, *common,
                           "--host", host]  # fmt: skip
            try:
                pure = case.server in PURE_SERVERS
                with netpath.open_path(case.path) as path:
                    client, server = h.run_server_and_client(
                        server_argv, client_argv, timeout, server_env=PURE_BUILD_ENV if pure else None,
                        pin=pin_cpus() if getattr(args, "pin", False) else None,
                        prefixes=(path.server_prefix(), path.client_prefix()),
                    )  # fmt: skip
                _fill(result, client, server, args.repeat)
                for counter in counters:
                    windows = sum(r["messages"] for r in client["repeats"])  # what the counters saw
                    result.extra["syscalls"] = syscounts.summary(
                        counter.finish(), windows, client.get("syscalls_switch_s"), args.repeat * args.duration
                    )
                result.extra["compiled"] = first_line.get("compiled")
                result.extra["server_cpus"] = first_line.get("cpus")
                if pure and first_line.get("compiled") is not False:
                    raise h.CaseFailed(f"{case.server}: the server did not run the pure build: {first_line}")
            except (h.CaseFailed, netpath.NetPathError) as exc:
                result.error = str(exc)
            finally:
                for counter in counters:
                    counter.kill()
        result.extra["netpath"] = case.path.record()
        return [result]

    def legend(self, nrepeats: int) -> str:
        repeats = f"median of {nrepeats} repeats" if nrepeats else "median of the repeats"
        return (
            f"loop us/msg: CPU time (user+system) of the server's event-loop thread per echoed message in\n"
            f"microseconds, {repeats} (min-max); srv us/msg: the same for the whole server process (with a\n"
            "GIL thread: that thread's CPU included); cli us/msg: the load client's; msgs/s: all connections\n"
            "together; p99: round trip; srv CPU: server CPU time per wall-clock second (100% = one core busy);\n"
            "gil-thread: yes = a thread holding the GIL ran beside the server's loop; tls: yes = server and\n"
            "client spoke TLS; offered: messages/s offered by all connections together, each on a fixed\n"
            "timetable (max: next message as soon as the echo is back, the server saturated); below\n"
            "saturation each message pays its own wake-up, and msgs/s well below offered means the server\n"
            "could not keep up; x asyncio-streams / x stock: loop us/msg relative to that server on the\n"
            "same loop in the same case of this run, GIL thread and TLS included (lower is cheaper);\n"
            "msgs/s x stock: msgs/s relative to stock's (higher is faster);\n"
            "path (with --netpath): loopback, or mtuN (a veth pair of MTU N between two network namespaces),\n"
            "@RATE: tc tbf on both ends; ratios compare servers on the same path;\n"
            "sysc/msg: the server's system calls per echoed message in the measured windows (--count-syscalls;\n"
            "by name on the progress line and in the JSON)."
        )

    def label(self, r: LoadResult) -> str:
        name = f"{r.server} on {r.loop}, {r.clients} clients, {h.format_size(r.msize)}"
        if r.rate:
            name += f", offered {format_rate_limit(offered_msgs_per_s(r))}"
        name += (", GIL thread" if r.gil_thread else "") + (", TLS" if r.tls else "")
        return name + (f", over {r.path}" if r.path != netpath.LOOPBACK.name else "")

    def brief(self, r: LoadResult) -> str:
        return (
            f"{h.format_rate(r.median('msgs_per_s'))} msgs/s, "
            f"loop thread {h.format_number(r.median('loop_cpu_us_per_msg'))} us/msg, "
            f"server {h.format_number(r.median('server_cpu_us_per_msg'))} us/msg "
            f"({h.format_pct(r.median('server_cpu_pct'))} CPU), "
            f"client {h.format_number(r.median('client_cpu_us_per_msg'))} us/msg"
            + (f", {syscounts.brief(r.extra['syscalls']['per_msg'])}" if r.extra.get("syscalls") else "")
            + (
                f"; BELOW the offered {format_rate_limit(offered_msgs_per_s(r))}: it did not keep up (saturated)"
                if kept_up(r) is False
                else ""
            )
        )

    def group(self, r: LoadResult) -> Hashable:
        return (r.group, r.loop)

    def table_columns(self, results: Sequence[LoadResult]) -> Sequence[h.Column[LoadResult]]:
        return netpath.with_column(self.columns, results, after="loop")

    def skip_label(self, r: LoadResult) -> str:
        return f"{r.server} on {r.loop}" + (" over TLS" if r.tls else "")

    def key(self, r: LoadResult) -> Hashable:
        return (r.server, r.loop, r.group)

    def describe(self, r: LoadResult) -> dict[str, Any]:
        impl, wire = _all_servers().get(r.server, (None, None))
        return {
            "impl": impl,
            "wire": wire,
            "msize_text": h.format_size(r.msize),
            "offered_msgs_per_s": offered_msgs_per_s(r),
            "kept_up": kept_up(r),
        }

    def meta(self, args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
        return {
            **super().meta(args, argv),
            "client_loop": args.client_loop or default_client_loop(),
            "duration_s": args.duration,
            "warmup_s": args.warmup,
            "gil_thread": args.gil_thread,
            "tls": args.tls,
            "openssl": ssl.OPENSSL_VERSION,
            "switch_interval_s": sys.getswitchinterval(),
            "clk_tck": os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else None,
            "netpath": [spec.name for spec in args.netpath],
        }

    def listing(self) -> str:
        """One line per server: availability on each loop, and over TLS (``--tls``)."""
        width = max(map(len, _all_servers()))
        lines = []
        certificates = _tls.unavailable()
        for name, (impl, wire) in _all_servers().items():
            spec = IMPLS[impl]
            conditions = [(loop, availability(spec, loop)) for loop in EVENT_LOOPS]
            conditions.append(("tls", availability(spec, tls=True) or certificates))
            status = ", ".join(
                f"{what}: {'available' if reason is None else 'UNAVAILABLE: ' + reason}" for what, reason in conditions
            )
            lines.append(f"{name:<{width}}  {spec.summary} ({impl}, {wire} wire)  [{status}]")
        return "\n".join(lines)

    def plot(self, results: Sequence[LoadResult], path: str, metric: str | None = None) -> None:
        """Grouped bars (x = server, colour = loop, min-max whiskers) of
        ``metric`` (default: `cpu_metric`), one panel per GIL-thread/connections/
        size/rate case (TLS or not, path)."""
        metric = metric or cpu_metric(*(r for r in results if r.ok))
        ok = [r for r in results if r.ok and r.median(metric) is not None]
        groups = sorted({r.group for r in ok})
        servers = list(dict.fromkeys(r.server for r in ok))
        loops = list(dict.fromkeys(r.loop for r in ok))
        label = {
            "loop_cpu_us_per_msg": "loop-thread CPU per message (us)",
            "server_cpu_us_per_msg": "server CPU per message (us)",
            "client_cpu_us_per_msg": "client CPU per message (us)",
            "msgs_per_s": "messages/s",
        }.get(metric, metric)
        ncols = max(1, len(groups))
        width = 0.8 / max(1, len(loops))
        with plots.figure(path, 1, ncols, (max(7.0, 0.9 * len(servers) * ncols + 2), 4.5)) as (fig, axes):
            colours = plots.colours(len(loops))
            for col, group in enumerate(groups):
                ax = axes[0][col]
                for i, loop in enumerate(loops):
                    placed = [(x + plots.offset(i, len(loops), width), r) for x, server in enumerate(servers)
                              for r in ok if r.group == group and r.server == server and r.loop == loop]  # fmt: skip
                    plots.bars(ax, placed, metric, width, color=colours(i), label=loop)
                path, gil_thread, tls, clients, msize, rate = group
                title = f"{clients} connections, {h.format_size(msize)}, offered {format_rate_limit(rate * clients)}"
                title += (", GIL thread" if gil_thread else "") + (", TLS" if tls else "")
                ax.set_title(title + (f", {path}" if path != netpath.LOOPBACK.name else ""))
                ax.set_ylabel(label)
                ax.set_xticks(range(len(servers)))
                ax.set_xticklabels(servers, rotation=30, ha="right")
                ax.grid(axis="y", alpha=0.3)
                ax.legend(title="loop", fontsize="small")
            if not groups:
                plots.no_results(axes[0][0])


def _format_syscalls(r: LoadResult) -> str:
    """The ``sysc/msg`` cell: all the server's syscalls per echoed message, or "-" (not counted)."""
    syscalls = r.extra.get("syscalls")
    if not syscalls or "total" not in syscalls["per_msg"]:
        return "-"
    return f"{syscalls['per_msg']['total']:.2f}"


def _add_condition(p: argparse.ArgumentParser, flag: str, help: str) -> None:
    """An off/on/both condition flag (`CONDITION_MODES`); the flag alone means on."""
    p.add_argument(flag, nargs="?", const="on", default="off", choices=tuple(CONDITION_MODES), help=help)


@contextlib.contextmanager
def _cert_files(tls: bool, host: str) -> Iterator[tuple[str, str] | tuple[None, None]]:
    """For a TLS case, a fresh CA and a certificate for the server's address
    ``host`` as PEM files (``cert_file, ca_file``) that live as long as the
    case; ``(None, None)`` for plain TCP."""
    if not tls:
        yield None, None
        return
    with tempfile.TemporaryDirectory(prefix="load-tls-") as directory:
        yield _tls.write_cert_files(directory, host)


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
        "tls_version": (client["tls"] or {}).get("version"),
        "tls_cipher": (client["tls"] or {}).get("cipher"),
    }
    h.verify_counts(client, server, clients=result.clients, nrepeats=nrepeats)
    if bool(server["tls"]) != result.tls or bool(client["tls"]) != result.tls:
        raise h.CaseFailed(f"asked for TLS {result.tls}: the server served TLS {server['tls']}, client {client['tls']}")
    if result.gil_thread and not (server["gil_thread_tid"] and server["gil_thread_cpu_s"]):
        raise h.CaseFailed(f"the server ran no GIL thread: {server}")
    if server["gil_thread_tid"] is not None and server["gil_thread_tid"] == server["loop_tid"]:
        raise h.CaseFailed("the GIL thread and the event loop share a thread id")


SUITE = LoadSuite()


if __name__ == "__main__":
    sys.exit(SUITE.main())
