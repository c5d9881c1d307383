"""The tasks of ``python -m benchmarks.dask``'s ``busy-worker`` workload.

They run in a dask worker process and share state there through this
module, which the worker imports by name (functions defined in the
benchmark's ``__main__`` would travel by value, each with its own copy of
the state).

`spin` is a busy loop of one of four task shapes (`SHAPES`), as a dask
task doing that work is:

* ``arith``: plain integer arithmetic, no call at all;
* ``builtins``: a loop calling C builtins that keep the GIL (``time``,
  ``math``, ``str`` methods);
* ``dictlist``: grouping integers into a dict of lists, as pure-Python
  data wrangling does;
* ``numpy``: numpy operations on a 64 KiB array, each of which releases the
  GIL for its loop (tens of microseconds), briefly and often.

The first three give the GIL up only when the interpreter makes them (after
the switch interval, while another thread waits).  A spinner stops once
`stop_spinning` has run in the worker (``client.run``), or after its own
deadline.  Each round is a fixed amount of work (about a millisecond), so
rounds per second measure the task's throughput.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

from benchmarks.harness.cpu import thread_cpu_s

_stop = threading.Event()
_lock = threading.Lock()
_spinning = 0


def _arith_round() -> None:
    x = 1
    for _ in range(10_000):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF


def _builtins_round() -> None:
    monotonic, sqrt, text = time.monotonic, math.sqrt, "a dask task"
    for i in range(2_000):
        monotonic()
        sqrt(i)
        text.upper().split()


def _dictlist_round() -> None:
    groups: dict[int, list[int]] = {}
    for i in range(4_000):
        groups.setdefault(i % 61, []).append(i)
    sorted(len(v) for v in groups.values())


def _numpy_round_factory() -> Callable[[], None]:
    import numpy as np

    a = np.ones(8192)  # 64 KiB: a loop long enough that numpy releases the GIL for it

    def numpy_round() -> None:
        for _ in range(20):
            np.multiply(a, 1.0000001, out=a)
            np.sqrt(a, out=a)

    return numpy_round


#: Task shapes -> a factory of one round of work.
SHAPES: dict[str, Callable[[], Callable[[], None]]] = {
    "arith": lambda: _arith_round,
    "builtins": lambda: _builtins_round,
    "dictlist": lambda: _dictlist_round,
    "numpy": _numpy_round_factory,
}


def spin(timeout_s: float, shape: str = "arith") -> dict[str, Any]:
    """Spin rounds of ``shape`` work until `stop_spinning` or ``timeout_s``;
    what it did.

    :arg timeout_s: the deadline, a safety net: a spinner stopped by it
        returns ``stopped=False``, and the repetition is not valid.
    :arg shape: one of `SHAPES`.
    """
    global _spinning
    one_round = SHAPES[shape]()
    with _lock:
        _spinning += 1
    started = time.monotonic()
    deadline = started + timeout_s
    n = 0
    try:
        while not _stop.is_set():  # a Python attribute read: no call that could release the GIL
            one_round()
            n += 1
            if time.monotonic() > deadline:
                break
    finally:
        with _lock:
            _spinning -= 1
    return {
        "shape": shape,
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


def reset() -> None:
    """Let spinners run again in this process (after `stop_spinning`)."""
    _stop.clear()


def loop_thread() -> tuple[int, int]:
    """(pid, native thread id) of the caller: through ``client.run`` (which
    calls a plain function on the worker's event loop), the loop thread's."""
    import os

    return os.getpid(), threading.get_native_id()


_counter: Any = None


def count_releases() -> int:
    """Install a `tornado_readinto.diagnostics.gilcount.ReleaseCounter` on the calling
    (loop) thread; its native id."""
    global _counter
    from tornado_readinto.diagnostics.gilcount import ReleaseCounter

    _counter = ReleaseCounter()
    _counter.install()
    return threading.get_native_id()


def released() -> dict[str, Any]:
    """Remove the counter `count_releases` installed; what it counted."""
    global _counter
    counter, _counter = _counter, None
    if counter is None:
        return {}
    counter.uninstall()
    return counter.counts.as_dict()


def set_switch_interval(seconds: float) -> float:
    """``sys.setswitchinterval(seconds)``; the interval now (for ``client.run``)."""
    import sys

    sys.setswitchinterval(seconds)
    return sys.getswitchinterval()


def switch_interval() -> float:
    import sys

    return sys.getswitchinterval()
