"""The dask-free comm layer (tornado_readinto.channel.comm): round trips over tcp, tls
and unix sockets, closing and aborting, connect timeouts, TLS verification,
Unix socket files, hostile peers on raw sockets, the handshake, pickle
opt-in, backpressure and cancellation.  Every wait is bounded."""

import asyncio
import dataclasses
import fractions
import hashlib
import os
import pickle
import shutil
import socket
import ssl
import stat
import subprocess
import sys
import tempfile

import msgpack
import numpy as np
import pytest

import tornado_readinto.channel.comm as comm_module
from tornado_readinto import (
    CommClosedError,
    CommTimeoutError,
    FrameTooLargeError,
    FramingError,
    HandshakeError,
    IncompleteReadError,
)
from tornado_readinto.channel.comm import (
    EXT_BUFFER,
    EXT_NDARRAY,
    EXT_PICKLE,
    PROTOCOL_NAME,
    PROTOCOL_VERSION,
    Comm,
    Listener,
    connect,
    decode_message,
    encode_message,
    listen,
)
from tornado_readinto.errors import BufferBusyError
from tornado_readinto.wire.allocators import bytearray_allocator, recycling_allocator
from tornado_readinto.wire.framing import pack_header

from ..conftest import CLOCK_SLACK_S, connect_attempts, run, until

SCHEMES = ["tcp", "tls", "unix"]
MiB = 1 << 20


# -- helpers ----------------------------------------------------------------------


@pytest.fixture
def short_tmp():
    """A short private directory: Unix socket paths must fit in 108 bytes."""
    path = tempfile.mkdtemp(prefix="trc-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


class Endpoint:
    """Listen/connect arguments for one scheme."""

    def __init__(self, scheme, tls_contexts, tmpdir):
        self.scheme = scheme
        self.server_ctx, self.client_ctx = tls_contexts
        self.tmpdir = tmpdir

    def listen_address(self):
        if self.scheme == "unix":
            return f"unix://{os.path.join(self.tmpdir, 'sock')}"
        return f"{self.scheme}://127.0.0.1:0"

    async def listen(self, handler, **kwargs):
        if self.scheme == "tls":
            kwargs.setdefault("ssl_context", self.server_ctx)
        return await listen(self.listen_address(), handler, **kwargs)

    async def connect(self, listener, **kwargs):
        if self.scheme == "tls":
            kwargs.setdefault("ssl_context", self.client_ctx)
        kwargs.setdefault("timeout", 5)
        return await connect(listener.contact_address, **kwargs)


@pytest.fixture(params=SCHEMES)
def endpoint(request, tls_contexts, short_tmp):
    return Endpoint(request.param, tls_contexts, short_tmp)


@pytest.fixture
def tcp(tls_contexts, short_tmp):
    return Endpoint("tcp", tls_contexts, short_tmp)


async def echo_handler(comm):
    try:
        while True:
            await comm.write(await comm.read())
    except CommClosedError:
        pass
    finally:
        comm.abort()


def recording_handler():
    """A handler that reads until an error and resolves ``result`` with it;
    returns ``(handler, result, started)``, ``started`` resolving when the
    handler is called."""
    loop = asyncio.get_running_loop()
    result = loop.create_future()
    started = loop.create_future()

    async def handler(comm):
        started.set_result(comm)
        try:
            while True:
                await comm.read()
        except BaseException as exc:
            if not result.done():
                result.set_result(exc)
        finally:
            comm.abort()

    return handler, result, started


def digest(buf):
    if isinstance(buf, np.ndarray):
        buf = np.ascontiguousarray(buf).reshape(-1).view(np.uint8)  # datetimes have no buffer interface
    return hashlib.sha256(memoryview(buf).cast("B")).hexdigest()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def raw_open(listener, endpoint=None):
    """An asyncio stream pair to a listener: a peer that speaks raw bytes
    (over TLS for a tls:// listener)."""
    address = listener.contact_address
    if address.startswith("unix://"):
        return await asyncio.open_unix_connection(address[len("unix://") :])
    host, port = address.split("://")[1].rsplit(":", 1)
    if address.startswith("tls://"):
        return await asyncio.open_connection(host, int(port), ssl=endpoint.client_ctx, server_hostname=host)
    return await asyncio.open_connection(host, int(port))


def framed(frames):
    return pack_header([len(f) for f in frames]) + b"".join(frames)


def handshake_bytes(version=PROTOCOL_VERSION, protocol=PROTOCOL_NAME, allow_pickle=False):
    return framed([msgpack.packb({"protocol": protocol, "version": version, "allow_pickle": allow_pickle})])


async def read_until_eof(reader, timeout=3):
    """Everything the peer sends until it closes (a reset counts as closed)."""
    try:
        return await asyncio.wait_for(reader.read(), timeout)
    except ConnectionResetError:
        return b""


def nested_message():
    rng = np.random.default_rng(0)
    return {
        "op": "compute",
        "small": [1, -2, 2**63, 3.5, None, True, "ünïcode", b"tiny", (1, ("nested", b"x"))],
        "big_bytes": rng.bytes(3 * MiB),
        "big_bytearray": bytearray(rng.bytes(MiB)),
        "big_view": memoryview(rng.bytes(2 * MiB))[MiB // 2 :],
        "arrays": {
            "f8": rng.random((512, 300)),
            "i4_fortran": np.asfortranarray(rng.integers(0, 100, (300, 200), dtype=np.int32)),
            "strided": rng.random((400, 400))[::2, ::3],
            "bool": rng.random(200_000) > 0.5,
            "datetime": np.arange(100_000).astype("M8[ms]"),
            "big_endian": rng.random(20_000).astype(">f8"),
            "complex": (rng.random(10_000) + 1j).astype(np.complex64),
            "small": np.arange(5, dtype=np.uint16),
            "empty": np.zeros((0, 3)),
        },
        ("tuple", "key"): (np.float64(2.5), np.int8(-3)),
    }


def assert_same_message(got, sent):
    assert type(got) is type(sent) or (isinstance(sent, (bytes, bytearray, memoryview)))
    if isinstance(sent, dict):
        assert got.keys() == sent.keys()
        for k in sent:
            assert_same_message(got[k], sent[k])
    elif isinstance(sent, (list, tuple)):
        assert len(got) == len(sent)
        for g, s in zip(got, sent):
            assert_same_message(g, s)
    elif isinstance(sent, np.ndarray):
        assert isinstance(got, np.ndarray)
        assert got.dtype == sent.dtype and got.shape == sent.shape
        assert got.flags.writeable
        assert np.array_equal(got, sent)
        assert digest(got) == digest(sent)
    elif isinstance(sent, np.generic):
        assert type(got) is type(sent) and got == sent
    elif isinstance(sent, (bytes, bytearray, memoryview)):
        assert digest(got) == digest(sent)
    else:
        assert got == sent


# -- message encoding (no sockets) ----------------------------------------------------


def test_encode_small_message_is_one_inline_frame():
    msg = {"op": "ping", "data": [1, 2.0, "x", b"y" * 100, (None, False)], "arr": np.arange(10)}
    frames = encode_message(msg)
    assert len(frames) == 1
    got = decode_message([memoryview(bytearray(frames[0]))])
    assert_same_message(got, msg)
    assert type(got["data"][3]) is bytes  # small buffers come back inline, as bytes


def test_encode_large_buffers_travel_out_of_band_by_reference():
    payload = bytearray(200_000)
    arr = np.ones((300, 300))
    frames = encode_message({"payload": payload, "arr": arr, "f": np.asfortranarray(arr)})
    assert len(frames) == 4
    # no copies: the frames are views of the caller's memory
    assert np.shares_memory(np.frombuffer(frames[1], np.uint8), np.frombuffer(payload, np.uint8))
    assert np.shares_memory(frames[2], arr)
    assert frames[3].base is not None
    got = decode_message([memoryview(bytearray(f)) for f in frames])
    assert isinstance(got["payload"], memoryview) and not got["payload"].readonly
    assert got["f"].flags.f_contiguous and np.array_equal(got["f"], arr)


def test_encode_threshold_is_configurable():
    assert len(encode_message([b"x" * 100], out_of_band_min_nbytes=10)) == 2
    assert len(encode_message([b"x" * 100], out_of_band_min_nbytes=1000)) == 1


def test_encode_unsupported_object_without_pickle_is_a_type_error():
    with pytest.raises(TypeError, match="allow_pickle"):
        encode_message({"x": fractions.Fraction(1, 3)})
    with pytest.raises(TypeError, match="allow_pickle"):
        encode_message(np.array([object()]))  # object arrays are never sent raw


def decode_raw(header_obj, *frames, allow_pickle=False):
    views = [memoryview(msgpack.packb(header_obj))] + [memoryview(f) for f in frames]
    return decode_message(views, allow_pickle=allow_pickle)


def ext(code, obj):
    return msgpack.ExtType(code, msgpack.packb(obj))


@pytest.mark.parametrize(
    "header, frames, match",
    [
        (ext(EXT_BUFFER, 1), [], "frame 1"),
        (ext(EXT_BUFFER, 0), [b"x"], "frame 0"),
        (ext(EXT_BUFFER, "1"), [b"x"], "frame '1'"),
        ([ext(EXT_BUFFER, 1), ext(EXT_BUFFER, 1)], [b"x"], "second time"),
        ("nothing refers to frame 1", [b"x"], "named by no placeholder"),
        (ext(EXT_NDARRAY, [1, "|O", [1], "C"]), [b"x" * 8], "not allowed"),
        (ext(EXT_NDARRAY, [1, "|V8", [1], "C"]), [b"x" * 8], "not allowed"),
        (ext(EXT_NDARRAY, [1, "<U2", [1], "C"]), [b"x" * 8], "not allowed"),
        (ext(EXT_NDARRAY, [1, "<f8", [3], "C"]), [b"x" * 16], "needs 24 bytes, got 16"),
        (ext(EXT_NDARRAY, [1, "<f8", [2**62, 2**62], "C"]), [b"x" * 16], "needs"),
        (ext(EXT_NDARRAY, [1, "<f8", [-1], "C"]), [b"x" * 8], "invalid shape"),
        (ext(EXT_NDARRAY, [1, "<f8", [1], "K"]), [b"x" * 8], "order"),
        (ext(EXT_NDARRAY, [b"x" * 3, "<f8", None, "C"]), [], "needs 8 bytes, got 3"),
        (ext(EXT_NDARRAY, [1, 2]), [b"x"], "not \\[data, dtype, shape, order\\]"),
        (msgpack.ExtType(99, b""), [], "unknown placeholder type 99"),
        (ext(EXT_PICKLE, [pickle.dumps(1), []]), [], "allow_pickle=True"),
    ],
)
def test_decode_rejects_bad_placeholders(header, frames, match):
    with pytest.raises(FramingError, match=match):
        decode_raw(header, *frames)


def test_decode_rejects_garbage_headers():
    with pytest.raises(FramingError, match="no frames"):
        decode_message([])
    for garbage in (b"\xc1", b"\x92\x01", b"\xa3\xff\xfe\xfd", b"\x81\x90\x01"):
        with pytest.raises(FramingError, match="cannot decode message"):
            decode_message([memoryview(garbage)])


# -- round trips ----------------------------------------------------------------------


async def check_round_trip(endpoint):
    listener = await endpoint.listen(echo_handler)
    try:
        comm = await endpoint.connect(listener)
        msg = nested_message()
        nbytes = await comm.write(msg)
        assert nbytes > 3 * MiB
        got = await comm.read()
        assert_same_message(got, msg)
        # out of band: writable memoryviews and numpy arrays over the frames
        assert isinstance(got["big_bytes"], memoryview) and not got["big_bytes"].readonly
        assert isinstance(got["arrays"]["f8"], np.ndarray) and got["arrays"]["f8"].flags.writeable
        assert got["arrays"]["i4_fortran"].flags.f_contiguous
        got["arrays"]["f8"][0, 0] = -1.0  # really writable
        # small messages, many of them, pipelined
        for i in range(200):
            await comm.write({"i": i, "s": "x" * (i % 7)})
        for i in range(200):
            assert await comm.read() == {"i": i, "s": "x" * (i % 7)}
        await comm.close()
        assert comm.closed()
    finally:
        listener.stop()


def test_comm_round_trip_nested_large_buffers(endpoint, loop_name):
    run(check_round_trip(endpoint), loop=loop_name)


async def check_addresses_and_repr(endpoint):
    server_comms = []

    async def handler(comm):
        server_comms.append(comm)
        await echo_handler(comm)

    listener = await endpoint.listen(handler)
    try:
        assert listener.listen_address.startswith(f"{endpoint.scheme}://")
        assert "listening" in repr(listener)
        comm = await endpoint.connect(listener)
        await comm.write("hello")
        assert await comm.read() == "hello"
        assert comm.peer_address == listener.contact_address
        assert comm.local_address.startswith(f"{endpoint.scheme}://")
        if endpoint.scheme != "unix":
            assert server_comms[0].peer_address == comm.local_address
            assert server_comms[0].local_address == comm.peer_address
        assert comm.peer_info["version"] == PROTOCOL_VERSION
        assert "open" in repr(comm) and comm.peer_address in repr(comm)
        await comm.close()
        assert "closed" in repr(comm)
    finally:
        listener.stop()
    assert "stopped" in repr(listener)


def test_comm_addresses_and_repr(endpoint):
    run(check_addresses_and_repr(endpoint))


async def check_contact_address_of_wildcard():
    listener = await listen("tcp://0.0.0.0:0", echo_handler)
    try:
        assert listener.listen_address.startswith("tcp://0.0.0.0:")
        port = listener.listen_address.rsplit(":", 1)[1]
        assert listener.contact_address == f"tcp://127.0.0.1:{port}"
        async with await connect(listener.contact_address, timeout=5) as comm:
            await comm.write([1])
            assert await comm.read() == [1]
    finally:
        listener.stop()


def test_listener_contact_address_of_wildcard():
    run(check_contact_address_of_wildcard())


async def check_ipv6():
    try:
        listener = await listen("tcp://[::1]:0", echo_handler)
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback: {exc}")
    try:
        assert listener.contact_address.startswith("tcp://[::1]:")
        async with await connect(listener.contact_address, timeout=5) as comm:
            await comm.write(b"v6")
            assert await comm.read() == b"v6"
            assert comm.local_address.startswith("tcp://[::1]:")
    finally:
        listener.stop()


def test_comm_ipv6_addresses():
    run(check_ipv6())


def test_address_errors():
    async def main():
        for bad in ("127.0.0.1:80", "http://x:80", "tcp://127.0.0.1", "tcp://::1:80", "tcp://h:99999", "unix://"):
            with pytest.raises(ValueError):
                await connect(bad, timeout=0.1)
        with pytest.raises(TypeError, match="unexpected keyword"):
            await connect("tcp://127.0.0.1:1", timeout=0.1, bogus=1)

    run(main())


async def check_many_listeners(n=20):
    listeners = [await listen("tcp://127.0.0.1:0", echo_handler) for _ in range(n)]
    try:
        assert len({lst.listen_address for lst in listeners}) == n
        comms = await asyncio.gather(*(connect(lst.contact_address, timeout=5) for lst in listeners))
        for i, comm in enumerate(comms):
            await comm.write({"i": i})
        for i, comm in enumerate(comms):
            assert await comm.read() == {"i": i}
            await comm.close()
    finally:
        for lst in listeners:
            lst.stop()


def test_listen_many_listeners_on_port_zero():
    run(check_many_listeners())


# -- closing, aborting, errors --------------------------------------------------------


async def check_implicit_close(endpoint):
    async def handler(comm):
        await comm.close()  # the server hangs up right after the handshake

    listener = await endpoint.listen(handler)
    try:
        comm = await endpoint.connect(listener)
        with pytest.raises(CommClosedError) as info:
            await comm.read()
        assert info.value.__cause__ is not None
        assert comm.closed()
        with pytest.raises(CommClosedError):
            await comm.write("after close")
        with pytest.raises(CommClosedError):
            await comm.read()
    finally:
        listener.stop()


def test_comm_closed_implicit(endpoint):
    run(check_implicit_close(endpoint))


async def check_write_to_vanished_peer(endpoint):
    async def handler(comm):
        comm.abort()

    listener = await endpoint.listen(handler)
    try:
        comm = await endpoint.connect(listener)
        with pytest.raises(CommClosedError):
            for _ in range(200):  # EPIPE/ECONNRESET surfaces within a few writes
                await comm.write(b"x" * MiB)
                await asyncio.sleep(0.005)
        assert comm.closed()
    finally:
        listener.stop()


def test_comm_write_to_vanished_peer_raises(endpoint):
    run(check_write_to_vanished_peer(endpoint))


async def check_explicit_close_flushes(endpoint):
    received = asyncio.get_running_loop().create_future()

    async def handler(comm):
        try:
            msg = await comm.read()
            with pytest.raises(CommClosedError):
                await comm.read()
            received.set_result(digest(msg["data"]))
        except BaseException as exc:
            received.set_exception(exc)
        finally:
            comm.abort()

    listener = await endpoint.listen(handler)
    try:
        comm = await endpoint.connect(listener)
        data = np.random.default_rng(1).bytes(32 * MiB)
        await comm.write({"data": data})
        assert comm.stream.writing()  # most of it is still queued
        await asyncio.wait_for(comm.close(), 10)
        assert comm.closed()
        await comm.close()  # idempotent
        comm.abort()  # also idempotent after close
        assert await asyncio.wait_for(received, 10) == digest(data)
    finally:
        listener.stop()


def test_comm_closed_explicit_flushes_pending_writes(endpoint, loop_name):
    run(check_explicit_close_flushes(endpoint), loop=loop_name)


async def check_abort_mid_message(endpoint):
    handler, result, started = recording_handler()
    listener = await endpoint.listen(handler)
    try:
        comm = await endpoint.connect(listener)
        await comm.write(np.zeros(48 * MiB, np.uint8))  # under the high-water mark: returns at once
        assert comm.stream.writing()
        comm.abort()
        comm.abort()
        assert comm.closed()
        exc = await asyncio.wait_for(result, 5)
        assert isinstance(exc, CommClosedError), exc
        assert isinstance(exc.__cause__, IncompleteReadError)
        assert "peer closed connection after" in str(exc)
    finally:
        listener.stop()


def test_comm_abort_mid_message(endpoint, loop_name):
    run(check_abort_mid_message(endpoint), loop=loop_name)


async def check_connect_timeout(scheme, tls_contexts, tmpdir):
    if scheme == "unix":
        address, kwargs = f"unix://{tmpdir}/nobody-listens", {}
    else:
        address = f"{scheme}://127.0.0.1:{free_port()}"
        kwargs = {"ssl_context": tls_contexts[1]} if scheme == "tls" else {}
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(CommTimeoutError) as info:
        await connect(address, timeout=0.5, **kwargs)
    assert loop.time() - start >= 0.5 - CLOCK_SLACK_S  # retried until the deadline, not given up before
    assert isinstance(info.value, TimeoutError) and isinstance(info.value, CommClosedError)
    assert address in str(info.value) and "0.5 s" in str(info.value)
    assert info.value.__cause__ is not None


@pytest.mark.parametrize("scheme", SCHEMES)
def test_connect_timeout_to_closed_port(scheme, tls_contexts, short_tmp):
    run(check_connect_timeout(scheme, tls_contexts, short_tmp))


async def check_connect_retries_until_listening(monkeypatch):
    address = f"tcp://127.0.0.1:{free_port()}"
    attempts = []
    listeners = []
    real_open_stream = comm_module.open_stream

    async def open_stream(*args, **kwargs):
        # the server comes up right after the first attempt was refused
        try:
            stream = await real_open_stream(*args, **kwargs)
        except OSError:
            attempts.append("refused")
            if not listeners:
                listeners.append(await listen(address, echo_handler))
            raise
        attempts.append("connected")
        return stream

    monkeypatch.setattr(comm_module, "open_stream", open_stream)
    try:
        comm = await connect(address, timeout=20)
        assert attempts == ["refused", "connected"]
        await comm.write("late")
        assert await comm.read() == "late"
        await comm.close()
    finally:
        for listener in listeners:
            listener.stop()


def test_connect_retries_until_the_server_listens(monkeypatch):
    run(check_connect_retries_until_listening(monkeypatch))


async def check_read_cancellation_aborts(endpoint):
    handler, result, started = recording_handler()
    listener = await endpoint.listen(handler)
    try:
        comm = await endpoint.connect(listener)
        reading = asyncio.ensure_future(comm.read())
        await until(comm.stream.reading)  # the read is pending
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading
        assert comm.closed()
        assert isinstance(await asyncio.wait_for(result, 5), CommClosedError)
        with pytest.raises(CommClosedError):
            await comm.read()
    finally:
        listener.stop()


def test_comm_read_cancellation_aborts(endpoint, loop_name):
    run(check_read_cancellation_aborts(endpoint), loop=loop_name)


async def check_read_timeout(tcp):
    listener = await tcp.listen(recording_handler()[0])
    try:
        comm = await tcp.connect(listener, read_timeout=0.2)
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(CommTimeoutError, match="read_timeout=0.2"):
            await comm.read()
        assert loop.time() - start >= 0.2 - CLOCK_SLACK_S  # not before the timeout
        assert comm.closed()
    finally:
        listener.stop()


def test_comm_read_timeout_aborts(tcp):
    run(check_read_timeout(tcp))


async def check_concurrent_read_is_refused(tcp):
    listener = await tcp.listen(echo_handler)
    try:
        comm = await tcp.connect(listener)
        first = asyncio.ensure_future(comm.read())
        await until(comm.stream.reading)  # the first read is pending
        with pytest.raises(BufferBusyError):
            await comm.read()
        assert not comm.closed()
        await comm.write("still fine")
        assert await asyncio.wait_for(first, 5) == "still fine"
        with pytest.raises(TypeError):
            await comm.write({"f": fractions.Fraction(1, 2)})  # nothing sent
        await comm.write("usable")
        assert await comm.read() == "usable"
        await comm.close()
    finally:
        listener.stop()


def test_comm_concurrent_read_and_bad_write_leave_comm_usable(tcp):
    run(check_concurrent_read_is_refused(tcp))


async def check_limits_pass_through(tcp):
    handler, result, _ = recording_handler()
    listener = await tcp.listen(handler, max_message_nbytes=100_000, max_frames=3)
    try:
        comm = await tcp.connect(listener)
        await comm.write({"ok": b"x" * 50_000})  # under the limits: delivered
        await comm.write({"too big": b"x" * 200_000})
        exc = await asyncio.wait_for(result, 5)
        assert isinstance(exc, FrameTooLargeError) and exc.field == "max_message_nbytes", exc
        with pytest.raises(CommClosedError):
            await asyncio.wait_for(comm.read(), 5)
    finally:
        listener.stop()


def test_comm_limits_pass_through_to_framed_stream(tcp):
    run(check_limits_pass_through(tcp))


async def check_allocator_option(tcp):
    listener = await tcp.listen(echo_handler)
    try:
        default = await tcp.connect(listener)
        custom = await tcp.connect(listener, allocator=bytearray_allocator)
        for comm in (default, custom):
            await comm.write({"b": b"z" * 100_000})
        assert isinstance((await default.read())["b"].obj, np.ndarray)  # numpy.empty below 4 MiB
        assert isinstance((await custom.read())["b"].obj, bytearray)
        default.abort()
        custom.abort()
    finally:
        listener.stop()


def test_comm_allocator_option(tcp):
    run(check_allocator_option(tcp))


async def check_large_buffers_are_recycled(tcp):
    """By default large frames land in recycling_allocator buffers: once a
    received array is dropped, the next message reuses its memory."""
    listener = await tcp.listen(echo_handler)
    try:
        comm = await tcp.connect(listener)
        hits = recycling_allocator.hits
        for i in range(4):
            sent = np.full(6 << 20, i, dtype=np.uint8)
            got = (await comm.write({"a": sent}), await comm.read())[1]["a"]
            assert got.dtype == np.uint8 and np.array_equal(got, sent)
            del got
        # 3 on the client's side, at least 2 on the echo server's
        assert recycling_allocator.hits - hits >= 5
        comm.abort()
    finally:
        listener.stop()


def test_comm_recycles_large_receive_buffers(tcp):
    run(check_large_buffers_are_recycled(tcp))


# -- backpressure ------------------------------------------------------------------------


def completes_without_waiting(coro):
    """Run ``coro`` one step: return its result if it finished without
    suspending, else fail (it waited for something)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise AssertionError(f"{coro} waited")


async def check_backpressure_resumes(endpoint):
    may_read = asyncio.Event()
    got = []
    finished = asyncio.get_running_loop().create_future()

    async def slow_reader(comm):
        await may_read.wait()
        try:
            while True:
                got.append(digest((await comm.read())["data"]))
        except CommClosedError:
            finished.set_result(None)

    listener = await endpoint.listen(slow_reader)
    try:
        comm = await endpoint.connect(listener, write_high_water_nbytes=MiB)
        small = b"s" * (MiB // 2)
        assert completes_without_waiting(comm.write({"data": small})) > MiB // 2  # under the mark
        data = np.random.default_rng(2).bytes(32 * MiB)
        # the queue is under the mark when it is queued: returns at once
        # though the peer does not read, as distributed's own comm does
        assert completes_without_waiting(comm.write({"data": data})) > 32 * MiB
        assert comm.stream.write_buffer_nbytes > 16 * MiB  # far more than kernel buffers take
        # over the mark: the next write waits for the queue to drain first
        writing = asyncio.ensure_future(comm.write({"data": small}))
        await asyncio.sleep(0)  # one loop turn: the write runs to its wait
        assert not writing.done()
        may_read.set()
        assert await asyncio.wait_for(writing, 10) > MiB // 2  # resumed once the peer read
        await asyncio.wait_for(comm.close(), 10)
        await finished  # the peer read all three, then saw the close
        assert got == [digest(small), digest(data), digest(small)]
    finally:
        listener.stop()


def test_comm_write_backpressure(endpoint, loop_name):
    run(check_backpressure_resumes(endpoint), loop=loop_name)


# -- TLS ----------------------------------------------------------------------------------


async def check_tls_refusals(tls_contexts, monkeypatch):
    server_ctx, client_ctx = tls_contexts
    listener = await listen("tls://127.0.0.1:0", echo_handler, ssl_context=server_ctx)
    attempts = connect_attempts(monkeypatch, comm_module)
    try:
        address = listener.contact_address
        with pytest.raises(HandshakeError, match="certificate verify failed|CERTIFICATE_VERIFY_FAILED"):
            await connect(address, ssl_context=client_ctx, server_hostname="wrong.example.com", timeout=5)
        untrusted = ssl.create_default_context()  # the system CAs do not know trustme's CA
        with pytest.raises(HandshakeError, match="certificate verify failed|CERTIFICATE_VERIFY_FAILED"):
            await connect(address, ssl_context=untrusted, timeout=5)
        assert attempts == ["failed", "failed"]  # refused at once, not retried until the timeout
        # the listener survives both and serves a good client, hostname checked
        assert client_ctx.check_hostname
        async with await connect(address, ssl_context=client_ctx, timeout=5) as comm:
            await comm.write("secure")
            assert await comm.read() == "secure"
            sock = comm.stream.socket
            assert isinstance(sock, ssl.SSLSocket)
            assert (sock.getpeercert() or {})["subjectAltName"]
        with pytest.raises(ValueError, match="ssl_context"):
            await connect(address, timeout=1)
        with pytest.raises(ValueError, match="tls://"):
            await connect(address.replace("tls://", "tcp://"), ssl_context=client_ctx, timeout=1)
        with pytest.raises(ValueError, match="ssl_context"):
            await listen("tls://127.0.0.1:0", echo_handler)
    finally:
        listener.stop()


def test_tls_hostname_and_ca_verification(tls_contexts, monkeypatch):
    run(check_tls_refusals(tls_contexts, monkeypatch))


# -- Unix sockets ---------------------------------------------------------------------------


async def check_unix_socket_file(tmpdir):
    path = os.path.join(tmpdir, "s.sock")
    # a stale socket file: bound, then its process went away without unlinking
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(path)
    stale.close()
    assert stat.S_ISSOCK(os.lstat(path).st_mode)
    listener = await listen(f"unix://{path}", echo_handler)
    try:
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
        assert [n for n in os.listdir(tmpdir) if n != "s.sock"] == []  # no temporary left behind
        async with await connect(f"unix://{path}", timeout=5) as comm:
            await comm.write({"unix": np.arange(100_000)})
            assert np.array_equal((await comm.read())["unix"], np.arange(100_000))
        # a live server's socket is not taken over
        with pytest.raises(OSError, match="already listening"):
            await listen(f"unix://{path}", echo_handler)
    finally:
        listener.stop()
    assert not os.path.exists(path)
    # a file that is not a socket is never replaced
    with open(path, "w") as f:
        f.write("precious")
    with pytest.raises(FileExistsError):
        await listen(f"unix://{path}", echo_handler)
    with open(path) as f:
        assert f.read() == "precious"


def test_unix_socket_file_mode_stale_and_removal(short_tmp):
    run(check_unix_socket_file(short_tmp))


async def check_unix_stop_keeps_foreign_file(tmpdir):
    path = os.path.join(tmpdir, "s.sock")
    listener = await listen(f"unix://{path}", echo_handler)
    os.unlink(path)
    other = await listen(f"unix://{path}", echo_handler)  # someone else now owns the path
    listener.stop()
    assert os.path.exists(path)
    other.stop()
    assert not os.path.exists(path)


def test_unix_stop_removes_only_its_own_file(short_tmp):
    run(check_unix_stop_keeps_foreign_file(short_tmp))


# -- hostile peers ----------------------------------------------------------------------------


HOSTILE_PAYLOADS = {
    # nframes = 0xffffffffffffffff
    "garbage": b"\xff" * 64,
    # one frame of 2**63 bytes
    "huge_frame": pack_header([2**63]),
    # frame 0 is not msgpack
    "bad_msgpack": framed([b"\xc1\xc1\xc1"]),
    # a placeholder naming a frame that does not exist
    "bad_placeholder": framed([msgpack.packb(msgpack.ExtType(EXT_BUFFER, msgpack.packb(7)))]),
    # half a message, then the peer closes
    "truncated": pack_header([1000, 5000]) + b"x" * 2000,
}

EXPECTED_ERRORS = {
    "garbage": FrameTooLargeError,
    "huge_frame": FrameTooLargeError,
    "bad_msgpack": FramingError,
    "bad_placeholder": FramingError,
    "truncated": CommClosedError,
}


async def check_hostile_peer(endpoint, kind):
    handler, result, started = recording_handler()
    listener = await endpoint.listen(handler)
    try:
        reader, writer = await raw_open(listener, endpoint)
        writer.write(handshake_bytes() + HOSTILE_PAYLOADS[kind])
        await writer.drain()
        if kind == "truncated":
            await asyncio.wait_for(started, 5)  # else the server may drop it before its handler runs
            writer.close()
        exc = await asyncio.wait_for(result, 5)
        assert isinstance(exc, EXPECTED_ERRORS[kind]), repr(exc)
        if kind == "huge_frame":
            assert str(2**63) in str(exc)
        await read_until_eof(reader)  # the server closed the connection
        writer.close()
    finally:
        listener.stop()


@pytest.mark.parametrize("kind", sorted(HOSTILE_PAYLOADS))
def test_hostile_peer_gets_clean_error(endpoint, kind, loop_name):
    run(check_hostile_peer(endpoint, kind), loop=loop_name)


async def check_hostile_handshake(tcp, payload):
    # A bad handshake is dropped at once: with an hour's handshake_timeout,
    # only the payload can make the server hang up (the test's own timeout
    # fails it otherwise).  Silence is dropped at handshake_timeout, not before.
    silent = payload == b""
    timeout = 0.5 if silent else 3600
    called: list[object] = []
    listener = await tcp.listen(called.append, handshake_timeout=timeout)
    try:
        loop = asyncio.get_running_loop()
        start = loop.time()  # before the server can accept, hence before its timer starts
        reader, writer = await raw_open(listener)
        writer.write(payload)
        data = await read_until_eof(reader, timeout=None)
        if silent:
            assert loop.time() - start >= timeout - CLOCK_SLACK_S
        # the server sent its own handshake, then hung up
        if data:
            frames_nbytes = int.from_bytes(data[8:16], "little")
            assert msgpack.unpackb(data[16 : 16 + frames_nbytes])["protocol"] == PROTOCOL_NAME
        assert called == []  # the handler never saw the connection
        writer.close()
    finally:
        listener.stop()


@pytest.mark.parametrize(
    "payload",
    [
        handshake_bytes(version=999),
        handshake_bytes(protocol="http"),
        framed([msgpack.packb(["not", "a", "dict"])]),
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"",  # says nothing: dropped after handshake_timeout
    ],
    ids=["version", "protocol", "not-a-dict", "http", "silent"],
)
def test_listener_drops_bad_handshake(tcp, payload):
    run(check_hostile_handshake(tcp, payload))


async def check_server_version_mismatch(reply, attempts):
    async def raw_server(reader, writer):
        writer.write(reply)
        await writer.drain()
        await read_until_eof(reader)
        writer.close()

    server = await asyncio.start_server(raw_server, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(HandshakeError) as info:
            await connect(f"tcp://127.0.0.1:{port}", timeout=5)
        assert attempts == ["connected"]  # the handshake failed; not retried
        return str(info.value)
    finally:
        server.close()


def test_connect_handshake_version_mismatch(monkeypatch):
    attempts = connect_attempts(monkeypatch, comm_module)
    message = run(check_server_version_mismatch(handshake_bytes(version=999), attempts))
    assert "version 999" in message and f"version {PROTOCOL_VERSION}" in message


def test_connect_to_a_peer_that_speaks_another_protocol(monkeypatch):
    attempts = connect_attempts(monkeypatch, comm_module)
    message = run(check_server_version_mismatch(b"HTTP/1.1 400 Bad Request\r\n\r\n" + b"\0" * 100, attempts))
    assert "does not speak tornado_readinto" in message


# -- pickle -----------------------------------------------------------------------------------

UNPICKLED: list[str] = []


def _record_unpickle(tag):
    UNPICKLED.append(tag)
    return tag


class Exploit:
    def __reduce__(self):
        return (_record_unpickle, ("pwned",))


@dataclasses.dataclass
class Payload:
    name: str
    data: np.ndarray


async def check_malicious_pickle_refused(endpoint):
    UNPICKLED.clear()
    handler, result, started = recording_handler()
    listener = await endpoint.listen(handler)  # allow_pickle not set
    try:
        reader, writer = await raw_open(listener, endpoint)
        placeholder = msgpack.ExtType(EXT_PICKLE, msgpack.packb([pickle.dumps(Exploit()), []]))
        writer.write(handshake_bytes(allow_pickle=True) + framed([msgpack.packb({"x": placeholder})]))
        await writer.drain()
        exc = await asyncio.wait_for(result, 5)
        assert isinstance(exc, FramingError) and "allow_pickle=True" in str(exc)
        assert UNPICKLED == []
        await read_until_eof(reader)  # aborted
        writer.close()
    finally:
        listener.stop()


def test_pickle_placeholder_refused_without_opt_in(endpoint):
    run(check_malicious_pickle_refused(endpoint))


async def check_pickle_opt_in(tcp):
    listener = await tcp.listen(echo_handler, allow_pickle=True)
    try:
        async with await tcp.connect(listener, allow_pickle=True) as comm:
            payload = Payload("p", np.arange(200_000, dtype=np.float32))
            msg = {"frac": fractions.Fraction(1, 3), "obj": payload, "set": {1, 2}}
            assert len(encode_message(msg, allow_pickle=True)) == 2  # the array's buffer out of band
            await comm.write(msg)
            got = await comm.read()
            assert got["frac"] == fractions.Fraction(1, 3) and got["set"] == {1, 2}
            assert got["obj"].name == "p" and np.array_equal(got["obj"].data, payload.data)
        # opted in here, but the peer did not: refused before sending anything
        plain = await listen("tcp://127.0.0.1:0", echo_handler)
        try:
            async with await connect(plain.contact_address, allow_pickle=True, timeout=5) as comm:
                assert comm.peer_info["allow_pickle"] is False
                with pytest.raises(TypeError, match="allow_pickle"):
                    await comm.write(fractions.Fraction(1, 3))
                await comm.write("fine")
                assert await comm.read() == "fine"
        finally:
            plain.stop()
    finally:
        listener.stop()


def test_pickle_round_trip_when_both_opt_in(tcp):
    run(check_pickle_opt_in(tcp))


# -- listener lifecycle -----------------------------------------------------------------------


async def check_stop_keeps_established_comms(tcp):
    listener = await tcp.listen(echo_handler)
    comm = await tcp.connect(listener)
    await comm.write("before stop")  # the server side is past its handshake too
    assert await comm.read() == "before stop"
    listener.stop()
    listener.stop()  # idempotent
    await comm.write("after stop")
    assert await comm.read() == "after stop"
    with pytest.raises(CommTimeoutError):
        await connect(listener.contact_address, timeout=0.3)
    await comm.close()


def test_listener_stop_keeps_established_comms(tcp):
    run(check_stop_keeps_established_comms(tcp))


def test_listen_returns_a_listener_already_listening(tcp):
    async def main():
        listener = await tcp.listen(echo_handler)
        assert isinstance(listener, Listener)
        host, port = listener.listen_address.split("://")[1].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=2):
            pass
        async with listener:
            comm = await tcp.connect(listener)
            assert isinstance(comm, Comm)
            comm.abort()

    run(main())


def test_import_does_not_pull_in_distributed():
    code = "import sys, tornado_readinto, tornado_readinto.channel.comm; assert 'distributed' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
