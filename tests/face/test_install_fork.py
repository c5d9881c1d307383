"""``install()`` under ``tornado.process.fork_processes``: it configures
Tornado's classes in the process that calls it, so children forked after it
inherit it, and a child that calls it after the fork is switched too.

Each case runs a real pre-fork server in a fresh interpreter: the parent binds
127.0.0.1, forks two children with ``fork_processes``, and each child serves
one request over the shared sockets, saying which stream served it, then
stops listening and exits; the parent exits 0 when both have.  Without
``install()`` the children serve over stock streams."""

from __future__ import annotations

import http.client
import subprocess
import sys
import textwrap

import pytest

SERVER = textwrap.dedent(
    """
    import asyncio, os, sys

    from tornado import process, web
    from tornado.httpclient import AsyncHTTPClient
    from tornado.httpserver import HTTPServer
    from tornado.netutil import bind_sockets

    import tornado_readinto

    when = sys.argv[1]
    if when == "before-fork":
        tornado_readinto.install()
    sockets = bind_sockets(0, "127.0.0.1")
    print(sockets[0].getsockname()[1], os.getpid(), flush=True)
    task_id = process.fork_processes(2, max_restarts=0)  # the parent stays in here
    if when == "in-each-child":
        tornado_readinto.install()


    async def main():
        served = asyncio.Event()

        class Which(web.RequestHandler):
            def get(self):
                server.stop()  # the next connection goes to the other child
                client = AsyncHTTPClient(force_instance=True)
                client.close()
                stream = type(self.request.connection.stream).__name__
                self.write(f"{task_id} {os.getpid()} {os.getppid()} {stream} {type(client).__name__}")

            def on_finish(self):
                served.set()

        server = HTTPServer(web.Application([("/", Which)]))
        server.add_sockets(sockets)
        await served.wait()
        await asyncio.sleep(0.05)  # let the response leave


    asyncio.run(main())
    """
)


@pytest.mark.parametrize(
    "when, expected",
    [
        ("before-fork", ("ReadIntoIOStream", "ReadIntoAsyncHTTPClient")),
        ("in-each-child", ("ReadIntoIOStream", "ReadIntoAsyncHTTPClient")),
        ("never", ("IOStream", "SimpleAsyncHTTPClient")),  # the control: stock
    ],
)
def test_install_holds_in_children_of_fork_processes(when, expected):
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, when], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        first_line = proc.stdout.readline().split()
        assert first_line, proc.communicate(timeout=30)[1]
        port, parent_pid = int(first_line[0]), int(first_line[1])
        replies = []
        for _ in range(2):  # one request per child, one after the other
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", "/", headers={"Connection": "close"})
            response = conn.getresponse()
            assert response.status == 200
            replies.append(response.read().decode().split())
            conn.close()
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 0, stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert sorted(task_id for task_id, *_ in replies) == ["0", "1"]
    assert len({pid for _, pid, *_ in replies}) == 2 and parent_pid not in {int(r[1]) for r in replies}
    for _, _, ppid, stream, client in replies:
        assert int(ppid) == parent_pid  # forked by fork_processes
        assert (stream, client) == expected
