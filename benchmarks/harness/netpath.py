"""The network path between a case's server and its client (``--netpath``):
loopback, or a veth pair between two network namespaces.

Loopback is not a network: a 64 KiB MTU, no link to fill, and the kernel's
copies are the whole cost of moving bytes.  `open_path` builds the other
kind for the length of a case: two fresh namespaces, the server's and the
client's, joined by a veth pair with an address each from a private /30, the
MTU set on both ends (1500, Ethernet's, or 9000, jumbo frames), and,
if asked, a token bucket (``tc qdisc ... tbf``) on both ends, so that the
link and not the CPU is the limit.  There the gain of a cheaper stream shows
as CPU saved per byte, not as throughput.

A process runs inside a namespace when its argv starts with
`NetPath.server_prefix` / `NetPath.client_prefix` (``ip netns exec NAME``).
``ip netns exec`` switches namespaces and then execs the command, so the
process that ``subprocess.Popen`` started keeps its pid: the harness reads
the server's CPU time from ``/proc/<pid>`` as on loopback (the namespaces
share the pid namespace and /proc).

veth passes TCP's GSO packets (up to 64 KiB) to its peer whole, with no
checksum to compute, as a NIC with TSO and GRO does: the MTU sets the MSS,
the number of packets a rate-limited link meters and the ACK rhythm, not one
trip through the stack per 1500 bytes.

Needs root (``CAP_NET_ADMIN`` and the right to mount ``/run/netns``) and
iproute2's ``ip`` (and ``tc`` for a rate); `unavailable` says what is
missing.  The namespaces are removed on every exit from `open_path`: a
return, an exception, ``KeyboardInterrupt``, and SIGTERM or SIGHUP, which,
while a path is open, raise ``SystemExit`` instead of killing the process on
the spot (deleting a namespace deletes its end of the veth, and with it the
pair).  A process killed by SIGKILL leaves its namespaces behind: they are
named ``trbench-PID-...`` (`NAME_PREFIX`); ``ip netns delete NAME`` removes one.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import math
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

from .table import Column, key_field
from .units import csv, shortest_exact

#: The only MTUs offered: Ethernet's and the common jumbo frame.
MTUS = (1500, 9000)

#: What the client connects to on loopback.
LOOPBACK_HOST = "127.0.0.1"

#: The veth pair's /30 (RFC 1918 space): the server's end, the client's end.
#: Every path has its own namespaces, so parallel runs may use the same
#: addresses without meeting.
SERVER_ADDRESS = "10.213.0.1"
CLIENT_ADDRESS = "10.213.0.2"
PREFIX_LEN = 30

#: Namespace names: ``trbench-PID-RANDOM-srv`` / ``-cli``.  The pid keeps
#: parallel runs apart; the random part keeps a run apart from namespaces a
#: killed run of the same pid left behind.
NAME_PREFIX = "trbench"

#: The interface in each namespace (at most 15 characters, IFNAMSIZ - 1).
#: Each end is created directly in its namespace, so the names never meet in
#: the caller's namespace.
SERVER_IFNAME = "trb-srv"
CLIENT_IFNAME = "trb-cli"

#: tbf's bucket, at least this many seconds of the rate: the kernel refills
#: tokens on a timer, and a bucket smaller than one refill's worth cannot
#: reach the rate (tc-tbf(8): "the minimum buffer size can be calculated by
#: dividing the rate by HZ"; 1 ms is HZ=1000's tick, and hrtimers refill
#: finer).  1 ms of 1 Gbit/s is 125 kB, of 10 Gbit/s 1.25 MB.
TBF_BURST_S = 0.001
#: ... and at least two of the largest packets TCP hands a veth: GSO packets
#: of up to gso_max_size (64 KiB on veth; tests_bench/test_bench_netpath.py
#: checks) plus headers.  A packet bigger than the bucket is segmented by
#: tbf at a CPU cost that would count against the benchmark (or, not being
#: GSO, dropped), and room for two keeps a sender from waiting out a refill
#: after each one.
GSO_MAX_NBYTES = 65536 + 256
TBF_MIN_BURST_NBYTES = 2 * GSO_MAX_NBYTES
#: tbf's queue: packets wait at most this long for tokens (tc-tbf(8)
#: ``latency``; the queue holds rate x latency + burst bytes).  50 ms of
#: 1 Gbit/s is 6.25 MB, more than the 4 MiB that TCP Small Queues lets one
#: socket keep below it (net.ipv4.tcp_limit_output_bytes), so a connection
#: is metered by the tokens rather than cut back by drops.
TBF_LATENCY_S = 0.05

#: Seconds for one ``ip`` or ``tc`` command.
COMMAND_TIMEOUT_S = 30.0

_RATE_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([kmgt]?)bit", re.IGNORECASE)
_RATE_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}  # tc's: kbit = 1000 bit
_PATH_RE = re.compile(r"mtu(\d+)(?:@(.+))?", re.IGNORECASE)

_names = itertools.count()


class NetPathError(RuntimeError):
    """A path cannot be set up here (not root, no iproute2), or a command failed."""


def parse_rate(text: str) -> int:
    """tc's spelling of a rate -> bits per second: ``"1gbit"`` -> 10**9,
    ``"2.5gbit"``, ``"100mbit"``, ``"500kbit"`` (k, m, g, t are powers of
    1000, as in tc).

    :raises ValueError: anything else, or a rate of less than 1 kbit/s.
    """
    match = _RATE_RE.fullmatch(text.strip())
    if not match:
        raise ValueError(f"not a rate: {text!r} (use e.g. 100mbit, 1gbit, 2.5gbit)")
    bits = float(match.group(1)) * _RATE_UNITS[match.group(2).lower()]
    if bits < 1000 or bits != int(bits):
        raise ValueError(f"rate {text!r}: need a whole number of bits/s, at least 1kbit")
    return int(bits)


def format_rate(bits_per_s: int) -> str:
    """The shortest exact tc spelling: 10**9 -> ``"1gbit"``, 2.5e9 -> ``"2.5gbit"``."""
    return shortest_exact(bits_per_s, [(f"{unit}bit", _RATE_UNITS[unit]) for unit in "tgmk"], "bit", 3)


def tbf_burst_nbytes(rate_bit_s: int) -> int:
    """tbf's bucket for ``rate_bit_s``: `TBF_BURST_S` of the rate, at least
    `TBF_MIN_BURST_NBYTES`."""
    return max(math.ceil(rate_bit_s / 8 * TBF_BURST_S), TBF_MIN_BURST_NBYTES)


@dataclass(frozen=True)
class PathSpec:
    """A path as ``--netpath`` names it: loopback (``mtu`` None), or a veth
    pair of MTU ``mtu``, rate-limited to ``rate_bit_s`` in each direction
    (None: as fast as the CPUs go)."""

    mtu: int | None = None
    rate_bit_s: int | None = None

    @property
    def loopback(self) -> bool:
        return self.mtu is None

    @property
    def name(self) -> str:
        """The ``--netpath`` spelling: ``loopback``, ``mtu1500``, ``mtu9000@1gbit``."""
        if self.mtu is None:
            return "loopback"
        return f"mtu{self.mtu}" + (f"@{format_rate(self.rate_bit_s)}" if self.rate_bit_s else "")

    def describe(self) -> str:
        """In words: ``loopback``, ``netns veth MTU 1500``, ``netns veth MTU 9000, tbf 1gbit``."""
        if self.mtu is None:
            return "loopback"
        return f"netns veth MTU {self.mtu}" + (f", tbf {format_rate(self.rate_bit_s)}" if self.rate_bit_s else "")

    def record(self) -> dict[str, Any]:
        """What a result's JSON says about its path (besides its name)."""
        if self.mtu is None:
            return {"kind": "loopback", "server_address": LOOPBACK_HOST}
        tbf = None
        if self.rate_bit_s:
            tbf = {
                "rate_bit_s": self.rate_bit_s,
                "burst_nbytes": tbf_burst_nbytes(self.rate_bit_s),
                "latency_s": TBF_LATENCY_S,
                "on": "both ends (each direction)",
            }
        return {
            "kind": "netns-veth",
            "mtu": self.mtu,
            "server_address": SERVER_ADDRESS,
            "client_address": CLIENT_ADDRESS,
            "tbf": tbf,
        }


LOOPBACK = PathSpec()


def parse_path(text: str) -> PathSpec:
    """``--netpath`` syntax: ``loopback``, ``mtu1500``, ``mtu9000``, and
    either MTU with ``@RATE`` (tc's units: ``mtu1500@1gbit``, ``mtu9000@100mbit``).

    :raises ValueError: anything else.
    """
    text = text.strip()
    if text.lower() == "loopback":
        return LOOPBACK
    match = _PATH_RE.fullmatch(text)
    if not match:
        raise ValueError(f"not a path: {text!r} (use loopback, mtu1500, mtu9000, or e.g. mtu1500@1gbit)")
    mtu = int(match.group(1))
    if mtu not in MTUS:
        raise ValueError(f"path {text!r}: MTU {mtu} is not one of {', '.join(map(str, MTUS))}")
    return PathSpec(mtu, parse_rate(match.group(2)) if match.group(2) else None)


def unavailable(specs: Sequence[PathSpec] = (PathSpec(1500),)) -> str | None:
    """Why ``specs`` cannot be set up here (loopback always can), or None."""
    if all(spec.loopback for spec in specs):
        return None
    needs = "a network namespace path (--netpath mtuN) needs root and iproute2 (ip, and tc for a rate)"
    if not sys.platform.startswith("linux"):
        return f"{needs}: this is {sys.platform}, not Linux"
    if os.geteuid() != 0:
        return f"{needs}: run as root (this is uid {os.geteuid()}), e.g. with sudo"
    tools = ["ip"] + (["tc"] if any(spec.rate_bit_s for spec in specs) else [])
    missing = [tool for tool in tools if _which(tool) is None]
    if missing:
        return f"{needs}: {' and '.join(missing)} not found (install iproute2)"
    return None


def _which(tool: str) -> str | None:
    """``tool`` on PATH, or in the sbin directories root's PATH has and a user's may not."""
    return shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin:/usr/local/sbin")


def run_command(argv: Sequence[str]) -> str:
    """Run an ``ip``/``tc`` command; its stdout.

    :raises NetPathError: it failed (its status and stderr), or was not found.
    """
    tool = _which(argv[0]) or argv[0]
    try:
        done = subprocess.run([tool, *argv[1:]], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetPathError(f"{' '.join(argv)}: {exc}") from exc
    if done.returncode != 0:
        raise NetPathError(f"{' '.join(argv)} failed with status {done.returncode}: {done.stderr.strip()}")
    return done.stdout


@dataclass(frozen=True)
class NetPath:
    """An open path: where the server listens and how to start a process on
    either side.  On loopback both namespaces are None (the caller's)."""

    spec: PathSpec
    server_ns: str | None = None
    client_ns: str | None = None

    @property
    def server_host(self) -> str:
        """The address the server binds and the client connects to."""
        return LOOPBACK_HOST if self.spec.loopback else SERVER_ADDRESS

    @property
    def client_host(self) -> str:
        """The client's address: where a process in its namespace listens, if it does."""
        return LOOPBACK_HOST if self.spec.loopback else CLIENT_ADDRESS

    def server_prefix(self) -> list[str]:
        """Put before a command's argv to run it in the server's namespace."""
        return _exec_prefix(self.server_ns)

    def client_prefix(self) -> list[str]:
        """Put before a command's argv to run it in the client's namespace."""
        return _exec_prefix(self.client_ns)


def _exec_prefix(namespace: str | None) -> list[str]:
    if namespace is None:
        return []
    return [_which("ip") or "ip", "netns", "exec", namespace]


@contextlib.contextmanager
def open_path(spec: PathSpec) -> Iterator[NetPath]:
    """The path ``spec`` for the length of the ``with``: for a veth path,
    two fresh namespaces joined by a veth pair (`SERVER_ADDRESS`,
    `CLIENT_ADDRESS`, MTU ``spec.mtu`` on both ends, lo and both ends up,
    tbf on both ends if ``spec.rate_bit_s``), removed on every way out.

    :raises NetPathError: not root, no iproute2, or a command failed (the
        namespaces made so far are removed first).
    """
    if spec.loopback:
        yield NetPath(spec)
        return
    reason = unavailable([spec])
    if reason is not None:
        raise NetPathError(reason)
    stem = f"{NAME_PREFIX}-{os.getpid()}-{next(_names)}{secrets.token_hex(2)}"
    path = NetPath(spec, f"{stem}-srv", f"{stem}-cli")
    with _signals_raise():
        try:
            _build(path)
            yield path
        except BaseException:
            _remove(path, failing=True)
            raise
        _remove(path, failing=False)


def _build(path: NetPath) -> None:
    spec = path.spec
    assert path.server_ns is not None and path.client_ns is not None and spec.mtu is not None
    sides = ((path.server_ns, SERVER_IFNAME, SERVER_ADDRESS), (path.client_ns, CLIENT_IFNAME, CLIENT_ADDRESS))
    for namespace, _, _ in sides:
        run_command(["ip", "netns", "add", namespace])
    run_command(["ip", "link", "add", SERVER_IFNAME, "netns", path.server_ns, "type", "veth",
                 "peer", "name", CLIENT_IFNAME, "netns", path.client_ns])  # fmt: skip
    for namespace, ifname, address in sides:
        run_command(["ip", "-n", namespace, "link", "set", ifname, "mtu", str(spec.mtu)])
        run_command(["ip", "-n", namespace, "addr", "add", f"{address}/{PREFIX_LEN}", "dev", ifname])
        run_command(["ip", "-n", namespace, "link", "set", "lo", "up"])
        run_command(["ip", "-n", namespace, "link", "set", ifname, "up"])
        if spec.rate_bit_s:
            run_command(["tc", "-n", namespace, "qdisc", "add", "dev", ifname, "root", "tbf",
                         "rate", f"{spec.rate_bit_s}bit", "burst", str(tbf_burst_nbytes(spec.rate_bit_s)),
                         "latency", f"{TBF_LATENCY_S * 1000:g}ms"])  # fmt: skip


def _remove(path: NetPath, failing: bool) -> None:
    """Delete both namespaces (what exists of them), with SIGINT/SIGTERM/SIGHUP
    held off until done.  Failures raise `NetPathError`, unless the ``with``
    is already ``failing`` (then they are printed, not to hide its error)."""
    errors = []
    with _signals_deferred():
        for namespace in (path.server_ns, path.client_ns):
            if namespace is None or not os.path.exists(f"/run/netns/{namespace}"):
                continue
            try:
                run_command(["ip", "netns", "delete", namespace])
            except NetPathError as exc:
                errors.append(str(exc))
    if errors:
        message = "could not remove the network namespaces: " + "; ".join(errors)
        if not failing:
            raise NetPathError(message)
        print(message, file=sys.stderr)


def namespaces() -> list[str]:
    """The network namespaces that ``ip netns`` knows (all of them, not only ours)."""
    return [line.split()[0] for line in run_command(["ip", "netns", "list"]).splitlines() if line.strip()]


# -- signals -------------------------------------------------------------------------------

#: Signals whose default action kills the process without unwinding: while
#: a path is open they raise ``SystemExit(128 + signum)`` instead (as a
#: shell reports a death by signal), so that the ``finally`` runs.
_FATAL_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _raise_exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """While inside: `_FATAL_SIGNALS` still at their default action raise
    ``SystemExit``.  Only the main thread can set handlers; elsewhere this
    does nothing (and signals keep their default)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for signum in _FATAL_SIGNALS:
        if signal.getsignal(signum) is signal.SIG_DFL:
            previous[signum] = signal.signal(signum, _raise_exit)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """While inside, SIGINT and `_FATAL_SIGNALS` are only noted; the first
    one noted is raised on the way out (``KeyboardInterrupt`` for SIGINT,
    else ``SystemExit(128 + signum)``, or the signal's own handler's effect)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    signums = (signal.SIGINT, *_FATAL_SIGNALS)
    previous: dict[int, Any] = {
        signum: signal.signal(signum, lambda signum, frame: noted.append(signum)) for signum in signums
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
    if noted:
        first = noted[0]
        handler = previous[first]
        if callable(handler):
            handler(first, None)
        elif handler is not signal.SIG_IGN:  # the default (or a handler set outside Python)
            if first == signal.SIGINT:
                raise KeyboardInterrupt
            raise SystemExit(128 + first)


# -- the suites' flag and column -------------------------------------------------------------

NETPATH_HELP = (
    "comma list of network paths between server and client: loopback (127.0.0.1, the default), "
    "mtu1500 or mtu9000 (server and client in two fresh network namespaces joined by a veth pair of "
    "that MTU; needs root and iproute2), optionally rate-limited in each direction with tc tbf: "
    "mtu1500@1gbit, mtu9000@10gbit, mtu1500@100mbit (tc's units). Every case runs on every path"
)


def add_argument(parser: argparse.ArgumentParser) -> None:
    """``--netpath`` (`NETPATH_HELP`)."""
    parser.add_argument("--netpath", type=csv(parse_path), metavar="PATH[,PATH...]", help=NETPATH_HELP)


def check_argument(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """``--netpath`` defaults to loopback, each path once.  The same on
    every machine: whether this one can set the paths up is `refusal`'s."""
    args.netpath = list(dict.fromkeys(args.netpath or [LOOPBACK]))


def refusal(args: argparse.Namespace) -> str | None:
    """Why this machine cannot run the paths of ``args.netpath`` (as
    `check_argument` left it), naming them; None if it can (loopback
    always can).  A suite's ``unavailable``: the command ends with it
    before any case runs."""
    reason = unavailable(args.netpath)
    return None if reason is None else f"--netpath {','.join(spec.name for spec in args.netpath)}: {reason}"


def column() -> Column[Any]:
    """The table's ``path`` column (a result's ``path`` field)."""
    return key_field("path", lambda r: r.path)


def with_column(columns: Sequence[Column[Any]], results: Sequence[Any], after: str) -> list[Column[Any]]:
    """``columns`` with the `column` after the one titled ``after``, when a
    result ran on another path than loopback; else ``columns`` as they are."""
    if all(getattr(r, "path", LOOPBACK.name) == LOOPBACK.name for r in results):
        return list(columns)
    out = []
    for c in columns:
        out.append(c)
        if c.title == after:
            out.append(column())
    return out
