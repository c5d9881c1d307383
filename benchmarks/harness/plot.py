"""The pieces of every suite's plot: a figure written to a PNG, and bars of
medians with min-max whiskers.  matplotlib is imported only when a plot is
asked for (``--plot``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from .results import Repeated


@contextlib.contextmanager
def figure(path: str, nrows: int, ncols: int, figsize: tuple[float, float]) -> Iterator[tuple[Any, Any]]:
    """A matplotlib figure of ``nrows`` x ``ncols`` panels (``axes[row][col]``),
    written to ``path`` as a PNG when the block ends."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(nrows, ncols, figsize=figsize, squeeze=False)
    try:
        yield fig, axes
        fig.tight_layout()
        fig.savefig(path, dpi=100, bbox_inches="tight")
    finally:
        plt.close(fig)


def colours(n: int) -> Any:
    """A colour map for ``n`` series (``colours(n)(i)``)."""
    import matplotlib.pyplot as plt

    return plt.get_cmap("tab20" if n > 10 else "tab10")


def bars(ax: Any, placed: Sequence[tuple[float, Repeated]], metric: str, width: float, **style: Any) -> list[float]:
    """One bar per ``(x, result)``: the median of ``metric`` with a min-max
    whisker (results without the metric are left out); the medians drawn."""
    xs, ys, lo, hi = [], [], [], []
    for x, result in placed:
        median, spread = result.median(metric), result.spread(metric)
        if median is None or spread is None:
            continue
        xs.append(x)
        ys.append(median)
        lo.append(median - spread[0])
        hi.append(spread[1] - median)
    if xs:
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, **style)
    return ys


def offset(i: int, n: int, width: float) -> float:
    """Where series ``i`` of ``n`` sits in a group of bars ``width`` wide each."""
    return (i - (n - 1) / 2) * width


def no_results(ax: Any) -> None:
    ax.text(0.5, 0.5, "no results", ha="center", va="center")
