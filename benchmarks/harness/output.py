"""What a run leaves: the table on stdout, the JSON and the plot when asked,
and the exit status.  The JSON's ``"meta"`` is `benchmarks.harness.meta.run_meta`."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Collection, Sequence
from typing import Any

from .results import R
from .table import Ratio


def _fields(result: Any) -> list[str]:
    return [f.name for f in dataclasses.fields(result) if f.name != "extra"]


def to_json(
    results: Sequence[R],
    meta: dict[str, Any] | None = None,
    *,
    describe: Callable[[R], dict[str, Any]] = lambda r: {},
    summaries: Sequence[str] = (),
    ratios: Sequence[Ratio[R]] = (),
) -> dict[str, Any]:
    """A JSON-ready dict ``{"meta": ..., "results": [...]}``, an entry per
    result (a dataclass over `Repeated`): ``describe(r)`` (derived names), its
    fields with their repeats, ``status``, its ``extra`` flattened in,
    median/min/max of every metric in ``summaries``, and every ratio's value."""
    out = []
    for r in results:
        entry: dict[str, Any] = {**describe(r), **{name: getattr(r, name) for name in _fields(r)}}
        entry["status"] = r.status
        entry.update(r.extra)
        for metric in summaries:
            entry[metric] = r.summary(metric)
        for ratio in ratios:
            entry[ratio.key] = ratio.value(results, r)
        out.append(entry)
    return {"meta": dict(meta or {}), "results": out}


def from_json(
    cls: Callable[..., R],
    entry: dict[str, Any],
    *,
    describe: Callable[[R], dict[str, Any]] = lambda r: {},
    derived: Collection[str] = (),
) -> R:
    """The inverse of one `to_json` entry (to re-tabulate or re-plot a saved
    run): ``cls``'s fields from the entry, every key that is neither a field
    nor derived (``status``, ``derived``, what ``describe`` adds) back in
    ``extra``."""
    names = [f.name for f in dataclasses.fields(cls) if f.name != "extra"]  # type: ignore[arg-type]
    result = cls(**{k: entry[k] for k in names if k in entry})
    skip = {"status", *names, *derived, *describe(result)}
    result.extra = {k: v for k, v in entry.items() if k not in skip}
    return result


def write_json(path: str, data: Any) -> None:
    with open(path, "w") as f:
        json.dump(data, f, indent=1)


def finish(
    results: Sequence[R],
    table: str,
    *,
    json_path: str | None = None,
    to_json: Callable[[], Any] = dict,
    plot_path: str | None = None,
    plot: Callable[[Sequence[R], str], None] | None = None,
    what: str = "case",
) -> int:
    """The end of every run: print ``table``, write ``to_json()`` to
    ``json_path`` and the plot to ``plot_path`` if asked, and return the exit
    status (1 if any result failed, saying how many on stderr)."""
    print(table)
    if json_path:
        write_json(json_path, to_json())
    if plot_path and plot is not None:
        plot(results, plot_path)
    failed = [r for r in results if r.error is not None]
    if failed:
        print(f"{len(failed)} {what}(s) FAILED", file=sys.stderr)
        return 1
    return 0
