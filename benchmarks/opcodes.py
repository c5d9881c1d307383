"""Python bytecodes executed per echoed message: a count, not a timing.

    python -m benchmarks.opcodes                                  # the default servers, both loops
    python -m benchmarks.opcodes --impl readinto,asyncio-streams --loop uvloop --by-function

One process runs an echo server of each implementation (the same
``serve_connection`` that ``benchmarks.echo`` and ``benchmarks.load`` run:
``echo_loop`` over ``from_socket``, except the ``BufferedProtocol`` anchors,
which echo from their callback) and a client on the same loop: ``--clients`` connections, each ping-ponging a
``--msize`` message with one frame.  After a warm-up, ``sys.settrace`` counts
every bytecode executed in Python code while ``--messages`` messages go round,
the client's included (a plain ``asyncio.Protocol``, the same for every
implementation).  C code (the event loop, socket calls, uvloop) executes no
bytecode and is not counted.

On a shared 2-core machine CPU time per message varies by 10% or more from
run to run; this count varies by well under 1% (only the busy-poll policy's
branches depend on timing), so it judges a hot-path change that CPU time
cannot resolve.  It is a proxy: bytecodes differ in cost, and it says nothing
about syscalls (see ``benchmarks.load`` for CPU time, ``strace -c`` for
syscalls).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import socket
import sys
from collections.abc import Sequence
from types import FrameType
from typing import Any

from benchmarks.harness.meta import run_meta
from benchmarks.harness.output import write_json
from benchmarks.impls import EVENT_LOOPS, IMPLS, availability, load
from benchmarks.impls._async import prepare_socket, run_loop
from benchmarks.impls._common import U64

#: Servers counted by default: ours, their heavier variant, and the anchors.
DEFAULT_IMPLS = ("readinto", "readinto-3reads", "framed-pool", "asyncio-streams", "asyncio-protocol")


class _Client(asyncio.Protocol):
    """Sends ``message``, waits for its whole echo, repeats ``count`` times."""

    def __init__(self, message: bytes, count: int, done: asyncio.Future[None]) -> None:
        self.message = message
        self.count = count
        self.done = done
        self.pending = 0
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def send(self, count: int, done: asyncio.Future[None]) -> None:
        self.count, self.done = count, done
        self.pending = len(self.message)
        self.transport.write(self.message)

    def data_received(self, data: bytes) -> None:
        self.pending -= len(data)
        if self.pending > 0:
            return
        self.count -= 1
        if self.count:
            self.pending = len(self.message)
            self.transport.write(self.message)
        elif not self.done.done():
            self.done.set_result(None)


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    prepare_socket(server)
    prepare_socket(client)
    return server, client


class _Counter:
    """A ``sys.settrace`` function counting opcode events, in all and by
    function and by source file, and the Python frames entered (``call``
    events: a function called, or a generator or coroutine resumed)."""

    def __init__(self) -> None:
        self.total = 0
        self.by_function: collections.Counter[str] = collections.Counter()
        self.by_file: collections.Counter[str] = collections.Counter()
        self.calls = 0
        self.calls_by_function: collections.Counter[str] = collections.Counter()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        code = frame.f_code
        key = f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_name}"
        self.calls += 1
        self.calls_by_function[key] += 1
        by_function = self.by_function
        by_file = self.by_file
        path = code.co_filename

        def opcode(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "opcode":
                self.total += 1
                by_function[key] += 1
                by_file[path] += 1
            return opcode

        return opcode


def count(
    impl: str, loop_name: str, *, clients: int = 8, messages: int = 2000, msize: int = 1024, trace: bool = True
) -> _Counter:
    """Run ``impl``'s echo server and the client on ``loop_name``; count the
    opcodes of ``messages`` round trips (after ``messages // 4`` of warm-up).
    With ``trace=False`` nothing is traced or counted: the same round trips
    run as they are (`benchmarks.instructions` counts their machine
    instructions)."""
    cls = load(IMPLS[impl])
    message = U64.pack(1) + U64.pack(msize) + bytes(range(256)) * (msize // 256) + bytes(msize % 256)
    per_client = max(1, messages // clients)
    counter = _Counter()

    async def main() -> _Counter:
        loop = asyncio.get_running_loop()
        pairs = [_tcp_pair() for _ in range(clients)]
        # What the load benchmark's server runs: echo_loop over from_socket,
        # or the class's own serve_connection (the BufferedProtocol anchors
        # echo from buffer_updated, with no coroutine per message).
        servers = [asyncio.ensure_future(cls.serve_connection(server)) for server, _ in pairs]
        await asyncio.sleep(0)  # (the protocols' transports are made)
        protocols = []
        for _, client_sock in pairs:
            _, protocol = await loop.create_connection(
                lambda: _Client(message, 0, loop.create_future()), sock=client_sock
            )
            protocols.append(protocol)

        async def round_trips(n: int) -> None:
            dones = [loop.create_future() for _ in protocols]
            for protocol, done in zip(protocols, dones):
                protocol.send(n, done)
            await asyncio.gather(*dones)

        previous = sys.gettrace()  # (a coverage tracer, say)
        # The warm-up runs traced by a counter thrown away: CPython 3.12
        # reports no opcode events under the first sys.settrace made inside
        # a running coroutine.
        sys.settrace(_Counter() if trace else previous)
        try:
            await round_trips(max(1, per_client // 4))
        finally:
            sys.settrace(previous)
        sys.settrace(counter if trace else previous)
        try:
            await round_trips(per_client)
        finally:
            sys.settrace(previous)
        for protocol in protocols:
            protocol.transport.close()
        await asyncio.wait_for(asyncio.gather(*servers, return_exceptions=True), 10)
        return counter

    return run_loop(loop_name, main, 120)


def add_workload_arguments(parser: argparse.ArgumentParser, messages_help: str) -> None:
    """The options of the one-process echo that `count` runs (``--loop``,
    ``--clients``, ``--messages``, ``--msize``): this module's and
    ``benchmarks.instructions``'."""
    parser.add_argument("--loop", default=",".join(EVENT_LOOPS), help="comma list: asyncio, uvloop")
    parser.add_argument("--clients", type=int, default=8, help="connections (default: 8)")
    parser.add_argument("--messages", type=int, default=2000, help=messages_help)
    parser.add_argument("--msize", type=int, default=1024, help="payload bytes per message (default: 1024)")


def parser() -> argparse.ArgumentParser:
    """The command line (``benchmarks.publish`` checks a command with it)."""
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.opcodes", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--impl", default=",".join(DEFAULT_IMPLS), help="comma list of echo implementations")
    add_workload_arguments(p, "round trips counted (default: 2000)")
    p.add_argument("--by-function", action="store_true", help="also list the functions that execute the most")
    p.add_argument(
        "--calls",
        action="store_true",
        help="also count the Python frames entered per message (calls, and coroutine or generator resumptions)",
    )
    p.add_argument(
        "--json",
        metavar="PATH",
        help="also write the counts as JSON, with the run's metadata: a result per implementation and loop "
        "(opcodes_per_msg, frames_per_msg with --calls; skipped: why it could not run)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    status = 0
    rows: list[dict[str, Any]] = []
    print(f"{'server':<22} {'loop':<8} {'opcodes/msg':>12}" + (f" {'frames/msg':>11}" if args.calls else ""))
    for loop_name in args.loop.split(","):
        for impl in args.impl.split(","):
            why = availability(IMPLS[impl], loop_name) if impl in IMPLS else f"unknown implementation {impl!r}"
            if why is not None:
                print(f"{impl:<22} {loop_name:<8} {'-':>12}  SKIPPED ({why})")
                status = status or (2 if impl not in IMPLS else 0)
                rows.append({"impl": impl, "loop": loop_name, "skipped": why})
                continue
            counted = count(impl, loop_name, clients=args.clients, messages=args.messages, msize=args.msize)
            n = max(1, args.messages // args.clients) * args.clients
            frames = f" {counted.calls / n:>11.1f}" if args.calls else ""
            print(f"{impl:<22} {loop_name:<8} {counted.total / n:>12.0f}{frames}")
            rows.append({"impl": impl, "loop": loop_name, "skipped": None, "messages": n,
                         "opcodes_per_msg": counted.total / n,
                         "frames_per_msg": counted.calls / n if args.calls else None})  # fmt: skip
            if args.by_function:
                for key, ops in counted.by_function.most_common(25):
                    calls = f" {counted.calls_by_function[key] / n:>11.2f}" if args.calls else ""
                    print(f"{'':<31} {ops / n:>12.1f}{calls}  {key}")
    if args.json:
        meta = {**run_meta("benchmarks.opcodes", argv), "clients": args.clients, "msize": args.msize}
        write_json(args.json, {"meta": meta, "results": rows})
    return status


if __name__ == "__main__":
    sys.exit(main())
