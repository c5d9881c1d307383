"""CPU accounting for every suite: one way to read a process's CPU time and
one way to read a thread's.

* `process_cpu_s`: user + system seconds of a process.  This process:
  ``time.process_time()`` (nanoseconds, all threads).  Another one: utime + stime from
  ``/proc/<pid>/stat`` (clock ticks, 10 ms on most kernels), so measure
  windows long enough for that resolution.
* `thread_cpu_s`: CPU seconds of one thread.  The calling thread:
  ``time.thread_time()``.  Another one (any process): the run time in
  nanoseconds from ``/proc/<pid>/task/<tid>/schedstat`` where the kernel
  has it, else utime + stime from ``.../stat``.
* `steal_s`: CPU seconds the hypervisor ran something else while this
  machine's CPUs had work (``steal`` of ``/proc/stat``): on a VM, what makes
  a window's CPU per message move with the host's load, not the code's.
* `host_reported_kib`: KiB of free memory the guest kernel has handed back
  to the host so far (virtio-balloon free page reporting): the next first
  touch of such memory costs a host round trip, so a window in which it
  rises pays for fresh pages that another window did not; `pretouch`
  makes a receiver's next pages resident before a window starts.
* `process_usage`: this process's ``getrusage`` counters (CPU, minor page
  faults, context switches) for the profiles that need more than CPU time.

Reads of another process return None where there is no /proc (or no such
process): callers show "-" rather than a wrong figure.
"""

from __future__ import annotations

import os
import resource
import time
from typing import overload


def _read_stat_cpu_s(path: str) -> float | None:
    """utime + stime from a ``stat`` file of /proc (fields 14 and 15, in
    clock ticks), or None if it cannot be read."""
    try:
        with open(path, "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # after "pid (comm) ": comm may hold spaces and parentheses, so split after the last ")"
    fields = stat[stat.rindex(b")") + 2 :].split()
    # fields[0] is the state (field 3): utime and stime are fields 14 and 15
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@overload
def process_cpu_s() -> float: ...
@overload
def process_cpu_s(pid: int | None) -> float | None: ...
def process_cpu_s(pid: int | None = None) -> float | None:
    """User + system CPU seconds of process ``pid`` (default: this one) so
    far, or None when it cannot be read (no /proc, no such process)."""
    if pid is None or pid == os.getpid():
        return time.process_time()
    return _read_stat_cpu_s(f"/proc/{pid}/stat")


@overload
def thread_cpu_s() -> float: ...
@overload
def thread_cpu_s(pid: int | None, tid: int | None) -> float | None: ...
def thread_cpu_s(pid: int | None = None, tid: int | None = None) -> float | None:
    """CPU seconds of thread ``tid`` of process ``pid`` so far (default: the
    calling thread), or None when it cannot be read."""
    if tid is None:
        return time.thread_time()
    try:
        with open(f"/proc/{pid or os.getpid()}/task/{tid}/schedstat", "rb") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return _read_stat_cpu_s(f"/proc/{pid or os.getpid()}/task/{tid}/stat")


def process_usage() -> dict[str, float]:
    """This process's CPU seconds (``user``, ``sys``), minor page faults
    (``minflt``) and voluntary and involuntary context switches (``nvcsw``,
    ``nivcsw``) so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return {"user": r.ru_utime, "sys": r.ru_stime, "minflt": r.ru_minflt, "nvcsw": r.ru_nvcsw, "nivcsw": r.ru_nivcsw}


def steal_s(path: str = "/proc/stat") -> float | None:
    """Steal seconds of all the machine's CPUs so far (the 8th number of the
    ``cpu`` line of ``/proc/stat``, in clock ticks), or None where the file
    or the field is missing."""
    try:
        with open(path, "rb") as f:
            line = f.readline().split()
        return int(line[8]) / os.sysconf("SC_CLK_TCK") if line[0] == b"cpu" else None
    except (OSError, ValueError, IndexError):
        return None


#: The free-page-reporting counter of kernels that export it.
REPORTED_KIB_PATH = "/sys/module/page_reporting/parameters/reported_kib"


def host_reported_kib(path: str = REPORTED_KIB_PATH) -> int | None:
    """KiB of free memory this machine's kernel has reported to the host
    (virtio-balloon free page reporting) so far, or None where the kernel
    does not export the count (not a VM, or no reporting)."""
    try:
        with open(path, "rb") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def pretouch(nbytes: int) -> int:
    """Make ``nbytes`` of fresh memory resident (one write per 4 KiB page),
    then free it, so that the pages a transfer receives into next are
    already the guest's.  On a VM whose balloon reports free pages to the
    host (virtio-balloon free page reporting, see `host_reported_kib`), the
    first touch of a page the host took back costs a host round trip: about
    4 s of kernel time per GiB on the development VM, which then decides a
    fresh receiver's transfer time.  Returns the bytes touched.  Needs
    numpy (imported here: the module needs it for this only)."""
    import numpy as np

    block = np.empty(nbytes, np.uint8)
    block[::4096] = 1
    del block
    return nbytes
