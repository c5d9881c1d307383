"""The compiled-core spike (``benchmarks/spike/_spikecore.py``, a
benchmark prototype): its compiled build and its pure twin do the duties of
a stream, and agree.

The compiled cases build the extension themselves, once per session
(`benchmarks.spike.compiled_module`: Cython and a C compiler, into
``build/spike/`` of the checkout, reused while the sources are unchanged).
On Linux a failed build fails them (CI has a compiler and the test extra
brings Cython); elsewhere they skip, saying why.  The pure twin always runs.
Self-contained: it needs only the ``benchmarks`` package, no other test module.
"""

from __future__ import annotations

import array
import asyncio
import random
import socket
import struct
import sys
from types import ModuleType
from typing import Any

import pytest
from tornado.iostream import StreamClosedError

from benchmarks.impls import IMPLS, availability
from benchmarks.impls._async import run_loop
from benchmarks.opcodes import _tcp_pair
from benchmarks.spike import SpikeBuildError, compiled_module, pure_module
from tests_bench.test_bench_anchors import _echo_case
from tornado_readinto.errors import BufferBusyError, IncompleteReadError

LOOPS = ["asyncio", "uvloop"]
COMPILED_IMPLS = ["spike-compiled", "spike-face", "spike-shared"]


@pytest.fixture(scope="session")
def compiled() -> ModuleType:
    """The compiled spike, built on demand (about 30 s the first time)."""
    try:
        return compiled_module()
    except SpikeBuildError as exc:
        if sys.platform.startswith("linux"):
            pytest.fail(f"the compiled spike must build on Linux (Cython from the test extra, a C compiler): {exc}")
        pytest.skip(str(exc))


@pytest.fixture(params=["compiled", "pure"])
def core(request: pytest.FixtureRequest) -> ModuleType:
    if request.param == "compiled":
        return request.getfixturevalue("compiled")  # type: ignore[no-any-return]
    return pure_module()


@pytest.fixture(params=LOOPS)
def loop_name(request: pytest.FixtureRequest) -> str:
    pytest.importorskip(request.param)
    return str(request.param)


async def _turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


# -- echoes, as the load benchmark runs them ----------------------------------------


@pytest.mark.parametrize("impl", [*COMPILED_IMPLS, "spike-pure"])
@pytest.mark.parametrize("msize, nframes", [(1024, 1), (1024, 4), (300 << 10, 4)])
def test_spike_echoes_verified(
    impl: str, loop_name: str, msize: int, nframes: int, request: pytest.FixtureRequest
) -> None:
    """Pipelined (several messages per receive), every echo checked, the
    first and last of each connection byte for byte."""
    if impl in COMPILED_IMPLS:
        request.getfixturevalue("compiled")  # built, or failed saying why
    assert availability(IMPLS[impl], loop_name) is None
    stats, echoed = _echo_case(impl, loop_name, msize, nframes)
    sent = sum(s.messages_sent for s in stats)
    assert sent > 2 * 8 and echoed == sent
    assert sum(s.verified_messages for s in stats) == sent
    assert [s.full_compares for s in stats] == [2, 2]


# -- duties --------------------------------------------------------------------------


def test_spike_read_from_read_ahead_completes_at_once(core: ModuleType, loop_name: str) -> None:
    async def main() -> None:
        a, b = _tcp_pair()
        stream = core.SpikeStream(a)
        b.sendall(bytes(range(48)))
        first = bytearray(16)
        assert await stream.read_into(first) == 16
        second = bytearray(16)
        future = stream.read_into(second)
        assert future.done() and future.result() == 16 and second == bytes(range(16, 32))
        future = stream.read_into(bytearray(32), partial=True)  # 16 are there: enough for partial
        assert future.done() and future.result() == 16
        assert stream.read_into(bytearray()).result() == 0
        stream.close()
        b.close()

    run_loop(loop_name, main, 10)


@pytest.mark.parametrize("nbytes", [10, 40 << 10])  # through the read-ahead; straight into the target
def test_spike_never_reads_past_the_target(core: ModuleType, loop_name: str, nbytes: int) -> None:
    async def main() -> None:
        a, b = _tcp_pair()
        stream = core.SpikeStream(a)
        buf = bytearray(b"\xee" * (nbytes + 20))
        data = bytes(random.Random(nbytes).randbytes(2 * nbytes + 7))
        writer = core.SpikeStream(b)
        sent = writer.writelines([data])
        assert await stream.read_into(memoryview(buf)[10 : 10 + nbytes]) == nbytes
        assert buf[:10] == b"\xee" * 10 and buf[10 + nbytes :] == b"\xee" * 10
        assert buf[10 : 10 + nbytes] == data[:nbytes]
        rest = bytearray(len(data) - nbytes)
        assert await stream.read_into(rest) == len(rest) and rest == data[nbytes:]
        await sent
        stream.close()
        writer.close()

    run_loop(loop_name, main, 10)


def test_spike_read_into_typed_buffer_sized_by_nbytes(core: ModuleType, loop_name: str) -> None:
    async def main() -> None:
        a, b = _tcp_pair()
        stream = core.SpikeStream(a)
        values = array.array("d", [1.5, -2.0, 3.25])
        b.sendall(values.tobytes())
        target = array.array("d", [0.0] * 3)
        assert await stream.read_into(memoryview(target)) == 24
        assert target == values
        stream.close()
        b.close()

    run_loop(loop_name, main, 10)


def test_spike_eof_fails_the_pending_read_and_closes(core: ModuleType, loop_name: str) -> None:
    async def main() -> None:
        a, b = _tcp_pair()
        stream = core.SpikeStream(a)
        b.sendall(b"abc")
        await _turns()  # read ahead, no read pending
        b.close()
        await _turns()
        # EOF closed the stream; what was read ahead is still readable
        assert stream.closed()
        assert await stream.read_into(bytearray(2)) == 2
        with pytest.raises(StreamClosedError):
            stream.read_into(bytearray(2))  # 1 byte left: cannot complete
        a2, b2 = _tcp_pair()
        stream2 = core.SpikeStream(a2)
        b2.sendall(b"xy")
        future = stream2.read_into(bytearray(5))
        await _turns()
        b2.close()
        with pytest.raises(IncompleteReadError) as info:
            await future
        assert (info.value.expected, info.value.received) == (5, 2)
        a3, b3 = _tcp_pair()
        stream3 = core.SpikeStream(a3)
        future = stream3.read_into(bytearray(5))
        b3.close()
        with pytest.raises(StreamClosedError) as closed:
            await future
        assert not isinstance(closed.value, IncompleteReadError) and stream3.closed()

    run_loop(loop_name, main, 10)


def test_spike_reset_closes_with_the_error(core: ModuleType, loop_name: str) -> None:
    async def main() -> None:
        a, b = _tcp_pair()
        stream = core.SpikeStream(a)
        future = stream.read_into(bytearray(5))
        b.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        b.close()  # RST
        with pytest.raises(StreamClosedError):
            await future
        assert stream.closed() and isinstance(stream.error, ConnectionResetError)
        with pytest.raises(StreamClosedError):
            stream.writelines([b"x"])

    run_loop(loop_name, main, 10)


def test_spike_one_read_at_a_time_and_a_cancelled_read_closes(core: ModuleType, loop_name: str) -> None:
    async def main() -> None:
        a, b = _tcp_pair()
        stream = core.SpikeStream(a)
        future = stream.read_into(bytearray(4))
        with pytest.raises(BufferBusyError):
            stream.read_into(bytearray(4))
        future.cancel()
        b.sendall(b"abcd")
        await _turns()
        assert stream.closed()  # its bytes came for a read nobody waits for
        b.close()

    run_loop(loop_name, main, 10)


def test_spike_writes_queue_only_what_the_kernel_did_not_take(core: ModuleType, loop_name: str) -> None:
    async def main() -> None:
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
        writer, reader = core.SpikeStream(a), core.SpikeStream(b)
        rng = random.Random(7)
        big = [rng.randbytes(3 << 20), memoryview(rng.randbytes(100)), bytearray(rng.randbytes(5000))]
        first = writer.writelines(big)
        assert not first.done()  # the kernel took part of it
        second = writer.writelines([b"tail", b"!"])  # queued behind
        expect = b"".join(map(bytes, big)) + b"tail!"
        got = bytearray(len(expect))
        assert await reader.read_into(got) == len(expect)
        await first
        await second
        assert got == expect
        done = writer.writelines([b"now"])
        assert done.done()  # taken whole: the shared resolved Future
        assert writer.writelines([b"again"]) is done
        writer.close()
        reader.close()

    run_loop(loop_name, main, 20)


# -- the compiled build against its pure twin -----------------------------------------


def _script(seed: int) -> tuple[list[bytes], list[tuple[int, bool]]]:
    """Chunks a writer sends and read sizes (with ``partial``) a reader asks for."""
    rng = random.Random(seed)
    chunks = [rng.randbytes(rng.choice([1, 7, 16, 100, 1040, 1040, 5000, 70000])) for _ in range(rng.randrange(20, 60))]
    total = sum(map(len, chunks))
    reads = []
    asked = 0
    while asked < total + 3:  # the last read runs into EOF
        nbytes = rng.choice([0, 1, 8, 16, 16, 100, 1024, 1024, 3000, 5000, 20000, 80000])
        reads.append((nbytes, rng.random() < 0.2))
        asked += nbytes
    return chunks, reads


def _run_script(core: ModuleType, loop_name: str, seed: int) -> list[Any]:
    chunks, reads = _script(seed)

    async def main() -> list[Any]:
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        reader, writer = core.SpikeStream(a), core.SpikeStream(b)
        events: list[Any] = []

        async def write() -> None:
            for chunk in chunks:
                await writer.writelines([chunk])
                await _turns(2)
            writer.close()

        sending = asyncio.ensure_future(write())
        data = bytearray()
        for nbytes, partial in reads:
            buf = bytearray(nbytes)
            try:
                future = reader.read_into(buf, partial=partial)
            except StreamClosedError:
                events.append(("raised", nbytes))
                break
            at_once = future.done()
            try:
                n = await future
            except IncompleteReadError as exc:
                events.append(("incomplete", exc.expected, exc.received))
                data += buf[: exc.received]
                break
            events.append((n, at_once))
            data += buf[:n]
        await sending
        assert data == b"".join(chunks)[: len(data)]
        events.append(len(data))
        return events

    return run_loop(loop_name, main, 30)


@pytest.mark.parametrize("seed", range(12))
def test_spike_compiled_and_pure_agree(compiled: ModuleType, loop_name: str, seed: int) -> None:
    """Same chunks, same reads (partial ones included), on a socketpair whose
    splits the loop's turns decide: the same results, resolved at once or
    not alike, and the bytes in order."""
    assert compiled.COMPILED
    assert _run_script(compiled, loop_name, seed) == _run_script(pure_module(), loop_name, seed)


# -- counts (never timings) -----------------------------------------------------------


def test_spike_compiled_runs_no_python_of_its_own_per_message(compiled: ModuleType, loop_name: str) -> None:
    """benchmarks.opcodes: per message, the compiled spike's server runs only
    the benchmark's own Python (one task step: serve_connection, echo_loop,
    recv resumed; recv and send started; pack_header, unpack_lengths,
    check_nframes, get, release), none of the stream's and, on uvloop, none of
    the loop's; fewer bytecodes than asyncio Streams on the same loop."""
    from benchmarks import opcodes

    clients, messages = 2, 200
    spike = opcodes.count("spike-compiled", loop_name, clients=clients, messages=messages)
    streams = opcodes.count("asyncio-streams", loop_name, clients=clients, messages=messages)
    assert not [key for key in spike.by_function if key.startswith("_spikecore")]
    assert spike.total < streams.total
    if loop_name == "uvloop":
        per_message = {key: n / messages for key, n in spike.calls_by_function.items() if n >= messages // 2}
        assert per_message == {
            "_async.py:serve_connection": 1.0,
            "_async.py:echo_loop": 1.0,
            "_tornado.py:recv": 2.0,
            "_tornado.py:send": 1.0,
            "_common.py:pack_header": 1.0,
            "_common.py:unpack_lengths": 1.0,
            "_common.py:check_nframes": 1.0,
            "_common.py:get": 1.0,
            "_async.py:release": 1.0,
            "opcodes.py:data_received": 1.0,  # the client's
        }


def test_spike_releases_every_buffer_it_exported(core: ModuleType, loop_name: str) -> None:
    """A bytearray with an export cannot be resized: after each read (at once,
    waited for, failed) and each write (sent whole, queued), the caller's
    buffers can be."""

    async def main() -> None:
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        reader, writer = core.SpikeStream(a), core.SpikeStream(b)
        whole, queued = bytearray(b"abcd" * 4), bytearray(4 << 20)
        await writer.writelines([whole])
        whole.append(0)
        sending = writer.writelines([queued])
        queued.append(0)  # the tail was copied, not held
        waited, at_once = bytearray(10), bytearray(6)
        assert await reader.read_into(waited) == 10 and reader.read_into(at_once).done()
        waited.append(0)
        at_once.append(0)
        rest = bytearray(4 << 20)
        assert await reader.read_into(rest) == len(rest)
        await sending
        failed = bytearray(10)
        future = reader.read_into(failed)
        writer.close()
        with pytest.raises(StreamClosedError):
            await future
        failed.append(0)
        reader.close()

    run_loop(loop_name, main, 20)


def test_spike_shared_done_reads_share_one_future_per_size(core: ModuleType, loop_name: str) -> None:
    async def main() -> None:
        a, b = _tcp_pair()
        stream = core.SpikeStream(a, share_done_reads=True)
        b.sendall(bytes(range(64)))
        assert await stream.read_into(bytearray(8)) == 8  # waited: a Future of its own
        first, second, third = bytearray(8), bytearray(8), bytearray(16)
        f1, f2 = stream.read_into(first), stream.read_into(second)
        f3 = stream.read_into(third)
        assert f1 is f2 and f1.result() == 8 and f3 is not f1 and f3.result() == 16
        assert (first, second, third) == (bytes(range(8, 16)), bytes(range(16, 24)), bytes(range(24, 40)))
        stream.close()
        b.close()

    run_loop(loop_name, main, 10)
