"""A/B echo benchmark: stock Tornado vs tornado_readinto vs asyncio, uvloop and threads.

    python -m benchmarks.echo                       # the default set, about a minute
    python -m benchmarks.echo --full --json out.json --plot out.png
    python -m benchmarks.echo --list

For every case (implementation x message size x frames x mode x clients) the
server and the client run in two fresh processes on 127.0.0.1 (see
``benchmarks/impls``); the client prints its measurements as JSON, the
server its peak RSS.  Every echo is checked (sequence stamp, frame sizes),
the first and last message of each connection byte for byte, and the
server's message count against the client's; a failed check fails the case
and makes the exit status non-zero.  See benchmarks/README.rst.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable

if __package__ in (None, ""):  # run as a script: python benchmarks/echo.py
    # The root instead of the script's directory, whose dask.py would shadow the dask package.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks.impls import DEFAULT_IMPLS, IMPLS, availability  # noqa: E402
from benchmarks.report import (  # noqa: E402
    Result,
    finish_run,
    format_rate,
    format_size,
    format_table,
    parse_size,
    plot,
    to_json,
)

ROOT = Path(__file__).resolve().parent.parent

DEFAULT_MSIZES = ("1KiB", "1MiB", "100MiB")
FULL_MSIZES = ("1KiB", "64KiB", "1MiB", "100MiB")
MODES = ("pingpong", "pipelined")

#: Pipelined mode keeps at most this many payload bytes in flight per
#: connection (the client's ring holds that many): --window 16 of 100 MiB
#: would be 1.6 GiB per side on a shared machine.  100 MiB -> window 2.
MAX_INFLIGHT_NBYTES = 256 << 20

#: Seconds for a process to start and print its port / its last line.
STARTUP_TIMEOUT_S = 30.0
#: Added to every case's own time budget before its processes are killed.
GRACE_S = 60.0


class CaseFailed(Exception):
    pass


@dataclass(frozen=True)
class Case:
    impl: str
    msize: int
    nframes: int
    mode: str
    clients: int

    def window(self, window: int) -> int:
        if self.mode == "pingpong":
            return 1
        return max(1, min(window, MAX_INFLIGHT_NBYTES // self.msize))


# -- command line ----------------------------------------------------------------


def _csv(convert: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    def parse(text: str) -> list[Any]:
        try:
            return [convert(item) for item in text.split(",") if item.strip()]
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(f"must be >= 1, not {value}")
    return value


def _choice(what: str, known: Collection[str]) -> Callable[[str], str]:
    """An argparse ``type`` that accepts one of ``known`` (``what`` names it
    in the errors)."""

    def check(text: str) -> str:
        text = text.strip()
        if text not in known:
            raise ValueError(f"unknown {what} {text!r}; known: {', '.join(known)}")
        return text

    check.__name__ = what
    return check


_impl_name = _choice("impl", IMPLS)
_mode = _choice("mode", MODES)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.echo",
        description="A/B echo benchmark over 127.0.0.1, server and client in separate processes.",
    )
    p.add_argument("--impl", type=_csv(_impl_name), help=f"comma list (default: {','.join(DEFAULT_IMPLS)})")
    p.add_argument("--msize", type=_csv(parse_size), help=f"payload per message (default: {','.join(DEFAULT_MSIZES)})")
    p.add_argument("--nframes", type=_csv(_positive_int), help="frames per message, msize split evenly (default: 1)")
    p.add_argument("--mode", type=_csv(_mode), help="pingpong,pipelined (default: pingpong)")
    p.add_argument(
        "--window",
        type=_positive_int,
        default=16,
        help="pipelined: messages in flight, capped at 256 MiB of payload (default: 16)",
    )
    p.add_argument(
        "--clients", type=_csv(_positive_int), default=[1], help="connections, all in one client process (default: 1)"
    )
    p.add_argument("--duration", type=float, default=1.25, help="seconds per repeat (default: 1.25)")
    p.add_argument("--repeat", type=_positive_int, default=3, help="repeats per case (default: 3)")
    p.add_argument("--warmup", type=float, default=0.25, help="seconds of warm-up per case (default: 0.25)")
    p.add_argument("--json", metavar="PATH", help="write all results as JSON")
    p.add_argument("--plot", metavar="PATH", help="write a PNG plot (needs matplotlib)")
    p.add_argument("--full", action="store_true", help="all impls, sizes 1KiB..100MiB, nframes 1,4, both modes")
    p.add_argument("--list", action="store_true", help="list the implementations and whether each can run")
    args = p.parse_args(argv)
    full = args.full
    args.impl = args.impl or (list(IMPLS) if full else list(DEFAULT_IMPLS))
    args.msize = args.msize or [parse_size(s) for s in (FULL_MSIZES if full else DEFAULT_MSIZES)]
    args.nframes = args.nframes or ([1, 4] if full else [1])
    args.mode = args.mode or (list(MODES) if full else ["pingpong"])
    for msize in args.msize:
        for nframes in args.nframes:
            if msize < 8 * nframes:
                p.error(f"--msize {format_size(msize)} with {nframes} frames: need at least 8 bytes per frame")
    if args.duration <= 0 or args.warmup < 0:
        p.error("--duration must be > 0 and --warmup >= 0")
    return args


def plan_cases(args: argparse.Namespace) -> list[Case]:
    """Implementations innermost, so the ones compared run back to back."""
    return [
        Case(impl, msize, nframes, mode, clients)
        for msize in args.msize
        for nframes in args.nframes
        for mode in args.mode
        for clients in args.clients
        for impl in args.impl
    ]


# -- one case ----------------------------------------------------------------------


class _Process:
    """A child process whose stdout lines we read with deadlines."""

    def __init__(self, argv: list[str], stderr: IO[bytes]) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
        self.argv = argv
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.impls", *argv], stdout=subprocess.PIPE, stderr=stderr, env=env
        )
        self.stderr = stderr
        self._pending = b""

    def read_json_line(self, timeout_s: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise CaseFailed(f"{self.argv[0]} printed nothing within {timeout_s:.0f}s{self.stderr_tail()}")
            chunk = os.read(fd, 65536)
            if not chunk:
                self.proc.wait(timeout=5)
                raise CaseFailed(f"{self.argv[0]} exited with status {self.proc.returncode}{self.stderr_tail()}")
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return json.loads(line)  # type: ignore[no-any-return]

    def finish(self, timeout_s: float) -> dict[str, Any]:
        """Its last JSON line, after it exited with status 0."""
        result = self.read_json_line(timeout_s)
        try:
            status = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise CaseFailed(f"{self.argv[0]} did not exit") from None
        if status:
            raise CaseFailed(f"{self.argv[0]} exited with status {status}{self.stderr_tail()}")
        return result

    def stderr_tail(self, nlines: int = 12) -> str:
        self.stderr.flush()
        self.stderr.seek(0)
        lines = self.stderr.read().decode(errors="replace").strip().splitlines()[-nlines:]
        # the last line (e.g. "VERIFICATION FAILED: ...") first: the table shows one line
        return f": {lines[-1]}\n" + "\n".join(lines) if lines else ""

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def case_timeout_s(args: argparse.Namespace) -> float:
    return GRACE_S + 3 * (args.warmup + args.repeat * args.duration)


def run_case(case: Case, args: argparse.Namespace) -> Result:
    """Run one case in a fresh server process and a fresh client process."""
    window = case.window(args.window)
    result = Result(case.impl, case.msize, case.nframes, case.mode, case.clients, window=window)
    reason = availability(IMPLS[case.impl])
    if reason is not None:
        result.skipped = reason
        return result
    timeout = case_timeout_s(args)
    common = ["--impl", case.impl, "--clients", str(case.clients), "--timeout", f"{timeout:g}"]
    processes: list[_Process] = []
    with tempfile.TemporaryFile() as server_err, tempfile.TemporaryFile() as client_err:
        try:
            server = _Process(["server", *common], server_err)
            processes.append(server)
            port = server.read_json_line(STARTUP_TIMEOUT_S)["port"]
            client = _Process(
                ["client", *common, "--port", str(port), "--msize", str(case.msize), "--nframes", str(case.nframes),
                 "--mode", case.mode, "--window", str(window), "--warmup", f"{args.warmup:g}",
                 "--duration", f"{args.duration:g}", "--repeat", str(args.repeat)],
                client_err,
            )  # fmt: skip
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


def _fill(result: Result, client: dict[str, Any], server: dict[str, Any], nrepeats: int) -> None:
    """Copy the processes' JSON into ``result``; raise `CaseFailed` if the counts disagree."""
    for repeat in client["repeats"]:
        repeat["mib_per_s"] = repeat["msgs_per_s"] * result.msize / (1 << 20)
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
    verify_counts(client, server, clients=result.clients, nrepeats=nrepeats)


def verify_counts(client: dict[str, Any], server: dict[str, Any], *, clients: int, nrepeats: int) -> None:
    """Raise `CaseFailed` unless the client checked every echo, made both full
    compares per connection, the server echoed exactly what was sent, and
    every repeat was measured (the processes' JSON, as from
    ``benchmarks.impls``)."""
    problems = []
    if client["verified_messages"] != client["messages_sent"]:
        problems.append(f"checked {client['verified_messages']} of {client['messages_sent']} echoes")
    if client["full_compares"] != 2 * clients:
        problems.append(f"{client['full_compares']} full compares, expected {2 * clients}")
    if server["messages"] != client["messages_sent"]:
        problems.append(f"server echoed {server['messages']} messages, client sent {client['messages_sent']}")
    if len(client["repeats"]) != nrepeats:
        problems.append(f"{len(client['repeats'])} repeats, expected {nrepeats}")
    if problems:
        raise CaseFailed("verification: " + "; ".join(problems))


# -- main ----------------------------------------------------------------------------


def _progress(n: int, total: int, case: Case, result: Result, elapsed_s: float) -> str:
    name = f"[{n}/{total}] {case.impl} {format_size(case.msize)} x{case.nframes} {case.mode}"
    if case.clients > 1:
        name += f" {case.clients} clients"
    if result.skipped is not None:
        return f"{name}: SKIPPED ({result.skipped})"
    if result.error is not None:
        return f"{name}: FAILED {result.error}"
    return (
        f"{name}: {format_rate(result.median('msgs_per_s'))} msgs/s, "
        f"{format_rate(result.median('mib_per_s'))} MiB/s ({elapsed_s:.1f}s)"
    )


def list_impls() -> str:
    width = max(map(len, IMPLS))
    lines = []
    for name, spec in IMPLS.items():
        reason = availability(spec)
        status = "available" if reason is None else f"UNAVAILABLE: {reason}"
        lines.append(f"{name:<{width}}  {spec.summary}  [{status}]")
    return "\n".join(lines)


def run_meta(argv: Sequence[str]) -> dict[str, Any]:
    """What every benchmark's JSON records about the run and the machine."""
    import tornado

    return {
        "argv": list(argv),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "tornado": tornado.version,
    }


def _meta(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    return {
        **run_meta(argv),
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "repeat": args.repeat,
        "window": args.window,
        "max_inflight_nbytes": MAX_INFLIGHT_NBYTES,
    }


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.list:
        print(list_impls())
        return 0
    cases = plan_cases(args)
    results = []
    for n, case in enumerate(cases, 1):
        started = time.perf_counter()
        result = run_case(case, args)
        results.append(result)
        print(_progress(n, len(cases), case, result, time.perf_counter() - started), file=sys.stderr, flush=True)
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
