"""tornado_readinto.channel._channel.FramedChannel: the close/abort/error lifecycle
shared by comm.Comm and the dask backend's ReadIntoComm."""

import asyncio
import gc
import weakref

import pytest
from tornado.iostream import StreamClosedError

from tornado_readinto import FramedStream, ReadIntoIOStream
from tornado_readinto.channel._channel import FramedChannel
from tornado_readinto.diagnostics.testing import stream_pair

from ..conftest import run


class _Closed(Exception):
    pass


class _Channel(FramedChannel):
    """The smallest channel: translates StreamClosedError, counts releases."""

    def __init__(self, stream):
        self._stream = stream
        self._framed = FramedStream(stream)
        self._closed = False
        self.releases = 0
        self.closed_when_translating = []

    def _release(self):
        self.releases += 1
        super()._release()

    def _closed_error(self, exc, doing):
        self.closed_when_translating.append(self._closed)
        return _Closed(f"{doing} failed") if isinstance(exc, StreamClosedError) else None


class _Buffer:
    """Stands for a received frame: something a failed read's frame holds."""


def _fail_holding(channel, buffer_refs, exc_class):
    buffer = _Buffer()
    buffer_refs.append(weakref.ref(buffer))
    try:
        raise exc_class()
    except BaseException as caught:
        channel._fail(caught, "read from")


@pytest.mark.parametrize("exc_class, raised", [(StreamClosedError, _Closed), (KeyError, KeyError)])
def test_fail_aborts_translates_and_leaves_no_reference_cycle(exc_class, raised):
    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        channel = _Channel(client)
        refs: list[weakref.ref] = []
        gc.disable()  # a buffer freed below was freed by reference counting alone
        try:
            with pytest.raises(raised) as info:
                _fail_holding(channel, refs, exc_class)
            if raised is _Closed:
                assert type(info.value.__cause__) is exc_class and str(info.value) == "read from failed"
            del info
            assert refs[0]() is None, "the failed read's frame is kept alive by a cycle"
        finally:
            gc.enable()
        assert channel.closed_when_translating == [False]  # translated before the abort
        assert channel.closed() and client.closed() and channel.releases == 1
        channel.abort()  # idempotent: the stream is released once
        assert channel.releases == 1
        server.close()

    run(main())


def test_begin_close_with_nothing_queued_closes_at_once():
    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        channel = _Channel(client)
        assert not channel.closed()
        assert channel._begin_close() is None
        assert channel.closed() and client.closed() and channel.releases == 1
        assert channel._begin_close() is None  # idempotent
        assert channel.releases == 1
        server.close()

    run(main())


def test_begin_close_flushes_what_is_queued_then_closes():
    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        channel = _Channel(client)
        payload = bytes(range(256)) * (64 * 1024)  # 16 MiB: more than the socket buffers take at once
        channel._framed.write_frames([payload])
        assert client.writing()
        flushing = channel._begin_close()
        assert flushing is not None
        assert channel.closed() and not client.closed()  # closed for its owner, still sending
        received = asyncio.ensure_future(FramedStream(server).read_frames())
        await flushing
        assert client.closed() and channel.releases == 1
        assert [bytes(f) for f in await received] == [payload]
        server.close()

    run(main())


def test_cancelled_flush_closes_at_once():
    async def main():
        server, client = await stream_pair(ReadIntoIOStream)
        channel = _Channel(client)
        channel._framed.write_frames([bytes(32 << 20)])  # the peer never reads: stays queued
        flushing = channel._begin_close()
        assert flushing is not None
        flushing.send(None)  # runs up to the wait for the queued bytes
        assert not client.closed()
        with pytest.raises(asyncio.CancelledError):
            flushing.throw(asyncio.CancelledError())
        assert client.closed() and channel.releases == 1
        server.close()

    run(main())
