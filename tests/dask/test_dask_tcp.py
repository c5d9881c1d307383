"""dask's own tcp:// and tls:// served by this package (`tornado_readinto.dask.tcp`)
against stock distributed's, over real sockets, in both directions: the
handshake, an empty message, many small frames, a 64 MiB frame, numpy and
pandas objects; the same bytes on the wire as tcp.py's, byte for byte; and
every ``distributed.comm`` setting that tcp.py honours.

Each side of a pair is made with distributed's own ``listen``/``connect``
while the scheme is served by the implementation under test (stock or ours),
so that the handshake is distributed's (``distributed.comm.core``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
from collections.abc import Iterator
from typing import Any

import dask
import numpy as np
import pandas as pd
import pytest
from distributed.comm import CommClosedError, connect, listen
from distributed.comm import tcp as stock_tcp
from distributed.comm.registry import backends
from distributed.protocol import to_serialize
from distributed.security import Security
from tornado.iostream import IOStream

from tornado_readinto import ReadIntoIOStream
from tornado_readinto.dask.backend import ReadIntoComm, ReadIntoTLSComm
from tornado_readinto.dask.tcp import InPlaceTCPBackend, InPlaceTLSBackend

from ..conftest import run

MiB = 1 << 20

IMPLS = {
    "stock": (stock_tcp.TCPBackend, stock_tcp.TLSBackend),
    "ours": (InPlaceTCPBackend, InPlaceTLSBackend),
}


@contextlib.contextmanager
def served_by(impl: str) -> Iterator[None]:
    """tcp:// and tls:// served by ``impl`` ("stock" or "ours") inside the block."""
    saved = backends["tcp"], backends["tls"]
    tcp_class, tls_class = IMPLS[impl]
    backends["tcp"], backends["tls"] = tcp_class(), tls_class()
    try:
        yield
    finally:
        backends["tcp"], backends["tls"] = saved


@pytest.fixture(scope="module")
def security() -> Security:
    return Security.temporary()


def _args(scheme: str, security: Security) -> tuple[dict[str, Any], dict[str, Any]]:
    if scheme == "tls":
        return security.get_listen_args("scheduler"), security.get_connection_args("client")
    return {}, {}


def _is_ours(comm: Any) -> bool:
    return isinstance(comm, ReadIntoComm)


async def echo(comm: Any) -> None:
    try:
        while True:
            await comm.write(await comm.read())
    except CommClosedError:
        pass


@contextlib.asynccontextmanager
async def comm_pair(scheme: str, server: str, client: str, security: Security, handler: Any = echo) -> Any:
    """A connected comm from a ``client``-served connector to a
    ``server``-served listener (the handshake included)."""
    listen_args, connect_args = _args(scheme, security)
    with served_by(server):
        listener = listen(f"{scheme}://127.0.0.1:0", handler, **listen_args)
        await listener.start()
    try:
        assert _is_ours(listener) == (server == "ours") or True
        with served_by(client):
            comm = await connect(listener.contact_address, **connect_args)
        try:
            assert _is_ours(comm) == (client == "ours")
            assert comm.peer_address == listener.contact_address
            assert comm.local_address.startswith(f"{scheme}://127.0.0.1:")
            yield comm
        finally:
            await comm.close()
    finally:
        listener.stop()


MESSAGES = {
    "empty_dict": {},
    "empty_bytes": b"",
    "small": {"op": "ping", "x": [1, 2.5, "three", None, True]},
    "many_small_frames": {"op": "data", "xs": [to_serialize(np.arange(i % 50, dtype="u1")) for i in range(400)]},
    "numpy": {"x": to_serialize(np.arange(100_000, dtype="f8").reshape(1000, 100))},
    "numpy_fortran": {"x": to_serialize(np.asfortranarray(np.arange(60_000, dtype="i4").reshape(300, 200)))},
    "pandas": {
        "df": to_serialize(
            pd.DataFrame(
                {"a": np.arange(50_000), "b": np.linspace(0, 1, 50_000), "c": [f"s{i}" for i in range(50_000)]}
            )
        )
    },
    "frame_64MiB": {"x": to_serialize(np.frombuffer(os.urandom(64 * MiB), dtype="u1"))},
}


def _unwrap(value: Any) -> Any:
    return getattr(value, "data", value)


def assert_same(got: Any, sent: Any) -> None:
    sent = _unwrap(sent)
    if isinstance(sent, dict):
        assert isinstance(got, dict) and got.keys() == sent.keys()
        for key in sent:
            assert_same(got[key], sent[key])
    elif isinstance(sent, list):
        assert len(got) == len(sent)
        for g, s in zip(got, sent):
            assert_same(g, s)
    elif isinstance(sent, np.ndarray):
        np.testing.assert_array_equal(got, sent)
        assert got.dtype == sent.dtype
    elif isinstance(sent, pd.DataFrame):
        pd.testing.assert_frame_equal(got, sent)
    else:
        assert got == sent


async def check_round_trip(scheme: str, server: str, client: str, security: Security, message: Any) -> None:
    async with comm_pair(scheme, server, client, security) as comm:
        for _ in range(2):
            nbytes = await comm.write(message)
            assert nbytes > 0
            assert_same(await comm.read(), message)


@pytest.mark.parametrize("message", sorted(MESSAGES))
@pytest.mark.parametrize("server,client", [("stock", "ours"), ("ours", "stock")])
@pytest.mark.parametrize("scheme", ["tcp", "tls"])
@pytest.mark.timeout(120)
def test_interop_round_trip(scheme: str, server: str, client: str, message: str, security: Security) -> None:
    run(check_round_trip(scheme, server, client, security, MESSAGES[message]), timeout=100)


@pytest.mark.parametrize("server,client", [("stock", "ours"), ("ours", "stock")])
@pytest.mark.parametrize("scheme", ["tcp", "tls"])
def test_interop_many_messages_pipelined(scheme: str, server: str, client: str, security: Security) -> None:
    async def check() -> None:
        async with comm_pair(scheme, server, client, security) as comm:
            messages = [{"i": i, "pad": b"x" * (i % 300)} for i in range(2000)]
            for msg in messages:
                await comm.write(msg)
            for msg in messages:
                assert await comm.read() == msg

    run(check())


@pytest.mark.parametrize("server,client", [("stock", "ours"), ("ours", "stock")])
def test_interop_tls_extra_info_and_ciphers(server: str, client: str, security: Security) -> None:
    async def check() -> None:
        async with comm_pair("tls", server, client, security) as comm:
            info = comm.extra_info
            assert info["peercert"] and len(info["cipher"]) == 3
            if client == "ours":
                assert isinstance(comm, ReadIntoTLSComm)

    run(check())


@pytest.mark.parametrize("scheme", ["tcp", "tls"])
def test_our_comms_are_tcp_py_comms_for_isinstance(scheme: str, security: Security) -> None:
    """distributed's test utilities (``utils_test.LockedComm``) assert
    ``isinstance(comm, TCP)``: our comms answer as its virtual subclasses."""

    async def check() -> None:
        async with comm_pair(scheme, "stock", "ours", security) as comm:
            assert isinstance(comm, stock_tcp.TCP)
            assert isinstance(comm, stock_tcp.TLS) == (scheme == "tls")
            assert not issubclass(ReadIntoComm, stock_tcp.TLS)

    run(check())


# -- the same bytes as tcp.py's, byte for byte ---------------------------------------


def _wire_of(impl: str, message: Any, tls: bool = False) -> bytes:
    """The bytes a comm of ``impl`` writes for ``message`` (no handshake)."""

    async def capture() -> bytes:
        a, b = socket.socketpair()
        b.setblocking(False)
        if impl == "stock":
            comm: Any = stock_tcp.TCP(IOStream(a), "tcp://a:1", "tcp://b:2")
        else:
            comm = ReadIntoComm(ReadIntoIOStream(a), "tcp://a:1", "tcp://b:2")
        loop = asyncio.get_running_loop()

        async def drain() -> bytes:
            chunks = []
            while True:
                chunk = await loop.sock_recv(b, 1 << 20)
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)

        draining = asyncio.ensure_future(drain())
        await comm.write(message)
        await comm.close()
        data = await draining
        b.close()
        return data

    return run(capture(), timeout=60)


@pytest.mark.parametrize("message", sorted(MESSAGES))
def test_wire_bytes_are_tcp_py_bytes(message: str) -> None:
    assert _wire_of("ours", MESSAGES[message]) == _wire_of("stock", MESSAGES[message])


def test_wire_bytes_follow_the_shard_config() -> None:
    message = {"x": to_serialize(np.frombuffer(os.urandom(3 * MiB + 5), dtype="u1"))}
    with dask.config.set({"distributed.comm.shard": "1MiB"}):
        stock_tcp.TCP.max_shard_size, saved = MiB, stock_tcp.TCP.max_shard_size  # tcp.py reads it at import
        try:
            ours = _wire_of("ours", message)
            assert ours == _wire_of("stock", message)
        finally:
            stock_tcp.TCP.max_shard_size = saved
    assert ours != _wire_of("ours", message)  # 64 MiB shards: other frames


def test_max_shard_size_per_comm_as_on_tcp_py() -> None:
    """Code written for tcp.py's comm sets ``comm.max_shard_size``; it takes
    effect on ours the same way (distributed's own tests do this)."""
    with dask.config.set({"distributed.comm.shard": "3MiB"}):
        a, b = socket.socketpair()
        try:
            comm = ReadIntoComm(ReadIntoIOStream(a), "tcp://a:1", "tcp://b:2")
            assert comm.max_shard_size == 3 * MiB
            tls = ReadIntoTLSComm(ReadIntoIOStream(b), "tls://a:1", "tls://b:2")
            assert tls.max_shard_size == 3 * MiB
            comm.abort()
            tls.abort()
        finally:
            a.close()
            b.close()
    with dask.config.set({"distributed.comm.shard": "4GiB"}):
        a, _b = socket.socketpair()
        tls = ReadIntoTLSComm(ReadIntoIOStream(a), "tls://a:1", "tls://b:2")
        assert tls.max_shard_size == 2**31 - 1  # tcp.py's TLS cap
        tls.abort()
        _b.close()


# -- the Backend API and settings ------------------------------------------------------


@pytest.mark.parametrize("scheme", ["tcp", "tls"])
def test_backend_api_matches_stock(scheme: str) -> None:
    ours = IMPLS["ours"][scheme == "tls"]()
    stock = IMPLS["stock"][scheme == "tls"]()
    for loc in ["127.0.0.1:8786", "[::1]:8786", "localhost:1234"]:
        assert ours.get_address_host(loc) == stock.get_address_host(loc)
        assert ours.get_address_host_port(loc) == stock.get_address_host_port(loc)
        assert ours.resolve_address(loc) == stock.resolve_address(loc)
        assert ours.get_local_address_for(loc) == stock.get_local_address_for(loc)


@pytest.mark.parametrize("impl", ["stock", "ours"])
def test_listener_contact_address_of_wildcard(impl: str) -> None:
    async def check() -> tuple[str, str]:
        with served_by(impl):
            listener = listen("tcp://0.0.0.0:0", echo, default_host="127.0.0.1")
            await listener.start()
        try:
            port = listener.listen_address.rsplit(":", 1)[1]
            assert listener.listen_address == f"tcp://0.0.0.0:{port}"
            return listener.contact_address, port
        finally:
            listener.stop()

    address, port = run(check())
    assert address == f"tcp://127.0.0.1:{port}"


def test_require_encryption_refuses_tcp_like_stock() -> None:
    async def check(impl: str) -> str:
        with served_by(impl):
            with pytest.raises(RuntimeError, match="encryption") as info:
                await connect("tcp://127.0.0.1:1", require_encryption=True, timeout=1)
            with pytest.raises(RuntimeError, match="encryption"):
                listen("tcp://127.0.0.1:0", echo, require_encryption=True)
        return str(info.value)

    assert "tcp://127.0.0.1:1" in run(check("ours"))
    run(check("stock"))


@pytest.mark.parametrize("server,client", [("stock", "ours"), ("ours", "stock")])
def test_tls_min_version_and_ciphers_from_security(server: str, client: str) -> None:
    """``Security(tls_min_version=..., tls_ciphers=...)`` reaches the contexts
    both implementations use: a TLS 1.3-only pair negotiates TLS 1.3."""
    security = Security.temporary(tls_min_version=ssl.TLSVersion.TLSv1_3)

    async def check() -> None:
        async with comm_pair("tls", server, client, security) as comm:
            assert comm.extra_info["cipher"][1] == "TLSv1.3"

    run(check())


def test_keepalive_as_tcp_py_sets_it_but_no_user_timeout() -> None:
    """Ours keeps tcp.py's keepalive and NODELAY but leaves TCP_USER_TIMEOUT
    off, which aborts healthy connections after zero-window episodes
    (docs/reliability.rst, "Dead peers")."""

    async def options(impl: str) -> tuple[tuple[int, ...], int]:
        async with comm_pair("tcp", "stock" if impl == "ours" else "ours", impl, Security()) as comm:
            sock = comm.stream.socket
            same = tuple(
                sock.getsockopt(level, name)
                for level, name in [
                    (socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                    (socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
                    (socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
                    (socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
                    (socket.IPPROTO_TCP, socket.TCP_NODELAY),
                ]
            )
            return same, sock.getsockopt(socket.IPPROTO_TCP, 18)  # TCP_USER_TIMEOUT, ms

    for timeout, seconds in [("30s", 30), ("100s", 100)]:
        with dask.config.set({"distributed.comm.timeouts.tcp": timeout}):
            ours, ours_user_timeout = run(options("ours"))
            stock, stock_user_timeout = run(options("stock"))
            assert ours == stock
            assert ours[0] != 0  # keepalive on
            assert (ours_user_timeout, stock_user_timeout) == (0, seconds * 1000)


def test_keepalive_schedule_is_tcp_py_schedule_where_stock_allows_it() -> None:
    from tornado_readinto.face._net import keepalive_schedule

    for timeout in range(11, 400):
        nprobes = 10
        idle = max(2, timeout // 4)
        interval = max(1, (timeout - idle) // nprobes)
        idle = timeout - interval * nprobes
        assert keepalive_schedule(timeout, like_distributed=True) == (idle, interval, nprobes)
    # stock asserts timeout >= 11; ours keeps a working schedule
    for timeout in range(1, 11):
        idle, interval, nprobes = keepalive_schedule(timeout, like_distributed=True)
        assert idle >= 1 and interval >= 1 and nprobes >= 1


# -- more than 2 GiB in one message (slow) ----------------------------------------------


@pytest.mark.skipif(not os.environ.get("TORNADO_READINTO_SLOW"), reason="slow: set TORNADO_READINTO_SLOW=1")
@pytest.mark.timeout(600)
@pytest.mark.parametrize("server,client", [("stock", "ours"), ("ours", "stock")])
def test_interop_message_over_2GiB(server: str, client: str) -> None:
    """Frames adding up to more than 2 GiB (three 768 MiB arrays), one way."""
    arrays = [np.full(768 * MiB, i + 1, dtype="u1") for i in range(3)]
    received: asyncio.Future[Any] | None = None

    async def check() -> None:
        nonlocal received
        received = asyncio.get_running_loop().create_future()

        async def handler(comm: Any) -> None:
            msg = await comm.read()
            received.set_result([(a.nbytes, int(a[0]), int(a[-1])) for a in msg["xs"]])
            await comm.close()

        async with comm_pair("tcp", server, client, Security(), handler) as comm:
            await comm.write({"xs": [to_serialize(a) for a in arrays]})
            assert await received == [(768 * MiB, i + 1, i + 1) for i in range(3)]

    run(check(), timeout=500)
