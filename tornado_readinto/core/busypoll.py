"""Busy-polling that never holds up the event loop, on any asyncio loop.

Busy polling is off unless asked for (``busy_poll_s=`` on a stream, the
dask backend's ``distributed.comm.readinto.busy-poll`` key): it trades CPU
for latency, and whether the trade pays depends on the machine.  On the
machine it was tuned on it raised one-connection ping-pong; on another it
cost 1.19x the CPU per message for 0.85x the messages with 64 connections
below saturation, and 1.39x the CPU for 0.71x the messages at saturation
(see the performance page).  `BUSY_POLL_BUDGET_S` is the budget to ask for.

Strategy, where it is on:

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
* A loop spins only in a process where no other Python thread exists
  (`other_threads()` is False).  Every poll releases the GIL, and while
  another thread wants it (a dask worker's task threads running Python), each
  release can cost the loop thread a hand-off of up to the switch interval
  (5 ms by default) before it runs again: spinning there would turn a
  microsecond saving into milliseconds.  No public API tells whether another
  thread wants the GIL, so any other thread counts; the check costs about
  0.3 us per parked read.
* A process spins only where it has at least two CPUs to itself
  (`room_to_spin`: its CPU affinity, its cgroup CPU quota and
  ``os.cpu_count()``, read once per process by `tornado_readinto.core._cpus`).
  On one CPU the spinning side keeps the CPU that a local peer needs in
  order to answer, so the answer comes only after the spin gives up: every
  message then pays the whole spin and a context switch (figures: the
  performance page, "Figures behind the code").  Under a CPU quota a spin burns
  quota and gets the whole container throttled.
* Evidence at run time: a CPU can also be taken by other load that no limit
  shows (a busy neighbour process, an undetected quota).  When a spin misses
  its data, the spinner looks at how long its thread waited, runnable, for a
  CPU (``run_delay`` in ``/proc/thread-self/schedstat``; at most one read per
  `CONTENTION_SAMPLE_S`): a thread that waited `CONTENDED_FRACTION` of the
  time since the last look competes for its CPU, and the loop stops
  spinning for `CONTENDED_HOLD_S`, then tries again.  Only misses are looked
  at, since a spin that catches its data did not take the CPU from whoever
  sent it.  Where the file does not exist (other systems) only the limits
  decide.
* `BusyPoll` is the adaptive policy of one stream.  Every parked read
  measures how long its data took, spinning or not, and the next read spins
  if the last data came soon.  Data within the budget: spin again.  Data a
  little later (within `REARM_FACTOR` budgets): spin again, with a budget
  twice as long if this read spun, up to `MAX_BUDGET_FACTOR` times the base
  (a dask comm's turnaround includes its serialization).  Data later than
  that: stop spinning; on a stream where a spin has caught data before,
  probe with one spin after 1, 3, 7, ... up to `MAX_PROBE_INTERVAL` parks.
  The probes matter between two processes that both busy-poll: once both
  have stopped, each waits for the other to wake up, their round trip can
  stay over the threshold, and only a spin that happens to catch the answer
  brings both back to the fast state.  So a request/response peer keeps its
  stream spinning, while connections that are slow, rate-limited or idle
  stop after their first spin, and so do the connections of a saturated
  server, whose next message arrives only after the loop has served all the
  others (the loop is busy anyway).
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import Callable
from time import perf_counter

from . import _cpus
from ._gilheld import other_threads

__all__ = [
    "CONTENDED_FRACTION",
    "CONTENDED_HOLD_S",
    "CONTENTION_SAMPLE_S",
    "BUSY_POLL_BUDGET_S",
    "MIN_CPUS_TO_SPIN",
    "MAX_BUDGET_FACTOR",
    "MAX_PROBE_INTERVAL",
    "REARM_FACTOR",
    "BusyPoll",
    "LoopSpinner",
    "other_threads",
    "room_to_spin",
    "spinner_for",
]

#: The budget to ask for when turning busy polling on (``busy_poll_s=``):
#: how long a parked read keeps its event loop polling before the loop may
#: block.  50 us covers a loopback request/response turnaround on the
#: machine it was tuned on (a Firecracker VM, where waking a parked process
#: costs about as much).  Streams default to 0: no busy polling.
BUSY_POLL_BUDGET_S = 50e-6  # seconds

#: A parked read whose data came within this many base budgets (500 us by
#: default) makes the next read spin; later data stops spinning.
REARM_FACTOR = 10

#: After late data, a stream where spinning has caught data before probes
#: with one spin after 1, 3, 7, ... up to this many parks without spinning
#: (quick data resets it).
MAX_PROBE_INTERVAL = 255

#: A spin that ended before data that then came within `REARM_FACTOR`
#: budgets doubles the next budget, up to this many times the base budget
#: (200 us by default).
MAX_BUDGET_FACTOR = 4

#: A process spins only with at least this many usable CPUs (`room_to_spin`):
#: one for the spinning loop, one for whoever is to answer it.
MIN_CPUS_TO_SPIN = 2

#: A loop thread that waited, runnable, for a CPU this fraction of the time
#: between two looks competes for its CPU: its spinner stops.  (A spinning
#: one-CPU ping-pong waits about half the time; a loop with a CPU to itself,
#: next to nothing.)
CONTENDED_FRACTION = 0.25

#: How long a spinner found contended stays off before it may spin again.
CONTENDED_HOLD_S = 1.0  # seconds

#: The least time between two looks at the loop thread's wait for a CPU: at
#: most 100 reads of a small /proc file per second (a few us each), however
#: often spins miss.
CONTENTION_SAMPLE_S = 10e-3  # seconds

#: Where Linux counts a thread's time spent waiting, runnable, for a CPU (the
#: second field, in nanoseconds).
SCHEDSTAT_PATH = "/proc/thread-self/schedstat"


def room_to_spin() -> bool:
    """True where this process has at least `MIN_CPUS_TO_SPIN` CPUs: its
    affinity, its cgroup CPU quota and ``os.cpu_count()`` all allow them
    (read once per process, see `tornado_readinto.core._cpus.usable_cpus`)."""
    return _cpus.usable_cpus() >= MIN_CPUS_TO_SPIN


def thread_run_delay_s() -> float | None:
    """Seconds the calling thread has waited, runnable, for a CPU since it
    started, or None where the system does not say (three syscalls)."""
    try:
        fd = os.open(SCHEDSTAT_PATH, os.O_RDONLY)
    except OSError:
        return None
    try:
        fields = os.read(fd, 128).split()
        return int(fields[1]) * 1e-9
    except (OSError, IndexError, ValueError):
        return None
    finally:
        os.close(fd)


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

    __slots__ = (
        "_call_soon",
        "_deadline",
        "_running",
        "_off_until",
        "_sampled_at",
        "_run_delay_s",
        "ticks",
        "contended",
        "__weakref__",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._call_soon: Callable[..., object] = loop.call_soon
        self._deadline = 0.0
        self._running = False
        self._off_until = 0.0  # refuse spins before this (perf_counter s)
        self._sampled_at = 0.0  # when run_delay was last read (0: never)
        self._run_delay_s = 0.0  # ...and what it said
        #: Callbacks run so far (for tests and statistics).
        self.ticks = 0
        #: Times the loop thread was found waiting for its CPU (`missed`).
        self.contended = 0

    @property
    def spinning(self) -> bool:
        """True while the loop is being kept polling."""
        return self._running

    def spin_until(self, deadline: float) -> bool:
        """Keep the loop polling until ``perf_counter() >= deadline`` (or a
        later deadline already asked for).  Refused (returns False, nothing
        scheduled) while another Python thread exists, and for
        `CONTENDED_HOLD_S` after `missed` found the loop thread waiting for
        its CPU: see the module docstring."""
        if deadline < self._off_until or other_threads():
            return False
        if deadline > self._deadline:
            self._deadline = deadline
        if not self._running:
            self._running = True
            self._call_soon(self._tick)
        return True

    def missed(self, now: float) -> None:
        """A spin ended before its data came (``now``: perf_counter seconds).
        At most once per `CONTENTION_SAMPLE_S`, read how long the loop thread
        has waited for a CPU since the last read; if that is
        `CONTENDED_FRACTION` of the time or more, refuse spins for
        `CONTENDED_HOLD_S`.  Call it from the loop's thread."""
        elapsed = now - self._sampled_at
        if elapsed < CONTENTION_SAMPLE_S:
            return
        run_delay_s = thread_run_delay_s()
        if run_delay_s is None:
            return
        waited = run_delay_s - self._run_delay_s
        first = not self._sampled_at
        self._sampled_at = now
        self._run_delay_s = run_delay_s
        if not first and elapsed <= CONTENDED_HOLD_S and waited >= CONTENDED_FRACTION * elapsed:
            self.contended += 1
            self._off_until = now + CONTENDED_HOLD_S

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

    __slots__ = (
        "budget_s",
        "spinner",
        "parked_at",
        "spun",
        "spin",
        "interval",
        "skip",
        "scale",
        "parks",
        "spins",
        "hits",
    )

    def __init__(self, budget_s: float, spinner: LoopSpinner) -> None:
        self.budget_s = budget_s
        self.spinner = spinner
        self.parked_at = 0.0  # when the pending read parked (0: not parked)
        self.spun = False  # ...and whether it spun
        self.spin = True  # the next parked read spins
        self.interval = 0  # parks between probes while not spinning
        self.skip = 0  # parks left before the next probe
        self.scale = 1  # budget in units of budget_s: 1, 2 ... MAX_BUDGET_FACTOR
        self.parks = 0  # reads that waited for data
        self.spins = 0  # of them, those that spun
        self.hits = 0  # of those, the ones whose data came within the budget

    def parked(self, now: float) -> None:
        """A pending read found no data: spin if the last data came soon."""
        self.parked_at = now
        self.parks += 1
        if not self.spin:
            if self.skip:
                self.skip -= 1
                self.spun = False
                return
            if not self.hits:  # no probe where spinning never caught data
                self.spun = False
                return
            self.skip = self.interval  # a probe; the next one comes later
        self.spun = self.spinner.spin_until(now + self.scale * self.budget_s)
        self.spins += self.spun

    def data_came(self, now: float) -> None:
        """The socket of a parked read became readable: decide about the next."""
        parked_at = self.parked_at
        if not parked_at:
            return
        self.parked_at = 0.0
        waited = now - parked_at
        if waited >= REARM_FACTOR * self.budget_s:
            # Late data, the common case on a busy loop: tested first.  (Later
            # than any budget, since REARM_FACTOR > MAX_BUDGET_FACTOR.)
            if self.spun:  # a spin that missed (and may have delayed) the data
                self.spinner.missed(now)
            if self.spin:
                self.spin = False
                self.interval = self.skip = 1
            elif self.spun:  # a probe that found late data: probe less often
                self.interval = self.skip = min(2 * self.interval + 1, MAX_PROBE_INTERVAL)
            self.scale = 1
            return
        if waited <= self.scale * self.budget_s:
            if self.spun:
                self.hits += 1  # caught while spinning
        elif self.spun:  # the spin ended just before the data: longer next time
            self.scale = min(2 * self.scale, MAX_BUDGET_FACTOR)
            self.spinner.missed(now)  # ...unless it took the CPU the data needed
        self.spin = True
        self.interval = self.skip = 0
