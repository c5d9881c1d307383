"""The receive low-water mark of a large wait (``SO_RCVLOWAT``, plain TCP on
Linux): a read that waits for `RCVLOWAT_MIN_MISSING` bytes or more of its own
buffer is woken by the loop only once `RCVLOWAT_NBYTES` have arrived, or
all that it still needs, and the mark is back at 1 before anything else
waits.  Real sockets on 127.0.0.1, on
asyncio's loop and on uvloop; the peer writes in small pieces and yields to
the loop between them (no sleep, no clock), so that without the mark every
piece would wake the stream."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from tornado.iostream import IOStream, StreamClosedError

from tornado_readinto import FramedStream, ReadIntoIOStream, SSLReadIntoIOStream
from tornado_readinto.core import _policy as _lowat  # (where LowWaterMark lives)
from tornado_readinto.core._policy import RCVLOWAT_MIN_MISSING, RCVLOWAT_NBYTES, lowat_applies
from tornado_readinto.diagnostics.testing import RecordingSocket, buffer_address, stream_pair
from tornado_readinto.wire.framing import NEED_DATA, message_header

from ..conftest import run, until

pytestmark = pytest.mark.skipif(not _lowat._LOWAT_PLATFORM, reason="SO_RCVLOWAT marks are used on Linux >= 4.18")

PIECE = 32 * 1024
NBYTES = 8 * 1024 * 1024  # a large read: 32 marks' worth


def _mark(sock) -> int:
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT)


async def _send_in_pieces(client: IOStream, data: bytes) -> None:
    view = memoryview(data)
    for start in range(0, len(view), PIECE):
        await client.write(view[start : start + PIECE])
        await asyncio.sleep(0)  # one loop turn: the server's READ event, if the kernel reports one


def _received_while_marked(recvs):
    """The receives made into a view of RCVLOWAT_MIN_MISSING bytes or more
    (the mark was set for the wait before each, if there was one), and the
    ones after."""
    big = [r for r in recvs if r.received and r.requested >= RCVLOWAT_MIN_MISSING]
    small = [r for r in recvs if r.received and r.requested < RCVLOWAT_MIN_MISSING]
    return big, small


def test_a_large_read_into_is_woken_only_at_the_mark_and_clears_it(loop_name):
    async def main():
        server, client = await stream_pair(ReadIntoIOStream, wrap_socket=RecordingSocket)
        sock = server.socket
        data = bytes(range(256)) * (NBYTES // 256)
        buf = bytearray(NBYTES)
        future = server.read_into(buf)
        assert _mark(sock) == RCVLOWAT_NBYTES  # set as the read parked
        await _send_in_pieces(client, data)
        assert await future == NBYTES
        assert buf == data
        assert _mark(sock) == 1  # cleared as the read completed
        start = buffer_address(buf)
        big, small = _received_while_marked([r for r in sock.recvs if start <= r.address < start + NBYTES])
        # each wake-up found a mark's worth, or all that the read still needed
        assert big and all(r.received >= min(r.requested, RCVLOWAT_NBYTES) for r in big)
        assert len(big) <= NBYTES // RCVLOWAT_NBYTES + 1
        # only the last 64 KiB, if a wake-up left less, wake on any byte
        assert sum(r.received for r in small) < RCVLOWAT_MIN_MISSING
        assert sum(r.received for r in big + small) == NBYTES
        eagain = [r for r in sock.recvs if r.received is None]
        if loop_name == "asyncio":
            assert eagain == sock.recvs[:1]  # one EAGAIN: at the start
        else:  # uvloop: an event that ends short receives again until EAGAIN (an error would end it)
            assert len(eagain) <= len(big) + len(small) + 1
        # the next small read waits with no mark
        small_buf = bytearray(100)
        future = server.read_into(small_buf)
        assert _mark(sock) == 1
        await client.write(b"x" * 100)
        assert await future == 100 and small_buf == b"x" * 100
        server.close()
        client.close()

    run(main(), loop=loop_name)


def test_the_last_wait_of_a_read_is_woken_once_by_its_last_byte(loop_name):
    """A read that needs less than a full mark waits for exactly what it
    needs: every byte but the last sits in the kernel, the read pending,
    and the last one completes it in one receive."""

    async def main():
        server, client = await stream_pair(ReadIntoIOStream, wrap_socket=RecordingSocket)
        sock = server.socket
        nbytes = RCVLOWAT_NBYTES - 1000  # under a full mark, over RCVLOWAT_MIN_MISSING
        data = bytes(range(256)) * (nbytes // 256) + bytes(nbytes % 256)
        buf = bytearray(nbytes)
        future = server.read_into(buf)
        assert _mark(sock) == nbytes  # set as the read parked: all of it
        await _send_in_pieces(client, data[:-1])
        await until(lambda: server.nbytes_arrived == nbytes - 1)  # held in the kernel, below the mark
        for _ in range(3):
            await asyncio.sleep(0)
        assert not future.done()
        assert [r for r in sock.recvs if r.received] == []  # not woken by any piece
        await client.write(data[-1:])
        assert await future == nbytes
        assert buf == data
        assert [r.received for r in sock.recvs if r.received] == [nbytes]  # one receive, all of it
        assert _mark(sock) == 1  # cleared as the read completed
        server.close()
        client.close()

    run(main(), loop=loop_name)


def test_a_large_frame_is_received_at_the_mark_and_the_next_message_is_not(loop_name):
    async def main():
        server, client = await stream_pair(ReadIntoIOStream, wrap_socket=RecordingSocket)
        sock = server.socket
        frame_at = []

        def allocate(nbytes):
            frame = bytearray(nbytes)
            frame_at.append((buffer_address(frame), nbytes))
            return frame

        framed = FramedStream(server, allocator=allocate)
        frames = [b"head", bytes(range(256)) * (NBYTES // 256), b"tail"]
        header, _ = message_header(frames)
        task = asyncio.ensure_future(framed.read_frames())
        await client.write(header + frames[0])
        # (the frame's first piece wakes the stream as any byte does: the mark
        # is set from the first wait for the rest of the frame on)
        await _send_in_pieces(client, frames[1] + frames[2])
        assert [bytes(f) for f in await task] == frames
        assert _mark(sock) == 1
        start, nbytes = max(frame_at, key=lambda at: at[1])
        into_frame = [r for r in sock.recvs if r.received and start <= r.address < start + nbytes]
        big, _ = _received_while_marked(into_frame)
        # the first receive into the frame came before any wait for it: the
        # mark was set for each wait after it, to what the frame still needed
        # and at most RCVLOWAT_NBYTES, while 64 KiB or more were missing
        assert len(big) > 1 and all(r.received >= min(r.requested, RCVLOWAT_NBYTES) for r in big[1:])
        # a small message next: its wait sets no mark
        task = asyncio.ensure_future(framed.read_frames())
        await asyncio.sleep(0)
        assert _mark(sock) == 1
        await client.write(message_header([b"ok"])[0] + b"ok")
        assert [bytes(f) for f in await task] == [b"ok"]
        server.close()
        client.close()

    run(main(), loop=loop_name)


class _ScratchLineReader:
    """A `MessageReader` in the ``BufferedProtocol`` style: one scratch
    buffer, larger than any message, and a message ends at a newline.  Its
    buffer says nothing of how many bytes the message needs."""

    def __init__(self, nbytes: int) -> None:
        self.buf = bytearray(nbytes)
        self.filled = 0

    @property
    def in_message(self) -> bool:
        return self.filled > 0

    @property
    def expected_nbytes(self) -> int:
        return -1

    @property
    def received_nbytes(self) -> int:
        return self.filled

    def describe_progress(self) -> str:
        return f"{self.filled} bytes, no newline yet"

    def get_buffer(self) -> memoryview:
        return memoryview(self.buf)[self.filled :]

    def buffer_updated(self, nbytes: int) -> None:
        self.filled += nbytes

    def feed(self, data) -> int:
        data = bytes(data)
        end = data.find(b"\n")
        take = len(data) if end < 0 else end + 1
        self.buf[self.filled : self.filled + take] = data[:take]
        self.filled += take
        return take

    def next_message(self):
        end = self.buf.find(b"\n", 0, self.filled)
        return bytes(self.buf[: end + 1]) if end >= 0 else NEED_DATA


@pytest.mark.parametrize("nbytes", [RCVLOWAT_MIN_MISSING, NBYTES])
def test_a_message_reader_with_a_large_scratch_buffer_never_sets_the_mark(loop_name, nbytes):
    """A reader whose buffer may be larger than its message: a short message
    is delivered as it arrives (a mark of the buffer's free space would hold
    it in the kernel until the peer sent more or closed)."""

    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        sock = server.socket
        future = server.read_message(_ScratchLineReader(nbytes))
        assert _mark(sock) == 1
        await client.write(b"a short request\n")
        assert await asyncio.wait_for(future, 10) == b"a short request\n"
        assert _mark(sock) == 1
        server.close()
        client.close()

    run(main(), loop=loop_name)


@pytest.mark.parametrize("how", ["eof", "reset"])
def test_a_peer_that_stops_short_of_the_mark_still_ends_the_read(loop_name, how):
    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        sock = server.socket
        buf = bytearray(NBYTES)
        future = server.read_into(buf)
        assert _mark(sock) == RCVLOWAT_NBYTES
        await client.write(b"y" * 1000)  # far under the mark
        if how == "reset":
            client.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()
        with pytest.raises(StreamClosedError):
            await future
        assert server.closed()

    run(main(), loop=loop_name)


def test_partial_and_smaller_reads_never_set_the_mark(loop_name):
    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        sock = server.socket
        buf = bytearray(NBYTES)
        future = server.read_into(buf, partial=True)  # completes with any byte
        assert _mark(sock) == 1
        await client.write(b"z")
        assert await future == 1
        under = bytearray(RCVLOWAT_MIN_MISSING - 1)
        future = server.read_into(under)
        assert _mark(sock) == 1
        await client.write(bytes(len(under)))
        assert await future == len(under)
        server.close()
        client.close()

    run(main(), loop=loop_name)


def test_tls_and_unix_streams_never_set_the_mark(loop_name, tls_contexts):
    async def main():
        server_ctx, client_ctx = tls_contexts
        server, client = await stream_pair(
            SSLReadIntoIOStream, server_ssl=server_ctx, client_ssl=client_ctx, server_hostname="localhost"
        )
        assert not server._core.policy.lowat.ok
        buf = bytearray(NBYTES)
        future = server.read_into(buf)
        assert _mark(server.socket) == 1
        await client.write(bytes(NBYTES))
        assert await future == NBYTES
        server.close()
        client.close()
        a, b = socket.socketpair()
        try:
            assert not lowat_applies(a)
            stream = ReadIntoIOStream(a)
            assert not stream._core.policy.lowat.ok
            stream.close()
        finally:
            b.close()

    run(main(), loop=loop_name)


def test_the_mark_needs_linux_4_18(monkeypatch):
    monkeypatch.setattr(sys, "platform", "linux")
    for release, expected in [("4.17.0", False), ("4.18.0-rc1", True), ("6.18.44-fc", True), ("weird", False)]:
        monkeypatch.setattr(_lowat.os, "uname", lambda release=release: type("U", (), {"release": release})())
        assert _lowat._lowat_kernel() is expected, release
    monkeypatch.setattr(sys, "platform", "darwin")
    assert _lowat._lowat_kernel() is False


def test_bytes_held_below_the_mark_count_for_the_idle_timeout(loop_name, monkeypatch):
    """A slow peer's bytes that wait in the kernel below the mark (they do
    not wake the loop) still show the read is alive: `nbytes_arrived` counts
    them, and FramedStream's idle checks (run by hand, two per trickle)
    never cut the read."""
    from ..channel.test_framed import _ManualIdleTicks

    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        sock = server.socket
        fs = FramedStream(server, read_idle_timeout=0.2)
        ticks = _ManualIdleTicks(fs, monkeypatch)
        frame = bytes(range(256)) * (NBYTES // 256)
        header, _ = message_header([frame])
        reading = fs.read_frames()
        await client.write(header + frame[:PIECE])
        await until(lambda: server.nbytes_received == len(header) + PIECE)
        # (those bytes landed in the read-ahead buffer; a receive into the
        # frame itself ends the next event, and the wait after it sets the mark)
        await client.write(frame[PIECE : 2 * PIECE])
        await until(lambda: _mark(sock) == RCVLOWAT_NBYTES)
        sent = 2 * PIECE
        for _ in range(5):  # 4 KiB per two checks: far under the mark
            arrived = server.nbytes_arrived
            await client.write(frame[sent : sent + 4096])
            sent += 4096
            await until(lambda arrived=arrived: server.nbytes_arrived == arrived + 4096)
            ticks.tick()
            ticks.tick()
            assert not server.closed() and not reading.done()
        assert server.nbytes_received < server.nbytes_arrived  # held in the kernel, not received
        await client.write(frame[sent:])
        assert [bytes(f) for f in await reading] == [frame]
        assert server.nbytes_arrived == server.nbytes_received == len(header) + NBYTES
        server.close()
        client.close()

    run(main(), loop=loop_name)


class _RefusingSocket:
    """A TCP socket whose ``setsockopt`` fails (as on a kernel that refuses
    the mark)."""

    def __init__(self, sock):
        self._sock = sock
        self.family, self.type = sock.family, sock.type

    def setsockopt(self, *args):
        raise OSError("refused")


def test_the_mark_alone_follows_each_wait_and_resets_once_a_read_completes():
    """`LowWaterMark` on a real TCP socket: a wait for `RCVLOWAT_MIN_MISSING`
    bytes or more sets a mark of what it waits for, at most
    `RCVLOWAT_NBYTES`; a smaller one sets 1, `reset` sets 1; the bytes the
    mark keeps from waking the loop are counted while it is set; switched off
    (``enabled=False``) it never sets one."""
    a, b = _tcp_pair()
    try:
        mark = _lowat.LowWaterMark(a)
        assert mark.ok and mark.mark == 1 and mark.unreported_nbytes() == 0
        assert mark.wait(RCVLOWAT_MIN_MISSING) is True
        assert mark.mark == _mark(a) == RCVLOWAT_MIN_MISSING
        assert mark.wait(RCVLOWAT_NBYTES + 1) is True
        assert mark.mark == _mark(a) == RCVLOWAT_NBYTES
        assert mark.wait(RCVLOWAT_NBYTES - 1) is True
        assert mark.mark == _mark(a) == RCVLOWAT_NBYTES - 1
        b.sendall(b"x" * 100)
        assert _until_queued(mark, 100)
        assert mark.wait(RCVLOWAT_MIN_MISSING - 1) is False and _mark(a) == 1
        mark.wait(RCVLOWAT_MIN_MISSING)
        mark.reset()
        assert mark.mark == _mark(a) == 1 and mark.unreported_nbytes() == 0
        off = _lowat.LowWaterMark(a, enabled=False)
        assert not off.ok and off.wait(RCVLOWAT_MIN_MISSING) is False and _mark(a) == 1
        mark.off()
        assert not mark.ok and mark.sock is None and mark.wait(RCVLOWAT_MIN_MISSING) is False
    finally:
        a.close()
        b.close()


def _tcp_pair():
    """Two connected TCP sockets on 127.0.0.1 (blocking)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        b = socket.create_connection(listener.getsockname())
        a, _ = listener.accept()
    return a, b


def _until_queued(mark, nbytes, timeout_s=5.0):
    import time

    deadline = time.monotonic() + timeout_s
    while mark.unreported_nbytes() < nbytes:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return mark.unreported_nbytes() == nbytes


def test_a_mark_the_kernel_refuses_turns_the_marks_off():
    a, b = _tcp_pair()
    try:
        mark = _lowat.LowWaterMark(_RefusingSocket(a))
        assert mark.ok
        assert mark.wait(RCVLOWAT_MIN_MISSING) is False
        assert not mark.ok and mark.mark == 1
    finally:
        a.close()
        b.close()


_CHILD = """
import asyncio, socket
from tornado_readinto import ReadIntoIOStream
from tornado_readinto.core import _policy as _lowat  # (where LowWaterMark lives)
from tornado_readinto.diagnostics.testing import stream_pair

async def main():
    server, client = await stream_pair(ReadIntoIOStream)
    future = server.read_into(bytearray(1 << 20))  # parks missing 1 MiB
    mark = server.socket.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT)
    await client.write(bytes(1 << 20))
    await future
    print(_lowat.ENABLED, server._core.policy.lowat.ok, mark)
    server.close()
    client.close()

asyncio.run(main())
"""


@pytest.mark.parametrize("value", [None, "1", "0"])
def test_the_environment_variable_turns_the_marks_off(value):
    """``TORNADO_READINTO_RCVLOWAT=0`` in a process's environment: no stream
    of it sets a mark (A/B runs; a dask worker inherits it); unset or any
    other value leaves them on."""
    env = {k: v for k, v in os.environ.items() if k != _lowat.ENV_VAR}
    if value is not None:
        env[_lowat.ENV_VAR] = value
    root = Path(__file__).resolve().parents[2]  # this checkout's package, whatever the working directory
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, cwd=root, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    if value == "0":
        assert out.stdout.split() == ["False", "False", "1"]
    else:
        assert out.stdout.split() == ["True", "True", str(RCVLOWAT_NBYTES)]
