"""The stream's mechanism (`StreamCore`) alone, over real sockets on
127.0.0.1, and each heuristic of its policy (`StreamPolicy`) switched off
alone.  The mechanism calls nothing of an owner: it returns `EOF`, raises
`CoreFailure`, and leaves closing to whoever holds it."""

from __future__ import annotations

import select
import socket
import struct
import time

import pytest
from tornado.iostream import StreamClosedError

from tornado_readinto import ReadIntoIOStream
from tornado_readinto.core import _gilheld
from tornado_readinto.core import _policy as _lowat  # (where LowWaterMark lives)
from tornado_readinto.core._policy import CORK_MAX_NBYTES, StreamPolicy
from tornado_readinto.core._readcore import PENDING
from tornado_readinto.core._streamcore import CORKED, EOF, SENT, CoreFailure, StreamCore
from tornado_readinto.diagnostics.testing import stream_pair
from tornado_readinto.wire.framing import FrameReader, FramingError

from ..conftest import run


@pytest.fixture
def pair():
    """A connected TCP pair on 127.0.0.1: (the core's non-blocking end, the
    peer's blocking end)."""
    listener = socket.create_server(("127.0.0.1", 0))
    peer = socket.create_connection(listener.getsockname())
    ours, _ = listener.accept()
    listener.close()
    ours.setblocking(False)
    yield ours, peer
    ours.close()
    peer.close()


def core_over(sock, **policy_options):
    policy = StreamPolicy(sock, **policy_options)
    return StreamCore(sock, own_socket_io=False, policy=policy)


def wait_readable(sock, nbytes):
    """Until ``nbytes`` bytes can be read from ``sock`` (the peer's send is
    asynchronous even on loopback)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        select.select([sock], [], [], 1)
        if len(sock.recv(nbytes, socket.MSG_PEEK)) >= nbytes:
            return
    raise AssertionError(f"{nbytes} bytes never arrived")


def wait_readable_eof(sock):
    """Until ``sock`` reports the peer's close or reset."""
    assert select.select([sock], [], [], 10)[0], "the peer's close never arrived"


# -- the mechanism ---------------------------------------------------------------


def test_the_mechanism_completes_a_read_and_reports_eof_without_closing(pair):
    ours, peer = pair
    core = core_over(ours)
    assert core.reads.read_bytes(5) is PENDING
    assert core.receive() is PENDING  # nothing sent yet: EAGAIN
    peer.sendall(b"hello")
    wait_readable(ours, 5)
    assert core.receive() == b"hello"
    assert core.counts.nbytes == 5 and core.counts.calls == 2  # the EAGAIN one too
    peer.close()
    wait_readable_eof(ours)
    assert core.reads.read_bytes(1) is PENDING
    assert core.receive() is EOF
    # It closed nothing: that is its owner's decision.
    assert not core.closed and ours.fileno() != -1
    assert core.reads.storage_nbytes == 0


def test_the_mechanism_raises_a_rejected_frame_as_data(pair):
    ours, peer = pair
    core = core_over(ours)
    reader = FrameReader(max_frames=2)
    assert core.reads.read_message(reader) is PENDING
    peer.sendall(struct.pack("<Q", 3) + struct.pack("<QQQ", 1, 1, 1))  # three frames: one too many
    wait_readable(ours, 32)
    with pytest.raises(CoreFailure) as info:
        core.receive()
    assert info.value.where == "data" and isinstance(info.value.error, FramingError)
    assert "max_frames = 2" in str(info.value.error)
    assert not core.closed  # the owner closes


def test_the_mechanism_raises_a_failed_send_as_write(pair):
    ours, peer = pair
    core = core_over(ours)
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    peer.close()  # a reset
    wait_readable_eof(ours)
    with pytest.raises(CoreFailure) as info:
        for _ in range(100):  # the first send may still be taken before the reset is seen
            core.writelines([b"x" * 1000], False, None)
            core.send_queued()
    assert info.value.where == "write" and isinstance(info.value.error, OSError)
    assert not core.closed


# -- each heuristic, switched off alone ---------------------------------------------


@pytest.mark.parametrize("valid_s", [60.0, 0.0])
def test_the_empty_proof_switched_off_never_skips_a_receive(pair, valid_s):
    ours, _ = pair
    core = core_over(ours, empty_proof_s=valid_s)
    assert core.reads.read_bytes(1) is PENDING
    assert core.receive() is PENDING  # EAGAIN: proves the socket empty
    # (READ registered: the loop would report data)
    assert core.policy.skip_receive(True) is (valid_s > 0)
    core.policy.data_ready()  # a READ event ends any proof
    assert core.policy.skip_receive(True) is False


@pytest.mark.skipif(not _lowat._LOWAT_PLATFORM, reason="SO_RCVLOWAT marks are used on Linux >= 4.18")
@pytest.mark.parametrize("lowat", [True, False])
def test_the_low_water_mark_switched_off_sets_no_mark(pair, lowat):
    ours, peer = pair
    core = core_over(ours, lowat=lowat)
    buf = bytearray(1 << 20)
    assert core.reads.read_into(memoryview(buf)) is PENDING
    peer.sendall(b"a" * 100_000)
    wait_readable(ours, 1)
    assert core.receive() is PENDING
    assert core.wait_nbytes >= _lowat.RCVLOWAT_MIN_MISSING
    core.park()
    mark = ours.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT)
    assert mark == (_lowat.RCVLOWAT_NBYTES if lowat and _lowat.ENABLED else 1)


@pytest.mark.parametrize("cork_max_nbytes", [CORK_MAX_NBYTES, 0])
def test_the_cork_switched_off_sends_a_reply_at_once(pair, cork_max_nbytes):
    ours, peer = pair
    core = core_over(ours, cork_max_nbytes=cork_max_nbytes)
    peer.sendall(b"1234" * 2)  # two requests arrive together
    wait_readable(ours, 8)
    assert core.reads.read_bytes(4) is PENDING
    assert core.receive() == b"1234"  # the second one is read ahead
    status = core.writelines([b"ok"], False, None)
    if cork_max_nbytes:
        assert status == CORKED and core.cork_nbytes == 2
        peer.setblocking(False)
        with pytest.raises(BlockingIOError):
            peer.recv(2)  # held back until the reads catch up
        assert core.uncork() is False
    else:
        assert status == SENT and core.cork_nbytes == 0
    peer.setblocking(True)
    assert peer.recv(2) == b"ok"


class RecordingPoll:
    """The busy-poll policy's interface, recorded (what `StreamPolicy` tells it)."""

    def __init__(self):
        self.parked_at = 0.0
        self.calls = []

    def parked(self, now):
        self.parked_at = now
        self.calls.append("parked")

    def data_came(self, now):
        self.parked_at = 0.0
        self.calls.append("data_came")


def test_busy_polling_is_told_of_a_parked_read_and_of_its_data(pair, stream_clock):
    # (stream_clock: no socket call looks stalled, which would stop the spins)
    ours, _ = pair
    poll = RecordingPoll()
    core = core_over(ours, busy_poll=poll)
    assert core.reads.read_bytes(1) is PENDING
    assert core.receive() is PENDING
    core.park()
    core.policy.data_ready()
    assert poll.calls == ["parked", "data_came"]


def test_busy_polling_switched_off_parks_and_wakes_all_the_same(pair):
    ours, peer = pair
    core = core_over(ours, busy_poll=None)
    assert core.reads.read_bytes(1) is PENDING
    assert core.receive() is PENDING
    assert core.park() is False and core.policy.busy_poll is None
    core.policy.data_ready()
    peer.sendall(b"x")
    wait_readable(ours, 1)
    assert core.receive() == b"x"


@pytest.mark.skipif(not _lowat._LOWAT_PLATFORM or not _lowat.ENABLED, reason="needs SO_RCVLOWAT marks")
def test_a_wait_for_the_low_water_mark_does_not_spin(pair, stream_clock):
    ours, peer = pair
    poll = RecordingPoll()
    core = core_over(ours, busy_poll=poll)
    assert core.reads.read_into(memoryview(bytearray(1 << 20))) is PENDING
    peer.sendall(b"a" * 100_000)
    wait_readable(ours, 1)
    assert core.receive() is PENDING
    core.park()
    assert ours.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT) > 1
    assert poll.calls == []  # the mark wakes the read: nothing to spin for


def test_eager_futures_switched_by_their_two_flags():
    assert StreamPolicy(eager=True).eager_future()
    assert not StreamPolicy(eager=False, eager_contended=True).eager_future()
    _gilheld.held_until = 1e300  # the GIL was seen contended (conftest resets it)
    assert StreamPolicy(eager=False, eager_contended=True).eager_future()
    assert not StreamPolicy(eager=False, eager_contended=False).eager_future()


# -- the face handles what the mechanism raises ----------------------------------------


def test_a_failed_send_of_the_cork_as_a_read_parks_closes_the_stream(stream_clock):
    """A reply held by the cork goes out when the next read parks; if that
    send fails (the peer reset), the stream closes with the error and the
    read fails: nothing is raised to the reader's caller."""

    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        try:
            first = server.read_bytes(4)
            client.socket.sendall(b"aaaabbbb")  # two requests at once
            assert await first == b"aaaa"  # the second one is read ahead
            # The peer resets while the server works (no loop turn: its READ
            # event must not see the reset first).
            client.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.socket.close()
            wait_readable_eof(server.socket)  # the reset arrived (nothing reads it yet)
            assert server._core.io.cork_nbytes == 0
            server.write(b"ok")  # corked: more input is read ahead
            assert server._core.io.cork_nbytes == 2
            assert await server.read_bytes(4) == b"bbbb"  # from the read-ahead, no loop turn
            third = server.read_bytes(4)  # parks: the cork's send fails
            assert server.closed()
            assert isinstance(server.error, (ConnectionResetError, BrokenPipeError)), server.error
            with pytest.raises(StreamClosedError):
                await third
        finally:
            server.close()
            client.close()

    run(main())


def test_a_failed_send_of_the_cork_on_close_records_the_error(stream_clock):
    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        try:
            first = server.read_bytes(4)
            client.socket.sendall(b"aaaabbbb")
            assert await first == b"aaaa"
            client.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.socket.close()
            wait_readable_eof(server.socket)  # the reset arrived (nothing reads it yet)
            server.write(b"ok")  # corked
            server.close()  # sends what the cork holds first: that fails
            assert server.closed()
            assert isinstance(server.error, (ConnectionResetError, BrokenPipeError)), server.error
        finally:
            server.close()
            client.close()

    run(main())
