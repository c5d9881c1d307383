"""The client process of ``python -m benchmarks.load``: many connections in
one process, each a small ``asyncio.BufferedProtocol`` (no coroutine, no
Future per message), so that the client costs little next to the server it
measures.

Every connection ping-pongs one message: it sends the next one from the
callback that completes the echo of the previous one, or, paced (``rate``
messages/s per connection), in its next slot of a fixed timetable: one slot
per period ``1/rate``, the connections' slots spread evenly over the period
(connection ``i`` of ``n`` owns ``[i/n, (i+1)/n)`` of it) and each message
sent at a random point of its slot, so that the connections never fire in
lockstep and the server sees one message at a time, as RPC traffic below
saturation does.  The timetable does not depend on how fast the server
answers, so every server gets the same offered load; an echo back after its
next slot starts sends at once (catching up), and one over a whole period
late skips the slots it missed instead of sending a burst.  (Timers fire on
the loop's clock, to the millisecond on uvloop: offered loads up to about
1000 messages/s all together keep one message per tick.)  A message is the
same bytes every time except for its sequence stamp, so the echo must be
byte-identical to what was sent:

``framed`` wire
    ``nframes=1:u64le, nbytes:u64le, payload``; the stamp is the payload's
    first 8 bytes.
``comm`` wire (``tornado_readinto.channel.comm``)
    after the comm handshake (one framed msgpack map each way), one framed
    message per ``{"op": "echo", "frames": [payload]}``, encoded once with the
    comm's own `encode_message`; the stamp is patched into the payload's first
    8 bytes where it lies in the encoding (inside the msgpack header under
    64 KiB, its own frame above).  The comm server decodes and re-encodes the
    same dict, so its echo is byte-identical too.

Over TLS (``--tls-ca``) every connection is the loop's SSL transport
(``create_connection(sock=..., ssl=..., server_hostname=...)`` with the
server's address) feeding the same protocol, which the transport decrypts into; the result
names the TLS version and cipher the connections negotiated.

Every echo is checked: the bytes before the stamp (framing header, msgpack
prefix: message count and sizes) and the stamp itself; the first and the last
echo of each connection byte for byte.  At each window boundary the process
samples the server's CPU time, that of the server's event-loop thread (with
``--gil-thread`` the process also runs a GIL-holding thread, which this
leaves out) and its own, all with ``benchmarks.harness.cpu``.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import socket
import ssl
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from benchmarks.harness import syscounts
from benchmarks.harness.cpu import process_cpu_s, steal_s, thread_cpu_s

from ._async import HOST, prepare_socket
from ._common import U64, VerificationError, pack_header, percentile

#: Message formats the client speaks (see the module docstring).
WIRES = ("framed", "comm")

#: Seconds between connection attempts while a comm server re-listens.
_CONNECT_RETRY_S = 0.01


@dataclass(frozen=True)
class LoadPlan:
    """What the load client does (the orchestrator passes it on argv)."""

    clients: int  # connections
    msize: int  # payload bytes per message
    wire: str  # one of WIRES
    rate: float  # messages/s per connection; 0 = as fast as possible
    warmup_s: float
    duration_s: float  # per window
    repeat: int  # windows
    server_pid: int  # whose CPU time to sample; 0 = none
    server_tid: int = 0  # the server's event-loop thread, whose CPU time to sample; 0 = none
    #: A windowed `syscounts.SyscallCounter`'s control (``CTL,ACK``): its
    #: counters are on from the first window's start to the last one's end.
    syscalls_control: str = ""


@dataclass(frozen=True)
class Template:
    """One message on the wire, and where its stamp goes."""

    wire: bytes
    stamp_offset: int
    prelude: bytes = b""  # sent once after connecting (the comm handshake)


def make_payload(msize: int, seed: int) -> bytes:
    if msize < U64.size:
        raise ValueError(f"msize {msize} is below {U64.size} bytes: no room for the stamp")
    return random.Random(seed).randbytes(msize)


def framed_template(payload: bytes) -> Template:
    return Template(pack_header([payload]) + payload, 2 * U64.size)


def comm_template(payload: bytes) -> Template:
    """The comm encoding of ``{"op": "echo", "frames": [payload]}``, with the handshake as prelude."""
    import msgpack

    from tornado_readinto.channel.comm import PROTOCOL_NAME, PROTOCOL_VERSION
    from tornado_readinto.wire.message import decode_message, encode_message

    frames = [bytes(f) for f in encode_message({"op": "echo", "frames": [payload]})]
    wire = pack_header(frames) + b"".join(frames)
    offset = wire.find(payload)
    if offset < 0 or wire.find(payload, offset + 1) >= 0:  # pragma: no cover - random payloads
        raise ValueError("cannot locate the payload in the comm encoding")
    decoded = decode_message([memoryview(f) for f in frames])
    if decoded["op"] != "echo" or [bytes(f) for f in decoded["frames"]] != [payload]:  # pragma: no cover
        raise ValueError("the comm encoding does not round-trip")
    handshake = msgpack.packb(
        {"protocol": PROTOCOL_NAME, "version": PROTOCOL_VERSION, "allow_pickle": False}, use_bin_type=True
    )
    return Template(wire, offset, pack_header([handshake]) + handshake)


def make_template(wire: str, msize: int, seed: int) -> Template:
    payload = make_payload(msize, seed)
    if wire == "framed":
        return framed_template(payload)
    if wire == "comm":
        return comm_template(payload)
    raise ValueError(f"unknown wire {wire!r}; known: {', '.join(WIRES)}")


class _Bench:
    """What the connections share: counters, latency samples, the stop flag."""

    def __init__(self, plan: LoadPlan) -> None:
        self.plan = plan
        self.loop = asyncio.get_running_loop()
        self.nechoes = 0
        self.latencies: list[float] = []
        self.stopping = False
        self.nfinished = 0
        self.error: BaseException | None = None
        self.wakeup: asyncio.Future[None] = self.loop.create_future()

    def fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
        if not self.wakeup.done():
            self.wakeup.set_result(None)

    def finished(self) -> None:
        self.nfinished += 1
        if self.nfinished == self.plan.clients and not self.wakeup.done():
            self.wakeup.set_result(None)

    async def wait(self, timeout_s: float | None) -> None:
        """Sleep ``timeout_s`` (None: until all connections finished); raise the first failure."""
        await asyncio.wait([self.wakeup], timeout=timeout_s)
        if self.error is not None:
            raise self.error


class _CommHandshake:
    """Receives and checks the comm server's handshake (one framed msgpack
    map naming the protocol and its version), fed like a `BufferedProtocol`:
    ``get_buffer`` returns exactly the bytes still missing, so nothing after
    the handshake is taken."""

    def __init__(self) -> None:
        self._buf = bytearray(2 * U64.size)  # nframes, nbytes
        self._filled = 0
        self._header = True

    def get_buffer(self) -> memoryview:
        return memoryview(self._buf)[self._filled :]

    def buffer_updated(self, nbytes: int) -> bool:
        """Record ``nbytes`` more; True once the whole handshake is in and checked.

        :raises VerificationError: a handshake that is not the comm's.
        """
        import msgpack

        from tornado_readinto.channel.comm import HANDSHAKE_MAX_NBYTES, PROTOCOL_NAME, PROTOCOL_VERSION

        self._filled += nbytes
        if self._filled < len(self._buf):
            return False
        if self._header:
            nframes, size = U64.unpack_from(self._buf, 0)[0], U64.unpack_from(self._buf, U64.size)[0]
            if nframes != 1 or not 0 < size <= HANDSHAKE_MAX_NBYTES:
                raise VerificationError(f"bad comm handshake header: {nframes} frames, {size} bytes")
            self._buf, self._filled, self._header = bytearray(size), 0, False
            return False
        try:
            remote = msgpack.unpackb(self._buf, raw=False)
        except Exception as exc:
            raise VerificationError(f"bad comm handshake: {exc}") from exc
        if not isinstance(remote, dict) or (remote.get("protocol"), remote.get("version")) != (
            PROTOCOL_NAME,
            PROTOCOL_VERSION,
        ):
            raise VerificationError(f"bad comm handshake: {remote!r}")
        return True


class _LoadConn(asyncio.BufferedProtocol):
    """One ping-pong connection: receives each echo straight into one buffer
    (``get_buffer`` returns exactly the bytes still missing), checks it and
    sends the next message from the same callback.

    With a prelude (the ``comm`` wire), `connection_made` sends it and the
    server's handshake is received and checked first; ``ready`` completes
    then (at once without a prelude), or fails with the reason.
    """

    def __init__(self, bench: _Bench, index: int, template: Template) -> None:
        self.bench = bench
        self.index = index
        self.prelude = template.prelude
        self.handshake = _CommHandshake() if template.prelude else None
        self.ready: asyncio.Future[None] = bench.loop.create_future()
        self.message = bytearray(template.wire)
        self.nbytes = len(self.message)
        self.stamp_offset = template.stamp_offset
        self.prefix = bytes(self.message[: template.stamp_offset])
        self.received = bytearray(self.nbytes)
        self.view = memoryview(self.received)
        self.filled = 0
        self.seq = 0  # the message in flight
        self.t_sent = 0.0
        plan = bench.plan
        self.period_s = 1.0 / plan.rate if plan.rate > 0 else 0.0  # paced: the timetable's period
        self.slot_s = self.period_s / plan.clients  # paced: the width of this connection's slot
        self.slot = 0.0  # paced: loop time when the current message's slot starts
        self.jitter = random.Random(index)  # paced: where in its slot a message goes
        self.transport: asyncio.Transport | None = None
        self.verified_messages = 0
        self.full_compares = 0
        self.done = False

    # -- sending ---------------------------------------------------------------

    def send(self) -> None:
        if self.done or self.bench.error is not None or self.transport is None:
            return
        U64.pack_into(self.message, self.stamp_offset, self.seq)
        self.t_sent = perf_counter()
        self.transport.write(self.message)

    def pace(self, first_slot: float) -> None:
        """Paced: send message 0 in the slot starting at ``first_slot``
        (loop time), and each later one a period after its predecessor's."""
        self.slot = first_slot
        self._send_in_slot()

    def _send_in_slot(self) -> None:
        loop = self.bench.loop
        when = self.slot + self.jitter.random() * self.slot_s
        if when <= loop.time():
            self.send()
        else:
            loop.call_at(when, self.send)

    def _next_slot(self) -> None:
        """Paced: the next message's slot, one period on (whole periods
        later if the echo came back over a period late: no burst)."""
        self.slot += self.period_s
        behind_s = self.bench.loop.time() - self.slot
        if behind_s > self.period_s:
            self.slot += math.floor(behind_s / self.period_s) * self.period_s
        self._send_in_slot()

    # -- receiving -------------------------------------------------------------

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.handshake is not None:
            return self.handshake.get_buffer()
        return self.view[self.filled :]

    def _handshake_updated(self, nbytes: int) -> None:
        assert self.handshake is not None
        try:
            done = self.handshake.buffer_updated(nbytes)
        except VerificationError as exc:
            self.ready.set_exception(exc)
            assert self.transport is not None
            self.transport.abort()
            return
        if done:
            self.handshake = None
            self.ready.set_result(None)

    def buffer_updated(self, nbytes: int) -> None:
        if self.handshake is not None:
            self._handshake_updated(nbytes)
            return
        self.filled += nbytes
        if self.filled < self.nbytes:
            return
        self.filled = 0
        now = perf_counter()
        bench = self.bench
        last = bench.stopping and self.seq > 0
        try:
            self._check()
            if last:
                self._compare()  # the last echo, byte for byte
        except VerificationError as exc:
            bench.fail(exc)
            assert self.transport is not None
            self.transport.abort()
            return
        bench.nechoes += 1
        bench.latencies.append(now - self.t_sent)
        if last:
            self.done = True
            bench.finished()
            return
        self.seq += 1
        if self.period_s:
            self._next_slot()
        else:
            self.send()

    def _check(self) -> None:
        received, seq = self.received, self.seq
        stamp = U64.unpack_from(received, self.stamp_offset)[0]
        if stamp != seq:
            raise VerificationError(f"connection {self.index}: expected the echo of message {seq}, got stamp {stamp}")
        if received[: self.stamp_offset] != self.prefix:
            raise VerificationError(f"connection {self.index}: echo {seq} has another header (count or sizes)")
        self.verified_messages += 1
        if seq == 0:
            self._compare()  # the first echo, byte for byte

    def _compare(self) -> None:
        if self.received != self.message:
            raise VerificationError(f"connection {self.index}: echo {self.seq} differs from what was sent")
        self.full_compares += 1

    # -- transport callbacks ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no asyncio.Transport
        if self.prelude:
            self.transport.write(self.prelude)  # type: ignore[union-attr]
        else:
            self.ready.set_result(None)

    def eof_received(self) -> bool | None:
        return None  # close

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ready.done():
            reason = f": {type(exc).__name__}: {exc}" if exc is not None else ""
            self.ready.set_exception(ConnectionError(f"connection {self.index} lost during the handshake{reason}"))
            return
        if not self.done:
            reason = f": {type(exc).__name__}: {exc}" if exc is not None else ""
            self.bench.fail(ConnectionError(f"connection {self.index} lost at message {self.seq}{reason}"))


async def _open(
    bench: _Bench,
    index: int,
    port: int,
    template: Template,
    deadline: float,
    ssl_context: ssl.SSLContext | None = None,
    host: str = HOST,
) -> _LoadConn:
    """Connect to ``host:port`` (retrying while the server is not listening
    yet), wrap in a `_LoadConn` (over TLS with ``ssl_context``, checking that
    the certificate names ``host``) and wait for its prelude."""
    loop = bench.loop
    while True:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        prepare_socket(sock)
        try:
            await loop.sock_connect(sock, (host, port))
            break
        except ConnectionRefusedError:
            sock.close()
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(_CONNECT_RETRY_S)
        except BaseException:
            sock.close()
            raise
    tls: dict[str, Any] = {"ssl": ssl_context, "server_hostname": host} if ssl_context is not None else {}
    conn = _LoadConn(bench, index, template)  # (what create_connection returns is not always ours)
    try:
        transport, _ = await loop.create_connection(lambda: conn, sock=sock, **tls)
    except BaseException:
        sock.close()
        raise
    try:
        await conn.ready
    except BaseException:
        transport.abort()
        raise
    return conn


async def _open_all(opening: list[Coroutine[Any, Any, _LoadConn]]) -> list[_LoadConn]:
    """Open all the connections at once; if one fails, stop the others and
    close the ones already open before raising its error (a failed TLS
    handshake then reports itself, not the loop closed under the others)."""
    tasks = [asyncio.ensure_future(c) for c in opening]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for task in tasks:
            if not task.cancelled() and task.exception() is None and task.result().transport is not None:
                task.result().transport.abort()  # type: ignore[union-attr]
        raise


class _Snapshot:
    """The counters at one window boundary."""

    def __init__(self, bench: _Bench) -> None:
        self.t = perf_counter()
        self.nechoes = bench.nechoes
        plan = bench.plan
        self.server_cpu_s = process_cpu_s(plan.server_pid) if plan.server_pid else None
        self.loop_cpu_s = thread_cpu_s(plan.server_pid, plan.server_tid) if plan.server_tid else None
        self.client_cpu_s = process_cpu_s()
        self.steal_s = steal_s()
        self.latencies = bench.latencies
        bench.latencies = []


def window_metrics(start: _Snapshot, end: _Snapshot) -> dict[str, Any]:
    """One repeat: rate, CPU per message and per second of both processes
    and of the server's loop thread, latency."""
    elapsed = end.t - start.t
    messages = end.nechoes - start.nechoes
    client_cpu = end.client_cpu_s - start.client_cpu_s

    def delta(a: float | None, b: float | None) -> float | None:
        return b - a if a is not None and b is not None else None

    server_cpu = delta(start.server_cpu_s, end.server_cpu_s)
    loop_cpu = delta(start.loop_cpu_s, end.loop_cpu_s)
    latencies = sorted(end.latencies)  # the echoes of this window
    steal = delta(start.steal_s, end.steal_s)

    def per_msg_us(cpu_s: float | None) -> float | None:
        return cpu_s / messages * 1e6 if cpu_s is not None and messages else None

    def pct(cpu_s: float | None) -> float | None:
        return cpu_s / elapsed * 100 if cpu_s is not None and elapsed > 0 else None

    return {
        "messages": messages,
        "elapsed_s": elapsed,
        "msgs_per_s": messages / elapsed if elapsed > 0 else 0.0,
        "server_cpu_s": server_cpu,
        "loop_cpu_s": loop_cpu,
        "client_cpu_s": client_cpu,
        "server_cpu_us_per_msg": per_msg_us(server_cpu),
        "loop_cpu_us_per_msg": per_msg_us(loop_cpu),
        "client_cpu_us_per_msg": per_msg_us(client_cpu),
        "server_cpu_pct": pct(server_cpu),
        "loop_cpu_pct": pct(loop_cpu),
        "client_cpu_pct": pct(client_cpu),
        "p50_s": percentile(latencies, 0.50),
        "p99_s": percentile(latencies, 0.99),
        # the share of the machine's CPU time the hypervisor took in the
        # window: a repeat that ran while the host was busy shows it here
        "steal_pct": pct(steal / (os.cpu_count() or 1)) if steal is not None else None,
    }


async def run_load(
    port: int,
    plan: LoadPlan,
    connect_timeout_s: float = 30.0,
    ssl_context: ssl.SSLContext | None = None,
    host: str = HOST,
) -> dict[str, Any]:
    """The whole case in this process, against the server at ``host:port``
    (over TLS with ``ssl_context``); returns its JSON result."""
    bench = _Bench(plan)
    deadline = time.monotonic() + connect_timeout_s
    templates = [make_template(plan.wire, plan.msize, seed=i) for i in range(plan.clients)]
    started = perf_counter()
    conns: Sequence[_LoadConn] = ()
    try:
        conns = await _open_all(
            [_open(bench, i, port, templates[i], deadline, ssl_context, host) for i in range(plan.clients)]
        )
        connect_s = perf_counter() - started
        tls = _tls_info(conns) if ssl_context is not None else None
        start = bench.loop.time()
        for i, conn in enumerate(conns):  # message 0; paced: in each connection's own share of the period
            if plan.rate:
                conn.pace(start + i / (plan.clients * plan.rate))
            else:
                conn.send()
        await bench.wait(plan.warmup_s)
        switch = syscounts.WindowSwitch(plan.syscalls_control) if plan.syscalls_control else None
        try:
            if switch is not None:
                switch.on()
            marks = [_Snapshot(bench)]
            for _ in range(plan.repeat):
                await bench.wait(plan.duration_s)
                marks.append(_Snapshot(bench))
            if switch is not None:
                switch.off()
        finally:
            if switch is not None:
                switch.close()
        bench.stopping = True  # each connection stops at its next echo
        if bench.nfinished < plan.clients:
            await bench.wait(None)
    finally:
        for conn in conns:
            if conn.transport is not None:
                conn.transport.close()
    return {
        "repeats": [window_metrics(a, b) for a, b in zip(marks, marks[1:])],
        "messages_sent": sum(c.seq + 1 for c in conns),
        "verified_messages": sum(c.verified_messages for c in conns),
        "full_compares": sum(c.full_compares for c in conns),
        "connect_s": connect_s,
        "tls": tls,
        "syscalls_switch_s": switch.waited_s if switch is not None else None,
    }


def _tls_info(conns: Sequence[_LoadConn]) -> dict[str, Any]:
    """The TLS version and cipher every connection negotiated (one each, or
    `VerificationError` when a connection has none or they differ)."""
    seen = set()
    for conn in conns:
        assert conn.transport is not None
        cipher = conn.transport.get_extra_info("cipher")  # (name, protocol version, secret bits)
        if not cipher:
            raise VerificationError(f"connection {conn.index} reports no TLS cipher")
        seen.add((cipher[1], cipher[0], cipher[2]))
    if len(seen) != 1:
        raise VerificationError(f"the connections negotiated different TLS parameters: {sorted(seen)}")
    version, cipher_name, bits = seen.pop()
    return {"version": version, "cipher": cipher_name, "bits": bits}


def default_client_loop() -> str:
    """uvloop when it imports, else asyncio."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"
