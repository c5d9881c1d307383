"""HTTP A/B benchmark: stock Tornado against ``tornado_readinto.install()``.

    python -m benchmarks http                          # every case, both implementations
    python -m benchmarks http --rounds 5 --json http.json
    python -m benchmarks http --rounds 5 --loop uvloop --cases hello,download

(``python -m benchmarks.http`` runs the same.)  For each implementation the
same `tornado.web.Application` is served by a server in its own process
(``python -m benchmarks.impls http-server``; ``install()`` is called there
first for ``readinto``); a load generator in another process drives it, and
the server's CPU time over each case (``benchmarks.harness.cpu``) is
divided by the requests served.

Cases:

* ``hello``: hello-world GET, keep-alive, ``--connections`` (32) connections,
  for ``--duration`` seconds;
* ``post``: one ``--body-mib`` (256) MiB POST body (``self.request.body``),
  ``--repeat`` times;
* ``put``: the same size as a streaming PUT (``@stream_request_body``);
* ``download``: a ``--download-mib`` (8) MiB GET response, keep-alive,
  4 connections, for ``--duration`` seconds.

The load generator for ``hello`` and ``download`` is ``wrk`` when it is on
PATH (Debian package ``wrk``), otherwise a small asyncio keep-alive client
(``python -m benchmarks.impls http-load``; ``--load-generator builtin``
forces it).  Bodies are uploaded from one blocking socket with ``sendall``
of a buffer made before the timed window, so the client copies nothing in
user space and the server is what is measured.  The table gives requests/s,
MiB/s, server CPU per request, and the ratios of ``readinto`` to ``stock``.

The keep-alive cases (``hello``, ``download``) serve both implementations at
once, each from its own process, and drive them in turns of one second
(`KEEPALIVE_BURST_S`; the order reversed every turn) until each had
``--duration`` seconds: on a shared machine whose speed drifts over seconds,
turns this short put both implementations under the same conditions, where
back-to-back runs of several seconds each mostly measured the drift.  The
upload cases run one server after the other.

``--rounds N`` runs every case N times, in fresh server processes, with the
order of the implementations alternating (stock first, then readinto first,
...); the table then gives medians with (min-max), and the ratios to stock
are taken within each round (side by side) before their median and spread.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks import harness as h
from benchmarks.impls._http import CASES, DOWNLOAD_CONNECTIONS, KEEPALIVE_CASES, MiB, run_wrk

IMPLS = ("stock", "readinto")

#: Keep-alive cases alternate the implementations in bursts of this many
#: seconds (the servers of both stay up for the whole case), so that slow
#: and fast spells of a shared machine fall on both alike.
KEEPALIVE_BURST_S = 1.0

#: Metrics of every round (one repeat per round).
METRICS = ("requests_per_s", "mib_per_s", "cpu_us_per_request")


@dataclass
class Result(h.Repeated):
    """One case of one implementation: a repeat per round (``requests``,
    ``seconds``, ``nbytes``, ``server_cpu_s``, ``round`` and `METRICS`)."""

    impl: str
    case: str
    generator: str
    repeats: list[dict[str, Any]] = field(default_factory=list)
    skipped: str | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def measured(round_index: int, counts: dict[str, float], cpu_s: float) -> dict[str, Any]:
    """One round's repeat: the load's counts, the server's CPU and the metrics."""
    requests, seconds, nbytes = int(counts["requests"]), float(counts["seconds"]), int(counts["nbytes"])
    return {
        "round": round_index,
        "requests": requests,
        "seconds": seconds,
        "nbytes": nbytes,
        "server_cpu_s": cpu_s,
        "requests_per_s": requests / seconds if seconds else 0.0,
        "mib_per_s": nbytes / MiB / seconds if seconds else 0.0,
        "cpu_us_per_request": cpu_s / requests * 1e6 if requests else 0.0,
    }


def round_ratios(results: Sequence[Result], result: Result, metric: str, lower_is_better: bool = False) -> list[float]:
    """Per round: ``result``'s ``metric`` over stock's in the same case and
    round (inverted if lower is better, so >1: ``result`` does better)."""
    stock = h.find_baseline(results, result, lambda r: r.impl == "stock", lambda r: r.case)
    return h.paired_ratios(result, stock, metric, lower_is_better=lower_is_better)


def _server_cpu_s(pid: int) -> float:
    cpu = h.process_cpu_s(pid)
    if cpu is None:
        raise RuntimeError(f"cannot read the CPU time of process {pid} (needs Linux /proc)")
    return cpu


class HttpSuite(h.TableSuite[str, Result]):
    name = "http"
    summary = "HTTP A/B: stock Tornado against tornado_readinto.install() (requests/s, server CPU per request)"
    description = __doc__ or ""
    result_type = Result
    summaries = METRICS
    repeat_default = None  # --repeat is the bodies per upload
    plots = False
    ratios = (
        h.Ratio("x stock", "x_stock", lambda results, r: round_ratios(results, r, "requests_per_s")),
        h.Ratio("cpu x", "cpu_x_stock", lambda results, r: round_ratios(results, r, "cpu_us_per_request", True)),
    )
    columns = (
        h.field("case", lambda r: r.case),
        h.field("impl", lambda r: r.impl),
        h.field("gen", lambda r: r.generator),
        h.metric("req/s", "requests_per_s", h.format_fixed(1)),
        h.metric("MiB/s", "mib_per_s", h.format_fixed(1), spread=False),
        h.metric("cpu us/req", "cpu_us_per_request", h.format_fixed(1), spread=False),
    )

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--impl", type=h.csv(h.choice("impl", IMPLS)), default=list(IMPLS), help="comma list: stock,readinto"
        )
        p.add_argument(
            "--cases", type=h.csv(h.choice("case", CASES)), default=list(CASES), help="comma list: " + ",".join(CASES)
        )
        p.add_argument(
            "--duration",
            type=float,
            default=5.0,
            help="seconds per keep-alive case and implementation, driven in turns of 1 s (default: 5)",
        )
        p.add_argument("--connections", type=int, default=32, help="connections of the hello case")
        p.add_argument("--body-mib", type=int, default=256, help="MiB per POST/PUT body")
        p.add_argument("--download-mib", type=int, default=8, help="MiB per download response")
        p.add_argument("--repeat", type=h.positive_int, default=3, help="bodies per POST/PUT case (default: 3)")
        p.add_argument(
            "--loop",
            choices=("asyncio", "uvloop"),
            default="asyncio",
            help="the servers' event loop (default: asyncio)",
        )
        p.add_argument("--load-generator", choices=("auto", "builtin"), default="auto")

    def cases(self, args: argparse.Namespace) -> list[str]:
        return list(args.cases)

    def run_case(self, case: str, args: argparse.Namespace, round_index: int) -> list[Result]:
        """Every implementation on ``case``, the first one alternating by round."""
        impls = h.in_turn(args.impl, round_index)
        try:
            if case in KEEPALIVE_CASES:
                return self._run_keepalive(impls, case, args, round_index)
            return self._run_uploads(impls, case, args, round_index)
        except (h.CaseFailed, RuntimeError, OSError, subprocess.CalledProcessError) as exc:
            error = f"{type(exc).__name__}: {exc}"
            return [Result(impl, case, self._generator(case, args), error=error) for impl in impls]

    def _run_uploads(self, impls: list[str], case: str, args: argparse.Namespace, round_index: int) -> list[Result]:
        """One server after the other, each for its own upload run."""
        results = []
        for impl in impls:
            with self._server(impl, args) as (pid, port):
                cpu0 = _server_cpu_s(pid)
                counts = self._drive(case, port, args, args.duration)
                cpu = _server_cpu_s(pid) - cpu0
            results.append(Result(impl, case, self._generator(case, args), [measured(round_index, counts, cpu)]))
        return results

    def _run_keepalive(self, impls: list[str], case: str, args: argparse.Namespace, round_index: int) -> list[Result]:
        """Serve every implementation at once and drive ``case`` against them in
        turns of `KEEPALIVE_BURST_S` (`in_turn`) until each had ``--duration``
        seconds; one `Result` per implementation, the sums of its bursts."""
        nbursts = max(1, round(args.duration / KEEPALIVE_BURST_S))
        burst_s = args.duration / nbursts
        totals = {impl: {"requests": 0.0, "seconds": 0.0, "nbytes": 0.0, "cpu": 0.0} for impl in impls}
        with contextlib.ExitStack() as stack:
            servers = {impl: stack.enter_context(self._server(impl, args)) for impl in impls}
            for burst in range(nbursts):
                for impl in h.in_turn(impls, burst):
                    pid, port = servers[impl]
                    cpu0 = _server_cpu_s(pid)
                    counts = self._drive(case, port, args, burst_s)
                    total = totals[impl]
                    total["cpu"] += _server_cpu_s(pid) - cpu0
                    for key in ("requests", "seconds", "nbytes"):
                        total[key] += counts[key]
        return [
            Result(impl, case, self._generator(case, args), [measured(round_index, total, total["cpu"])])
            for impl, total in totals.items()
        ]

    @contextlib.contextmanager
    def _server(self, impl: str, args: argparse.Namespace) -> Iterator[tuple[int, int]]:
        """A benchmark server for ``impl`` in its own process: (pid, port)."""
        argv = ["http-server", "--impl", impl, "--loop", args.loop,
                "--body-mib", str(args.body_mib), "--download-mib", str(args.download_mib)]  # fmt: skip
        with tempfile.TemporaryFile() as stderr:
            server = h.ChildProcess(argv, stderr)
            try:
                started = server.read_json_line(h.STARTUP_TIMEOUT_S)
                expected = "ReadIntoHTTPServer" if impl == "readinto" else "HTTPServer"
                if (started["server"], started["loop"]) != (expected, args.loop):
                    runs = f"{started['server']} on {started['loop']}"
                    raise h.CaseFailed(f"{impl} server runs {runs}, expected {expected} on {args.loop}")
                yield server.proc.pid, started["port"]
            finally:
                server.kill()

    def _generator(self, case: str, args: argparse.Namespace) -> str:
        uses_wrk = case in KEEPALIVE_CASES and args.load_generator != "builtin" and shutil.which("wrk") is not None
        return "wrk" if uses_wrk else "builtin"

    def _drive(self, case: str, port: int, args: argparse.Namespace, duration: float) -> dict[str, float]:
        """Run ``case``'s load against ``port`` (for ``duration`` seconds:
        keep-alive cases) from another process; its counts."""
        if self._generator(case, args) == "wrk":
            if case == "hello":
                return run_wrk(port, "/", args.connections, duration)
            return run_wrk(port, "/download", DOWNLOAD_CONNECTIONS, duration, args.download_mib * MiB)
        argv = ["http-load", "--case", case, "--port", str(port), "--body-mib", str(args.body_mib),
                "--connections", str(args.connections), "--duration", str(duration),
                "--repeat", str(args.repeat)]  # fmt: skip
        with tempfile.TemporaryFile() as stderr:
            load = h.ChildProcess(argv, stderr)
            try:
                return load.finish(h.STARTUP_TIMEOUT_S + duration + 600)
            finally:
                load.kill()

    def legend(self, nrepeats: int) -> str:
        rounds = f"{nrepeats} rounds" if nrepeats > 1 else "one round"
        return (
            f"req/s: requests per second, median (min-max) over {rounds}; MiB/s: payload; cpu us/req: server CPU\n"
            "time per request; x stock: req/s relative to stock's, cpu x: stock's cpu us/req over this one's,\n"
            "each taken within a round (side by side), then median (min-max); >1: better than stock."
        )

    def label(self, r: Result) -> str:
        return f"{r.case} {r.impl}"

    def brief(self, r: Result) -> str:
        requests, cpu = r.repeats[-1]["requests_per_s"], r.repeats[-1]["cpu_us_per_request"]
        return f"round {r.repeats[-1]['round'] + 1}: {requests:.1f} req/s, {cpu:.1f} us CPU/req"

    def group(self, r: Result) -> Hashable:
        return r.case

    def key(self, r: Result) -> Hashable:
        return (r.case, r.impl)

    def meta(self, args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
        return {
            **super().meta(args, argv),
            "loop": args.loop,
            "duration_s": args.duration,
            "connections": args.connections,
            "body_mib": args.body_mib,
            "download_mib": args.download_mib,
            "bodies_per_upload": args.repeat,
            "keepalive_burst_s": KEEPALIVE_BURST_S,
        }


SUITE = HttpSuite()


if __name__ == "__main__":
    sys.exit(SUITE.main())
