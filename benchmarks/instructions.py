"""Machine instructions executed per echoed message: a count, not a timing.

    python -m benchmarks.instructions                      # the default servers, both loops
    python -m benchmarks.instructions --server readinto,readinto-pure --loop uvloop

Each server runs as ``benchmarks.opcodes`` runs it (server and client in one
process, ``--clients`` connections ping-ponging a ``--msize`` message), with
nothing traced, under valgrind's ``cachegrind`` tool with its cache
simulation off, which counts every user-space instruction the process
executes.  The process runs twice, once with ``--messages`` round trips
and once with three times as many; the difference of the two counts,
divided by the difference of the messages, is the instructions per message,
start-up and warm-up cancelled.  The client (a plain ``asyncio.Protocol``)
is the same for every server, so differences between servers are the
servers'.

The process is pinned to one CPU, as ``benchmarks.load --pin`` pins its
server, so busy polling is off (the one part of the streams whose work
depends on timing).  On a shared 2-core machine CPU time per small message
moves by tens of percent between runs; this count moves by about a percent.
It counts the kernel's work not at all, nor what instructions cost (cache
misses, branch mispredictions): a server that makes more syscalls or
touches more memory is cheaper here than in ``benchmarks.load``.  A server
named ``NAME-pure`` (``readinto-pure``...) is ``NAME`` run with
``TORNADO_READINTO_NO_EXTENSIONS=1``.  It needs valgrind (the ``valgrind``
Debian package); without it the run stops, saying so.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from benchmarks.harness.meta import run_meta
from benchmarks.harness.processes import child_env
from benchmarks.impls import IMPLS, availability
from benchmarks.load import PURE_BUILD_ENV
from benchmarks.opcodes import add_workload_arguments

_PURE = "-pure"

#: Servers counted by default: ours (compiled and pure), the anchors.
DEFAULT_SERVERS = ("readinto", "readinto-pure", "framed-pool", "asyncio-streams", "asyncio-protocol")

#: The anchor of the ratio column.
REFERENCE = "asyncio-streams"

_I_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")
_VALGRIND = ("--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null")


class Unavailable(RuntimeError):
    """Instructions cannot be counted here (no valgrind)."""


@dataclass
class Counted:
    """One server on one loop: instructions per message, and the runs it
    came from (``(messages, instructions)`` of the short and the long run)."""

    server: str
    loop: str
    per_msg: float
    runs: list[tuple[int, int]]


def parse_instructions(stderr: str) -> int:
    """The instruction count of cachegrind's summary (``I refs: 1,234``).

    :raises ValueError: there is none (valgrind failed).
    """
    match = _I_REFS.search(stderr)
    if match is None:
        raise ValueError(f"no instruction count in valgrind's output: {stderr[-500:]!r}")
    return int(match.group(1).replace(",", ""))


def per_message(short: tuple[int, int], long: tuple[int, int]) -> float:
    """Instructions per message from two ``(messages, instructions)`` runs."""
    (m1, i1), (m2, i2) = short, long
    if m2 <= m1:
        raise ValueError(f"the long run must have more messages: {m1} then {m2}")
    return (i2 - i1) / (m2 - m1)


def valgrind() -> str:
    """The valgrind executable.

    :raises Unavailable: not installed.
    """
    path = shutil.which("valgrind")
    if path is None:
        raise Unavailable("valgrind is not installed (the valgrind Debian package): no instruction counts")
    return path


def implementation(server: str) -> tuple[str, bool]:
    """``(echo implementation, pure build)`` of a server name."""
    if server.endswith(_PURE) and server[: -len(_PURE)] in IMPLS:
        return server[: -len(_PURE)], True
    return server, False


def _one_cpu() -> None:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def run_once(server: str, loop: str, messages: int, clients: int, msize: int) -> tuple[int, int]:
    """One process under cachegrind, on one CPU: ``(messages echoed, instructions)``."""
    impl, pure = implementation(server)
    env = child_env()
    if pure:
        env.update(PURE_BUILD_ENV)
    argv = [valgrind(), *_VALGRIND, sys.executable, "-m", "benchmarks.instructions", "--child"]
    argv += [impl, loop, str(messages), str(clients), str(msize)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900, preexec_fn=_one_cpu)
    if done.returncode != 0:
        raise RuntimeError(f"{server} on {loop}: the counted run failed:\n{done.stderr[-2000:]}")
    line = json.loads(done.stdout.strip().splitlines()[-1])
    if pure and line["compiled"] is not False:
        raise RuntimeError(f"{server} on {loop}: the pure build did not run: {line}")
    return line["messages"], parse_instructions(done.stderr)


def count(server: str, loop: str, *, messages: int = 2000, clients: int = 8, msize: int = 1024) -> Counted:
    """Instructions per echoed message of ``server`` on ``loop`` (see the
    module docstring)."""
    short = run_once(server, loop, messages, clients, msize)
    long = run_once(server, loop, 3 * messages, clients, msize)
    return Counted(server, loop, per_message(short, long), [short, long])


def _child(argv: Sequence[str]) -> int:
    """Echo ``messages`` round trips untraced; print how many."""
    from benchmarks.opcodes import count as echo

    impl, loop, messages, clients, msize = argv
    echo(impl, loop, clients=int(clients), messages=int(messages), msize=int(msize), trace=False)
    n = max(1, int(messages) // int(clients)) * int(clients)
    package = sys.modules.get("tornado_readinto")
    print(json.dumps({"messages": n, "compiled": getattr(package, "COMPILED", None)}))
    return 0


def table(rows: Sequence[Counted]) -> str:
    """One line per server and loop, with the ratio to `REFERENCE` on the same loop."""
    lines = [f"{'server':<18} {'loop':<8} {'instructions/msg':>17} {'x ' + REFERENCE:>18}"]
    for row in rows:
        ref = [r.per_msg for r in rows if r.server == REFERENCE and r.loop == row.loop]
        ratio = f"{row.per_msg / statistics.median(ref):.2f}x" if ref else "-"
        lines.append(f"{row.server:<18} {row.loop:<8} {row.per_msg:>17,.0f} {ratio:>18}")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    """The command line (``benchmarks.publish`` checks a command with it)."""
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.instructions",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--server", default=",".join(DEFAULT_SERVERS), help="comma list of echo servers")
    add_workload_arguments(p, "round trips of the short run (default: 2000)")
    p.add_argument("--json", metavar="PATH", help="also write the counts as JSON, with the run's metadata")
    return p


def unknown_servers(servers: str) -> list[str]:
    """The names of the comma list ``servers`` that are no echo server."""
    return [s for s in servers.split(",") if implementation(s)[0] not in IMPLS]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        return _child(argv[1:])
    args = parser().parse_args(argv)
    try:
        valgrind()
    except Unavailable as e:
        print(e, file=sys.stderr)
        return 2
    rows = []
    for loop in args.loop.split(","):
        for server in args.server.split(","):
            impl = implementation(server)[0]
            why = availability(IMPLS[impl], loop) if impl in IMPLS else f"unknown server {server!r}"
            if why is not None:
                print(f"{server:<18} {loop:<8} SKIPPED ({why})", file=sys.stderr)
                continue
            row = count(server, loop, messages=args.messages, clients=args.clients, msize=args.msize)
            print(f"{server} on {loop}: {row.per_msg:,.0f} instructions/msg", file=sys.stderr)
            rows.append(row)
    print(table(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"meta": run_meta("benchmarks.instructions", argv), "results": [asdict(r) for r in rows]},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
