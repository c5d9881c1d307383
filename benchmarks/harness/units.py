"""Sizes, rates, times and ratios as text, and the argparse types of every suite.

Pure functions: no I/O.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Collection, Sequence
from typing import Any

MiB = 1 << 20

_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}
_SIZE_RE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``"64KiB"`` -> 65536.  Units B, KiB, MiB, GiB (case-insensitive) or none
    (bytes); fractions allowed if the result is whole bytes.

    :raises ValueError: not a size, or not a whole number of bytes.
    """
    match = _SIZE_RE.fullmatch(text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _UNITS:
        raise ValueError(f"not a size: {text!r} (use e.g. 1000, 1KiB, 1.5MiB, 1GiB)")
    value = float(match.group(1)) * _UNITS[unit]
    if value != int(value):
        raise ValueError(f"not a whole number of bytes: {text!r}")
    return int(value)


def shortest_exact(value: int, units: Sequence[tuple[str, int]], base_unit: str, max_digits: int) -> str:
    """``value`` in the first of ``units`` (name, scale; largest first) that
    it reaches and that spells it exactly with at most ``max_digits``
    decimals, else in ``base_unit``."""
    for unit, scale in units:
        if value >= scale:
            for digits in range(max_digits + 1):
                text = f"{value / scale:.{digits}f}"
                if round(float(text) * scale) == value:
                    return f"{text}{unit}"
    return f"{value}{base_unit}"


def format_size(nbytes: int) -> str:
    """The shortest exact binary form: 1024 -> "1KiB", 1536 -> "1.5KiB", 1000 -> "1000B"."""
    return shortest_exact(nbytes, (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)), "B", 2)


def format_rate(value: float | None) -> str:
    """3 significant digits with k/M: 12345 -> "12.3k"; None -> "-"."""
    if value is None:
        return "-"
    for scale, suffix in ((1e6, "M"), (1e3, "k"), (1, "")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def format_seconds(value: float | None) -> str:
    """3 significant digits in s, ms or us: 0.0123 -> "12.3ms"; None -> "-"."""
    if value is None:
        return "-"
    for scale, unit in ((1, "s"), (1e-3, "ms")):
        if value >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value / 1e-6:.3g}us"


def format_number(value: float | None) -> str:
    """3 significant digits, no unit: 31.25 -> "31.2"; None -> "-"."""
    return "-" if value is None else f"{value:.3g}"


def format_fixed(digits: int) -> Callable[[float | None], str]:
    """A formatter with ``digits`` decimals: ``format_fixed(1)(2.25)`` -> "2.2"; None -> "-"."""

    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    return fmt


def format_pct(value: float | None) -> str:
    """A percentage without decimals: 97.4 -> "97%"; None -> "-"."""
    return "-" if value is None else f"{value:.0f}%"


def format_mib(nbytes: int | None) -> str:
    """Whole MiB: 31457280 -> "30"; None -> "-"."""
    return "-" if nbytes is None else f"{nbytes / MiB:.0f}"


def format_ratio(value: float | None) -> str:
    """A ratio with two decimals: 2.0 -> "2.00x"; None -> "-"."""
    return "-" if value is None else f"{value:.2f}x"


# -- argparse types ---------------------------------------------------------------


def csv(convert: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    """An argparse ``type`` for a comma list, each item through ``convert``
    (whose ValueError becomes an argparse error)."""

    def parse(text: str) -> list[Any]:
        try:
            return [convert(item) for item in text.split(",") if item.strip()]
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def positive_int(text: str) -> int:
    """An int >= 1.

    :raises ValueError: anything else.
    """
    value = int(text)
    if value < 1:
        raise ValueError(f"must be >= 1, not {value}")
    return value


def positive(text: str) -> float:
    """A float > 0.

    :raises ValueError: anything else.
    """
    value = float(text)
    if not value > 0:
        raise ValueError(f"must be > 0, not {text}")
    return value


def non_negative(text: str) -> float:
    """A float >= 0.

    :raises ValueError: anything else.
    """
    value = float(text)
    if not value >= 0:
        raise ValueError(f"must be >= 0, not {text}")
    return value


def choice(what: str, known: Collection[str]) -> Callable[[str], str]:
    """An argparse ``type`` that accepts one of ``known`` (``what`` names it
    in the errors)."""

    def check(text: str) -> str:
        text = text.strip()
        if text not in known:
            raise ValueError(f"unknown {what} {text!r}; known: {', '.join(known)}")
        return text

    check.__name__ = what
    return check
