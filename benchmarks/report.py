"""Results of the echo benchmark: sizes, the table, JSON and the plot.

Pure functions over `Result` (no I/O except `plot`, which writes the PNG it
is asked for and imports matplotlib only when called).
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable

#: The ratio columns: msgs/s relative to these implementations, same case.
BASELINES = ("stock-read_bytes", "threads")

#: Metrics stored per repeat.
METRICS = ("msgs_per_s", "mib_per_s", "p50_s", "p99_s")

MiB = 1 << 20

_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}
_SIZE_RE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``"64KiB"`` -> 65536.  Units B, KiB, MiB, GiB (case-insensitive) or none
    (bytes); fractions allowed if the result is whole bytes."""
    match = _SIZE_RE.fullmatch(text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _UNITS:
        raise ValueError(f"not a size: {text!r} (use e.g. 1000, 1KiB, 1.5MiB, 1GiB)")
    value = float(match.group(1)) * _UNITS[unit]
    if value != int(value):
        raise ValueError(f"not a whole number of bytes: {text!r}")
    return int(value)


def format_size(nbytes: int) -> str:
    """The shortest exact binary form: 1024 -> "1KiB", 1536 -> "1.5KiB", 1000 -> "1000B"."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            for digits in range(3):
                text = f"{nbytes / scale:.{digits}f}"
                if round(float(text) * scale) == nbytes:
                    return f"{text}{unit}"
    return f"{nbytes}B"


class RepeatedMixin:
    """Median and spread over ``repeats`` (per-repeat metric dicts); shared by
    the echo `Result` and the load benchmark's result."""

    repeats: list[dict[str, Any]]
    skipped: str | None
    error: str | None

    @property
    def ok(self) -> bool:
        return self.skipped is None and self.error is None and bool(self.repeats)

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


def finish_run(
    results: Sequence[Any],
    table: str,
    *,
    json_path: str | None,
    to_json: Callable[[], dict[str, Any]],
    plot_path: str | None,
    plot: Callable[[Sequence[Any], str], None],
    what: str = "case",
) -> int:
    """The end of every benchmark run: print ``table``, write the JSON and
    the plot if asked, and return the exit status (1 if any result has an
    ``error``, saying how many on stderr)."""
    print(table)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(to_json(), f, indent=1)
    if plot_path:
        plot(results, plot_path)
    failed = [r for r in results if r.error is not None]
    if failed:
        print(f"{len(failed)} {what}(s) FAILED", file=sys.stderr)
        return 1
    return 0


@dataclass
class Result(RepeatedMixin):
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

    @property
    def case(self) -> tuple[int, int, str, int]:
        return (self.msize, self.nframes, self.mode, self.clients)


def ratio(results: Sequence[Result], result: Result, baseline: str) -> float | None:
    """Median msgs/s of ``result`` over that of ``baseline`` in the same case."""
    mine = result.median("msgs_per_s") if result.ok else None
    for other in results:
        if other.impl == baseline and other.case == result.case and other.ok:
            theirs = other.median("msgs_per_s")
            if mine is not None and theirs:
                return mine / theirs
    return None


# -- formatting ----------------------------------------------------------------


def format_rate(value: float | None) -> str:
    """3 significant digits with k/M: 12345 -> "12.3k"."""
    if value is None:
        return "-"
    for scale, suffix in ((1e6, "M"), (1e3, "k"), (1, "")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def format_seconds(value: float | None) -> str:
    if value is None:
        return "-"
    for scale, unit in ((1, "s"), (1e-3, "ms")):
        if value >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value / 1e-6:.3g}us"


def _format_mib(nbytes: int | None) -> str:
    return "-" if nbytes is None else f"{nbytes / MiB:.0f}"


def _format_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _with_spread(result: RepeatedMixin, metric: str, fmt: Callable[[float | None], str] = format_rate) -> str:
    """``median (min-max)`` of ``metric`` over the repeats, each formatted by ``fmt``."""
    median, spread = result.median(metric), result.spread(metric)
    if spread is None or len(result.repeats) < 2:
        return fmt(median)
    return f"{fmt(median)} ({fmt(spread[0])}-{fmt(spread[1])})"


COLUMNS = ("impl", "msize", "nframes", "mode", "msgs/s", "MiB/s", "p50", "p99", "RSS srv/cli", "x stock", "x threads")
_LEFT = {"impl", "mode"}


def _row(results: Sequence[Result], r: Result) -> list[str]:
    head = [r.impl, format_size(r.msize), str(r.nframes), r.mode + (f" x{r.clients}" if r.clients > 1 else "")]
    if r.error is not None:
        first_line = r.error.strip().splitlines()[0] if r.error.strip() else ""
        return head + [f"FAILED: {first_line}"]
    return head + [
        _with_spread(r, "msgs_per_s"),
        _with_spread(r, "mib_per_s"),
        format_seconds(r.median("p50_s")),
        format_seconds(r.median("p99_s")),
        f"{_format_mib(r.server_rss_bytes)}/{_format_mib(r.client_rss_bytes)}",
        *(_format_ratio(ratio(results, r, b)) for b in BASELINES),
    ]


def table_header(nrepeats: int | None = None) -> str:
    repeats = f"median of {nrepeats} repeats" if nrepeats else "median of the repeats"
    return (
        f"msgs/s: messages echoed per second, {repeats} (min-max); MiB/s: one-way payload"
        " (msize x msgs/s);\np50/p99: latency per round trip (pingpong) or send-to-echo (pipelined);"
        " RSS: peak MiB, server/client;\nx stock / x threads: msgs/s relative to stock-read_bytes / threads"
        " in the same case of this run."
    )


def format_table(results: Sequence[Result]) -> str:
    """The results as an aligned text table, a blank line between cases;
    failures inline, skipped implementations listed once at the end with
    their reason."""
    measured = [r for r in results if r.skipped is None]
    rows = [_row(results, r) for r in measured]
    full = [list(COLUMNS)] + [row for row in rows if len(row) == len(COLUMNS)]
    widths = [max(len(row[i]) for row in full) for i in range(len(COLUMNS))]
    for row in rows:  # failed rows share the first columns
        for i, cell in enumerate(row[:4]):
            widths[i] = max(widths[i], len(cell))

    def align(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if COLUMNS[i] in _LEFT else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
        )

    header = align(COLUMNS)
    lines = [header, "-" * len(header)]
    for n, (r, row) in enumerate(zip(measured, rows)):
        if n and r.case != measured[n - 1].case:
            lines.append("")
        lines.append(align(row) if len(row) == len(COLUMNS) else align(row[:4]) + "  " + row[4])
    skipped: dict[str, str] = {}
    for r in results:
        if r.skipped is not None:
            skipped.setdefault(r.impl, r.skipped)
    if skipped:
        lines.append("")
    lines += [f"SKIPPED {impl}: {reason}" for impl, reason in skipped.items()]
    nrepeats = max((len(r.repeats) for r in measured), default=0)
    return table_header(nrepeats) + "\n\n" + "\n".join(line.rstrip() for line in lines)


def to_json(results: Sequence[Result], meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """A JSON-ready dict: every result with its repeats, median/min/max of
    each metric, and the ratios to the baselines."""
    out = []
    for r in results:
        entry: dict[str, Any] = {
            "impl": r.impl,
            "msize": r.msize,
            "msize_text": format_size(r.msize),
            "nframes": r.nframes,
            "mode": r.mode,
            "clients": r.clients,
            "window": r.window,
            "status": "skipped" if r.skipped is not None else "failed" if r.error is not None else "ok",
            "skipped": r.skipped,
            "error": r.error,
            "repeats": r.repeats,
            "server_rss_bytes": r.server_rss_bytes,
            "client_rss_bytes": r.client_rss_bytes,
            "verified_messages": r.verified_messages,
            **r.extra,
        }
        for metric in METRICS:
            entry[metric] = r.summary(metric)
        for baseline in BASELINES:
            entry[f"x_{baseline}"] = ratio(results, r, baseline)
        out.append(entry)
    return {"meta": dict(meta or {}), "results": out}


def result_from_json(entry: dict[str, Any]) -> Result:
    """The inverse of one `to_json` entry (for re-plotting saved runs)."""
    known = {"impl", "msize", "nframes", "mode", "clients", "repeats", "window", "server_rss_bytes",
             "client_rss_bytes", "verified_messages", "skipped", "error"}  # fmt: skip
    derived = {"msize_text", "status", *METRICS, *(f"x_{b}" for b in BASELINES)}
    extra = {k: v for k, v in entry.items() if k not in known | derived}
    return Result(**{k: entry[k] for k in known if k in entry}, extra=extra)


# -- plot ------------------------------------------------------------------------


def plot(results: Sequence[Result], path: str, metric: str = "mib_per_s") -> None:
    """Grouped bars (x = message size, colour = implementation, min-max
    whiskers), one column per mode/nframes/clients; below, msgs/s relative to
    stock-read_bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in results if r.ok]
    groups = sorted({(r.mode, r.nframes, r.clients) for r in ok})
    impls = list(dict.fromkeys(r.impl for r in ok))
    colours = plt.get_cmap("tab20" if len(impls) > 10 else "tab10")
    label = {"mib_per_s": "MiB/s (one-way payload)", "msgs_per_s": "messages/s"}[metric]
    fig, axes = plt.subplots(2, max(1, len(groups)), figsize=(max(7.0, 5.5 * len(groups)), 8), squeeze=False)
    for col, (mode, nframes, clients) in enumerate(groups):
        top, bottom = axes[0][col], axes[1][col]
        group = [r for r in ok if (r.mode, r.nframes, r.clients) == (mode, nframes, clients)]
        sizes = sorted({r.msize for r in group})
        width = 0.8 / max(1, len(impls))
        values = []
        for i, impl in enumerate(impls):
            xs, ys, lo, hi, xr, yr = [], [], [], [], [], []
            for x, msize in enumerate(sizes):
                r = next((r for r in group if r.impl == impl and r.msize == msize), None)
                if r is None:
                    continue
                median, spread = r.median(metric), r.spread(metric)
                if median is None or spread is None:
                    continue
                xs.append(x + (i - (len(impls) - 1) / 2) * width)
                ys.append(median)
                lo.append(median - spread[0])
                hi.append(spread[1] - median)
                rel = ratio(results, r, BASELINES[0])
                if rel is not None:
                    xr.append(xs[-1])
                    yr.append(rel)
            values += ys
            if xs:
                top.bar(xs, ys, width, yerr=[lo, hi], capsize=2, color=colours(i), label=impl)
            if xr:
                bottom.bar(xr, yr, width, color=colours(i), label=impl)
        positive = [v for v in values if v > 0]
        if positive and max(positive) / min(positive) > 20:
            top.set_yscale("log")
        title = f"{mode}, {nframes} frame{'s' if nframes > 1 else ''}/message"
        top.set_title(title + (f", {clients} clients" if clients > 1 else ""))
        top.set_ylabel(label)
        bottom.set_ylabel(f"msgs/s relative to {BASELINES[0]}")
        bottom.axhline(1.0, color="black", linewidth=0.8)
        for ax in (top, bottom):
            ax.set_xticks(range(len(sizes)))
            ax.set_xticklabels([format_size(s) for s in sizes])
            ax.set_xlabel("message size (payload)")
            ax.grid(axis="y", alpha=0.3)
    if impls:
        # one legend for all panels, to the right of them, covering no bars
        handles, names = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, names, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize="small")
    else:
        axes[0][0].text(0.5, 0.5, "no results", ha="center", va="center")
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
