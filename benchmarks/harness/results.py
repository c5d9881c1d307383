"""A result of one case: its repeats, or why it has none; and the ratios
between results.

Every suite's result is a dataclass that subclasses `Repeated` and adds the
fields naming its case.  Pure code: no I/O.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Hashable, Sequence
from typing import Any, ClassVar, TypeVar


class Repeated:
    """Median and spread over ``repeats`` (one dict of metrics per repeat),
    ``skipped`` (why the case cannot run here) and ``error`` (why it failed).

    Subclasses are dataclasses that declare these three fields and ``extra``
    (figures of the whole case, flattened into its JSON entry).
    """

    repeats: list[dict[str, Any]]
    skipped: str | None
    error: str | None
    extra: dict[str, Any]

    #: Counts (fields, or keys of ``extra``) that `merge` adds up over rounds.
    summed: ClassVar[tuple[str, ...]] = ()

    @property
    def ok(self) -> bool:
        return self.skipped is None and self.error is None and bool(self.repeats)

    @property
    def status(self) -> str:
        """``"skipped"``, ``"failed"`` or ``"ok"`` (as in the JSON)."""
        return "skipped" if self.skipped is not None else "failed" if self.error is not None else "ok"

    def values(self, metric: str) -> list[float]:
        return [r[metric] for r in self.repeats if r.get(metric) is not None]

    def median(self, metric: str) -> float | None:
        values = self.values(metric)
        return statistics.median(values) if values else None

    def spread(self, metric: str) -> tuple[float, float] | None:
        values = self.values(metric)
        return (min(values), max(values)) if values else None

    def summary(self, metric: str) -> dict[str, float | None]:
        """``{"median", "min", "max"}`` of ``metric`` over the repeats (for JSON)."""
        spread = self.spread(metric)
        return {
            "median": self.median(metric),
            "min": spread[0] if spread else None,
            "max": spread[1] if spread else None,
        }

    def merge(self, later: Repeated) -> None:
        """Pool a later round's repeats of the same case into this one, and
        add up its `summed` counts (a failure in any round fails the case;
        other figures of the case stay the first round's)."""
        self.repeats.extend(later.repeats)
        if later.error is not None and self.error is None:
            self.error = later.error
        for name in self.summed:
            if hasattr(self, name):
                setattr(self, name, getattr(self, name) + getattr(later, name))
            elif name in self.extra and name in later.extra:
                self.extra[name] += later.extra[name]


R = TypeVar("R", bound=Repeated)


def find_baseline(
    results: Sequence[R], result: R, is_baseline: Callable[[R], bool], key: Callable[[R], Hashable]
) -> R | None:
    """The first measured result for which ``is_baseline`` holds and whose
    ``key`` (the case) equals ``result``'s, or None."""
    for other in results:
        if other.ok and is_baseline(other) and key(other) == key(result):
            return other
    return None


def median_ratio(
    mine: Repeated, theirs: Repeated | None, metric: str, *, lower_is_better: bool = False
) -> float | None:
    """How ``mine`` compares with ``theirs`` in ``metric``: the ratio of the
    medians, inverted if lower is better (so >1 always means ``mine`` does
    better), or None when either has no value (or is not measured)."""
    if theirs is None or not mine.ok:
        return None
    a, b = mine.median(metric), theirs.median(metric)
    if not a or not b:
        return None
    return b / a if lower_is_better else a / b


def paired_ratios(
    mine: Repeated, theirs: Repeated | None, metric: str, *, lower_is_better: bool = False
) -> list[float]:
    """The ratios of ``mine`` to ``theirs`` repeat by repeat (repeat ``i`` of
    each ran side by side, as the rounds of a suite do), inverted if lower is
    better; pairs missing a value are left out."""
    if theirs is None or not mine.ok:
        return []
    out = []
    for a_repeat, b_repeat in zip(mine.repeats, theirs.repeats):
        a, b = a_repeat.get(metric), b_repeat.get(metric)
        if a and b:
            out.append(b / a if lower_is_better else a / b)
    return out
