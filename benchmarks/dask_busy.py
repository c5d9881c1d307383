"""The tasks of ``python -m benchmarks.dask``'s ``busy-worker`` workload.

They run in a dask worker process and share state there through this
module, which the worker imports by name (functions defined in the
benchmark's ``__main__`` would travel by value, each with its own copy of
the state).

`spin` is a pure-Python busy loop, as a dask task doing pure-Python work
is: plain integer arithmetic, no call that releases the GIL, so its thread
gives the GIL up only when the interpreter makes it (after the switch
interval, while another thread waits).  It stops once `stop_spinning` has
run in the worker (``client.run``), or after its own deadline.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from benchmarks.harness.cpu import thread_cpu_s

_stop = threading.Event()
_lock = threading.Lock()
_spinning = 0


def spin(timeout_s: float) -> dict[str, Any]:
    """Spin until `stop_spinning` or ``timeout_s``; what it did.

    :arg timeout_s: the deadline, a safety net: a spinner stopped by it
        returns ``stopped=False``, and the repetition is not valid.
    """
    global _spinning
    with _lock:
        _spinning += 1
    started = time.monotonic()
    deadline = started + timeout_s
    x, n = 1, 0
    try:
        while not _stop.is_set():  # a Python attribute read: no call that could release the GIL
            for _ in range(10_000):
                x = (x * 1103515245 + 12345) & 0x7FFFFFFF
            n += 1
            if time.monotonic() > deadline:
                break
    finally:
        with _lock:
            _spinning -= 1
    return {
        "stopped": _stop.is_set(),
        "rounds": n,
        "spun_s": time.monotonic() - started,
        "thread_cpu_s": thread_cpu_s(),
    }


def spinning() -> int:
    """How many `spin` tasks run in this process now (for ``client.run``)."""
    return _spinning


def stop_spinning() -> int:
    """Make every `spin` in this process return (for ``client.run``);
    how many were running."""
    _stop.set()
    return _spinning
