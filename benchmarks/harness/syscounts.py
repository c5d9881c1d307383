"""System calls of a server process, counted by name (``load --count-syscalls``).

CPU time per message moves with the cost of a system call, a page fault
and a context switch, which differ from machine to machine by an order of
magnitude (and from hour to hour on a shared VM); the number of calls per
message does not.  `SyscallCounter` runs ``perf stat`` on the syscall
tracepoints of one process (``-p PID``) from just after it started until it
exits.  With ``windowed`` its counters start off and count only while the
load client turns them on (`WindowSwitch`, through perf's control FIFOs),
from the first measured window's start to the last one's end: the
connections' setup, the warm-up and the close are left out, which at
10,000 connections are as many calls as the messages themselves.  The
edges are not exact: the client's loop stands still while perf acks, and
the server echoes what is in flight meanwhile; a result records that wait
(``switch_s``) and its share of the windows (``edge_share``).
Tracepoints cost the traced process a little CPU per call, so CPU figures
of a counting run read a little high.

Needs ``perf`` and permission to read tracepoints (root, or
``kernel.perf_event_paranoid`` <= -1); `unavailable` says why not.
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import tempfile
import time
from typing import IO, Any

#: The calls counted by name: every receive, send and poll call of asyncio's
#: loop, uvloop and Tornado on Linux, and the usual hidden costs (memory
#: mapping of large receive buffers, clock reads that miss the vDSO, locks).
#: ``total`` counts all calls, named or not.
NAMES = (
    "recvfrom", "recvmsg", "read",
    "sendto", "sendmsg", "write", "writev",
    "epoll_wait", "epoll_pwait", "epoll_ctl",
    "mmap", "munmap", "mremap",
    "getsockopt", "clock_gettime", "futex",
)  # fmt: skip

#: Short names for the progress line: what a message costs, grouped.
GROUPS = {
    "recv": ("recvfrom", "recvmsg", "read"),
    "send": ("sendto", "sendmsg", "write", "writev"),
    "poll": ("epoll_wait", "epoll_pwait"),
    "ctl": ("epoll_ctl",),
    "mm": ("mmap", "munmap", "mremap"),
}

_TOTAL_EVENT = "raw_syscalls:sys_enter"


def events() -> list[str]:
    return [_TOTAL_EVENT, *(f"syscalls:sys_enter_{name}" for name in NAMES)]


def unavailable() -> str | None:
    """Why syscalls cannot be counted here, or None."""
    if shutil.which("perf") is None:
        return "perf is not installed"
    try:
        probe = subprocess.run(
            ["perf", "stat", "-x", ",", "-e", _TOTAL_EVENT, "--", "true"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"perf stat failed: {exc}"
    if probe.returncode != 0 or _TOTAL_EVENT not in probe.stderr or "<not supported>" in probe.stderr:
        return f"perf cannot read syscall tracepoints: {probe.stderr.strip()[-200:]}"
    return None


def parse(perf_stderr: str) -> dict[str, int]:
    """Counts by name (``total`` for all calls) from ``perf stat -x ,`` output."""
    counts: dict[str, int] = {}
    for line in perf_stderr.splitlines():
        fields = line.split(",")
        if len(fields) < 3:
            continue
        event = fields[2]
        if event == _TOTAL_EVENT:
            name = "total"
        elif event.startswith("syscalls:sys_enter_"):
            name = event[len("syscalls:sys_enter_") :]
        else:
            continue
        try:
            counts[name] = int(fields[0])
        except ValueError:  # "<not counted>"
            continue
    return counts


def per_message(counts: dict[str, int], nmessages: int) -> dict[str, float]:
    """``counts`` divided by ``nmessages``, the calls that never happened left out."""
    if nmessages <= 0:
        return {}
    return {name: n / nmessages for name, n in counts.items() if n}


def brief(per_msg: dict[str, float]) -> str:
    """``2.04 syscalls/msg (recv 1.01 send 1.01 poll 0.02)``: the total and
    the groups that occur; ``other`` is what no named call explains."""
    if not per_msg:
        return "no syscall counts"
    parts = []
    named = 0.0
    for group, names in GROUPS.items():
        value = sum(per_msg.get(name, 0.0) for name in names)
        named += value
        if value >= 0.005:
            parts.append(f"{group} {value:.2f}")
    named += sum(per_msg.get(name, 0.0) for name in NAMES if not any(name in g for g in GROUPS.values()))
    other = per_msg.get("total", 0.0) - named
    if other >= 0.005:
        parts.append(f"other {other:.2f}")
    return f"{per_msg.get('total', 0.0):.2f} syscalls/msg ({' '.join(parts)})"


class SyscallCounter:
    """``perf stat`` on process ``pid`` until it exits; `finish` returns the counts.

    With ``windowed``, the counters start off; `control` is what a
    `WindowSwitch` needs to turn them on and off (two FIFOs, removed by
    `finish` and `kill`)."""

    def __init__(self, pid: int, stderr: IO[bytes] | None = None, windowed: bool = False) -> None:
        argv = ["perf", "stat", "-x", ",", "-e", ",".join(events()), "-p", str(pid)]
        #: ``CTL,ACK``: the FIFOs of perf's ``--control`` (windowed; else "").
        self.control = ""
        self._fifos: str | None = None
        if windowed:
            self._fifos = tempfile.mkdtemp(prefix="syscounts-")
            ctl, ack = f"{self._fifos}/ctl", f"{self._fifos}/ack"
            os.mkfifo(ctl)
            os.mkfifo(ack)
            self.control = f"{ctl},{ack}"
            argv += ["--control", f"fifo:{self.control}", "--delay", "-1"]  # -1: start with the counters off
        self.proc: subprocess.Popen[str] = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        self.attached = self._wait_attached()

    def _wait_attached(self, timeout_s: float = 10.0) -> bool:
        """Wait until perf has opened its counters (one perf_event file per
        event and thread), so that the messages after this are all counted."""
        deadline = time.monotonic() + timeout_s
        fds = f"/proc/{self.proc.pid}/fd"
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                opened = sum(os.readlink(f"{fds}/{fd}") == "anon_inode:[perf_event]" for fd in os.listdir(fds))
            except OSError:  # an fd closed while we looked, or no /proc
                opened = 0
            if opened >= len(events()):
                return True
            time.sleep(0.005)
        return False

    def finish(self, timeout_s: float = 30.0) -> dict[str, int]:
        """The counts, once the traced process has exited (perf stat exits with it)."""
        try:
            _, err = self.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        self._remove_fifos()
        return parse(err)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
        self._remove_fifos()

    def _remove_fifos(self) -> None:
        if self._fifos is not None:
            shutil.rmtree(self._fifos, ignore_errors=True)
            self._fifos = None


class WindowSwitch:
    """The load client's end of a windowed `SyscallCounter`: `on` and `off`
    turn perf's counters on and off, each returning once perf has acked;
    `waited_s` adds up those waits (the caller stands still meanwhile: the
    windows' edges).

    :arg control: the counter's `SyscallCounter.control` (``CTL,ACK``).
    :raises RuntimeError: perf is not reading its control FIFO (it exited,
        or does not take ``--control``): no wait for a reader that never comes.
    """

    def __init__(self, control: str) -> None:
        ctl, ack = control.split(",")
        try:  # non-blocking: ENXIO at once when nothing reads the FIFO
            self._ctl = os.open(ctl, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise RuntimeError(f"perf is not reading its control FIFO {ctl}: {exc}") from exc
        self._ack = os.open(ack, os.O_RDONLY | os.O_NONBLOCK)
        self._poll = select.poll()
        self._poll.register(self._ack, select.POLLIN)
        #: Seconds spent in `on` and `off` so far.
        self.waited_s = 0.0

    def on(self) -> None:
        self._command("enable")

    def off(self) -> None:
        self._command("disable")

    def close(self) -> None:
        os.close(self._ctl)
        os.close(self._ack)

    def _command(self, command: str, timeout_s: float = 10.0) -> None:
        """Send ``command`` and wait for perf's ``ack`` (a few ms)."""
        start = time.monotonic()
        os.write(self._ctl, (command + "\n").encode())  # a few bytes: one atomic FIFO write
        deadline = start + timeout_s
        reply = b""
        while b"ack\n" not in reply:
            left = deadline - time.monotonic()
            if left <= 0 or not self._poll.poll(left * 1000):  # poll: the fd may be over select's 1024
                raise TimeoutError(f"perf did not ack {command!r} within {timeout_s:g}s")
            chunk = os.read(self._ack, 64)
            if not chunk:
                raise EOFError(f"perf closed its control FIFO before acking {command!r}")
            reply += chunk
        self.waited_s += time.monotonic() - start


def summary(
    counts: dict[str, int], nmessages: int, switch_s: float | None = None, measured_s: float | None = None
) -> dict[str, Any]:
    """What a result stores: the raw counts, the messages they cover, and per
    message; with the load client's time waiting for perf's acks
    (``switch_s``) and the measured windows' length (``measured_s``), also
    ``edge_share``: about the share of the counted calls that can belong to
    messages the windows do not count (while the client's loop waits for an
    ack, the server still echoes what is in flight, at about its rate in
    the windows): a few ms against seconds, so well under 1%."""
    result: dict[str, Any] = {"counts": counts, "messages": nmessages, "per_msg": per_message(counts, nmessages)}
    if switch_s is not None and measured_s:
        result["switch_s"] = switch_s
        result["edge_share"] = switch_s / measured_s
    return result
