"""The proof that a socket is empty (the fields and hooks of
`tornado_readinto.core._policy.StreamPolicy` that keep it), one heuristic of
the core: alone, on an explicit clock, and switched off in a stream over
real sockets."""

from __future__ import annotations

import pytest

from tornado_readinto import ReadIntoIOStream
from tornado_readinto.core import _policy as _emptyproof  # (where the proof lives)
from tornado_readinto.core._policy import DRAINED_VALID_S, StreamPolicy
from tornado_readinto.diagnostics.testing import RecordingSocket, stream_pair

from ..conftest import run


def test_a_fresh_proof_never_holds(stream_clock):
    proof = StreamPolicy()
    assert proof.readable and not proof.short and not proof.unconfirmed
    assert not proof.skip_receive(True)


@pytest.mark.parametrize("short", [True, False])
def test_a_receive_that_emptied_the_socket_proves_it_for_the_window(stream_clock, short):
    """Short ``recv`` or EAGAIN: the proof holds while READ is registered,
    up to ``empty_proof_s`` after it; `ended_short` says which of the two
    made it."""
    proof = StreamPolicy()
    stream_clock.now = 5.0
    proof.receiving()
    proof.drained(short)
    assert proof.short is short and proof.ended_short() is short and not proof.readable
    assert not proof.keep_receiving()
    assert proof.skip_receive(True)
    assert not proof.skip_receive(False)  # nothing would report new data
    stream_clock.now = 5.0 + DRAINED_VALID_S / 2
    assert proof.skip_receive(True)
    stream_clock.now = 5.0 + DRAINED_VALID_S
    assert not proof.skip_receive(True)  # stale: the loop thread was held up
    proof.receiving()
    assert not proof.short  # the next receive decides again


def test_a_read_event_ends_the_proof_and_a_write_restarts_its_window(stream_clock):
    proof = StreamPolicy()
    proof.drained(True)
    stream_clock.now += DRAINED_VALID_S * 0.9
    proof.wrote()  # a request/response peer answers only after this
    stream_clock.now += DRAINED_VALID_S * 0.9
    assert proof.skip_receive(True)
    proof.data_ready()
    assert proof.readable and proof.keep_receiving() and not proof.skip_receive(True)
    before = proof.proved_at
    stream_clock.now += 1
    proof.wrote()  # nothing proved: the write starts no window
    assert proof.proved_at == before


def test_decrypted_bytes_that_may_wait_end_the_proof(stream_clock):
    proof = StreamPolicy()
    proof.drained(True)
    assert proof.skip_receive(True)
    proof.may_have_data()
    assert proof.readable and not proof.skip_receive(True)


def test_an_unconfirmed_proof_is_not_used(stream_clock):
    proof = StreamPolicy()
    proof.drained(True)
    proof.unconfirm()
    assert proof.unconfirmed and not proof.skip_receive(True)
    proof.confirmed()
    assert not proof.unconfirmed and proof.skip_receive(True)


def test_the_end_of_the_stream_proves_nothing_for_later(stream_clock):
    proof = StreamPolicy()
    proof.ended()
    assert not proof.readable and not proof.short
    assert proof.proved_at == 0.0


def test_switched_off_the_proof_never_holds(stream_clock):
    proof = StreamPolicy(empty_proof_s=0)
    proof.drained(True)
    assert proof.empty_proof_s == 0 and not proof.skip_receive(True)


@pytest.mark.parametrize("valid_s", [-1.0, float("nan")])
def test_a_negative_window_is_refused(valid_s):
    with pytest.raises(ValueError, match="empty_proof_s must be >= 0 seconds"):
        StreamPolicy(empty_proof_s=valid_s)


def test_the_proof_reads_the_clock_through_its_module(stream_clock):
    """What `stream_clock` patches: the proof's time is the module's
    ``perf_counter``, whichever build runs."""
    assert _emptyproof.perf_counter is stream_clock
    stream_clock.now = 42.0
    proof = StreamPolicy()
    proof.drained(False)
    assert proof.proved_at == 42.0


class _NoProofStream(ReadIntoIOStream):
    _empty_proof_s = 0.0


@pytest.mark.parametrize("stream_class, eagain_recvs", [(ReadIntoIOStream, 0), (_NoProofStream, 1)])
def test_a_read_right_after_a_short_recv_tries_the_socket_only_without_the_proof(
    loop_name, stream_clock, stream_class, eagain_recvs
):
    """Over real sockets: a read started right after a short recv parks
    without a recv when the proof is on (the default), and tries one that
    fails with EAGAIN when it is off; either way it completes with the
    peer's next bytes.  (A reply is sent in between, as a request/response
    server does: on uvloop a READ event's proof counts only once a send or
    another receive showed the socket is still watched.)"""

    async def main():
        server, client = await stream_pair(stream_class, wrap_socket=RecordingSocket, busy_poll_s=0)
        sock = server.socket
        try:
            assert server._core.policy.empty_proof_s == stream_class._empty_proof_s
            buf = bytearray(4)
            reading = server.read_into(buf)  # nothing there: parks, READ registered
            client.socket.sendall(b"ping")
            assert await reading == 4  # its recv was short
            await server.writelines([b"ack"])  # a reply (on uvloop it also confirms the proof)
            sock.reset()
            reading = server.read_into(buf)
            assert [r.received for r in sock.recvs] == [None] * eagain_recvs
            assert not reading.done()
            client.socket.sendall(b"pong")
            assert await reading == 4 and buf == b"pong"
        finally:
            server.close()
            client.close()

    run(main(), loop=loop_name)
