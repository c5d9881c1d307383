"""A served connection's task ends when its read fails or its peer closes,
and nothing is left pending for the loop's close to destroy.

asyncio logs "Task was destroyed but it is pending!" when a task that still
waits is garbage-collected, which happens when a loop is closed with a
handler's wake-up still queued.  Since CPython 3.12, ``asyncio.wait_for``
(rebuilt on ``asyncio.timeout``) finishes its caller a few loop turns sooner
than 3.11's did, so a program (or a test) that returns as soon as its client
has closed no longer leaves the server those turns to finish its handler:
the task that awaited a read, its Future already failed and its wake-up
queued, stays pending.  Stock ``tcp://`` and this package's comms behave the
same; what ends such a task is waiting for it.  These tests check both: the
handler of every kind of failed read ends, on both loops, and the cost
tests' own round-trip helper waits for its server before it returns.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
import struct

import pytest

from tornado_readinto import FramedStream, FramingError
from tornado_readinto.face.tcpserver import HandshakingTCPServer

from ..conftest import new_event_loop


class DestroyedTasks(logging.Handler):
    """Collects asyncio's "Task was destroyed but it is pending!" records."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "destroyed but it is pending" in message:
            self.messages.append(message)


@pytest.fixture
def destroyed_tasks():
    gc.collect()  # what earlier tests left is theirs
    handler = DestroyedTasks()
    logger = logging.getLogger("asyncio")
    logger.addHandler(handler)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)


def run_then_close(loop_name: str, coro) -> object:
    """Run ``coro`` on a fresh loop and close the loop at once, as a program
    that returns from ``run_until_complete`` does (no cancelling of what is
    left), then collect: a task left pending is destroyed and logged."""
    loop = new_event_loop(loop_name)
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()
        gc.collect()


def _abort(sock: socket.socket) -> None:
    """Close with a reset (SO_LINGER 0): the server's next receive fails."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


# The ways a waiting read ends badly: the peer closes mid-message, resets, or
# sends a header over the stream's limits.
ENDINGS = {
    "eof-mid-message": (lambda s: (s.sendall(struct.pack("<QQ", 1, 100) + b"x" * 10), s.close())),
    "reset": _abort,
    "bad-header": (lambda s: s.sendall(struct.pack("<QQ", 1, 1 << 60))),
}


async def _serve_one(ending: str) -> list[str]:
    """One connection to a `HandshakingTCPServer` whose handler waits in
    ``read_frames`` while the client ends the connection as ``ending`` says;
    returns what the handler's read raised, once the handler has ended."""
    raised: list[str] = []
    ended = asyncio.Event()

    async def handler(stream, address):
        try:
            await FramedStream(stream, max_frame_nbytes=1 << 20).read_frames()
        except (OSError, FramingError) as exc:
            raised.append(type(exc).__name__)
        finally:
            stream.close()
            ended.set()

    server = HandshakingTCPServer(handler)
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    listening.setblocking(False)
    server.add_sockets([listening])
    try:
        loop = asyncio.get_running_loop()
        client = socket.socket()
        client.setblocking(False)
        await loop.sock_connect(client, listening.getsockname())
        client.setblocking(True)
        ENDINGS[ending](client)
        if client.fileno() >= 0:
            client.close()
        await ended.wait()
        return raised
    finally:
        server.stop()


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_served_connection_whose_read_fails_leaves_no_pending_task(loop_name, ending, destroyed_tasks):
    raised = run_then_close(loop_name, _serve_one(ending))
    expected = {"bad-header": "FrameTooLargeError", "eof-mid-message": "IncompleteReadError"}
    if ending in expected:
        assert raised == [expected[ending]]
    else:  # a reset: which error the read sees depends on when the RST lands
        assert len(raised) == 1, raised
    assert destroyed_tasks == []


@pytest.mark.parametrize("scheme", ["tcp", "readinto"])
def test_cost_tests_round_trips_wait_for_their_server(loop_name, scheme, destroyed_tasks):
    """The helper behind the loop-turn counts returns only once its server's
    handler has ended (it closes the loop right after, on every Python)."""
    import tornado_readinto.dask.backend  # noqa: F401  (registers readinto://)

    from .test_costs import _dask_rpcs

    run_then_close(loop_name, _dask_rpcs(scheme, 10))
    assert destroyed_tasks == []
