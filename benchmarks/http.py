"""HTTP A/B benchmark: stock Tornado against ``tornado_readinto.install()``.

Run ``python -m benchmarks.http`` (``--help`` for options).  For each
implementation the same `tornado.web.Application` is served by a server in its
own process (``install()`` is called there first for ``readinto``); a load
generator in another process drives it, and the server's CPU time (utime +
stime from ``/proc/<pid>/stat``) over each case is divided by the requests
served.

Cases:

* ``hello``: hello-world GET, keep-alive, ``--connections`` (32) connections,
  for ``--duration`` seconds;
* ``post``: one ``--body-mib`` (256) MiB POST body (``self.request.body``),
  ``--repeat`` times;
* ``put``: the same size as a streaming PUT (``@stream_request_body``);
* ``download``: a ``--download-mib`` (8) MiB GET response, keep-alive,
  4 connections, for ``--duration`` seconds.

The load generator for ``hello`` and ``download`` is ``wrk`` when it is on
PATH (Debian package ``wrk``), otherwise a small asyncio keep-alive client
(``--load-generator builtin`` forces it).  Bodies are uploaded from one
blocking socket with ``sendall`` of a buffer made before the timed window, so
the client copies nothing in user space and the server is what is measured.
The table gives requests/s, MiB/s, server CPU per request, and the ratio of
``readinto`` to ``stock``.

The keep-alive cases (``hello``, ``download``) serve both implementations at
once, each from its own process, and drive them in turns of one second
(`KEEPALIVE_BURST_S`; the order reversed every turn) until each had
``--duration`` seconds: on a shared machine whose speed drifts over seconds,
turns this short put both implementations under the same conditions, where
back-to-back runs of several seconds each mostly measured the drift.  The
upload cases run one server after the other.

``--rounds N`` runs every case N times, in fresh server processes, with the
order of the implementations alternating (stock first, then readinto first,
...); the table then gives medians with (min-max), and the ratios to stock
are taken within each round (side by side) before their median and spread.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass

MiB = 1024 * 1024
IMPLS = ("stock", "readinto")
CASES = ("hello", "post", "put", "download")
KEEPALIVE_CASES = ("hello", "download")
DOWNLOAD_CONNECTIONS = 4


# -- server ------------------------------------------------------------------------


def serve(impl: str, body_nbytes: int, download_nbytes: int, loop_name: str = "asyncio") -> None:
    """Serve the benchmark application on 127.0.0.1 (ephemeral port, printed
    as one line on stdout) until stdin closes, on asyncio's default event
    loop or on uvloop (``loop_name``)."""
    from tornado import web
    from tornado.httpserver import HTTPServer
    from tornado.ioloop import IOLoop
    from tornado.netutil import bind_sockets

    if impl == "readinto":
        import tornado_readinto

        tornado_readinto.install()
    elif impl != "stock":
        raise SystemExit(f"unknown impl {impl!r}")

    payload = b"x" * download_nbytes

    class Hello(web.RequestHandler):
        def get(self) -> None:
            self.write("Hello, world")

    class Post(web.RequestHandler):
        def post(self) -> None:
            self.write(str(len(self.request.body)))

    @web.stream_request_body
    class Put(web.RequestHandler):
        def prepare(self) -> None:
            self.received = 0

        def data_received(self, chunk: bytes) -> None:
            self.received += len(chunk)

        def put(self) -> None:
            self.write(str(self.received))

    class Download(web.RequestHandler):
        def get(self) -> None:
            self.write(payload)

    app = web.Application([("/", Hello), ("/post", Post), ("/put", Put), ("/download", Download)])

    async def main() -> None:
        limit = body_nbytes + MiB
        sockets = bind_sockets(0, address="127.0.0.1")
        # HTTPServer(...) is what install() configures (Application.listen too)
        server = HTTPServer(app, max_body_size=limit, max_buffer_size=limit)
        server.add_sockets(sockets)
        port = sockets[0].getsockname()[1]
        loop = asyncio.get_running_loop()
        print(port, type(server).__name__, type(loop).__module__.partition(".")[0], flush=True)
        await loop.run_in_executor(None, sys.stdin.read)  # until the parent closes it
        server.stop()

    if loop_name == "uvloop":
        import uvloop

        event_loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    elif loop_name == "asyncio":
        event_loop = asyncio.new_event_loop()
    else:
        raise SystemExit(f"unknown event loop {loop_name!r}")
    asyncio.set_event_loop(event_loop)
    IOLoop.current().run_sync(main)


def cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid`` (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is the state (field 3); utime and stime are fields 14 and 15
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- built-in load generator ---------------------------------------------------------


def _content_length(head: bytes) -> int:
    """The Content-Length of a 200 response head.

    :raises RuntimeError: another status, or no Content-Length.
    """
    match = re.search(rb"(?i)\r?\ncontent-length:\s*(\d+)", head)
    if not head.startswith(b"HTTP/1.1 200") or match is None:
        raise RuntimeError(f"unexpected response: {head[:200]!r}")
    return int(match.group(1))


async def _read_response(reader: asyncio.StreamReader) -> int:
    nbytes = _content_length(await reader.readuntil(b"\r\n\r\n"))
    await reader.readexactly(nbytes)
    return nbytes


async def _keepalive(port: int, path: str, connections: int, duration: float) -> dict[str, float]:
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
    deadline = time.perf_counter() + duration
    counts = [0] * connections
    nbytes = [0] * connections

    async def one(i: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
        try:
            while time.perf_counter() < deadline:
                writer.write(request)
                nbytes[i] += await _read_response(reader)
                counts[i] += 1
        finally:
            writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(connections)))
    return {"requests": sum(counts), "seconds": time.perf_counter() - start, "nbytes": sum(nbytes)}


#: Bodies are sent in pieces of this size, all from one buffer that stays in
#: the CPU cache, so the client's own copy into the kernel is as cheap as it
#: can be and the server is what is measured.
UPLOAD_PIECE_NBYTES = MiB


def _upload(port: int, method: str, path: str, body_nbytes: int, repeat: int) -> dict[str, float]:
    """Send ``repeat`` bodies over one keep-alive connection, each answered
    before the next, with blocking ``sendall`` calls of one
    `UPLOAD_PIECE_NBYTES` buffer (asyncio's transport would first copy each
    body into a buffer of its own: the client would be the bottleneck)."""
    piece = memoryview(bytearray(min(body_nbytes, UPLOAD_PIECE_NBYTES)))
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {body_nbytes}\r\n\r\n".encode()
    with socket.create_connection(("127.0.0.1", port)) as sock, sock.makefile("rb") as reader:
        start = time.perf_counter()
        for _ in range(repeat):
            sock.sendall(head)
            for offset in range(0, body_nbytes, len(piece)):
                sock.sendall(piece[: body_nbytes - offset])
            lines = []
            while True:
                line = reader.readline()
                if line in (b"\r\n", b"\n", b""):
                    break
                lines.append(line)
            reader.read(_content_length(b"".join(lines)))
        seconds = time.perf_counter() - start
    return {"requests": repeat, "seconds": seconds, "nbytes": repeat * body_nbytes}


def load(case: str, port: int, args: argparse.Namespace) -> dict[str, float]:
    """Run one case's load (in this process) and return its counts."""
    if case == "hello":
        coro = _keepalive(port, "/", args.connections, args.duration)
    elif case == "download":
        coro = _keepalive(port, "/download", DOWNLOAD_CONNECTIONS, args.duration)
    elif case == "post":
        return _upload(port, "POST", "/post", args.body_mib * MiB, args.repeat)
    elif case == "put":
        return _upload(port, "PUT", "/put", args.body_mib * MiB, args.repeat)
    else:
        raise SystemExit(f"unknown case {case!r}")
    return asyncio.run(coro)


def run_wrk(port: int, path: str, connections: int, duration: float, response_nbytes: int = 0) -> dict[str, float]:
    """Drive GET ``path`` with ``wrk`` (keep-alive; one thread per core, at
    most one per connection); ``nbytes`` counts ``response_nbytes`` per
    request."""
    threads = min(connections, os.cpu_count() or 1)
    out = subprocess.run(
        ["wrk", f"-t{threads}", f"-c{connections}", f"-d{max(1, round(duration))}s", f"http://127.0.0.1:{port}{path}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    match = re.search(r"(\d+) requests in ([\d.]+)(m?s)", out)
    if match is None:
        raise RuntimeError(f"cannot parse wrk output:\n{out}")
    seconds = float(match.group(2)) / (1000 if match.group(3) == "ms" else 1)
    requests = int(match.group(1))
    return {"requests": requests, "seconds": seconds, "nbytes": requests * response_nbytes}


# -- driver ----------------------------------------------------------------------------


@dataclass
class Result:
    impl: str
    case: str
    generator: str
    requests: int
    seconds: float
    nbytes: int
    server_cpu_s: float
    round: int = 0

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    @property
    def mib_per_s(self) -> float:
        return self.nbytes / MiB / self.seconds if self.seconds else 0.0

    @property
    def cpu_us_per_request(self) -> float:
        return self.server_cpu_s / self.requests * 1e6 if self.requests else 0.0


#: Keep-alive cases alternate the implementations in bursts of this many
#: seconds (the servers of both stay up for the whole case), so that slow
#: and fast spells of a shared machine fall on both alike.
KEEPALIVE_BURST_S = 1.0


@contextlib.contextmanager
def _server(impl: str, args: argparse.Namespace) -> Iterator[tuple[subprocess.Popen, int]]:
    """A benchmark server for ``impl`` in its own process: (process, port)."""
    me = [sys.executable, "-m", "benchmarks.http"]
    sizes = ["--body-mib", str(args.body_mib), "--download-mib", str(args.download_mib), "--loop", args.loop]
    server = subprocess.Popen([*me, "--serve", impl, *sizes], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdin is not None
        port_s, server_class, loop_module = server.stdout.readline().split()
        expected = "ReadIntoHTTPServer" if impl == "readinto" else "HTTPServer"
        if (server_class, loop_module) != (expected, args.loop):
            raise RuntimeError(
                f"{impl} server runs {server_class} on {loop_module}, expected {expected} on {args.loop}"
            )
        yield server, int(port_s)
    finally:
        if server.stdin is not None:
            server.stdin.close()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _uses_wrk(case: str, args: argparse.Namespace) -> bool:
    return case in ("hello", "download") and args.load_generator != "builtin" and shutil.which("wrk") is not None


def _drive(case: str, port: int, args: argparse.Namespace, duration: float) -> dict[str, float]:
    """Run ``case``'s load against ``port`` for ``duration`` seconds (keep-alive
    cases) from another process; return its counts."""
    if _uses_wrk(case, args) and case == "hello":
        return run_wrk(port, "/", args.connections, duration)
    if _uses_wrk(case, args):
        return run_wrk(port, "/download", DOWNLOAD_CONNECTIONS, duration, args.download_mib * MiB)
    generator_args = [
        *("--body-mib", str(args.body_mib), "--download-mib", str(args.download_mib)),
        *("--connections", str(args.connections), "--duration", str(duration), "--repeat", str(args.repeat)),
    ]
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.http", "--load", case, "--port", str(port), *generator_args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)


def run_case(impl: str, case: str, args: argparse.Namespace, round_index: int = 0) -> Result:
    """Start a server for ``impl``, drive ``case`` against it from another
    process and measure the server's CPU time over the run."""
    with _server(impl, args) as (server, port):
        cpu0 = cpu_seconds(server.pid)
        counts = _drive(case, port, args, args.duration)
        cpu = cpu_seconds(server.pid) - cpu0
    return _result(impl, case, args, round_index, counts, cpu)


def run_keepalive_case(impls: list[str], case: str, args: argparse.Namespace, round_index: int = 0) -> list[Result]:
    """Serve every implementation at once and drive ``case`` against them in
    turns of `KEEPALIVE_BURST_S` (the order reversed every turn) until each
    had ``--duration`` seconds; one `Result` per implementation, the sums
    of its bursts."""
    nbursts = max(1, round(args.duration / KEEPALIVE_BURST_S))
    burst_s = args.duration / nbursts
    totals = {impl: {"requests": 0.0, "seconds": 0.0, "nbytes": 0.0, "cpu": 0.0} for impl in impls}
    with contextlib.ExitStack() as stack:
        servers = {impl: stack.enter_context(_server(impl, args)) for impl in impls}
        for burst in range(nbursts):
            for impl in impls if burst % 2 == 0 else impls[::-1]:
                server, port = servers[impl]
                cpu0 = cpu_seconds(server.pid)
                counts = _drive(case, port, args, burst_s)
                total = totals[impl]
                total["cpu"] += cpu_seconds(server.pid) - cpu0
                for key in ("requests", "seconds", "nbytes"):
                    total[key] += counts[key]
    return [_result(impl, case, args, round_index, total, total["cpu"]) for impl, total in totals.items()]


def _result(
    impl: str, case: str, args: argparse.Namespace, round_index: int, counts: dict[str, float], cpu: float
) -> Result:
    return Result(
        impl,
        case,
        "wrk" if _uses_wrk(case, args) else "builtin",
        int(counts["requests"]),
        float(counts["seconds"]),
        int(counts["nbytes"]),
        cpu,
        round_index,
    )


def _median_spread(values: list[float], fmt: str) -> str:
    """``median`` alone for one value, else ``median (min-max)``."""
    median = format(statistics.median(values), fmt)
    if len(values) < 2:
        return median
    return f"{median} ({min(values):{fmt}}-{max(values):{fmt}})"


def round_ratios(results: list[Result], case: str, impl: str) -> tuple[list[float], list[float]]:
    """Per round: ``impl``'s requests/s over stock's, and stock's CPU per
    request over ``impl``'s, against the stock result of the same case and
    round."""
    stock = {r.round: r for r in results if r.impl == "stock" and r.case == case}
    speed, cpu = [], []
    for r in results:
        base = stock.get(r.round)
        if r.impl != impl or r.case != case or base is None:
            continue
        if base.requests_per_s and r.requests_per_s:
            speed.append(r.requests_per_s / base.requests_per_s)
        if r.cpu_us_per_request:
            cpu.append(base.cpu_us_per_request / r.cpu_us_per_request)
    return speed, cpu


def format_table(results: list[Result]) -> str:
    """A plain-text table, one row per case and implementation: medians
    over the rounds, with (min-max) when there are several.  ``x stock`` is
    the ratio of requests/s to stock's in the same round (``cpu x``: stock's
    CPU per request over this one's), summarised the same way."""
    header = ["case", "impl", "gen", "req/s", "MiB/s", "cpu us/req", "x stock", "cpu x"]
    rows: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        rows.setdefault((r.case, r.impl), []).append(r)
    table = [header]
    for (case, impl), mine in rows.items():
        speed, cpu = round_ratios(results, case, impl)
        table.append(
            [
                case,
                impl,
                mine[0].generator,
                _median_spread([r.requests_per_s for r in mine], ".1f"),
                f"{statistics.median(r.mib_per_s for r in mine):.1f}",
                f"{statistics.median(r.cpu_us_per_request for r in mine):.1f}",
                _median_spread(speed, ".2f") if speed else "nan",
                _median_spread(cpu, ".2f") if cpu else "nan",
            ]
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = [
        " ".join(cell.ljust(w) if i < 3 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
        for row in table
    ]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.http", description=__doc__.split("\n\n")[0])
    parser.add_argument("--impl", default=",".join(IMPLS), help="comma-separated: stock,readinto")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ",".join(CASES))
    parser.add_argument(
        "--duration",
        type=float,
        default=5.0,
        help="seconds per keep-alive case and implementation, driven in turns of 1 s (default: 5)",
    )
    parser.add_argument("--connections", type=int, default=32, help="connections of the hello case")
    parser.add_argument("--body-mib", type=int, default=256, help="MiB per POST/PUT body")
    parser.add_argument("--download-mib", type=int, default=8, help="MiB per download response")
    parser.add_argument("--repeat", type=int, default=3, help="bodies per POST/PUT case")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run every case this many times, alternating which implementation goes first; "
        "medians and (min-max) in the table, ratios taken within each round (default: 1)",
    )
    parser.add_argument(
        "--loop", choices=("asyncio", "uvloop"), default="asyncio", help="the servers' event loop (default: asyncio)"
    )
    parser.add_argument("--load-generator", choices=("auto", "builtin"), default="auto")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--serve", metavar="IMPL", help=argparse.SUPPRESS)
    parser.add_argument("--load", metavar="CASE", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.serve:
        serve(args.serve, args.body_mib * MiB, args.download_mib * MiB, args.loop)
        return
    if args.load:
        print(json.dumps(load(args.load, args.port, args)))
        return

    results = []
    impls = args.impl.split(",")
    for round_index in range(args.rounds):
        for case in args.cases.split(","):
            order = impls if round_index % 2 == 0 else impls[::-1]
            if case in KEEPALIVE_CASES:
                done = run_keepalive_case(order, case, args, round_index)
            else:
                done = [run_case(impl, case, args, round_index) for impl in order]
            for result in done:
                print(
                    f"round {round_index + 1}/{args.rounds} {case} {result.impl}: {result.requests_per_s:.1f} req/s, "
                    f"{result.cpu_us_per_request:.1f} us CPU/req",
                    file=sys.stderr,
                    flush=True,
                )
            results.extend(done)
    print(format_table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in results], f, indent=2)


if __name__ == "__main__":
    main()
