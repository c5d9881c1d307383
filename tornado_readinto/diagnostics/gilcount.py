"""Counting what makes an event-loop thread give up the GIL: for measurements
and tests, never on a hot path.

Why: while another thread runs Python (a dask worker's tasks), every release
of the GIL by the event-loop thread can hand the GIL over, and getting it
back waits up to the switch interval (5 ms by default).  A message's cost
there is the number of such releases, which depends on the code, not on how
fast the machine is; these tools count them.

* `thread_switches`: a thread's voluntary and involuntary context switches
  (``/proc/<pid>/task/<tid>/status``, Linux).  A voluntary switch is a wait:
  for the network (a blocking ``epoll_wait``) or for the GIL.
* `ReleaseCounter`: a profile hook (``sys.setprofile``, installed on the
  thread to watch, from that thread) that counts the calls from Python into
  C functions known to release the GIL, by origin: our socket calls, the
  loop's poll and its ``epoll_ctl``, Tornado, dask, locks, logging, other.
  On asyncio's own loop the polls are the selector's ``epoll.poll`` calls,
  one per loop iteration, with the timeout the loop asked for (zero,
  positive or none: blocking).
* `CountingSelector`: a selector wrapper for a loop one makes oneself
  (``asyncio.SelectorEventLoop(CountingSelector())``): every ``select`` and
  its timeout, without a profile hook.

Limits (say them with any figure):

* Only the C functions in `RELEASING` called *from Python* are seen.  C code
  that releases the GIL inside another C function is not: uvloop runs its
  whole loop (libuv's ``epoll_wait`` included) in C, so on uvloop neither its
  polls nor its iterations are visible (only its callbacks' own calls are,
  and the thread's context switches); nor are releases inside psutil, numpy
  or compressors.  A lock's ``acquire`` and a buffered file's ``write`` or
  ``flush`` are counted although they release the GIL only when they must
  wait (a contended lock, a buffer that is written out): "may release".
  ``with lock:`` calls ``__enter__`` without a profile event (CPython 3.11):
  such acquisitions are missed.
* ctypes foreign calls make no profile event, nor (on CPython 3.11) do
  Cython functions: a ``ctypes.CDLL`` call, which releases the GIL, is
  missed.  The GIL-keeping socket calls of `tornado_readinto.core._gilheld` (a
  Cython function of ``_gilheld_native`` in the compiled build, a
  ``ctypes.PyDLL`` call in the pure one) make none, and rightly count as
  nothing.
* Calls made from compiled code make no profile event either: in the
  package's compiled build its own socket calls (made by the compiled
  core) are not seen, and count as zero whatever they are.  Count the
  package's calls under the pure build (``TORNADO_READINTO_NO_EXTENSIONS=1``
  in the environment of the process watched), whose policy is the same.
* The hook makes the watched thread slower (a Python call per Python call):
  count with it, time without it.
"""

from __future__ import annotations

import inspect
import selectors
import sys
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import FrameType, ModuleType
from typing import Any, Final

__all__ = [
    "ORIGINS",
    "RELEASING",
    "CountingSelector",
    "ReleaseCounter",
    "ReleaseCounts",
    "thread_switches",
]


def thread_switches(tid: int | None = None, pid: int | str = "self") -> tuple[int, int]:
    """(voluntary, involuntary) context switches of thread ``tid`` (a native
    id, `threading.get_native_id`; default: the calling thread) of process
    ``pid`` so far, from ``/proc/<pid>/task/<tid>/status``.

    :raises OSError: no such thread, or not Linux.
    """
    if tid is None:
        tid = threading.get_native_id()
    voluntary = involuntary = -1
    with open(f"/proc/{pid}/task/{tid}/status", "rb") as f:
        for line in f:
            if line.startswith(b"voluntary_ctxt_switches:"):
                voluntary = int(line.split()[1])
            elif line.startswith(b"nonvoluntary_ctxt_switches:"):
                involuntary = int(line.split()[1])
    if voluntary < 0 or involuntary < 0:
        raise OSError(f"no context switch counts in /proc/{pid}/task/{tid}/status")
    return voluntary, involuntary


# -- which C calls release the GIL ----------------------------------------------------------------

_SOCKET_CALLS = ("recv", "recv_into", "recvfrom", "recvfrom_into", "recvmsg", "recvmsg_into", "send", "sendall",
                 "sendto", "sendmsg", "_accept", "connect", "connect_ex")  # fmt: skip
_FILE_CALLS = ("read", "readinto", "readall", "write", "flush")
_POSIX_CALLS = ("read", "write", "readv", "writev", "pread", "pwrite", "open", "close", "stat", "fstat", "lstat",
                "listdir", "scandir", "fsync", "waitpid", "sendfile")  # fmt: skip

#: What the GIL-releasing C callables are, by ``__qualname__`` (methods) or
#: ``(module, name)`` (functions): the kind each one is counted as.
RELEASING: Final[Mapping[str | tuple[str, str], str]] = {
    **{f"socket.{name}": "socket" for name in _SOCKET_CALLS},
    **{f"_SSLSocket.{name}": "socket" for name in ("read", "write", "do_handshake", "shutdown")},
    "epoll.poll": "poll",
    "poll.poll": "poll",
    ("select", "select"): "poll",
    **{f"epoll.{name}": "epoll_ctl" for name in ("register", "modify", "unregister")},
    "lock.acquire": "lock",
    "RLock.acquire": "lock",
    ("time", "sleep"): "sleep",
    **{("posix", name): "file" for name in _POSIX_CALLS},
    ("io", "open"): "file",
    **{
        f"{cls}.{name}": "file"
        for cls in ("FileIO", "BufferedWriter", "BufferedReader", "BufferedRandom", "TextIOWrapper")
        for name in _FILE_CALLS
    },  # fmt: skip
}

#: Origins, in the order of reports: where the releasing call was made from.
ORIGINS: Final = ("ours", "loop", "tornado", "dask", "locks", "logging", "other")

# Path fragments of the calling Python frame -> origin (first match wins).
_PATHS: Final = (
    ("/tornado_readinto/", "ours"),
    ("/logging/", "logging"),
    ("/threading.py", "locks"),
    ("/asyncio/", "loop"),
    ("/selectors.py", "loop"),
    ("/uvloop/", "loop"),
    ("/tornado/", "tornado"),
    ("/distributed/", "dask"),
    ("/dask/", "dask"),
)


def _kind(func: Any) -> str | None:
    """The kind of GIL release ``func`` (a C callable) makes, or None."""
    qualname = getattr(func, "__qualname__", None)
    kind = RELEASING.get(qualname) if qualname is not None else None
    if kind is not None:
        return kind
    owner = getattr(func, "__self__", None)
    if isinstance(owner, ModuleType):
        return RELEASING.get((owner.__name__, getattr(func, "__name__", "")))
    return None


def _origin(frame: FrameType | None, kind: str) -> str:
    """Where a release of ``kind`` was made: logging if a logging frame is
    among the innermost 12 (whoever called the logger), else locks for a
    lock, else the innermost frame's known origin (``other`` if none)."""
    depth = 0
    found = "locks" if kind == "lock" else "other"
    while frame is not None and depth < 12:
        path = frame.f_code.co_filename.replace("\\", "/")
        for fragment, origin in _PATHS:
            if fragment in path:
                if origin == "logging":
                    return origin
                if found == "other":
                    found = origin
                break
        frame = frame.f_back
        depth += 1
    return found


# -- the profile hook -----------------------------------------------------------------------------


@dataclass
class ReleaseCounts:
    """What a `ReleaseCounter` saw."""

    #: (origin, kind) -> calls, e.g. ``("ours", "socket")``, ``("loop", "poll")``.
    calls: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: Loop polls by the timeout the loop passed: ``"zero"``, ``"timed"``
    #: (positive) or ``"blocking"`` (None); asyncio's loop only.
    polls: Counter[str] = field(default_factory=Counter)
    #: Entries into Python from C code under the loop (see `ReleaseCounter`):
    #: on uvloop, each is a return from libuv to Python, which takes the GIL.
    entries: int = 0
    #: The same entries by what was entered (``module:qualname`` of the code
    #: called): which callbacks a count is made of.
    entered: Counter[str] = field(default_factory=Counter)

    def total(self, origin: str | None = None, kind: str | None = None) -> int:
        """Calls of ``origin`` and ``kind`` (None: any)."""
        return sum(
            n for (o, k), n in self.calls.items() if (origin is None or o == origin) and (kind is None or k == kind)
        )

    def by_origin(self) -> dict[str, int]:
        return {origin: self.total(origin) for origin in ORIGINS}

    def minus(self, other: ReleaseCounts) -> ReleaseCounts:
        """What was counted since ``other`` (a `ReleaseCounter.snapshot`)."""
        return ReleaseCounts(
            self.calls - other.calls, self.polls - other.polls, self.entries - other.entries,
            self.entered - other.entered,
        )

    def as_dict(self) -> dict[str, Any]:
        """Plain data (JSON): ``{"calls": {"ours/socket": n, ...}, "polls": {...}}``."""
        return {
            "calls": {f"{o}/{k}": n for (o, k), n in sorted(self.calls.items())},
            "polls": dict(self.polls),
            "entries": self.entries,
            "entered": dict(self.entered),
        }


class ReleaseCounter:
    """Counts the GIL-releasing C calls of one thread (see the module
    docstring for what is seen and what is not).

    `install` and `uninstall` must be called from the watched thread (a
    profile hook is per thread); `snapshot` from any thread.  Replaces any
    profile hook the thread had, and puts it back on `uninstall`.

    Called (directly or not) from a coroutine, it also counts *entries*:
    Python calls made straight from the frame below the coroutines (and
    below the frames of Tornado and this package, which may run a task
    step): on uvloop the frame that started the loop.  On uvloop, whose loop is C code, each entry is a return from
    libuv into Python (a timer, a readiness callback, a ready callback), and
    each takes the GIL back (several ready callbacks of one batch count one
    each: an upper bound).  On asyncio's loop, whose loop is Python, there
    are none; count its polls instead.
    """

    def __init__(self) -> None:
        self.counts = ReleaseCounts()
        self._previous: Any = None
        self._base: FrameType | None = None
        self.installed_tid: int | None = None

    def install(self) -> None:
        self._previous = sys.getprofile()
        self.installed_tid = threading.get_native_id()
        self._base = _loop_caller(sys._getframe(1))
        sys.setprofile(self._hook)

    def uninstall(self) -> None:
        sys.setprofile(self._previous)
        self._previous = None

    def snapshot(self) -> ReleaseCounts:
        """A copy of the counts so far."""
        counts = self.counts
        return ReleaseCounts(Counter(counts.calls), Counter(counts.polls), counts.entries, Counter(counts.entered))

    def _hook(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "c_call":
            if event == "call" and frame.f_back is self._base:
                self.counts.entries += 1
                code = frame.f_code
                self.counts.entered[f"{frame.f_globals.get('__name__', '?')}:{code.co_qualname}"] += 1
            return
        kind = _kind(arg)
        if kind is None:
            return
        self.counts.calls[_origin(frame, kind), kind] += 1
        if kind == "poll":
            # asyncio's selectors call epoll.poll(timeout) from their
            # select(timeout): the caller's own argument says how long.
            timeout = frame.f_locals.get("timeout", "?") if frame.f_code.co_name == "select" else "?"
            self.counts.polls[_timeout_class(timeout)] += 1


def _loop_caller(frame: FrameType | None) -> FrameType | None:
    """From ``frame``, the frame below the coroutine that (directly or not)
    called: past the nearest coroutine, every coroutine frame and every
    frame of Tornado and this package.  On uvloop, the frame that started
    the loop; on asyncio's loop, the ``Handle`` that ran this step.  None
    outside a coroutine."""
    while frame is not None and not frame.f_code.co_flags & _SUSPENDABLE:
        frame = frame.f_back
    if frame is None:
        return None
    while frame is not None and (
        frame.f_code.co_flags & _SUSPENDABLE or any(part in frame.f_code.co_filename for part in _MACHINERY)
    ):
        frame = frame.f_back
    return frame


# Path fragments of the frames that may sit between a C loop and a coroutine
# it runs: Tornado's readiness handler and this package's (which may step a
# task at once, see tornado_readinto.face._facecore.EagerFuture).
_MACHINERY: Final = ("/tornado/", "/tornado_readinto/")

# Code flags of frames that suspend and resume (coroutines and generators).
_SUSPENDABLE: Final = (
    inspect.CO_COROUTINE | inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE
)


def _timeout_class(timeout: Any) -> str:
    if timeout is None:
        return "blocking"
    if isinstance(timeout, (int, float)):
        return "zero" if timeout <= 0 else "timed"
    return "unknown"


# -- a counting selector --------------------------------------------------------------------------


class CountingSelector(selectors.BaseSelector):
    """Wraps a selector (default: `selectors.DefaultSelector`) and counts
    its ``select`` calls by timeout class (``polls``) and registrations
    changed (``ctl``), for a loop built on it:
    ``asyncio.SelectorEventLoop(CountingSelector())``.  Every ``select`` and
    every change of a registration releases the GIL (CPython's ``select``
    module)."""

    def __init__(self, selector: selectors.BaseSelector | None = None) -> None:
        self._selector = selector if selector is not None else selectors.DefaultSelector()
        self.polls: Counter[str] = Counter()
        self.ctl = 0

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        self.ctl += 1
        return self._selector.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        self.ctl += 1
        return self._selector.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        self.ctl += 1
        return self._selector.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        self.polls[_timeout_class(timeout)] += 1
        return self._selector.select(timeout)

    def close(self) -> None:
        self._selector.close()

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        return self._selector.get_key(fileobj)

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._selector.get_map()
