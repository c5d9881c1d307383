"""How many CPUs this process may run on: its affinity, its cgroup quota, the machine.

Strategy:

* Busy polling pays only where the spinning thread does not take the CPU its
  peer (or the rest of its container) needs.  Three limits can leave a
  process less than two CPUs, and each is read here: the CPU affinity
  (``taskset``, ``os.sched_getaffinity``), the cgroup CPU quota (a container's
  ``--cpus``: cgroup v2 ``cpu.max``, cgroup v1 ``cpu.cfs_quota_us`` over
  ``cpu.cfs_period_us``) and ``os.cpu_count()``.  A quota can be fractional
  (1.5 CPUs), so the figure is a float.
* The quota that applies is the smallest on the way from the process's
  cgroup up to the root: a parent's ``cpu.max`` limits its children.  Inside
  a container the cgroup namespace makes the process's own cgroup the root,
  so both the path named in ``/proc/self/cgroup`` and the root are read.
* Reading these takes a few file reads: `usable_cpus` does it once per
  process and caches the answer (a quota or an affinity changed later is not
  seen; ``usable_cpus.cache_clear()`` reads again).
* A quota limits CPU time, not how many threads run at once: a process
  under a one-CPU quota on a larger machine still runs two threads side by
  side until the quota is spent.  `parallel_cpus` counts only what bounds
  that (the affinity and ``os.cpu_count()``), for policies that depend on
  whether two threads of the process can run at the same moment.
* A file that is missing, unreadable or malformed ("max", garbage, a zero
  period) says nothing: the other limits decide, and nothing raises.

Pure: no Tornado, no sockets; every reader takes its paths as arguments, so
tests give it files of their own.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator

__all__ = ["affinity_cpus", "cgroup_v1_cpus", "cgroup_v2_cpus", "parallel_cpus", "usable_cpus"]

CGROUP_ROOT = "/sys/fs/cgroup"
PROC_SELF_CGROUP = "/proc/self/cgroup"


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read(4096)
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def _ancestors(root: str, cgroup_path: str) -> Iterator[str]:
    """The folder of ``cgroup_path`` below ``root``, then each parent up to
    ``root`` itself (``..`` and empty parts are dropped: never above root)."""
    parts = [p for p in cgroup_path.split("/") if p and p not in (".", "..")]
    for i in range(len(parts), -1, -1):
        yield os.path.join(root, *parts[:i])


def _cgroup_paths(proc_self_cgroup: str) -> dict[str, str]:
    """``controller -> path`` from ``/proc/self/cgroup`` (``""`` for the v2
    unified hierarchy's ``0::/path`` line); empty if unreadable."""
    text = _read(proc_self_cgroup)
    paths: dict[str, str] = {}
    for line in (text or "").splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        for controller in fields[1].split(","):
            paths[controller] = fields[2]
    return paths


def _quota(quota_text: str | None, period_text: str | None) -> float | None:
    """CPUs allowed by a quota and period in microseconds, or None (no limit,
    or text that is not two positive integers)."""
    try:
        quota = int(quota_text or "")
        period = int(period_text or "")
    except ValueError:
        return None
    if quota <= 0 or period <= 0:  # v1 says -1 for "no limit"
        return None
    return quota / period


def cgroup_v2_cpus(root: str | None = None, proc_self_cgroup: str | None = None) -> float | None:
    """The smallest cgroup v2 ``cpu.max`` quota from this process's cgroup up
    to the root, in CPUs, or None where no quota is set or readable.
    ``root`` and ``proc_self_cgroup`` default to `CGROUP_ROOT` and
    `PROC_SELF_CGROUP`."""
    root = root or CGROUP_ROOT
    proc_self_cgroup = proc_self_cgroup or PROC_SELF_CGROUP
    path = _cgroup_paths(proc_self_cgroup).get("")
    folders = list(_ancestors(root, path)) if path is not None else []
    if root not in folders:
        folders.append(root)  # a cgroup namespace: our cgroup is the root
    limits = []
    for folder in folders:
        fields = (_read(os.path.join(folder, "cpu.max")) or "").split()
        if len(fields) == 2:
            cpus = _quota(*fields)
            if cpus is not None:
                limits.append(cpus)
    return min(limits, default=None)


def cgroup_v1_cpus(root: str | None = None, proc_self_cgroup: str | None = None) -> float | None:
    """The smallest cgroup v1 CFS quota (``cpu.cfs_quota_us`` /
    ``cpu.cfs_period_us``) on this process's ``cpu`` cgroup and its parents,
    in CPUs, or None where none is set or readable.  Defaults as
    `cgroup_v2_cpus`."""
    root = root or CGROUP_ROOT
    proc_self_cgroup = proc_self_cgroup or PROC_SELF_CGROUP
    path = _cgroup_paths(proc_self_cgroup).get("cpu")
    limits = []
    for mount in ("cpu,cpuacct", "cpu", "cpuacct,cpu"):
        base = os.path.join(root, mount)
        folders = list(_ancestors(base, path)) if path is not None else []
        if base not in folders:
            folders.append(base)
        for folder in folders:
            cpus = _quota(
                _read(os.path.join(folder, "cpu.cfs_quota_us")),
                _read(os.path.join(folder, "cpu.cfs_period_us")),
            )
            if cpus is not None:
                limits.append(cpus)
    return min(limits, default=None)


def affinity_cpus() -> int | None:
    """How many CPUs this process's affinity mask allows, or None where the
    platform cannot tell (no ``os.sched_getaffinity``: macOS, Windows)."""
    getaffinity = getattr(os, "sched_getaffinity", None)
    if getaffinity is None:
        return None
    try:
        return len(getaffinity(0)) or None
    except OSError:
        return None


@functools.cache
def usable_cpus() -> float:
    """How many CPUs this process may keep busy: the least of its affinity,
    its cgroup quota (v2, else v1) and ``os.cpu_count()``; 1.0 if none can
    be read.  Read once per process, then cached."""
    limits: list[float] = []
    readers: tuple[Callable[[], float | None], ...] = (affinity_cpus, cgroup_v2_cpus, cgroup_v1_cpus, os.cpu_count)
    for reader in readers:
        try:
            found = reader()
        except Exception:  # a limit that cannot be read says nothing
            found = None
        if found is not None and found > 0:
            limits.append(float(found))
    return min(limits, default=1.0)


@functools.cache
def parallel_cpus() -> int:
    """How many threads of this process can run at the same moment: the
    least of its affinity and ``os.cpu_count()`` (a cgroup quota limits
    time, not that); 1 if neither can be read.  Read once per process, then
    cached."""
    limits: list[int] = []
    for reader in (affinity_cpus, os.cpu_count):
        try:
            found = reader()
        except Exception:  # a limit that cannot be read says nothing
            found = None
        if found is not None and found > 0:
            limits.append(found)
    return min(limits, default=1)
