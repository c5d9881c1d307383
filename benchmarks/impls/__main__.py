"""The two processes of one echo case (``benchmarks.echo`` starts them).

``python -m benchmarks.impls server --impl NAME --clients N --timeout S``
    listens on 127.0.0.1:0, prints ``{"port": P}``, echoes on N connections
    until they all close, prints ``{"messages": ..., "rss_bytes": ...,
    "cpu_s": ...}``.

``python -m benchmarks.impls client --impl NAME --port P --msize ... ``
    runs the case and prints one JSON line (see ``_common.summarize``).

Exit status: 0 ok, 2 an echo failed verification, 1 any other error.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import traceback
from collections.abc import Sequence

from . import IMPLS, load
from ._common import CasePlan, VerificationError, process_stats, summarize


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.impls")
    sub = parser.add_subparsers(dest="role", required=True)
    for role in ("server", "client"):
        p = sub.add_parser(role)
        p.add_argument("--impl", required=True, choices=sorted(IMPLS))
        p.add_argument("--clients", type=int, default=1)
        p.add_argument("--timeout", type=float, default=60.0, help="seconds before giving up")
    client = sub.choices["client"]
    client.add_argument("--port", type=int, required=True)
    client.add_argument("--msize", type=int, required=True)
    client.add_argument("--nframes", type=int, default=1)
    client.add_argument("--mode", choices=("pingpong", "pipelined"), default="pingpong")
    client.add_argument("--window", type=int, default=1)
    client.add_argument("--warmup", type=float, default=0.25)
    client.add_argument("--duration", type=float, default=1.0)
    client.add_argument("--repeat", type=int, default=1)
    return parser


def _emit(obj: object) -> None:
    print(json.dumps(obj), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    spec = IMPLS[args.impl]
    try:
        impl = load(spec)
        if args.role == "server":
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.bind(("127.0.0.1", 0))
            listener.listen(args.clients + 8)
            _emit({"port": listener.getsockname()[1]})
            nmessages = impl.run_server(listener, spec.loop, args.clients, args.timeout)
            _emit({"messages": nmessages, **process_stats()})
        else:
            window = 1 if args.mode == "pingpong" else args.window
            plan = CasePlan(
                args.msize, args.nframes, args.mode, window, args.warmup, args.duration, args.repeat, args.clients
            )
            stats = impl.run_client(args.port, plan, spec.loop, args.timeout)
            _emit({**summarize(stats), "window": window, **process_stats()})
    except VerificationError as exc:
        print(f"{args.role} {args.impl}: VERIFICATION FAILED: {exc}", file=sys.stderr)
        return 2
    except BaseException:
        print(f"{args.role} {args.impl}: failed", file=sys.stderr)
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
