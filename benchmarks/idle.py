"""Memory per idle connection: what a server pays for connections that sit idle.

    python -m benchmarks idle                          # 10,000 connections per kind
    python -m benchmarks idle --connections 1000 --kinds readinto,framed

For every kind a fresh server process listens on 127.0.0.1; this process
(the client) opens ``--connections`` connections one after another, and on
each sends one framed message (a 16-byte header as `FramedStream` writes it
and a 1 KiB payload), reads the echo back and checks it, then leaves the
connection open and silent.  The server's handler has then parked its next
read on every connection.  The server reports its RSS (``VmRSS``, after a
``gc.collect()``) before the first connection and once all are idle; the
table shows both and the difference per connection.  A count of bytes, not a
timing: it may run beside a timed benchmark.

Kinds: ``stock`` (Tornado's ``IOStream``, ``read_bytes(16)`` +
``read_bytes(n)``), ``asyncio`` (asyncio Streams, ``readexactly``),
``readinto`` (`ReadIntoIOStream`, ``read_bytes(16)`` + ``read_into``),
``framed`` (`FramedStream`, ``read_frames``/``write_frames``).

The table also counts the objects the cyclic garbage collector tracks
(``len(gc.get_objects())``) per idle connection: every full collection
visits each of them, so at thousands of connections they set what a full
collection costs.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: python benchmarks/idle.py
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks import harness as h  # noqa: E402

KINDS = ("stock", "asyncio", "readinto", "framed")
PAYLOAD_NBYTES = 1024
#: Connections that send a message and close before the first measurement:
#: what the first connection imports or allocates once is not counted.
WARMUP_CONNECTIONS = 32
ROOT = Path(__file__).resolve().parent.parent


def message(index: int) -> bytes:
    """The one message of connection ``index``: FramedStream's header for one
    1 KiB frame, then the frame."""
    payload = (index.to_bytes(8, "little") * (PAYLOAD_NBYTES // 8))[:PAYLOAD_NBYTES]
    return (1).to_bytes(8, "little") + PAYLOAD_NBYTES.to_bytes(8, "little") + payload


def raise_nofile() -> int:
    """The soft RLIMIT_NOFILE raised to the hard one; the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def rss_bytes() -> int:
    gc.collect()
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


# -- the server (a process of its own) ---------------------------------------------


async def serve(kind: str, loop_name: str) -> None:
    """Listen, print the port, then answer "rss" lines on stdin with the RSS
    and the count of connections that got their echo."""
    served = [0]
    if kind == "asyncio":

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    header = await reader.readexactly(16)
                    payload = await reader.readexactly(int.from_bytes(header[8:], "little"))
                    writer.write(header + payload)
                    served[0] += 1
                    del header, payload  # (the server keeps no message while idle)
            except (asyncio.IncompleteReadError, ConnectionError):
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
        port = server.sockets[0].getsockname()[1]
    else:
        from tornado.iostream import StreamClosedError
        from tornado.netutil import bind_sockets
        from tornado.tcpserver import TCPServer

        from tornado_readinto import FramedStream, ReadIntoTCPServer

        async def handle_stream(self: Any, stream: Any, address: Any) -> None:
            try:
                if kind == "framed":
                    framed = FramedStream(stream)
                    while True:
                        frames = await framed.read_frames()
                        await framed.write_frames(frames)
                        served[0] += 1
                        del frames
                while True:
                    header = await stream.read_bytes(16)
                    nbytes = int.from_bytes(header[8:], "little")
                    if kind == "stock":
                        payload = await stream.read_bytes(nbytes)
                    else:
                        payload = bytearray(nbytes)
                        await stream.read_into(payload)
                    await stream.write(header + payload)
                    served[0] += 1
                    del header, payload
            except StreamClosedError:
                pass

        base = TCPServer if kind == "stock" else ReadIntoTCPServer
        tcp = type("Server", (base,), {"handle_stream": handle_stream})()
        sockets = bind_sockets(0, "127.0.0.1", backlog=1024)
        tcp.add_sockets(sockets)
        port = sockets[0].getsockname()[1]
    print(port, flush=True)
    loop = asyncio.get_running_loop()
    lines = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(lines), sys.stdin)
    while True:
        line = await lines.readline()
        if not line:
            return
        print(rss_bytes(), served[0], len(gc.get_objects()), flush=True)


def server_main(kind: str, loop_name: str) -> None:
    raise_nofile()
    loop_factory = None
    if loop_name == "uvloop":
        import uvloop

        loop_factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:  # (no event loop policy: deprecated in 3.14)
        runner.run(serve(kind, loop_name))


# -- the client (this process) ---------------------------------------------------


def connect_and_echo(port: int, index: int) -> socket.socket:
    """One connection that sent its message and got it back whole; left open."""
    sock = socket.create_connection(("127.0.0.1", port))
    data = message(index)
    sock.sendall(data)
    got = bytearray()
    while len(got) < len(data):
        chunk = sock.recv(len(data) - len(got))
        if not chunk:
            raise RuntimeError(f"connection {index}: the server closed after {len(got)} bytes")
        got += chunk
    if got != data:
        raise RuntimeError(f"connection {index}: the echo differs")
    return sock


@dataclass
class Result(h.Repeated):
    kind: str
    connections: int
    loop: str
    repeats: list[dict[str, Any]] = field(default_factory=list)
    skipped: str | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def kib(value: float | None) -> str:
    return "-" if value is None else f"{value / 1024:,.1f}"


class IdleSuite(h.TableSuite[str, Result]):
    name = "idle"
    summary = "server RSS per idle connection (stock, asyncio, ReadIntoIOStream, FramedStream)"
    description = __doc__ or ""
    result_type = Result
    repeat_default = None
    rounds = False
    plots = False
    columns = (
        h.field("server", lambda r: r.kind),
        h.key_field("loop", lambda r: r.loop),
        h.key_field("connections", lambda r: f"{r.connections:,}"),
        h.metric("RSS before KiB", "rss_before", kib, spread=False),
        h.metric("RSS after KiB", "rss_after", kib, spread=False),
        h.metric("KiB per idle conn", "per_connection", kib, spread=False),
        h.metric("GC objects per conn", "gc_objects_per_connection", h.format_fixed(1), spread=False),
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--connections", type=int, default=10_000, help="idle connections per kind")
        parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of {', '.join(KINDS)}")
        parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio", help="the server's loop")
        parser.add_argument("--serve", choices=KINDS, help=argparse.SUPPRESS)

    def run(self, args: argparse.Namespace, argv: Sequence[str]) -> int:
        if args.serve:
            server_main(args.serve, args.loop)
            return 0
        return super().run(args, argv)

    def cases(self, args: argparse.Namespace) -> Sequence[str]:
        return [kind for kind in args.kinds.split(",") if kind]

    def label(self, result: Result) -> str:
        return f"{result.kind} x {result.connections}"

    def brief(self, result: Result) -> str:
        return f"{kib(result.median('per_connection'))} KiB per idle connection"

    def legend(self, nrepeats: int) -> str:
        return (
            "Server RSS (VmRSS after gc.collect()) before the connections and with all of them idle, each\n"
            f"having echoed one {PAYLOAD_NBYTES}-byte framed message; per connection: the difference / connections.\n"
            "GC objects per conn: objects the cyclic GC tracks (len(gc.get_objects())), the same difference."
        )

    def run_case(self, case: str, args: argparse.Namespace, round_index: int) -> Sequence[Result]:
        result = Result(kind=case, connections=args.connections, loop=args.loop)
        limit = raise_nofile()
        if args.connections + WARMUP_CONNECTIONS + 64 > limit:
            result.skipped = f"RLIMIT_NOFILE is {limit}"
            return [result]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        server = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.idle", "--serve", case, "--loop", args.loop],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env,
        )
        assert server.stdin is not None and server.stdout is not None
        socks: list[socket.socket] = []

        def ask() -> tuple[int, int, int]:
            server.stdin.write("rss\n")  # type: ignore[union-attr]
            server.stdin.flush()  # type: ignore[union-attr]
            rss, served, objects = server.stdout.readline().split()  # type: ignore[union-attr]
            return int(rss), int(served), int(objects)

        try:
            port = int(server.stdout.readline())
            for index in range(WARMUP_CONNECTIONS):
                connect_and_echo(port, index).close()
            before, _, objects_before = ask()
            for index in range(args.connections):
                socks.append(connect_and_echo(port, index))
            after, served, objects_after = ask()
            expected = WARMUP_CONNECTIONS + args.connections
            if served != expected:
                raise RuntimeError(f"the server echoed {served} messages, expected {expected}")
            result.repeats.append(
                {
                    "rss_before": before,
                    "rss_after": after,
                    "per_connection": (after - before) / args.connections,
                    "gc_objects_per_connection": (objects_after - objects_before) / args.connections,
                }
            )
        except Exception as e:  # noqa: BLE001 (the case fails, the run goes on)
            result.error = f"{type(e).__name__}: {e}"
        finally:
            for sock in socks:
                sock.close()
            server.stdin.close()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        return [result]


SUITE = IdleSuite()

if __name__ == "__main__":
    sys.exit(SUITE.main())
