"""A thread that holds the GIL beside a server's event loop, as a dask
worker's task thread running pure-Python code does (``--gil-thread`` of the
load benchmark).

The thread runs plain Python arithmetic: it never calls anything that
releases the GIL, so it gives the GIL up only when the interpreter makes it,
after the switch interval (``sys.getswitchinterval()``, 5 ms by default)
while another thread waits.  Every time the loop thread releases the GIL (a
syscall, ``epoll_wait``) it may have to wait that long to get it back.
"""

from __future__ import annotations

import threading

from benchmarks.harness.cpu import thread_cpu_s


class GilThread(threading.Thread):
    """A daemon thread spinning in pure Python until `stop`.

    ``tid`` is its kernel thread id (``/proc/<pid>/task/<tid>``) once
    started; `stop` returns the CPU seconds it used (`thread_cpu_s` taken in the
    thread itself).
    """

    def __init__(self) -> None:
        super().__init__(name="gil-thread", daemon=True)
        self.running = True
        self.iterations = 0
        self.cpu_s = 0.0
        self._started_event = threading.Event()
        self._tid: int | None = None

    def run(self) -> None:
        self._tid = threading.get_native_id()
        self._started_event.set()
        x = 1
        n = 0
        while self.running:  # an attribute read: no call that could release the GIL
            for _ in range(1000):
                x = (x * 1103515245 + 12345) & 0x7FFFFFFF
            n += 1
        self.iterations = n
        self.cpu_s = thread_cpu_s()

    @property
    def tid(self) -> int:
        self._started_event.wait()
        assert self._tid is not None
        return self._tid

    def stop(self, timeout_s: float = 5.0) -> float:
        """Stop spinning; the thread's CPU seconds."""
        self.running = False
        self.join(timeout_s)
        return self.cpu_s


def start_gil_thread() -> GilThread:
    """Start a `GilThread` and return it once it runs."""
    thread = GilThread()
    thread.start()
    thread.tid  # noqa: B018 - waits until it runs
    return thread
