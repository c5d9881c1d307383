"""A suite: what ``python -m benchmarks SUITE`` runs.

A `Suite` declares its name, a one-line summary and its flags, and runs.
Most suites are a `TableSuite`: they declare their cases, how to run one
case, the columns of their table and their ratios; the harness owns the
rest: the common flags, the rounds (in alternating order), the progress
lines, the table, the JSON, the plot's file and the exit status.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

from .meta import run_meta
from .output import finish, from_json, to_json
from .results import R
from .table import Column, Ratio, format_table
from .units import positive_int

C = TypeVar("C")
T = TypeVar("T")


def in_turn(items: Sequence[T], turn: int) -> list[T]:
    """``items`` in order on even turns, reversed on odd ones (A B C, C B A,
    ...): slow and fast spells of a shared machine then fall on all alike."""
    return list(items) if turn % 2 == 0 else list(items)[::-1]


def alternation(nrepeats: int, nsides: int = 2) -> list[tuple[int, int]]:
    """(repeat, side) pairs, the sides `in_turn` repeat by repeat: for two,
    A B B A A B ..."""
    return [(rep, side) for rep in range(nrepeats) for side in in_turn(range(nsides), rep)]


class Suite:
    """A benchmark of ``python -m benchmarks``: its ``name``, a one-line
    ``summary`` (the suite list), a ``description`` (``--help``), its flags
    (`add_arguments`, `check_arguments`) and `run`."""

    name = ""
    summary = ""
    description = ""

    @property
    def module(self) -> str:
        """The module that runs the suite: ``python -m benchmarks.NAME``."""
        return f"benchmarks.{self.name}"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add the suite's own flags."""

    def check_arguments(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
        """Fill in defaults that depend on other flags; ``parser.error`` on bad ones.
        The same on every machine: what this one lacks is `unavailable`'s."""

    def unavailable(self, args: argparse.Namespace) -> str | None:
        """What this machine lacks to run ``args`` (a tool, root), or None.
        `main` refuses the command with it before anything runs; parsing
        (`parse_args`, ``publish --remake --dry-run``) does not ask."""
        return None

    def run(self, args: argparse.Namespace, argv: Sequence[str]) -> int:
        """Run, print the results; the exit status."""
        raise NotImplementedError

    def parser(self) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(
            prog=f"python -m benchmarks {self.name}",
            description=self.description or self.summary,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        self.add_arguments(parser)
        return parser

    def parse_args(self, argv: Sequence[str] | None = None) -> argparse.Namespace:
        parser = self.parser()
        args = parser.parse_args(argv)
        self.check_arguments(args, parser)
        return args

    def main(self, argv: Sequence[str] | None = None) -> int:
        """``python -m benchmarks NAME ARGV`` (or the suite's own module): a
        command this machine cannot run (`unavailable`) ends with the reason
        (``parser.error``: status 2, no traceback) before anything runs."""
        argv = list(sys.argv[1:] if argv is None else argv)
        args = self.parse_args(argv)
        reason = self.unavailable(args)
        if reason is not None:
            self.parser().error(reason)
        return self.run(args, argv)


class TableSuite(Suite, Generic[C, R]):
    """A suite whose results are a table, a JSON file and a plot.

    A suite declares:

    * ``result_type`` (a dataclass over `Repeated`), ``columns`` and
      ``ratios`` (the table's last columns, and keys of the JSON),
      ``summaries`` (metrics whose median/min/max go into the JSON);
    * `cases`, `run_case`, `legend`, and for the progress lines `label` and
      `brief`; `group`, `skip_label`, `describe`, `key`, `meta`, `plot`,
      `table_columns` and `listing` where the defaults do not fit.

    The harness adds ``--repeat`` (unless ``repeat_default`` is None),
    ``--rounds`` (if ``rounds``), ``--json``, ``--plot`` (if the suite
    plots) and ``--list`` (if it lists anything).
    """

    result_type: Callable[..., R]
    columns: Sequence[Column[R]] = ()
    ratios: Sequence[Ratio[R]] = ()
    summaries: Sequence[str] = ()
    repeat_default: int | None = 3
    rounds = True
    what = "case"

    # -- declared by the suite --------------------------------------------------------

    def cases(self, args: argparse.Namespace) -> Sequence[C]:
        """Every case of the run, in the order they run (the first round)."""
        raise NotImplementedError

    def run_case(self, case: C, args: argparse.Namespace, round_index: int) -> Sequence[R]:
        """Measure one case: its results (one, or one per thing compared when
        they run together)."""
        raise NotImplementedError

    def legend(self, nrepeats: int) -> str:
        """The text above the table (``nrepeats``: the most repeats of a result)."""
        return ""

    def label(self, result: R) -> str:
        """What a progress line calls ``result``'s case."""
        return repr(result)

    def brief(self, result: R) -> str:
        """A measured result's figures on its progress line."""
        return ""

    def group(self, result: R) -> Hashable:
        """The table puts a blank line where this changes."""
        return None

    def skip_label(self, result: R) -> str:
        """Skipped results are listed once per label."""
        return self.label(result)

    def describe(self, result: R) -> dict[str, Any]:
        """Derived fields of a result's JSON entry (not read back)."""
        return {}

    def key(self, result: R) -> Hashable:
        """What makes results of several rounds the same case."""
        return self.label(result)

    def meta(self, args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
        """The JSON's ``meta``: `run_meta` (the run, the build, the machine), the
        repeats and rounds; a suite adds its own settings."""
        meta = run_meta(self.module, argv)
        if self.repeat_default is not None:
            meta["repeat"] = args.repeat
        if self.rounds:
            meta["rounds"] = args.rounds
        return meta

    def table_columns(self, results: Sequence[R]) -> Sequence[Column[R]]:
        """The table's columns before the ratios (default ``columns``): a suite
        may add one that only some runs need."""
        return self.columns

    def listing(self) -> str | None:
        """What ``--list`` prints (a suite that lists nothing does not override this: no ``--list``)."""
        return None

    def plot(self, results: Sequence[R], path: str) -> None:
        """Write a PNG of ``results`` to ``path``; ``plots = False`` for none."""
        raise NotImplementedError

    plots = True

    # -- owned by the harness ----------------------------------------------------------

    def parser(self) -> argparse.ArgumentParser:
        parser = super().parser()
        if self.repeat_default is not None:
            parser.add_argument(
                "--repeat",
                type=positive_int,
                default=self.repeat_default,
                help=f"timed repeats per case{' and round' if self.rounds else ''} (default: {self.repeat_default})",
            )
        if self.rounds:
            parser.add_argument(
                "--rounds",
                type=positive_int,
                default=1,
                help="run every case this many times in fresh processes, in alternating order "
                "(A B C, C B A, ...), and pool their repeats: slow spells of a shared machine "
                "then hit every case alike (default: 1)",
            )
        parser.add_argument("--json", metavar="PATH", help="write all results as JSON")
        if self.plots:
            parser.add_argument("--plot", metavar="PATH", help="write a PNG plot (needs matplotlib)")
        if type(self).listing is not TableSuite.listing:  # the suite lists something
            parser.add_argument("--list", action="store_true", help="list what can run here, then exit")
        return parser

    def format_table(self, results: Sequence[R]) -> str:
        measured = [r for r in results if r.skipped is None]
        return format_table(
            results,
            [*self.table_columns(results), *(ratio.column() for ratio in self.ratios)],
            legend=self.legend(max((len(r.repeats) for r in measured), default=0)),
            group=self.group,
            skip_label=self.skip_label,
        )

    def to_json(self, results: Sequence[R], meta: dict[str, Any] | None = None) -> dict[str, Any]:
        return to_json(results, meta, describe=self.describe, summaries=self.summaries, ratios=self.ratios)

    def from_json(self, entry: dict[str, Any]) -> R:
        derived = [*self.summaries, *(ratio.key for ratio in self.ratios)]
        return from_json(self.result_type, entry, describe=self.describe, derived=derived)

    def progress_line(self, n: int, total: int, result: R, elapsed_s: float) -> str:
        name = f"[{n}/{total}] {self.label(result)}"
        if result.skipped is not None:
            return f"{name}: SKIPPED ({result.skipped})"
        if result.error is not None:
            return f"{name}: FAILED {result.error}"
        return f"{name}: {self.brief(result)} ({elapsed_s:.1f}s)"

    def run_cases(self, args: argparse.Namespace) -> list[R]:
        """Every case, ``--rounds`` times in alternating order, a progress
        line per result on stderr; the results of a case in all rounds merged
        (`Repeated.merge`), in the order of the first round."""
        cases = self.cases(args)
        nrounds = args.rounds if self.rounds else 1
        by_key: dict[Hashable, R] = {}
        total, n = len(cases) * nrounds, 0
        for round_index in range(nrounds):
            for case in in_turn(cases, round_index):
                n += 1
                started = time.perf_counter()
                done = self.run_case(case, args, round_index)
                elapsed = time.perf_counter() - started
                for result in done:
                    print(self.progress_line(n, total, result, elapsed), file=sys.stderr, flush=True)
                    key = self.key(result)
                    if key in by_key:
                        by_key[key].merge(result)
                    else:
                        by_key[key] = result
        return list(by_key.values())

    def run(self, args: argparse.Namespace, argv: Sequence[str]) -> int:
        if getattr(args, "list", False):
            print(self.listing())
            return 0
        results = self.run_cases(args)
        return finish(
            results,
            self.format_table(results),
            json_path=args.json,
            to_json=lambda: self.to_json(results, self.meta(args, argv)),
            plot_path=getattr(args, "plot", None),
            plot=self.plot if self.plots else None,
            what=self.what,
        )
