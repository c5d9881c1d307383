"""The interpreter's switch interval as an explicit, process-wide opt-in.

Why: while a thread runs pure Python, another thread that wants the GIL (a
dask worker's event-loop thread, back from ``epoll_wait`` with a message)
waits up to ``sys.getswitchinterval()`` (5 ms by default) before the
interpreter makes the running thread let go, and each further release of
the GIL by the loop thread (a poll, a syscall) can cost another such wait.
A shorter interval makes each of those waits shorter, for every protocol
alike (``tcp://`` too); it costs the computing threads more switches.  See
docs/guides/dask.rst, "The switch interval".

This module never changes the interpreter by itself: `apply_switch_interval`
is called with a value only where a user asked for one (the dask backend
passes its config key ``distributed.comm.readinto.switch-interval``, unset by
default).  It applies the value once per value and logs it once; the same
value asked for again changes nothing and logs nothing.
"""

from __future__ import annotations

import logging
import sys
from typing import Final

__all__ = [
    "MAX_SWITCH_INTERVAL_S",
    "MIN_SWITCH_INTERVAL_S",
    "applied_switch_interval",
    "apply_switch_interval",
    "parse_switch_interval",
]

logger = logging.getLogger(__name__)

#: The shortest interval accepted: 50 us.  Shorter ones make the computing
#: threads switch more often than a switch costs (a futex wake-up and a
#: cache refill: tens of microseconds).
MIN_SWITCH_INTERVAL_S: Final = 50e-6  # seconds

#: The longest interval accepted: 1 s (longer is a typo, not a tuning).
MAX_SWITCH_INTERVAL_S: Final = 1.0  # seconds

#: The interval this module last applied (None: it never changed anything).
_applied_s: float | None = None


def parse_switch_interval(seconds: float | None, name: str) -> float | None:
    """Check a parsed duration: None stays None (not configured).

    :arg name: what the value came from, for the message (a config key).
    :raises ValueError: outside [`MIN_SWITCH_INTERVAL_S`, `MAX_SWITCH_INTERVAL_S`].
    """
    if seconds is None:
        return None
    if not MIN_SWITCH_INTERVAL_S <= seconds <= MAX_SWITCH_INTERVAL_S:
        raise ValueError(
            f"{name} must be a duration from {MIN_SWITCH_INTERVAL_S * 1e6:.0f} us to"
            f" {MAX_SWITCH_INTERVAL_S:.0f} s, got {seconds!r} s"
        )
    return float(seconds)


def apply_switch_interval(seconds: float | None, source: str) -> bool:
    """Set ``sys.setswitchinterval(seconds)`` unless ``seconds`` is None or
    was applied already; log it once (INFO, with the interval it replaces).
    Returns True when it changed the interval now.

    :arg source: where the value came from (a config key), for the log.
    """
    global _applied_s
    if seconds is None or seconds == _applied_s:
        return False
    before = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    _applied_s = seconds
    logger.info("switch interval set to %.3g ms (was %.3g ms) by %s", seconds * 1e3, before * 1e3, source)
    return True


def applied_switch_interval() -> float | None:
    """The interval `apply_switch_interval` set in this process, or None."""
    return _applied_s
