"""The dask.distributed plug-in: entry points, distributed's generic comm
checks for the readinto:// and readinto-tls:// schemes (through distributed's
public connect/listen), and real LocalClusters moving >100 MB between worker
processes over each scheme.  These must run wherever distributed is installed
(the test extra): nothing here is skipped."""

import asyncio
import os
import struct

import dask
import dask.array as da
import numpy as np
import pytest
import trustme
from distributed import Client, LocalCluster, wait
from distributed.comm import CommClosedError, connect, listen
from distributed.comm.addressing import (
    get_address_host,
    get_address_host_port,
    get_local_address_for,
    parse_address,
    resolve_address,
)
from distributed.comm.core import FatalCommClosedError
from distributed.comm.registry import get_backend
from distributed.protocol import Serialized, dumps, to_serialize
from distributed.security import Security

import tornado_readinto.dask.backend as dask_backend
from tornado_readinto import ReadIntoIOStream
from tornado_readinto.dask.backend import (
    ReadIntoComm,
    ReadIntoTCPBackend,
    ReadIntoTCPListener,
    ReadIntoTLSBackend,
    ReadIntoTLSComm,
)
from tornado_readinto.dask.switch import install_backends, switch_off
from tornado_readinto.wire.framing import pack_header, prefixed_message_header

from ..conftest import connect_attempts, run

MiB = 1 << 20


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory):
    """PEM files from a throwaway trustme CA: (ca_file, cert_and_key_file)."""
    d = tmp_path_factory.mktemp("dask-tls")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    ca_file, cert_file = str(d / "ca.pem"), str(d / "cert.pem")
    ca.cert_pem.write_to_path(ca_file)
    cert.private_key_and_cert_chain_pem.write_to_path(cert_file)
    return ca_file, cert_file


@pytest.fixture(scope="module")
def security(tls_files):
    ca_file, cert_file = tls_files
    return Security(
        tls_ca_file=ca_file,
        tls_client_cert=cert_file,
        tls_scheduler_cert=cert_file,
        tls_worker_cert=cert_file,
        require_encryption=True,
    )


@pytest.fixture
def switched():
    """distributed's tcp:// and tls:// served by this package for the test."""
    install_backends()
    yield
    switch_off(config=False)


@pytest.fixture(params=["readinto", "readinto-tls", "tcp", "tls"])
def scheme_args(request, security):
    """(scheme, listen_args, connect_args) for distributed's listen/connect;
    tcp and tls are served by this package (`tornado_readinto.dask.tcp`)."""
    if request.param in ("tcp", "tls"):
        request.getfixturevalue("switched")
    if request.param in ("readinto-tls", "tls"):
        return request.param, security.get_listen_args("scheduler"), security.get_connection_args("client")
    return request.param, {}, {}


# -- (a) registration ---------------------------------------------------------------


def test_entry_points_register_both_schemes():
    assert isinstance(get_backend("readinto"), ReadIntoTCPBackend)
    assert isinstance(get_backend("readinto-tls"), ReadIntoTLSBackend)


# -- (b) distributed's generic comm checks, for our schemes ---------------------------


async def check_client_server(scheme, listen_args, connect_args):
    server_comms = []

    async def handle_comm(comm):
        server_comms.append(comm)
        try:
            while True:
                msg = await comm.read()
                await comm.write({"op": "pong", "data": msg["data"]})
        except CommClosedError:
            pass
        finally:
            comm.abort()

    async with listen(f"{scheme}://127.0.0.1:0", handle_comm, **listen_args) as listener:
        assert listener.listen_address.startswith(f"{scheme}://127.0.0.1:")
        assert listener.contact_address == listener.listen_address
        comm = await connect(listener.contact_address, **connect_args)
        assert isinstance(comm, ReadIntoTLSComm if scheme == "readinto-tls" else ReadIntoComm)
        assert comm.peer_address == listener.contact_address
        assert comm.local_address.startswith(f"{scheme}://127.0.0.1:")
        for data in ((1, "two", 3.0), b"x" * 10, b"y" * (3 * MiB)):  # distributed sends lists as tuples
            nbytes = await comm.write({"op": "ping", "data": data})
            assert nbytes > (len(data) if isinstance(data, bytes) else 0)
            reply = await comm.read()
            assert reply["op"] == "pong" and reply["data"] == data
        server = server_comms[0]
        assert server.peer_address == comm.local_address
        assert server.local_address == comm.peer_address
        assert comm.same_host and server.same_host
        if scheme == "readinto-tls":
            assert comm.extra_info["peercert"] and comm.extra_info["cipher"]
            assert server.extra_info["peercert"]  # mutual TLS
        # as distributed's TCP comm: the stream while open, None once closed
        assert isinstance(comm.stream, ReadIntoIOStream)
        assert comm.stream.socket.getsockname() == server.stream.socket.getpeername()
        await comm.close()
        assert comm.closed() and comm.stream is None


def test_dask_client_server(scheme_args, loop_name):
    run(check_client_server(*scheme_args), loop=loop_name)


async def check_comm_closed_implicit(scheme, listen_args, connect_args):
    async def handle_comm(comm):
        await comm.close()

    async with listen(f"{scheme}://127.0.0.1:0", handle_comm, **listen_args) as listener:
        comm = await connect(listener.contact_address, **connect_args)
        with pytest.raises(CommClosedError) as info:
            await comm.write({"op": "ping"})
            await comm.read()
        assert info.value.__cause__ is not None or "closed" in str(info.value)
        assert comm.closed()
        with pytest.raises(CommClosedError):
            await comm.read()


def test_dask_comm_closed_implicit(scheme_args):
    run(check_comm_closed_implicit(*scheme_args))


def read_error_handler():
    """A comm handler that reads once; and a Future of the error that read raised."""
    server_error = asyncio.get_running_loop().create_future()

    async def handle_comm(comm):
        try:
            await comm.read()
        except BaseException as exc:
            server_error.set_result(exc)

    return handle_comm, server_error


async def check_comm_closed_explicit(scheme, listen_args, connect_args):
    handle_comm, server_error = read_error_handler()

    async with listen(f"{scheme}://127.0.0.1:0", handle_comm, **listen_args) as listener:
        comm = await connect(listener.contact_address, **connect_args)
        await comm.close()
        assert comm.closed()
        await comm.close()  # idempotent
        comm.abort()
        assert "(closed)" in repr(comm)
        with pytest.raises(CommClosedError):
            await comm.write({"op": "ping"})
        with pytest.raises(CommClosedError):
            await comm.read()
        assert isinstance(await asyncio.wait_for(server_error, 5), CommClosedError)


def test_dask_comm_closed_explicit(scheme_args):
    run(check_comm_closed_explicit(*scheme_args))


async def check_deserialize(scheme, listen_args, connect_args):
    received = []

    async def handle_comm(comm):
        msg = await comm.read()
        received.append(msg)
        await comm.write({k: v if isinstance(v, (str, Serialized)) else to_serialize(v) for k, v in msg.items()})
        await comm.close()

    arr = np.arange(2_000_000, dtype=np.float64)
    big = os.urandom(12 * MiB)
    msg = {"op": "update", "array": to_serialize(arr), "bytes": to_serialize(big), "small": to_serialize(b"tiny")}

    # the server deserializes
    async with listen(f"{scheme}://127.0.0.1:0", handle_comm, **listen_args) as listener:
        comm = await connect(listener.contact_address, **connect_args)
        await comm.write(msg)
        got = await comm.read()
        assert isinstance(received[0]["array"], np.ndarray) and np.array_equal(received[0]["array"], arr)
        assert np.array_equal(got["array"], arr) and got["array"].flags.writeable
        assert bytes(got["bytes"]) == big and bytes(got["small"]) == b"tiny"
        await comm.close()

    # the server does not deserialize: it sees (and forwards) Serialized objects
    received.clear()
    async with listen(f"{scheme}://127.0.0.1:0", handle_comm, deserialize=False, **listen_args) as listener:
        comm = await connect(listener.contact_address, **connect_args)
        await comm.write(msg)
        got = await comm.read()
        assert isinstance(received[0]["array"], Serialized)
        assert np.array_equal(got["array"], arr) and bytes(got["bytes"]) == big
        await comm.close()


def test_dask_deserialize_round_trips(scheme_args):
    run(check_deserialize(*scheme_args))


async def check_garbled_handshake(scheme):
    """A raw peer that sends a hostile header instead of distributed's
    handshake: the listener drops it cleanly (the comm handler never runs),
    nothing hangs."""
    handled: list[object] = []
    async with listen(f"{scheme}://127.0.0.1:0", handled.append) as listener:
        host, port = get_address_host_port(listener.contact_address)
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(pack_header([2**63]))
        await writer.drain()
        try:
            await asyncio.wait_for(reader.read(), 5)  # the server hangs up
        except ConnectionResetError:
            pass
        writer.close()
        assert handled == []


@pytest.mark.parametrize("scheme", ["readinto", "tcp"])
def test_dask_listener_drops_garbled_handshake(scheme, request):
    if scheme == "tcp":
        request.getfixturevalue("switched")
    run(check_garbled_handshake(scheme))


async def check_close_flushes_and_abort_breaks(scheme, listen_args, connect_args):
    results = []
    done = asyncio.Event()

    async def handle_comm(comm):
        try:
            while True:
                results.append(await comm.read())
        except BaseException as exc:
            results.append(exc)
        finally:
            done.set()

    data = os.urandom(32 * MiB)
    async with listen(f"{scheme}://127.0.0.1:0", handle_comm, **listen_args) as listener:
        # close() sends what is still queued first
        comm = await connect(listener.contact_address, **connect_args)
        await comm.write({"data": to_serialize(data)})
        await asyncio.wait_for(comm.close(), 10)
        await asyncio.wait_for(done.wait(), 10)
        assert bytes(results[0]["data"]) == data
        assert isinstance(results[1], CommClosedError)

        # abort() in the middle of a message: the peer gets CommClosedError, no hang
        results.clear()
        done.clear()
        comm = await connect(listener.contact_address, **connect_args)
        await comm.write({"data": to_serialize(data)})
        assert comm.stream is not None
        comm.abort()
        assert comm.stream is None
        await asyncio.wait_for(done.wait(), 10)
        assert len(results) == 1 and isinstance(results[0], CommClosedError), results
        assert "peer closed connection after" in str(results[0])


def test_dask_close_flushes_abort_breaks(scheme_args, loop_name):
    run(check_close_flushes_and_abort_breaks(*scheme_args), loop=loop_name)


async def check_read_cancellation_aborts():
    handle_comm, server_error = read_error_handler()

    async with listen("readinto://127.0.0.1:0", handle_comm) as listener:
        comm = await connect(listener.contact_address)
        reading = asyncio.ensure_future(comm.read())
        await asyncio.sleep(0.05)
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading
        assert comm.closed()
        assert isinstance(await asyncio.wait_for(server_error, 5), CommClosedError)


def test_dask_read_cancellation_aborts(loop_name):
    run(check_read_cancellation_aborts(), loop=loop_name)


#: Hostile headers after the handshake (tcp.py's byte stream: P first), and
#: what the error names.
GARBLED = {
    "length_2_63": (struct.pack("<Q", 16) + pack_header([2**63]), str(2**63)),
    "nframes_2_40": (struct.pack("<QQ", 8, 2**40), str(2**40)),
    "prefix_mid_frame": (struct.pack("<Q", 16 + 5) + pack_header([10]), "bad message prefix: P=21"),
    "prefix_huge": (struct.pack("<Q", 2**64 - 1) + pack_header([10]), "bad message prefix"),
    "prefix_below_prelude": (struct.pack("<Q", 8) + pack_header([10, 10]), "bad message prefix: P=8"),
}


async def check_garbled_message_after_handshake(scheme, header, named):
    """A raw peer that does distributed's handshake, then sends a hostile
    header: the server's read fails cleanly with an error that names the
    bad value, the comm is closed, nothing hangs."""
    handle_comm, server_error = read_error_handler()

    async with listen(f"{scheme}://127.0.0.1:0", handle_comm) as listener:
        host, port = get_address_host_port(listener.contact_address)
        reader, writer = await asyncio.open_connection(host, port)
        handshake = dumps({"compression": None, "python": (3, 11, 0), "pickle-protocol": 5})
        handshake_header, _ = prefixed_message_header(handshake)
        writer.write(handshake_header + b"".join(handshake) + header + b"\0" * 64)
        await writer.drain()
        exc = await asyncio.wait_for(server_error, 5)
        assert isinstance(exc, CommClosedError) and "garbled" in str(exc) and named in str(exc)
        try:
            await asyncio.wait_for(reader.read(), 5)  # returns at EOF: the comm was closed
        except ConnectionResetError:
            pass
        writer.close()


@pytest.mark.parametrize("case", sorted(GARBLED))
@pytest.mark.parametrize("scheme", ["readinto", "tcp"])
def test_dask_garbled_message_after_handshake(scheme, case, request):
    if scheme == "tcp":
        request.getfixturevalue("switched")
    run(check_garbled_message_after_handshake(scheme, *GARBLED[case]))


async def check_addresses(scheme, listen_args, connect_args):
    async with listen(f"{scheme}://127.0.0.1:0", lambda comm: comm.abort(), **listen_args) as listener:
        address = listener.contact_address
        assert parse_address(address)[0] == scheme
        assert get_address_host(address) == "127.0.0.1"
        assert get_address_host_port(address) == ("127.0.0.1", int(address.rsplit(":", 1)[1]))
    assert resolve_address(f"{scheme}://localhost:8786") == f"{scheme}://127.0.0.1:8786"
    assert get_local_address_for(f"{scheme}://127.0.0.1:8786") == f"{scheme}://127.0.0.1"
    assert get_address_host(f"{scheme}://[::1]:8786") == "::1"


def test_dask_addresses(scheme_args):
    run(check_addresses(*scheme_args))


async def check_listen_on_all_interfaces():
    async with listen("readinto://:0", lambda comm: comm.abort()) as listener:
        host, port = get_address_host_port(listener.listen_address)
        assert port > 0
        contact_host = get_address_host(listener.contact_address)
        assert contact_host not in ("", "0.0.0.0")  # a concrete host to connect to
    listener = ReadIntoTCPListener("127.0.0.1", lambda comm: None, default_port=0)
    with pytest.raises(ValueError, match="non-started"):
        listener.listen_address


def test_dask_listen_wildcard_and_default_port():
    run(check_listen_on_all_interfaces())


def test_dask_tls_needs_an_ssl_context_and_encryption_is_enforced(security):
    async def main():
        with pytest.raises(TypeError, match="ssl_context"):
            await listen("readinto-tls://127.0.0.1:0", lambda comm: None)
        with pytest.raises(RuntimeError, match="encryption required"):
            await listen("readinto://127.0.0.1:0", lambda comm: None, require_encryption=True)
        with pytest.raises(RuntimeError, match="encryption required"):
            await connect("readinto://127.0.0.1:1", timeout=1, require_encryption=True)

    run(main())


def test_dask_tls_untrusted_client_is_refused(security, tls_contexts, monkeypatch):
    """A client whose CA does not know the server's certificate."""
    attempts = connect_attempts(monkeypatch, dask_backend)

    async def main():
        listen_args = security.get_listen_args("scheduler")
        async with listen("readinto-tls://127.0.0.1:0", lambda comm: comm.abort(), **listen_args) as listener:
            _, stranger_ctx = tls_contexts  # trusts another CA
            with pytest.raises(FatalCommClosedError, match="certificate"):
                await connect(listener.contact_address, timeout=5, ssl_context=stranger_ctx)
            assert attempts == ["failed"]  # refused at once, not retried until the timeout

    run(main())


def test_dask_repr():
    async def main():
        async with listen("readinto://127.0.0.1:0", lambda comm: comm.abort()) as listener:
            comm = await connect(listener.contact_address)
            assert repr(comm).startswith("<ReadIntoComm")
            assert comm.local_address in repr(comm) and comm.peer_address in repr(comm)
            comm.abort()
            assert "(closed)" in repr(comm)

    run(main())


# -- (c) real clusters ------------------------------------------------------------------------

N = 4096  # a 4096 x 4096 float64 array: 128 MiB
CHUNKS = (N // 4, N // 4)  # 16 chunks of 8 MiB


def random_array():
    return da.random.RandomState(0).random_sample((N, N), chunks=CHUNKS)


@pytest.fixture(scope="module")
def expected_sum():
    x = random_array().compute(scheduler="sync")  # same seed, same chunks: the same numbers
    return float((x + x.T).sum())


def run_cluster_computation(client, scheme, expected):
    workers = sorted(client.scheduler_info()["workers"])
    assert len(workers) == 2
    assert all(w.startswith(f"{scheme}://") for w in workers), workers
    assert client.scheduler.address.startswith(f"{scheme}://")
    a, b = workers
    # All of x lives on a; the sum runs on b, so all 128 MiB move from a to b.
    x = client.persist(random_array(), workers=[a])
    wait(x)
    total = client.compute((x + x.T).sum(), workers=[b]).result(timeout=120)
    assert np.isclose(total, expected, rtol=1e-10), (total, expected)
    sent = client.run(lambda dask_worker: dask_worker.transfer_outgoing_bytes_total)
    assert sent[a] >= 100e6, sent


def local_cluster(scheme, **kwargs):
    return LocalCluster(
        protocol=f"{scheme}://",
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        worker_dashboard_address=None,
        **kwargs,
    )


@pytest.mark.timeout(180)
def test_local_cluster_moves_100mb_over_readinto(expected_sum):
    with dask.config.set({"distributed.comm.timeouts.connect": "30s"}):
        with local_cluster("readinto") as cluster, Client(cluster, timeout="30s") as client:
            run_cluster_computation(client, "readinto", expected_sum)


@pytest.mark.timeout(180)
def test_local_cluster_moves_100mb_over_readinto_tls(security, expected_sum):
    with dask.config.set({"distributed.comm.timeouts.connect": "30s"}):
        with local_cluster("readinto-tls", security=security) as cluster, Client(
            cluster, security=security, timeout="30s"
        ) as client:
            assert cluster.scheduler_address.startswith("readinto-tls://")
            run_cluster_computation(client, "readinto-tls", expected_sum)


async def check_busy_poll_from_config(scheme, listen_args, connect_args, setting, expected_s):
    accepted = asyncio.get_running_loop().create_future()

    async def handler(comm):
        accepted.set_result(comm.stream.busy_poll_s)
        await comm.close()

    with dask.config.set({"distributed.comm.readinto.busy-poll": setting}):
        async with listen(f"{scheme}://127.0.0.1:0", handler, **listen_args) as listener:
            comm = await connect(listener.contact_address, **connect_args)
            try:
                assert comm.stream.busy_poll_s == pytest.approx(expected_s)
                assert await asyncio.wait_for(accepted, 10) == pytest.approx(expected_s)
            finally:
                comm.abort()


@pytest.mark.parametrize(
    ("setting", "expected_s"), [(0, 0.0), ("0ms", 0.0), ("120us", 120e-6), (None, 0.0)]
)
def test_dask_busy_poll_comes_from_dask_config_on_both_ends(scheme_args, setting, expected_s):
    run(check_busy_poll_from_config(*scheme_args, setting, expected_s))


def test_dask_busy_poll_config_rejects_a_negative_duration():
    from tornado_readinto.dask.backend import stream_kwargs

    with dask.config.set({"distributed.comm.readinto.busy-poll": "-1ms"}):
        with pytest.raises(ValueError, match="distributed.comm.readinto.busy-poll must be a duration >= 0"):
            stream_kwargs()
    with dask.config.set({"distributed.comm.readinto.busy-poll": "50us"}):
        assert stream_kwargs() == {"busy_poll_s": pytest.approx(50e-6)}


@pytest.mark.parametrize("value", ["abc", [1]])
def test_dask_busy_poll_config_rejects_what_is_not_a_duration(value):
    from tornado_readinto.dask.backend import stream_kwargs

    with dask.config.set({"distributed.comm.readinto.busy-poll": value}):
        with pytest.raises(ValueError, match="must be a duration >= 0"):
            stream_kwargs()
