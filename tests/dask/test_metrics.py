"""The switched comms' figures (`tornado_readinto.dask.metrics`) as a user sees
them from outside: on each process's ``/metrics`` over real HTTP
(`tornado_readinto.dask.prometheus`, registered by the switch's preload), in
`verify`'s report, and in the refused count after a hostile header.  A
switched ``LocalCluster`` of Nanny workers on 127.0.0.1, a stock ``dask
worker`` joining it.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import re
import socket
import struct
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from distributed import Client, LocalCluster

import tornado_readinto
from tornado_readinto.dask import switch as dask_switch
from tornado_readinto.dask.backend import ReadIntoComm
from tornado_readinto.dask.metrics import FIGURES, CommMetrics, snapshot
from tornado_readinto.dask.switch import verify
from tornado_readinto.errors import FrameTooLargeError, FramingError
from tornado_readinto.face.iostream import ReadIntoIOStream

from .test_dask_deploy import CLICluster
from .test_dask_switch import start_stock_worker

BUILD = "compiled" if tornado_readinto.COMPILED else "pure"

#: The array moved worker to worker (the issue's 64 MiB).
ARRAY_NBYTES = 64 * 1024 * 1024

_SAMPLE = re.compile(r"^(tornado_readinto_[a-z_]+)(\{[^}]*\})? (\S+)$", re.MULTILINE)


@pytest.fixture(autouse=True)
def stock_here():
    dask_switch.switch_off()
    yield
    dask_switch.switch_off()


def scrape(port: int) -> dict[str, float]:
    """``/metrics`` of the process whose HTTP server is on ``port``: every
    ``tornado_readinto_`` sample, by name with its labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        assert response.status == 200
        text = response.read().decode()
    assert "# TYPE" in text  # distributed's own metrics are there either way
    return {name + (labels or ""): float(value) for name, labels, value in _SAMPLE.findall(text)}


def http_port(dask_worker: Any) -> int:
    return dask_worker.http_server.port  # type: ignore[no-any-return]


def make_array(nbytes: int) -> np.ndarray:
    return np.ones(nbytes // 8)


def array_nbytes(array: np.ndarray) -> int:
    return int(array.nbytes)


def hostile_header(address: str) -> None:
    """Connect to ``address`` (``tcp://host:port``) and send what a stock
    peer's first message would start with, but announcing one frame of 2**62
    bytes: far over the 64 GiB limit."""
    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(struct.pack("<QQQ", 8 + 8, 1, 1 << 62))  # P (the prelude), nframes, the length
        try:
            while sock.recv(65536):  # the worker's own handshake, then its close
                pass
        except ConnectionResetError:
            pass  # closed, with our bytes unread: as good


@pytest.mark.timeout(240)
def test_a_switched_cluster_shows_its_comms_on_metrics_and_a_stock_process_does_not(tmp_path: Path) -> None:
    """Every switched process's ``/metrics`` has the package's figures, read
    at scrape time: the worker that received a 64 MiB array counts at least
    that many bytes received, the
    scheduler counts messages, the ``info`` metric names the build; a
    hostile header sent to a worker is counted as refused there, by limit;
    a stock ``dask worker`` serves no such metric."""
    pytest.importorskip("prometheus_client")
    dask_switch.switch_on()
    before = snapshot()
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address="127.0.0.1:0"
        ) as cluster,
        Client(cluster) as client,
    ):
        a, b = sorted(client.scheduler_info()["workers"])
        array = client.submit(make_array, ARRAY_NBYTES, workers=[a], pure=False)
        assert client.submit(array_nbytes, array, workers=[b], pure=False).result(timeout=120) == ARRAY_NBYTES
        hostile_header(a)
        ports = client.run(http_port)
        scheduler = scrape(cluster.scheduler.http_server.port)
        on_a, on_b = scrape(ports[a]), scrape(ports[b])

        for figures in (scheduler, on_a, on_b):
            info = [name for name in figures if name.startswith("tornado_readinto_info{")]
            assert len(info) == 1 and f'build="{BUILD}"' in info[0], info
            assert f'version="{tornado_readinto.__version__}"' in info[0]
            assert figures["tornado_readinto_comms_opened_total"] >= 1
        # (the scheduler runs in this process, whose earlier tests' comms count too)
        assert scheduler["tornado_readinto_messages_received_total"] > before["messages_received"]
        assert scheduler["tornado_readinto_messages_sent_total"] > before["messages_sent"]
        received, calls = on_b["tornado_readinto_received_bytes_total"], on_b["tornado_readinto_receive_calls_total"]
        assert received >= ARRAY_NBYTES and calls > 0
        # The array's frame is received in place but for its first bytes, which
        # may come read ahead with the header (at most one read-ahead buffer).
        assert on_b["tornado_readinto_received_in_place_bytes_total"] >= ARRAY_NBYTES - (1 << 20)
        assert on_a["tornado_readinto_sent_bytes_total"] >= ARRAY_NBYTES
        assert on_a['tornado_readinto_refused_messages_total{reason="max_frame_nbytes"}'] == 1
        assert not any(name.startswith("tornado_readinto_refused") for name in on_b)  # no refusal there

        # verify reports the same counters, from inside each process
        report = verify(client)
        assert report["workers"][a]["counters"]["refused"] == {"max_frame_nbytes": 1}
        assert report["workers"][b]["counters"]["nbytes_received"] >= ARRAY_NBYTES
        assert report["scheduler"]["counters"]["messages_received"] > before["messages_received"]

        joining = CLICluster(tmp_path, tmp_path / "scheduler.json")
        try:
            start_stock_worker(joining, client, cluster.scheduler_address, nworkers=3)
            (stock,) = set(client.scheduler_info()["workers"]) - {a, b}
            assert scrape(client.run(http_port, workers=[stock])[stock]) == {}
        finally:
            joining.stop()


# -- the counting itself, over a real connection -------------------------------------------


def test_a_comm_counts_its_messages_and_bytes_and_folds_them_in_when_it_closes() -> None:
    """Two switched comms over 127.0.0.1: each message read or written counts
    once, the bytes are the streams' own counts, and a closed comm's figures
    stay in the process's totals (a comm dropped unclosed too)."""
    from distributed.comm.core import connect, listen

    before = snapshot()

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        dask_switch.install_backends()
        served: list[Any] = []

        async def echo(comm: Any) -> None:
            served.append(comm)
            await comm.write(await comm.read())

        listener = await listen("tcp://127.0.0.1:0", echo)
        comm = await connect(listener.contact_address)
        assert isinstance(comm, ReadIntoComm)
        await comm.write({"x": b"y" * 100_000})
        assert (await comm.read())["x"] == b"y" * 100_000
        during = snapshot()
        await comm.close()
        listener.stop()
        for other in served:
            other.abort()
        return during, snapshot()

    during, after = asyncio.run(main())
    # the handshake (one message each way) and the echo, on each of the two comms
    assert during["comms_opened"] - before["comms_opened"] == 2
    assert during["comms_open"] - before["comms_open"] == 2
    assert during["messages_received"] - before["messages_received"] == 4
    assert during["messages_sent"] - before["messages_sent"] == 4
    assert during["nbytes_received"] - before["nbytes_received"] >= 2 * 100_000
    assert during["receive_calls"] > before["receive_calls"]
    # the 100 kB frame, each way, in place but for what came with its header
    assert during["nbytes_received_in_place"] - before["nbytes_received_in_place"] >= 2 * (100_000 - 65536)
    assert after["comms_open"] == before["comms_open"]
    for name in FIGURES:
        assert after[name] >= during[name], name  # nothing lost when the comms closed


def test_a_comm_dropped_unclosed_leaves_the_open_comms_with_its_figures(caplog: pytest.LogCaptureFixture) -> None:
    """A comm nobody closes is counted open until it is garbage; its figures
    then join the closed comms' totals (and its stream is closed)."""
    from distributed.comm.core import connect, listen

    before = snapshot()

    async def main() -> tuple[dict[str, Any], dict[str, Any], ReadIntoIOStream]:
        dask_switch.install_backends()
        served: list[Any] = []

        async def echo(comm: Any) -> None:
            served.append(comm)
            await comm.write(await comm.read())

        listener = await listen("tcp://127.0.0.1:0", echo)
        comm = await connect(listener.contact_address)
        await comm.write({"x": b"y" * 1000})
        await comm.read()
        stream = comm.figures.stream
        during = snapshot()
        del comm  # dropped, never closed
        gc.collect()
        dropped = snapshot()
        listener.stop()
        for other in served:
            other.abort()
        return during, dropped, stream

    with caplog.at_level(logging.WARNING):
        during, dropped, stream = asyncio.run(main())
    assert during["comms_open"] - before["comms_open"] == 2
    assert dropped["comms_open"] - before["comms_open"] == 1  # the served one is still open
    assert stream.closed()
    assert any("closing dangling stream" in r.getMessage() for r in caplog.records)
    for name in FIGURES:
        assert dropped[name] >= during[name], name  # the dropped comm's figures stay in the totals


def test_refused_messages_are_counted_by_reason() -> None:
    metrics = CommMetrics()
    metrics.message_refused(FrameTooLargeError("max_frames", 10, 5))
    metrics.message_refused(FrameTooLargeError("max_frames", 11, 5))
    metrics.message_refused(FramingError("garbled"))
    metrics.message_refused(ConnectionResetError())  # not the peer's header: not counted
    assert metrics.snapshot()["refused"] == {"max_frames": 2, "malformed": 1}


def test_the_stream_counts_receive_calls_and_bytes_sent() -> None:
    """What the figures read from a stream: every receive call (one that finds
    nothing too) and every byte sent."""

    async def main() -> None:
        a, b = socket.socketpair()
        left, right = ReadIntoIOStream(a), ReadIntoIOStream(b)
        try:
            assert (left.receive_calls, left.nbytes_sent) == (0, 0)
            await right.write(b"x" * 1000)
            assert right.nbytes_sent == 1000
            buf = bytearray(1000)
            await left.read_into(buf)
            assert left.nbytes_received == 1000 and left.receive_calls >= 1
            assert left.nbytes_received_in_place == 0  # read ahead, then copied: small reads are
        finally:
            left.close()
            right.close()

    asyncio.run(main())


def test_the_stream_counts_the_bytes_it_receives_in_place() -> None:
    """A large read_into that waits receives into the caller's buffer: every
    byte of it counts as received in place (none was read ahead before it);
    a later small read_bytes adds bytes but none in place."""
    nbytes = 1 << 20

    async def main() -> None:
        a, b = socket.socketpair()
        left, right = ReadIntoIOStream(a), ReadIntoIOStream(b)
        try:
            buf = bytearray(nbytes)
            read = left.read_into(buf)  # pending before a byte is sent
            await right.write(b"z" * nbytes)
            assert await read == nbytes and buf == b"z" * nbytes
            assert left.nbytes_received == left.nbytes_received_in_place == nbytes
            await right.write(b"tail")
            assert await left.read_bytes(4) == b"tail"
            assert (left.nbytes_received, left.nbytes_received_in_place) == (nbytes + 4, nbytes)
        finally:
            left.close()
            right.close()

    asyncio.run(main())
