"""Reliability: hostile peers, killed peers, floods and a soak, against a
FramedStream echo server.  Peers are separate processes (tests/_peers.py) on
127.0.0.1; every wait is bounded.

``TORNADO_READINTO_SOAK_SECONDS`` (``tox -e soak`` sets 120) lengthens the
soak; the default run soaks for a few seconds with the same checks.
"""

import asyncio
import gc
import logging
import os
import resource
import struct
import sys
import time
import tracemalloc

import pytest
from tornado.iostream import StreamClosedError
from tornado.netutil import add_accept_handler, bind_sockets

from tornado_readinto import (
    FramedStream,
    FrameTooLargeError,
    IncompleteReadError,
    ReadIntoIOStream,
    ReadTimeoutError,
)
from tornado_readinto.diagnostics.testing import stream_pair

from ..conftest import run, until

PEERS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_peers.py")
SOAK_SECONDS = float(os.environ.get("TORNADO_READINTO_SOAK_SECONDS", "6"))

LIMITS = dict(max_frames=1024, max_frame_nbytes=16 << 20, max_message_nbytes=64 << 20, read_idle_timeout=0.5)


class EchoServer:
    """An in-process FramedStream echo server that records how each
    connection ended."""

    def __init__(self, **framed_kwargs):
        self.framed_kwargs = framed_kwargs
        self.listener = bind_sockets(0, "127.0.0.1", backlog=1024)[0]
        self.port = self.listener.getsockname()[1]
        self.outcomes = []  # one exception per finished connection
        self._ended = asyncio.Event()  # set each time a connection ends
        self.messages = 0
        self.streams = []
        self.tasks = []
        self._remove = add_accept_handler(self.listener, self._accept)

    def _accept(self, conn, address):
        stream = ReadIntoIOStream(conn)
        stream.set_nodelay(True)
        self.streams.append(stream)
        self.tasks.append(asyncio.ensure_future(self._serve(FramedStream(stream, **self.framed_kwargs))))

    async def _serve(self, fs):
        try:
            while True:
                frames = await fs.read_frames()
                await fs.write_frames(frames)
                self.messages += 1
        except Exception as e:  # every way a connection ends is recorded
            self.outcomes.append(e)
            self._ended.set()
        finally:
            fs.close()

    async def wait_outcomes(self, n):
        """Wait until ``n`` connections have ended; return their outcomes."""
        while len(self.outcomes) < n:
            self._ended.clear()
            await self._ended.wait()
        return self.outcomes

    def stop(self):
        self._remove()
        self.listener.close()
        for stream in self.streams:
            stream.close()


async def good_client(port, stop, checked):
    """A well-behaved client that keeps echoing verified messages until
    ``stop`` is set."""
    import socket

    sock = socket.create_connection(("127.0.0.1", port))
    stream = ReadIntoIOStream(sock)
    fs = FramedStream(stream)
    try:
        i = 0
        while not stop.is_set():
            frames = [struct.pack("<Q", i), bytes([i % 256]) * (i % 5000)]
            await fs.write_frames(frames)
            echo = await fs.read_frames()
            assert [bytes(f) for f in echo] == frames, "a good connection's message was corrupted"
            checked.append(i)
            i += 1
            await asyncio.sleep(0.001)
    finally:
        stream.close()


async def run_peer(*args, timeout=30):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, PEERS, *map(str, args), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode == 0, err.decode()[-2000:]
    return out.decode()


HOSTILE = {
    "garbage": (FrameTooLargeError, "max_frames"),
    "huge-length": (FrameTooLargeError, "max_frame_nbytes"),
    "huge-count": (FrameTooLargeError, "max_frames"),
    "slowloris": (ReadTimeoutError, "no data for 0.5 s"),
    "half-close": (IncompleteReadError, "after 50016 of 100016 bytes"),
    "half-rst": (StreamClosedError, ""),
    "byte-at-a-time": (StreamClosedError, ""),  # served, then a clean close
}


@pytest.mark.parametrize("scenario", sorted(HOSTILE))
def test_reliability_hostile_peer_gets_clear_error_others_unaffected(scenario):
    async def main():
        server = EchoServer(**LIMITS)
        stop, checked = asyncio.Event(), []
        good = asyncio.ensure_future(good_client(server.port, stop, checked))
        tracemalloc.start()
        try:
            await until(lambda: len(checked) >= 5)  # the good connection is served before
            out = await run_peer(scenario, server.port)
            outcomes = await server.wait_outcomes(1)
            _, peak = tracemalloc.get_traced_memory()
            served = len(checked)
            await until(lambda: len(checked) >= served + 5)  # and after the bad one ended
            stop.set()
            await asyncio.wait_for(good, 5)
        finally:
            tracemalloc.stop()
            stop.set()
            server.stop()
        kind, text = HOSTILE[scenario]
        (outcome,) = outcomes[:1]
        assert isinstance(outcome, kind), repr(outcome)
        assert text in str(outcome)
        if scenario == "half-rst":
            assert isinstance(outcome, IncompleteReadError) or isinstance(outcome.real_error, ConnectionResetError)
        if scenario == "byte-at-a-time":
            assert "ECHO-OK" in out and not isinstance(outcome, IncompleteReadError)
        # the bad connection allocated nothing near its limits, and the good
        # one was served correctly before and after it (each echo is checked)
        assert peak < 8 << 20, peak

    run(main(), timeout=60)


def _open_fds():
    return len(os.listdir("/proc/self/fd"))


def test_reliability_killed_peers_fail_pending_reads_and_writes():
    """50 times: a peer sends half a frame and is SIGKILLed while the server
    has a read and a large write pending; both fail (the read with the byte
    count it got), and no fd, task or future is left behind."""
    destroyed = []

    class Catch(logging.Handler):
        def emit(self, record):
            if "destroyed but it is pending" in record.getMessage():
                destroyed.append(record.getMessage())

    handler = Catch()
    logging.getLogger("asyncio").addHandler(handler)

    async def main():
        server = EchoServer()
        fds_before = _open_fds()
        tasks_before = asyncio.all_tasks()
        try:
            for i in range(50):
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, PEERS, "stall-mid-frame", str(server.port), stdout=asyncio.subprocess.PIPE
                )
                line = await asyncio.wait_for(proc.stdout.readline(), 20)
                assert line.strip() == b"READY"
                await until(lambda i=i: len(server.streams) > i)
                stream = server.streams[i]
                # the server has read the half frame
                await until(lambda stream=stream: stream.nbytes_received == 16 + 10_000)
                pending_write = stream.writelines([bytearray(16 << 20)])  # the peer never reads
                assert not pending_write.done()
                proc.kill()
                await proc.wait()
                with pytest.raises(StreamClosedError):
                    await pending_write
                outcomes = await server.wait_outcomes(i + 1)
                assert isinstance(outcomes[i], IncompleteReadError), repr(outcomes[i])
                assert outcomes[i].received == 16 + 10_000
            await asyncio.gather(*server.tasks)
        finally:
            server.stop()
        gc.collect()
        await asyncio.sleep(0.05)
        assert _open_fds() <= fds_before + 1  # +1: the listener closed at stop is not counted before
        pending = [t for t in asyncio.all_tasks() - tasks_before if not t.done()]
        assert pending == []
        assert all(stream.closed() and not stream._write_futures for stream in server.streams)

    try:
        run(main(), timeout=120)
        gc.collect()
        assert destroyed == []
    finally:
        logging.getLogger("asyncio").removeHandler(handler)


def test_reliability_flood_500_connections_no_loss():
    """500 concurrent connections (another process) each send 200 messages of
    random sizes and frame counts, every echo checked by hash."""

    async def main():
        server = EchoServer()
        try:
            out = await run_peer("flood", server.port, 500, 200, 1, timeout=100)
        finally:
            server.stop()
        assert out.split()[:2] == ["OK", "100000"], out
        assert server.messages == 100_000

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2048:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    run(main(), timeout=110)


def _rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_reliability_soak_rss_and_fds_stay_flat():
    """Rounds of 50-connection floods for SOAK_SECONDS: RSS and the fd count
    stay flat (the last rounds use no more than the first ones plus slack)."""

    async def main():
        server = EchoServer()
        rss, fds = [], []
        deadline = time.monotonic() + SOAK_SECONDS
        seed = 0
        try:
            while time.monotonic() < deadline or seed < 4:
                seed += 1
                out = await run_peer("flood", server.port, 50, 40, seed, timeout=60)
                assert out.startswith("OK 2000 ")
                gc.collect()
                rss.append(_rss_kib())
                fds.append(_open_fds())
        finally:
            server.stop()
        quarter = max(1, len(rss) // 4)
        assert max(rss[-quarter:]) <= max(rss[:quarter]) * 1.10 + 8 * 1024, rss
        assert max(fds[-quarter:]) <= max(fds[:quarter]), fds

    run(main(), timeout=SOAK_SECONDS + 120)


def test_reliability_cancelled_framed_read_leaves_stream_closed():
    """asyncio.wait_for on read_frames: the timeout closes the stream rather
    than leaving it out of step."""

    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        fs = FramedStream(server)
        try:
            await client.write(struct.pack("<QQ", 1, 100) + b"x" * 10)
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(fs.read_frames(), 0.05)
            assert server.closed()
            with pytest.raises(StreamClosedError):
                await fs.read_frames()
        finally:
            server.close()
            client.close()

    run(main())
