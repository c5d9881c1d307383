"""The two processes of one echo case (``benchmarks.echo`` starts them).

``python -m benchmarks.impls server --impl NAME --clients N --timeout S``
    listens on 127.0.0.1:0, prints ``{"port": P}``, echoes on N connections
    until they all close, prints ``{"messages": ..., "rss_bytes": ...,
    "cpu_s": ...}``.

``python -m benchmarks.impls client --impl NAME --port P --msize ... ``
    runs the case and prints one JSON line (see ``_common.summarize``).
    ``--server-pid PID``: also the server process's CPU time over each
    window (from /proc).

``--host ADDRESS`` (server, client and load-client): where the server
listens and the clients connect instead of 127.0.0.1, e.g. the server's
veth address when the two run in network namespaces (``--netpath``).

``--loop asyncio|uvloop`` (server and client) runs the implementation on that
event loop instead of its registry entry's.

``server --gil-thread`` also starts, beside the event loop, a thread that
holds the GIL (see ``_gilthread``).  The server's first line then also has
``loop_tid`` (the thread running the loop) and ``gil_thread_tid``; its last
line has both threads' CPU seconds (``loop_thread_cpu_s``,
``gil_thread_cpu_s``).

``server --tls-cert PEM`` serves over TLS with the certificate chain and
key in ``PEM`` (see ``_tls``); an implementation without a TLS server exits
with status 1.

``python -m benchmarks.impls load-client --port P --server-pid PID [--server-tid TID] --clients N ...``
    the client of ``benchmarks.load`` (see ``_loadclient``): N cheap
    ping-pong connections, CPU of both processes (and of the server's loop
    thread) per window; one JSON line.  ``--tls-ca PEM``: over TLS, trusting
    the CA in ``PEM``.

``python -m benchmarks.impls http-server --impl stock|readinto ...``
    the server of ``benchmarks.http`` (see ``_http``): prints ``{"port",
    "server", "loop"}`` and serves until killed.

``python -m benchmarks.impls http-load --case CASE --port P ...``
    the built-in load generator of ``benchmarks.http``: one JSON line of counts.

Exit status: 0 ok, 2 an echo failed verification, 1 any other error.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import traceback
from collections.abc import Sequence
from typing import Any

from benchmarks.harness.cpu import thread_cpu_s

from . import EVENT_LOOPS, IMPLS, _http, _tls, load
from ._async import HOST, run_loop
from ._common import CasePlan, VerificationError, process_stats, summarize
from ._gilthread import start_gil_thread
from ._loadclient import WIRES, LoadPlan, default_client_loop, run_load


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.impls")
    sub = parser.add_subparsers(dest="role", required=True)
    for role in ("server", "client"):
        p = sub.add_parser(role)
        p.add_argument("--impl", required=True, choices=sorted(IMPLS))
        p.add_argument("--clients", type=int, default=1)
        p.add_argument("--timeout", type=float, default=60.0, help="seconds before giving up")
        p.add_argument("--loop", choices=EVENT_LOOPS, help="event loop (default: the impl's)")
        p.add_argument("--host", default=HOST, help=f"the server's address (default: {HOST})")
    sub.choices["server"].add_argument(
        "--gil-thread", action="store_true", help="run a GIL-holding thread beside the event loop"
    )
    sub.choices["server"].add_argument("--tls-cert", metavar="PEM", help="serve over TLS: certificate chain and key")
    client = sub.choices["client"]
    client.add_argument("--port", type=int, required=True)
    client.add_argument("--msize", type=int, required=True)
    client.add_argument("--nframes", type=int, default=1)
    client.add_argument("--mode", choices=("pingpong", "pipelined"), default="pingpong")
    client.add_argument("--window", type=int, default=1)
    client.add_argument("--warmup", type=float, default=0.25)
    client.add_argument("--duration", type=float, default=1.0)
    client.add_argument("--repeat", type=int, default=1)
    client.add_argument("--server-pid", type=int, default=0, help="process whose CPU time to sample (0: none)")
    lc = sub.add_parser("load-client")
    lc.add_argument("--port", type=int, required=True)
    lc.add_argument("--server-pid", type=int, default=0, help="process whose CPU time to sample (0: none)")
    lc.add_argument("--server-tid", type=int, default=0, help="its thread whose CPU time to sample (0: none)")
    lc.add_argument("--syscalls-control", default="", metavar="CTL,ACK",
                    help="a windowed syscall counter's FIFOs: count from the first window to the last")  # fmt: skip
    lc.add_argument("--clients", type=int, default=64)
    lc.add_argument("--msize", type=int, default=1024)
    lc.add_argument("--wire", choices=WIRES, default="framed")
    lc.add_argument("--rate", type=float, default=0.0, help="messages/s per connection (0: as fast as possible)")
    lc.add_argument("--warmup", type=float, default=0.5)
    lc.add_argument("--duration", type=float, default=2.0)
    lc.add_argument("--repeat", type=int, default=3)
    lc.add_argument("--timeout", type=float, default=60.0, help="seconds before giving up")
    lc.add_argument("--loop", choices=EVENT_LOOPS, help="event loop (default: uvloop if it imports)")
    lc.add_argument("--tls-ca", metavar="PEM", help="connect over TLS, trusting the CA certificate in PEM")
    lc.add_argument("--host", default=HOST, help=f"the server's address (default: {HOST})")
    hs = sub.add_parser("http-server")
    hs.add_argument("--impl", required=True, choices=("stock", "readinto"))
    hs.add_argument("--loop", choices=EVENT_LOOPS, default="asyncio")
    hl = sub.add_parser("http-load")
    hl.add_argument("--case", required=True, choices=_http.CASES)
    hl.add_argument("--port", type=int, required=True)
    hl.add_argument("--connections", type=int, default=32, help="connections of the hello case")
    hl.add_argument("--duration", type=float, default=5.0, help="seconds of the keep-alive cases")
    hl.add_argument("--repeat", type=int, default=3, help="bodies per post/put case")
    for p in (hs, hl):
        p.add_argument("--body-mib", type=int, default=256, help="MiB per POST/PUT body")
        p.add_argument("--timeout", type=float, default=3600.0, help="seconds before giving up")
    hs.add_argument("--download-mib", type=int, default=8, help="MiB per download response")
    return parser


def _emit(obj: object) -> None:
    print(json.dumps(obj), flush=True)


def _load_client(args: argparse.Namespace) -> None:
    plan = LoadPlan(
        args.clients,
        args.msize,
        args.wire,
        args.rate,
        args.warmup,
        args.duration,
        args.repeat,
        args.server_pid,
        args.server_tid,
        args.syscalls_control,
    )
    loop = args.loop or default_client_loop()
    ssl_context = _tls.client_context(args.tls_ca) if args.tls_ca else None
    result = run_loop(loop, lambda: run_load(args.port, plan, ssl_context=ssl_context, host=args.host), args.timeout)
    _emit({**result, "loop": loop, **process_stats()})


def _compiled() -> bool | None:
    """Which build of tornado_readinto this process runs (None: not importable)."""
    try:
        import tornado_readinto
    except ImportError:
        return None
    return bool(tornado_readinto.COMPILED)


def _serve(impl: Any, listener: socket.socket, loop: str, args: argparse.Namespace) -> None:
    """The server process: the port line, the echo server, the stats line."""
    tls = {"ssl_context": _tls.server_context(args.tls_cert)} if args.tls_cert else {}
    gil_thread = start_gil_thread() if args.gil_thread else None
    threads = {
        "loop_tid": threading.get_native_id(),
        "gil_thread_tid": gil_thread.tid if gil_thread is not None else None,
    }
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    _emit({"port": listener.getsockname()[1], "compiled": _compiled(), "cpus": cpus, **threads})
    try:
        nmessages = impl.run_server(listener, loop, args.clients, args.timeout, **tls)
    finally:
        gil_cpu_s = gil_thread.stop() if gil_thread is not None else None
    stats = {"loop_thread_cpu_s": thread_cpu_s(), "gil_thread_cpu_s": gil_cpu_s}
    _emit({"messages": nmessages, "tls": bool(tls), **process_stats(), **threads, **stats})


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    name = f"{args.role} {args.impl}" if args.role in ("server", "client") else args.role
    try:
        if args.role == "load-client":
            _load_client(args)
            return 0
        if args.role == "http-server":
            _http.serve(args.impl, args.body_mib * _http.MiB, args.download_mib * _http.MiB, args.loop, args.timeout)
            return 0
        if args.role == "http-load":
            counts = _http.load(args.case, args.port, connections=args.connections, duration=args.duration,
                                body_nbytes=args.body_mib * _http.MiB, repeat=args.repeat)  # fmt: skip
            _emit(counts)
            return 0
        spec = IMPLS[args.impl]
        loop = args.loop or spec.loop
        if args.loop is not None and spec.loop not in EVENT_LOOPS:
            raise ValueError(f"--loop {args.loop}: {args.impl} runs on {spec.loop}, not on an event loop")
        impl = load(spec)
        if args.role == "server" and args.tls_cert and not getattr(impl, "supports_tls", False):
            raise ValueError(f"--tls-cert: {args.impl} has no TLS server")
        if args.role == "server":
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.bind((args.host, 0))
            listener.listen(args.clients + 8)
            _serve(impl, listener, loop, args)
        else:
            window = 1 if args.mode == "pingpong" else args.window
            plan = CasePlan(
                args.msize, args.nframes, args.mode, window, args.warmup, args.duration, args.repeat, args.clients,
                args.server_pid,
            )  # fmt: skip
            stats = impl.run_client(args.port, plan, loop, args.timeout, host=args.host)
            _emit({**summarize(stats), "window": window, **process_stats()})
    except VerificationError as exc:
        print(f"{name}: VERIFICATION FAILED: {exc}", file=sys.stderr)
        return 2
    except BaseException:
        print(f"{name}: failed", file=sys.stderr)
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
