"""The two processes of an HTTP case (``benchmarks.http`` starts them through
``python -m benchmarks.impls http-server|http-load``).

`serve`: the benchmark `tornado.web.Application` on 127.0.0.1, stock or
after ``tornado_readinto.install()``; prints one JSON line (port, server
class, event loop) and serves until it is killed.

`load`: drive one case against a port and return its counts; ``hello`` and
``download`` from an asyncio keep-alive client, ``post`` and ``put`` from one
blocking socket.  `run_wrk` is the other load generator of the keep-alive
cases (run by the orchestrator itself).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import time

from ._async import run_loop

MiB = 1 << 20
CASES = ("hello", "post", "put", "download")
KEEPALIVE_CASES = ("hello", "download")
DOWNLOAD_CONNECTIONS = 4

#: Bodies are sent in pieces of this size, all from one buffer that stays in
#: the CPU cache, so the client's own copy into the kernel is as cheap as it
#: can be and the server is what is measured.
UPLOAD_PIECE_NBYTES = MiB


# -- server ------------------------------------------------------------------------


def serve(impl: str, body_nbytes: int, download_nbytes: int, loop_name: str, timeout_s: float) -> None:
    """Serve the benchmark application on 127.0.0.1 (ephemeral port, printed
    as JSON ``{"port", "server", "loop"}``) on asyncio's default event loop
    or on uvloop (``loop_name``) until killed (or ``timeout_s``)."""
    from tornado import web
    from tornado.httpserver import HTTPServer
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
        loop = asyncio.get_running_loop()
        port = sockets[0].getsockname()[1]
        started = {"port": port, "server": type(server).__name__, "loop": type(loop).__module__.partition(".")[0]}
        print(json.dumps(started), flush=True)
        await asyncio.Event().wait()  # until killed

    run_loop(loop_name, main, timeout_s)


# -- built-in load generator ---------------------------------------------------------


def content_length(head: bytes) -> int:
    """The Content-Length of a 200 response head.

    :raises RuntimeError: another status, or no Content-Length.
    """
    match = re.search(rb"(?i)\r?\ncontent-length:\s*(\d+)", head)
    if not head.startswith(b"HTTP/1.1 200") or match is None:
        raise RuntimeError(f"unexpected response: {head[:200]!r}")
    return int(match.group(1))


async def _read_response(reader: asyncio.StreamReader) -> int:
    nbytes = content_length(await reader.readuntil(b"\r\n\r\n"))
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
            reader.read(content_length(b"".join(lines)))
        seconds = time.perf_counter() - start
    return {"requests": repeat, "seconds": seconds, "nbytes": repeat * body_nbytes}


def load(case: str, port: int, *, connections: int, duration: float, body_nbytes: int, repeat: int) -> dict[str, float]:
    """Run one case's load (in this process) and return its counts
    (``requests``, ``seconds``, ``nbytes``)."""
    if case == "hello":
        return asyncio.run(_keepalive(port, "/", connections, duration))
    if case == "download":
        return asyncio.run(_keepalive(port, "/download", DOWNLOAD_CONNECTIONS, duration))
    if case == "post":
        return _upload(port, "POST", "/post", body_nbytes, repeat)
    if case == "put":
        return _upload(port, "PUT", "/put", body_nbytes, repeat)
    raise ValueError(f"unknown case {case!r}")


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
