"""``python -m benchmarks``: the suites, and ``python -m benchmarks SUITE
[options]`` runs one (``python -m benchmarks SUITE --help`` for its flags).

Every suite runs on the one harness in ``benchmarks.harness``; each
``benchmarks/SUITE.py`` declares its cases, how to run one, and its columns,
and ``python -m benchmarks.SUITE`` runs it too.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from benchmarks.harness import Suite

#: The suites, in the order listed: name -> module.
SUITES = {
    "echo": "benchmarks.echo",
    "load": "benchmarks.load",
    "http": "benchmarks.http",
    "dask": "benchmarks.dask_netpath",  # (the dask suite, with --netpath)
    "dask_profile": "benchmarks.dask_profile",
    "check": "benchmarks.check",
    "idle": "benchmarks.idle",
}


def suite(name: str) -> Suite:
    """The `Suite` of ``name`` (its module's ``SUITE``)."""
    found: Suite = importlib.import_module(SUITES[name]).SUITE
    return found


def usage() -> str:
    width = max(map(len, SUITES))
    lines = [
        "usage: python -m benchmarks SUITE [options]   (python -m benchmarks SUITE --help: its options)",
        "",
        "suites:",
    ]
    lines += [f"  {name:<{width}}  {suite(name).summary}" for name in SUITES]
    lines += [
        "",
        "micro-benchmarks of the pure parts: pytest benchmarks/micro --benchmark-group-by=group,param:nbytes",
        "bytecodes per echoed message (a count, not a timing): python -m benchmarks.opcodes",
        "machine instructions per echoed message (valgrind; a count): python -m benchmarks.instructions",
        "the docs' tables, headline and plot from benchmarks/results/: python -m benchmarks.publish",
        "how to run and read them: benchmarks/README.rst",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "--list"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUITES:
        print(f"unknown suite {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    return suite(name).main(rest)


if __name__ == "__main__":
    sys.exit(main())
