"""A/B echo benchmark: stock Tornado vs tornado_readinto vs asyncio, uvloop and threads.

    python -m benchmarks echo                       # the default set, about a minute
    python -m benchmarks echo --full --json out.json --plot out.png
    python -m benchmarks echo --list

(``python -m benchmarks.echo`` and ``python benchmarks/echo.py`` run the same.)
For every case (implementation x message size x frames x mode x clients x
path) the server and the client run in two fresh processes on 127.0.0.1 (see
``benchmarks/impls``), or with ``--netpath mtu1500`` / ``mtu9000`` (root) in
two fresh network namespaces joined by a veth pair of that MTU, optionally
rate-limited (``mtu1500@1gbit``: tc tbf on both ends; see
``benchmarks.harness.netpath``).  The client prints its measurements as
JSON, with the server process's CPU time over each window (from /proc), the
server its peak RSS.  Where the link is the limit, implementations that all
fill it differ in the server's CPU seconds per GiB, not in msgs/s.  Every
echo is checked (sequence stamp, frame sizes), the first and last message of
each connection byte for byte, and the server's message count against the
client's; a failed check fails the case and makes the exit status non-zero.
See benchmarks/README.rst.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: python benchmarks/echo.py
    # The root instead of the script's directory, whose dask.py would shadow the dask package.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks import harness as h  # noqa: E402
from benchmarks.harness import netpath  # noqa: E402
from benchmarks.harness import plot as plots  # noqa: E402
from benchmarks.impls import DEFAULT_IMPLS, IMPLS, availability  # noqa: E402

DEFAULT_MSIZES = ("1KiB", "1MiB", "100MiB")
FULL_MSIZES = ("1KiB", "64KiB", "1MiB", "100MiB")
MODES = ("pingpong", "pipelined")

#: Pipelined mode keeps at most this many payload bytes in flight per
#: connection (the client's ring holds that many): --window 16 of 100 MiB
#: would be 1.6 GiB per side on a shared machine.  100 MiB -> window 2.
MAX_INFLIGHT_NBYTES = 256 << 20

#: The ratio columns: msgs/s relative to these implementations, same case.
BASELINES = ("stock-read_bytes", "threads")

#: Metrics stored per repeat.  The CPU figures are the server's (and the
#: client's) process CPU time over the window: per wall-clock second (%), per
#: GiB of payload echoed (each GiB received and sent back) and per message.
METRICS = (
    "msgs_per_s",
    "mib_per_s",
    "p50_s",
    "p99_s",
    "server_cpu_pct",
    "server_cpu_s_per_gib",
    "server_cpu_us_per_msg",
    "client_cpu_pct",
    "client_cpu_s_per_gib",
)

GiB = 1 << 30


@dataclass(frozen=True)
class Case:
    impl: str
    msize: int
    nframes: int
    mode: str
    clients: int
    path: netpath.PathSpec = netpath.LOOPBACK

    def window(self, window: int) -> int:
        if self.mode == "pingpong":
            return 1
        return max(1, min(window, MAX_INFLIGHT_NBYTES // self.msize))


@dataclass
class Result(h.Repeated):
    """One case of one implementation: its repeats, or why it has none."""

    impl: str
    msize: int
    nframes: int
    mode: str
    clients: int = 1
    repeats: list[dict[str, Any]] = field(default_factory=list)  # METRICS and counts, one dict per repeat
    window: int = 1  # messages in flight
    server_rss_bytes: int | None = None
    client_rss_bytes: int | None = None
    verified_messages: int = 0
    skipped: str | None = None  # why the implementation cannot run here
    error: str | None = None  # why the case failed
    extra: dict[str, Any] = field(default_factory=dict)
    path: str = netpath.LOOPBACK.name  # the network path (--netpath), its details in extra["netpath"]

    #: Counts added up over rounds: with them the checks agree after ``--rounds``.
    summed = ("verified_messages", "messages_sent", "messages_echoed_by_server", "full_compares")

    @property
    def case(self) -> tuple[str, int, int, str, int]:
        return (self.path, self.msize, self.nframes, self.mode, self.clients)


def ratio(results: Sequence[Result], result: Result, baseline: str) -> float | None:
    """Median msgs/s of ``result`` over that of ``baseline`` in the same case."""
    theirs = h.find_baseline(results, result, lambda r: r.impl == baseline, lambda r: r.case)
    return h.median_ratio(result, theirs, "msgs_per_s")


def _ratio(baseline: str) -> h.Ratio[Result]:
    title = "stock" if baseline == "stock-read_bytes" else baseline
    return h.Ratio(f"x {title}", f"x_{baseline}", lambda results, r: h.one(ratio(results, r, baseline)))


class EchoSuite(h.TableSuite[Case, Result]):
    name = "echo"
    summary = (
        "A/B echo over 127.0.0.1 or a veth pair: stock Tornado vs tornado_readinto, asyncio, uvloop, threads "
        "(msgs/s, MiB/s, server CPU/GiB)"
    )
    description = __doc__ or ""
    result_type = Result
    summaries = METRICS
    ratios = tuple(_ratio(b) for b in BASELINES)
    columns = (
        h.field("impl", lambda r: r.impl),
        h.key_field("msize", lambda r: h.format_size(r.msize)),
        h.key_field("nframes", lambda r: str(r.nframes)),
        h.field("mode", lambda r: r.mode + (f" x{r.clients}" if r.clients > 1 else "")),
        h.metric("msgs/s", "msgs_per_s", h.format_rate),
        h.metric("MiB/s", "mib_per_s", h.format_rate),
        h.metric("p50", "p50_s", h.format_seconds, spread=False),
        h.metric("p99", "p99_s", h.format_seconds, spread=False),
        h.metric("srv CPU", "server_cpu_pct", h.format_pct, spread=False),
        h.metric("srv s/GiB", "server_cpu_s_per_gib", h.format_number),
        h.Column(
            "RSS srv/cli", lambda results, r: f"{h.format_mib(r.server_rss_bytes)}/{h.format_mib(r.client_rss_bytes)}"
        ),
    )

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        impl, mode = h.choice("impl", IMPLS), h.choice("mode", MODES)
        p.add_argument("--impl", type=h.csv(impl), help=f"comma list (default: {','.join(DEFAULT_IMPLS)})")
        p.add_argument(
            "--msize", type=h.csv(h.parse_size), help=f"payload per message (default: {','.join(DEFAULT_MSIZES)})"
        )
        p.add_argument(
            "--nframes", type=h.csv(h.positive_int), help="frames per message, msize split evenly (default: 1)"
        )
        p.add_argument("--mode", type=h.csv(mode), help="pingpong,pipelined (default: pingpong)")
        p.add_argument(
            "--window",
            type=h.positive_int,
            default=16,
            help="pipelined: messages in flight, capped at 256 MiB of payload (default: 16)",
        )
        p.add_argument(
            "--clients",
            type=h.csv(h.positive_int),
            default=[1],
            help="connections, all in one client process (default: 1)",
        )
        p.add_argument("--duration", type=h.positive, default=1.25, help="seconds per repeat (default: 1.25)")
        p.add_argument(
            "--warmup", type=h.non_negative, default=0.25, help="seconds of warm-up per case (default: 0.25)"
        )
        p.add_argument("--full", action="store_true", help="all impls, sizes 1KiB..100MiB, nframes 1,4, both modes")
        netpath.add_argument(p)

    def check_arguments(self, args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
        full = args.full
        args.impl = args.impl or (list(IMPLS) if full else list(DEFAULT_IMPLS))
        args.msize = args.msize or [h.parse_size(s) for s in (FULL_MSIZES if full else DEFAULT_MSIZES)]
        args.nframes = args.nframes or ([1, 4] if full else [1])
        args.mode = args.mode or (list(MODES) if full else ["pingpong"])
        netpath.check_argument(args, p)
        for msize in args.msize:
            for nframes in args.nframes:
                if msize < 8 * nframes:
                    p.error(f"--msize {h.format_size(msize)} with {nframes} frames: need at least 8 bytes per frame")

    def unavailable(self, args: argparse.Namespace) -> str | None:
        return netpath.refusal(args)

    def cases(self, args: argparse.Namespace) -> list[Case]:
        """Implementations innermost, so the ones compared run back to back,
        then the paths."""
        return [
            Case(impl, msize, nframes, mode, clients, path)
            for msize in args.msize
            for nframes in args.nframes
            for mode in args.mode
            for clients in args.clients
            for path in args.netpath
            for impl in args.impl
        ]

    def run_case(self, case: Case, args: argparse.Namespace, round_index: int = 0) -> list[Result]:
        """Run one case in a fresh server process and a fresh client process,
        on a fresh path (`netpath.open_path`: nothing to do for loopback)."""
        window = case.window(args.window)
        result = Result(
            case.impl, case.msize, case.nframes, case.mode, case.clients, window=window, path=case.path.name
        )
        reason = availability(IMPLS[case.impl])
        if reason is not None:
            result.skipped = reason
            return [result]
        timeout = h.case_timeout_s(args.warmup, args.repeat, args.duration)
        common = ["--impl", case.impl, "--clients", str(case.clients), "--timeout", f"{timeout:g}"]

        def client_argv(started: dict[str, Any], server_pid: int) -> list[str]:
            return ["client", *common, "--port", str(started["port"]), "--msize", str(case.msize),
                    "--nframes", str(case.nframes), "--mode", case.mode, "--window", str(window),
                    "--warmup", f"{args.warmup:g}", "--duration", f"{args.duration:g}",
                    "--repeat", str(args.repeat), "--server-pid", str(server_pid)]  # fmt: skip

        try:
            with netpath.open_path(case.path) as path:
                host = ["--host", path.server_host]
                client, server = h.run_server_and_client(
                    ["server", *common, *host], lambda started, pid: [*client_argv(started, pid), *host], timeout,
                    prefixes=(path.server_prefix(), path.client_prefix()),
                )  # fmt: skip
            _fill(result, client, server, args.repeat)
        except (h.CaseFailed, netpath.NetPathError) as exc:
            result.error = str(exc)
        result.extra["netpath"] = case.path.record()
        return [result]

    def legend(self, nrepeats: int) -> str:
        repeats = f"median of {nrepeats} repeats" if nrepeats else "median of the repeats"
        return (
            f"msgs/s: messages echoed per second, {repeats} (min-max); MiB/s: one-way payload"
            " (msize x msgs/s);\np50/p99: latency per round trip (pingpong) or send-to-echo (pipelined);"
            " RSS: peak MiB, server/client;\nsrv CPU: the server process's CPU time (user+system) per wall-clock"
            " second over the windows (100% = one core);\nsrv s/GiB: its CPU seconds per GiB of payload echoed"
            " (each GiB received and sent back), median (min-max): what moving\nthe bytes costs when the link,"
            " not the CPU, is the limit; path (with --netpath): loopback, or mtuN (a veth pair of\nMTU N"
            " between two network namespaces), @RATE: tc tbf on both ends;\nx stock / x threads: msgs/s"
            " relative to stock-read_bytes / threads in the same case (and path) of this run."
        )

    def label(self, r: Result) -> str:
        name = f"{r.impl} {h.format_size(r.msize)} x{r.nframes} {r.mode}"
        name += f" {r.clients} clients" if r.clients > 1 else ""
        return name + (f" over {r.path}" if r.path != netpath.LOOPBACK.name else "")

    def brief(self, r: Result) -> str:
        return (
            f"{h.format_rate(r.median('msgs_per_s'))} msgs/s, {h.format_rate(r.median('mib_per_s'))} MiB/s, "
            f"server {h.format_pct(r.median('server_cpu_pct'))} CPU, "
            f"{h.format_number(r.median('server_cpu_s_per_gib'))} CPU s/GiB"
        )

    def table_columns(self, results: Sequence[Result]) -> Sequence[h.Column[Result]]:
        return netpath.with_column(self.columns, results, after="mode")

    def group(self, r: Result) -> Hashable:
        return r.case

    def skip_label(self, r: Result) -> str:
        return r.impl

    def key(self, r: Result) -> Hashable:
        return (r.impl, r.case)

    def describe(self, r: Result) -> dict[str, Any]:
        return {"msize_text": h.format_size(r.msize)}

    def meta(self, args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
        return {
            **super().meta(args, argv),
            "duration_s": args.duration,
            "warmup_s": args.warmup,
            "window": args.window,
            "max_inflight_nbytes": MAX_INFLIGHT_NBYTES,
            "netpath": [spec.name for spec in args.netpath],
        }

    def listing(self) -> str:
        width = max(map(len, IMPLS))
        lines = []
        for name, spec in IMPLS.items():
            reason = availability(spec)
            status = "available" if reason is None else f"UNAVAILABLE: {reason}"
            lines.append(f"{name:<{width}}  {spec.summary}  [{status}]")
        return "\n".join(lines)

    def plot(self, results: Sequence[Result], path: str, metric: str = "mib_per_s") -> None:
        """Grouped bars (x = message size, colour = implementation, min-max
        whiskers), one column per mode/nframes/clients; below, msgs/s relative to
        stock-read_bytes."""
        ok = [r for r in results if r.ok]
        groups = list(dict.fromkeys((r.path, r.mode, r.nframes, r.clients) for r in ok))
        impls = list(dict.fromkeys(r.impl for r in ok))
        label = {"mib_per_s": "MiB/s (one-way payload)", "msgs_per_s": "messages/s"}[metric]
        width = 0.8 / max(1, len(impls))
        figsize = (max(7.0, 5.5 * len(groups)), 8.0)
        with plots.figure(path, 2, max(1, len(groups)), figsize) as (fig, axes):
            colours = plots.colours(len(impls))
            for col, (path, mode, nframes, clients) in enumerate(groups):
                top, bottom = axes[0][col], axes[1][col]
                group = [r for r in ok if (r.path, r.mode, r.nframes, r.clients) == (path, mode, nframes, clients)]
                sizes = sorted({r.msize for r in group})
                values = []
                for i, impl in enumerate(impls):
                    placed = [(x + plots.offset(i, len(impls), width), r) for x, msize in enumerate(sizes)
                              for r in group if r.impl == impl and r.msize == msize]  # fmt: skip
                    values += plots.bars(top, placed, metric, width, color=colours(i), label=impl)
                    relative = [(x, rel) for x, r in placed if (rel := ratio(results, r, BASELINES[0])) is not None]
                    if relative:
                        bottom.bar([x for x, _ in relative], [y for _, y in relative], width, color=colours(i))
                positive = [v for v in values if v > 0]
                if positive and max(positive) / min(positive) > 20:
                    top.set_yscale("log")
                title = f"{mode}, {nframes} frame{'s' if nframes > 1 else ''}/message"
                title += f", {clients} clients" if clients > 1 else ""
                top.set_title(title + (f", {path}" if path != netpath.LOOPBACK.name else ""))
                top.set_ylabel(label)
                bottom.set_ylabel(f"msgs/s relative to {BASELINES[0]}")
                bottom.axhline(1.0, color="black", linewidth=0.8)
                for ax in (top, bottom):
                    ax.set_xticks(range(len(sizes)))
                    ax.set_xticklabels([h.format_size(s) for s in sizes])
                    ax.set_xlabel("message size (payload)")
                    ax.grid(axis="y", alpha=0.3)
            if impls:
                # one legend for all panels, to the right of them, covering no bars
                handles, names = axes[0][0].get_legend_handles_labels()
                fig.legend(handles, names, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize="small")
            else:
                plots.no_results(axes[0][0])


def _fill(result: Result, client: dict[str, Any], server: dict[str, Any], nrepeats: int) -> None:
    """Copy the processes' JSON into ``result``; raise `CaseFailed` if the counts disagree."""
    for repeat in client["repeats"]:
        repeat["mib_per_s"] = repeat["msgs_per_s"] * result.msize / h.MiB
        gib_per_s = repeat["msgs_per_s"] * result.msize / GiB
        for who in ("server", "client"):
            pct = repeat.get(f"{who}_cpu_pct")
            repeat[f"{who}_cpu_s_per_gib"] = pct / 100 / gib_per_s if pct is not None and gib_per_s else None
        pct = repeat.get("server_cpu_pct")
        msgs_per_s = repeat["msgs_per_s"]
        repeat["server_cpu_us_per_msg"] = pct / 100 / msgs_per_s * 1e6 if pct is not None and msgs_per_s else None
    result.repeats = client["repeats"]
    result.window = client["window"]
    result.server_rss_bytes = server["rss_bytes"]
    result.client_rss_bytes = client["rss_bytes"]
    result.verified_messages = client["verified_messages"]
    result.extra = {
        "messages_sent": client["messages_sent"],
        "messages_echoed_by_server": server["messages"],
        "full_compares": client["full_compares"],
        "server_cpu_s": server["cpu_s"],
        "client_cpu_s": client["cpu_s"],
    }
    h.verify_counts(client, server, clients=result.clients, nrepeats=nrepeats)


SUITE = EchoSuite()


if __name__ == "__main__":
    sys.exit(SUITE.main())
