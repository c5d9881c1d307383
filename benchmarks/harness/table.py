"""The text table of every suite: columns declared by the suite, laid out here.

Pure functions: no I/O.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic

from .results import R
from .units import format_ratio


@dataclass(frozen=True)
class Column(Generic[R]):
    """One column: its title and how to fill a row's cell from the result
    (and all the results of the run, for ratios)."""

    title: str
    cell: Callable[[Sequence[R], R], str]
    left: bool = False  # aligned left (names), else right (numbers)
    head: bool = False  # names the case: shown on failed rows too


@dataclass(frozen=True)
class Ratio(Generic[R]):
    """A comparison with a baseline: a column ``title`` and a JSON key
    ``key``; ``of`` gives the ratios of one result (one for a ratio of
    medians, one per round for side-by-side ratios; none without a
    baseline).  The table shows their median (min-max), the JSON their median."""

    title: str
    key: str
    of: Callable[[Sequence[R], R], list[float]]

    def value(self, results: Sequence[R], result: R) -> float | None:
        values = self.of(results, result)
        return statistics.median(values) if values else None

    def column(self) -> Column[R]:
        return Column(self.title, lambda results, r: format_spread(self.of(results, r), format_ratio))


def one(value: float | None) -> list[float]:
    """A single ratio (or none) as `Ratio.of` returns it."""
    return [] if value is None else [value]


def format_spread(values: Sequence[float], fmt: Callable[[float | None], str]) -> str:
    """``median (min-max)`` of ``values``, each formatted by ``fmt``; the
    median alone for one value; ``fmt(None)`` for none."""
    if not values:
        return fmt(None)
    median = fmt(statistics.median(values))
    if len(values) < 2:
        return median
    return f"{median} ({fmt(min(values))}-{fmt(max(values))})"


def field(title: str, get: Callable[[R], str]) -> Column[R]:
    """A column naming the case (left-aligned, also on failed rows)."""
    return Column(title, lambda results, r: get(r), left=True, head=True)


def key_field(title: str, get: Callable[[R], str]) -> Column[R]:
    """A column naming the case, right-aligned (sizes, counts)."""
    return Column(title, lambda results, r: get(r), head=True)


def metric(title: str, name: str, fmt: Callable[[float | None], str], *, spread: bool = True) -> Column[R]:
    """The median of metric ``name`` over the repeats, with (min-max) if ``spread``."""
    if spread:
        return Column(title, lambda results, r: format_spread(r.values(name), fmt))
    return Column(title, lambda results, r: fmt(r.median(name)))


def format_table(
    results: Sequence[R],
    columns: Sequence[Column[R]],
    *,
    legend: str = "",
    group: Callable[[R], Hashable] = lambda r: None,
    skip_label: Callable[[R], str] = lambda r: "",
) -> str:
    """The results as an aligned text table under ``legend``: one row per
    measured result, a blank line where ``group`` changes, a failed result's
    first error line after its `Column.head` cells, and the skipped results
    listed once per ``skip_label`` at the end with their reason."""
    measured = [r for r in results if r.skipped is None]
    nhead = sum(c.head for c in columns)
    rows: list[list[str]] = []
    for r in measured:
        if r.error is not None:
            first_line = r.error.strip().splitlines()[0] if r.error.strip() else "failed"
            rows.append([c.cell(results, r) for c in columns[:nhead]] + [f"FAILED: {first_line}"])
        else:
            rows.append([c.cell(results, r) for c in columns])
    titles = [c.title for c in columns]
    full = [titles] + [row for row in rows if len(row) == len(columns)]
    widths = [max(len(row[i]) for row in full) for i in range(len(columns))]
    for row in rows:  # failed rows share the head columns
        for i, cell in enumerate(row[:nhead]):
            widths[i] = max(widths[i], len(cell))

    def align(cells: Sequence[str]) -> str:
        return "  ".join(
            cell.ljust(w) if columns[i].left else cell.rjust(w) for i, (cell, w) in enumerate(zip(cells, widths))
        )

    header = align(titles)
    lines = [header, "-" * len(header)]
    for n, (r, row) in enumerate(zip(measured, rows)):
        if n and group(r) != group(measured[n - 1]):
            lines.append("")
        lines.append(align(row) if len(row) == len(columns) else align(row[:nhead]) + "  " + row[nhead])
    skipped: dict[str, str] = {}
    for r in results:
        if r.skipped is not None:
            skipped.setdefault(skip_label(r), r.skipped)
    if skipped:
        lines.append("")
    lines += [f"SKIPPED {label}: {reason}" for label, reason in skipped.items()]
    body = "\n".join(line.rstrip() for line in lines)
    return f"{legend}\n\n{body}" if legend else body
