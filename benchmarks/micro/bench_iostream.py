"""Micro-benchmarks of the stream layer over a 127.0.0.1 TCP pair in one
process: stock IOStream vs ReadIntoIOStream, reads and writes."""

import pytest
from tornado.iostream import IOStream

from tornado_readinto import FramedStream, ReadIntoIOStream
from tornado_readinto.diagnostics.testing import stream_pair
from tornado_readinto.wire.framing import pack_header

IMPLS = {"stock": IOStream, "readinto": ReadIntoIOStream}
NMESSAGES = 200


@pytest.mark.benchmark(group="read-exact")
@pytest.mark.parametrize("nbytes", [1024, 1 << 20])
@pytest.mark.parametrize("impl", ["stock-read_bytes", "stock-read_into", "readinto-read_into"])
def test_bench_read_exact(benchmark, loop, impl, nbytes):
    """Benchmark 200 length-prefixed messages written then read back."""
    cls = IMPLS[impl.split("-")[0]]
    server, client = loop.run_until_complete(stream_pair(cls))
    header, payload = nbytes.to_bytes(8, "little"), b"x" * nbytes
    head, buf = bytearray(8), bytearray(nbytes)

    async def rounds():
        for _ in range(NMESSAGES):
            client.write(header)
            client.write(payload)
            if impl == "stock-read_bytes":
                await server.read_bytes(8)
                await server.read_bytes(nbytes)
            else:
                await server.read_into(head)
                await server.read_into(buf)

    benchmark.extra_info["nbytes"] = NMESSAGES * (nbytes + 8)
    benchmark(lambda: loop.run_until_complete(rounds()))
    server.close()
    client.close()


@pytest.mark.benchmark(group="write-message")
@pytest.mark.parametrize("nbytes", [1024, 1 << 20])
@pytest.mark.parametrize("impl", ["stock-write", "readinto-write_frames"])
def test_bench_write_message(benchmark, loop, impl, nbytes):
    """Benchmark 200 messages of a header plus 8 frames, sent and drained."""
    frames = [b"f" * (nbytes // 8)] * 8
    header = pack_header([len(f) for f in frames])
    total = len(header) + nbytes
    cls = IMPLS[impl.split("-")[0]]
    server, client = loop.run_until_complete(stream_pair(cls))
    sink = bytearray(total)
    sender = FramedStream(server) if impl.startswith("readinto") else None

    async def rounds():
        for _ in range(NMESSAGES):
            if sender is not None:
                sender.write_frames(frames)
            else:
                server.write(header)
                for f in frames:
                    server.write(f)
            await client.read_into(sink)

    benchmark.extra_info["nbytes"] = NMESSAGES * total
    benchmark(lambda: loop.run_until_complete(rounds()))
    server.close()
    client.close()
