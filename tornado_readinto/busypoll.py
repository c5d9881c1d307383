"""Busy-polling that never holds up the event loop, on any asyncio loop.

Strategy:

* Parking a process in ``epoll_wait`` and waking it again costs more on a
  virtual machine than a loopback request/response turnaround, so a stream
  whose peer answers within tens of microseconds does better if the process
  does not park while it waits.
* A stream never spins inside its own callback: that would delay every other
  callback and connection on the loop, and no public asyncio API tells
  whether the loop has other work ready.  Instead a pending read that parks
  asks its loop's `LoopSpinner` to keep the loop *polling* until a deadline:
  the spinner re-schedules a no-op callback with ``loop.call_soon``, and a
  loop with a callback ready polls the selector with a zero timeout instead
  of blocking.  That is how every event loop works (asyncio's own and
  uvloop's), through public API only.  Other callbacks, timers and
  connections run between polls as they always do, and the stream's data is
  delivered by the loop's ordinary readable callback.
* One spinner per loop serves all its streams; on a busy loop (many
  connections) it costs one callback per loop iteration, not per message.
* `BusyPoll` is the adaptive policy of one stream.  A spin that ends before
  the data comes makes the stream skip spinning for 1, 3, 7, ... up to
  `MAX_SPIN_BACKOFF` parks; a spin that catches the data resets that.  On a
  stream where spinning has worked, data that comes within `REARM_FACTOR`
  budgets of parking re-arms spinning at once (two backed-off peers would
  otherwise stay on the slow park/wake path), and a spin that ended just
  before such data doubles the next budget, up to `MAX_BUDGET_FACTOR` times
  the base (a dask comm's turnaround includes its serialization).  Idle
  connections back off to one spin per 256 reads and cost nothing while they
  wait.
"""

from __future__ import annotations

import asyncio
import weakref
from time import perf_counter
from typing import Callable

__all__ = ["DEFAULT_BUSY_POLL_S", "BusyPoll", "LoopSpinner", "spinner_for"]

#: How long a parked read keeps its event loop polling before the loop may
#: block.  50 us covers a loopback request/response turnaround on the
#: development machine (a Firecracker VM, where waking a parked process costs
#: about as much); see README "Performance" for the measurements.
DEFAULT_BUSY_POLL_S = 50e-6  # seconds

#: After a spin that found no data, skip spinning for 1, 3, 7, ... up to this
#: many parks (a spin that finds data resets it).
MAX_SPIN_BACKOFF = 255

#: A parked read whose data arrives within this many budgets (500 us by
#: default) re-arms spinning, if spinning has found data on this stream
#: before.  Idle connections wait far longer and stay backed off.
REARM_FACTOR = 10

#: A spin that ended before data that then came within `REARM_FACTOR`
#: budgets doubles the next budget, up to this many times the base budget
#: (200 us by default).
MAX_BUDGET_FACTOR = 4


class LoopSpinner:
    """Keeps one event loop polling instead of blocking until a deadline.

    While a deadline is in the future, one no-op callback at a time is
    scheduled with ``loop.call_soon``; it re-schedules itself until the
    deadline passes.  A loop with a ready callback polls its selector with a
    zero timeout, so it sees new data without parking, and runs everything
    else that is ready in between.  Cost: one callback per loop iteration
    while spinning, nothing otherwise.  Not thread-safe: use it from the
    loop's thread.
    """

    __slots__ = ("_call_soon", "_deadline", "_running", "ticks", "__weakref__")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._call_soon: Callable[..., object] = loop.call_soon
        self._deadline = 0.0
        self._running = False
        #: Callbacks run so far (for tests and statistics).
        self.ticks = 0

    @property
    def spinning(self) -> bool:
        """True while the loop is being kept polling."""
        return self._running

    def spin_until(self, deadline: float) -> None:
        """Keep the loop polling until ``perf_counter() >= deadline`` (or a
        later deadline already asked for)."""
        if deadline > self._deadline:
            self._deadline = deadline
        if not self._running:
            self._running = True
            self._call_soon(self._tick)

    def _tick(self) -> None:
        self.ticks += 1
        if perf_counter() < self._deadline:
            self._call_soon(self._tick)
        else:
            self._running = False


_spinners: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopSpinner] = weakref.WeakKeyDictionary()


def spinner_for(loop: asyncio.AbstractEventLoop) -> LoopSpinner:
    """The `LoopSpinner` of ``loop`` (one per loop, made on first use)."""
    spinner = _spinners.get(loop)
    if spinner is None:
        spinner = _spinners[loop] = LoopSpinner(loop)
    return spinner


class BusyPoll:
    """The adaptive busy-poll policy of one stream (see the module docstring).

    The stream calls `parked` when a pending read waits for data and
    `data_came` when the loop reports its socket readable.  Two
    ``perf_counter`` calls per parked read; nothing else.

    :arg budget_s: the base spin budget, > 0 seconds.
    :arg spinner: the stream's loop's `LoopSpinner`.
    """

    __slots__ = ("budget_s", "spinner", "parked_at", "spin_until", "backoff", "skip", "hits", "scale")

    def __init__(self, budget_s: float, spinner: LoopSpinner) -> None:
        self.budget_s = budget_s
        self.spinner = spinner
        self.parked_at = 0.0  # when the pending read parked (0: not parked)
        self.spin_until = 0.0  # the deadline of its spin (0: it did not spin)
        self.backoff = 0  # parks to skip after the next failed spin
        self.skip = 0  # parks still to skip
        self.hits = 0  # spins that caught their data
        self.scale = 1  # budget in units of budget_s: 1, 2 ... MAX_BUDGET_FACTOR

    def parked(self, now: float) -> None:
        """A pending read found no data: spin unless backed off."""
        self.parked_at = now
        if self.skip:
            self.skip -= 1
            self.spin_until = 0.0
            return
        self.spin_until = deadline = now + self.scale * self.budget_s
        self.spinner.spin_until(deadline)

    def data_came(self, now: float) -> None:
        """The socket of a parked read became readable: adapt."""
        parked_at = self.parked_at
        if not parked_at:
            return
        self.parked_at = 0.0
        spin_until = self.spin_until
        quick = now - parked_at < REARM_FACTOR * self.budget_s
        if spin_until:
            self.spin_until = 0.0
            if now <= spin_until:
                self.backoff = 0  # caught while spinning
                self.hits += 1
                return
            # The spin ended first: spin less often, and longer if the data
            # came soon after it ended.
            self.backoff = min(2 * self.backoff + 1, MAX_SPIN_BACKOFF)
            self.skip = self.backoff
            self.scale = min(2 * self.scale, MAX_BUDGET_FACTOR) if quick else 1
        if quick and self.hits:
            self.backoff = self.skip = 0
