"""What every echo implementation shares: the wire header, the payload ring,
the checks on echoed data, the clock bookkeeping and the per-process stats.

No I/O and no event loop here: the async and threaded drivers build on it.
"""

from __future__ import annotations

import random
import resource
import struct
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import chain
from typing import Any

from benchmarks.harness.cpu import process_cpu_s

#: A frame on the wire: anything with the buffer protocol, 1-D, bytes.
Buffer = Any

#: nframes and every frame length: u64 little-endian (DESIGN.md "Wire format").
U64 = struct.Struct("<Q")

#: nframes and the first frame's length: what the readers that read as few
#: times as a message needs read first (every benchmark message has a frame).
HEAD_NBYTES = 2 * U64.size

#: Sanity bounds for the benchmark's own raw parsers, so that garbage on the
#: wire fails loudly instead of allocating absurd buffers (the same defaults
#: as DESIGN.md "Limits": 1 Mi frames, 64 GiB per message).
MAX_NFRAMES = 1 << 20
MAX_MESSAGE_NBYTES = 64 << 30

#: Payload bytes are a random pattern of this many bytes, tiled.  A prime
#: period, so reordered 4 KiB/64 KiB chunks do not compare equal by accident.
PATTERN_NBYTES = 65521


class ConnClosed(Exception):
    """The peer closed the connection before the first byte of a message."""


class VerificationError(Exception):
    """An echoed message differs from what was sent."""


class WireError(Exception):
    """A header outside the sanity bounds."""


@dataclass(frozen=True)
class CasePlan:
    """What one client process does (the orchestrator passes it on argv)."""

    msize: int  # payload bytes per message, all frames together
    nframes: int
    mode: str  # "pingpong" or "pipelined"
    window: int  # messages in flight (1 for pingpong)
    warmup_s: float
    duration_s: float  # per repeat
    repeat: int
    clients: int  # connections in this process
    server_pid: int = 0  # the server process, whose CPU time each window samples (0: none)


def frame_sizes(msize: int, nframes: int) -> list[int]:
    """``msize`` split evenly over ``nframes`` frames (the first ones take the remainder)."""
    base, extra = divmod(msize, nframes)
    return [base + (i < extra) for i in range(nframes)]


@lru_cache(maxsize=64)
def _header_struct(nframes: int) -> struct.Struct:
    return struct.Struct(f"<{nframes + 1}Q")


@lru_cache(maxsize=64)
def lengths_struct(nframes: int) -> struct.Struct:
    return struct.Struct(f"<{nframes}Q")


def pack_header(frames: Sequence[Buffer]) -> bytes:
    """``nframes, nbytes[0], ...`` for 1-D byte frames (``len`` is their size)."""
    return _header_struct(len(frames)).pack(len(frames), *map(len, frames))


def check_nframes(nframes: int) -> int:
    if nframes > MAX_NFRAMES:
        raise WireError(f"header announces {nframes} frames, more than {MAX_NFRAMES}")
    return nframes


def unpack_lengths(nframes: int, buf: Buffer) -> tuple[int, ...]:
    lengths: tuple[int, ...] = lengths_struct(nframes).unpack(buf)
    if sum(lengths) > MAX_MESSAGE_NBYTES:
        raise WireError(f"header announces {sum(lengths)} bytes, more than {MAX_MESSAGE_NBYTES}")
    return lengths


class ReusedBuffers:
    """Frame buffers reused from message to message while the sizes stay the
    same, made by ``allocate(nbytes)`` (default ``bytearray``)."""

    def __init__(self, allocate: Callable[[int], Any] = bytearray) -> None:
        self._allocate = allocate
        self._lengths: tuple[int, ...] | None = None
        self._buffers: list[Any] = []

    def get(self, lengths: tuple[int, ...]) -> list[Any]:
        if lengths != self._lengths:
            self._buffers = [self._allocate(n) for n in lengths]
            self._lengths = lengths
        return self._buffers


def _tiled(pattern: bytes, nbytes: int, offset: int) -> bytearray:
    start = offset % len(pattern)
    rotated = pattern[start:] + pattern[:start]
    buf = bytearray(rotated) * (nbytes // len(rotated) + 1)
    del buf[nbytes:]
    return buf


class MessageRing:
    """``nslots`` payloads that the client sends in turn, and the checks of their echoes.

    Message ``seq`` is sent from slot ``seq % nslots``; its frame 0 starts with
    ``seq`` as u64le.  With at most ``nslots`` messages in flight a slot is
    stamped again only after its previous echo came back, so zero-copy writes
    never see a payload change while queued.  Each frame is its own
    ``bytearray`` so that a full compare is one ``memcmp``.
    """

    def __init__(self, msize: int, nframes: int, nslots: int, seed: int = 0) -> None:
        self.sizes = tuple(frame_sizes(msize, nframes))
        if self.sizes[0] < U64.size:
            raise ValueError(f"frame 0 has {self.sizes[0]} bytes, needs at least {U64.size} for the stamp")
        pattern = random.Random(seed).randbytes(PATTERN_NBYTES)
        self.slots = [
            [_tiled(pattern, size, offset=7919 * (slot * nframes + i)) for i, size in enumerate(self.sizes)]
            for slot in range(nslots)
        ]
        self.verified_messages = 0  # echoes whose stamp and frame sizes were checked
        self.full_compares = 0  # echoes compared byte for byte

    def stamp(self, seq: int) -> list[bytearray]:
        frames = self.slots[seq % len(self.slots)]
        U64.pack_into(frames[0], 0, seq)
        return frames

    def check(self, echo: Sequence[Buffer], seq: int) -> None:
        """Frame count, frame sizes and the sequence stamp of an echo."""
        if len(echo) != len(self.sizes):
            raise VerificationError(f"echo of message {seq} has {len(echo)} frames, sent {len(self.sizes)}")
        for i, (frame, size) in enumerate(zip(echo, self.sizes)):
            if len(frame) != size:
                raise VerificationError(f"frame {i} of echo {seq} has {len(frame)} bytes, sent {size}")
        stamp = U64.unpack_from(echo[0], 0)[0]
        if stamp != seq:
            raise VerificationError(f"expected the echo of message {seq}, got stamp {stamp}")
        self.verified_messages += 1

    def compare(self, echo: Sequence[Buffer], seq: int) -> None:
        """`check`, then compare every byte with what was sent."""
        self.check(echo, seq)
        for i, (frame, sent) in enumerate(zip(echo, self.slots[seq % len(self.slots)])):
            if sent != frame:  # bytearray == buffer: one memcmp
                raise VerificationError(f"frame {i} of echo {seq} differs from what was sent")
        self.full_compares += 1


@dataclass
class Repeat:
    """One measurement window of one connection."""

    messages: int
    elapsed_s: float
    latencies_s: list[float]
    server_cpu_s: float | None = None  # the server process's CPU time over the window (None: not sampled)
    client_cpu_s: float | None = None  # this process's


def cpu_sample(server_pid: int) -> tuple[float | None, float]:
    """CPU seconds so far of the server process ``server_pid`` (None for 0 or
    when unreadable; from /proc, in clock ticks) and of this process."""
    return (process_cpu_s(server_pid) if server_pid else None), process_cpu_s()


class Recorder:
    """Turns echo arrival times into back-to-back measurement windows.

    The first window opens at the first echo after the warm-up; each closes
    at the first echo at least ``duration_s`` after it opened, and the next
    opens there.  Rate = echoes after the opening one / time between the two
    echoes, so it is exact even when a window holds a handful of 100 MiB
    messages.  At each window boundary it also samples the CPU time of the
    server process (``plan.server_pid``) and of this one (`cpu_sample`: a
    read of /proc per boundary, none per echo).
    """

    def __init__(self, plan: CasePlan, t_origin: float) -> None:
        self.duration_s = plan.duration_s
        self.nrepeats = plan.repeat
        self.opens_after = t_origin + plan.warmup_s
        self.server_pid = plan.server_pid
        self.window_start: float | None = None
        self.cpu_at_start: tuple[float | None, float] = (None, 0.0)
        self.messages = 0
        self.latencies: list[float] = []
        self.repeats: list[Repeat] = []

    def on_echo(self, now: float, latency_s: float) -> bool:
        """Record one echo; False once all repeats are done."""
        if self.window_start is None:
            if now >= self.opens_after:
                self.window_start = now
                self.cpu_at_start = cpu_sample(self.server_pid)
            return True
        self.messages += 1
        self.latencies.append(latency_s)
        if now - self.window_start < self.duration_s:
            return True
        cpu = cpu_sample(self.server_pid)
        (server_start, client_start), (server_end, client_end) = self.cpu_at_start, cpu
        server_cpu_s = server_end - server_start if server_end is not None and server_start is not None else None
        self.repeats.append(
            Repeat(self.messages, now - self.window_start, self.latencies, server_cpu_s, client_end - client_start)
        )
        self.window_start, self.messages, self.latencies, self.cpu_at_start = now, 0, [], cpu
        return len(self.repeats) < self.nrepeats


@dataclass
class ConnStats:
    repeats: list[Repeat] = field(default_factory=list)
    messages_sent: int = 0
    verified_messages: int = 0
    full_compares: int = 0


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks; None for no values."""
    if not sorted_values:
        return None
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def _cpu_pct(windows: Sequence[Repeat], name: str) -> float | None:
    """CPU time per wall-clock second (%, 100 = one core) of ``name``
    (``server_cpu_s``, ``client_cpu_s``), averaged over the connections'
    windows of one repeat (concurrent, so each sees the whole process)."""
    values = [getattr(w, name) / w.elapsed_s for w in windows if getattr(w, name) is not None and w.elapsed_s > 0]
    return 100 * sum(values) / len(values) if values else None


def summarize(stats: Sequence[ConnStats]) -> dict[str, Any]:
    """The client process's result: per-repeat totals over its connections."""
    repeats = []
    for r in range(min(len(s.repeats) for s in stats)):
        windows = [s.repeats[r] for s in stats]
        latencies = sorted(chain.from_iterable(w.latencies_s for w in windows))
        repeats.append(
            {
                "msgs_per_s": sum(w.messages / w.elapsed_s for w in windows),
                "messages": sum(w.messages for w in windows),
                "elapsed_s": max(w.elapsed_s for w in windows),
                "p50_s": percentile(latencies, 0.50),
                "p99_s": percentile(latencies, 0.99),
                "server_cpu_pct": _cpu_pct(windows, "server_cpu_s"),
                "client_cpu_pct": _cpu_pct(windows, "client_cpu_s"),
            }
        )
    return {
        "repeats": repeats,
        "messages_sent": sum(s.messages_sent for s in stats),
        "verified_messages": sum(s.verified_messages for s in stats),
        "full_compares": sum(s.full_compares for s in stats),
    }


def _peak_rss_bytes(usage: resource.struct_rusage) -> int:
    """This process's peak RSS.  On Linux from ``VmHWM``: ``ru_maxrss``
    carries the peak of the process that forked and exec'd us (the
    orchestrator), so a small server would report the orchestrator's."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    # ru_maxrss is KiB on Linux, bytes on macOS
    return usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def process_stats() -> dict[str, float]:
    """Peak RSS (bytes) and CPU seconds of this process so far."""
    return {"rss_bytes": _peak_rss_bytes(resource.getrusage(resource.RUSAGE_SELF)), "cpu_s": process_cpu_s()}
