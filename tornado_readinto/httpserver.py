"""`ReadIntoHTTPServer`: a `tornado.httpserver.HTTPServer` over
`ReadIntoIOStream`\\ s, which receives fixed-length request bodies with
`ReadIntoIOStream.read_into`.

It is `HTTPServer` with `ReadIntoTCPServer` in front of `TCPServer`, so every
connection it accepts (plain or TLS) is one of this package's streams; the
HTTP/1.1 protocol code, ``xheaders``, ``max_body_size``, ``body_timeout``,
``decompress_request``, ``Expect: 100-continue`` and the rest are stock.
`tornado_readinto.install` makes it the class that ``HTTPServer(...)`` and
`tornado.web.Application.listen` build.

Strategy for request bodies with a ``Content-Length``:

* Stock Tornado reads them in ``read_bytes(chunk_size, partial=True)``
  pieces (64 KiB), hands each to the delegate, which appends it to a
  ``bytearray`` and copies that into ``request.body`` at the end: every byte
  is copied three times in user space, and twice into freshly allocated
  memory, whose page faults dominate the cost of a large body (3 to 5 us per
  4 KiB page on the development VM: 0.2 to 0.3 s per pass over 256 MiB).
* Here, when the delegate chain is one this module knows (`tornado.web`
  handlers and plain request callbacks, through routing, ``xheaders`` and an
  uncompressed ``decompress_request``), a body that is not streamed is
  received with ``recv_into`` straight into the buffer of an `io.BytesIO`,
  and ``getvalue()`` hands that very buffer out as a ``bytes`` (CPython
  returns its internal ``bytes`` without a copy when no view is left): one
  copy, from the kernel, and one pass of page faults.  ``request.body`` stays
  a ``bytes``.
* The buffer starts at `INITIAL_BODY_NBYTES` and doubles as the bytes arrive
  (``realloc``, which moves pages rather than bytes at these sizes), so a
  peer that announces a large ``Content-Length`` and sends little commits
  little memory.
* Streamed bodies (``@stream_request_body``) are received into one reused
  buffer of `STREAM_RECV_NBYTES` with ``recv_into`` of whatever has arrived,
  and handed to ``data_received`` in ``bytes`` pieces of at most
  ``chunk_size``: one ``recv`` and one Future per up to 256 KiB instead of
  per 64 KiB, and memory bounded by the buffer, never the whole body.
* Compressed bodies, chunked bodies and delegates of unknown classes take
  Tornado's own path.
* Fairness: the event loop gets a turn after every `YIELD_NBYTES` received
  without waiting, as Tornado 6.6 does (``_YIELD_THRESHOLD``).

Responses: Tornado's ``write_headers(start_line, headers, chunk)`` copies the
first body chunk after the header block into one new ``bytes`` (``data +=
chunk``), for a ``RequestHandler`` the whole body of a response written at
once.  For chunks of at least `GATHER_MIN_NBYTES`, header block and chunk go
to `ReadIntoIOStream.writelines` instead: one gather ``sendmsg``, the chunk
sent by reference, no copy and no fresh allocation of its size.
"""

from __future__ import annotations

import asyncio
import io
from typing import Any, Callable

from tornado.httpserver import HTTPServer
from tornado.log import app_log

from ._tornado_compat import (
    HTTP1Connection,
    _CallableAdapter,
    _ExceptionLoggingContext,
    _GzipMessageDelegate,
    _HandlerDelegate,
    _ProxyAdapter,
    _RoutingDelegate,
)
from .iostream import ReadIntoIOStream
from .tcpserver import ReadIntoTCPServer

__all__ = [
    "ReadIntoHTTPServer",
    "ReadIntoHTTP1Connection",
    "read_body_bytes",
    "GATHER_MIN_NBYTES",
    "INITIAL_BODY_NBYTES",
    "STREAM_RECV_NBYTES",
    "YIELD_NBYTES",
]

#: First allocation for a fixed-length request body; the buffer then doubles
#: as bytes arrive.  A peer that announces a body but does not send it makes
#: the server commit at most this much.
INITIAL_BODY_NBYTES = 1024 * 1024  # bytes

#: Tornado 6.6 yields to the event loop after each 256 KiB of a body read
#: without waiting (``http1connection._YIELD_THRESHOLD``); so do we.
YIELD_NBYTES = 256 * 1024  # bytes

#: Size of the buffer a streamed body (``@stream_request_body``) is received
#: into: at most one `YIELD_NBYTES` of work between two turns of the loop.
STREAM_RECV_NBYTES = YIELD_NBYTES

#: A response chunk given to ``write_headers`` with at least this many bytes
#: is sent with the header block in one gather write instead of being copied
#: after it (below this, the copy costs less than a second buffer).
GATHER_MIN_NBYTES = 64 * 1024  # bytes


def _body_sink(delegate: Any) -> Any:
    """The delegate at the end of ``delegate``'s chain that stores or streams
    the body (a ``tornado.web._HandlerDelegate`` or
    ``tornado.httpserver._CallableAdapter``), or None when the chain holds a
    delegate of another class (user code: take the stock path) or a gzip
    decompressor is active.

    Exact classes are matched: a subclass may have changed what its
    ``data_received`` does.
    """
    while True:
        kind = type(delegate)
        if kind is _HandlerDelegate or kind is _CallableAdapter:
            return delegate
        if kind is _GzipMessageDelegate:
            if delegate._decompressor is not None:
                return None  # a compressed body: stock decompresses it
            delegate = delegate._delegate
        elif kind is _ProxyAdapter or kind is _RoutingDelegate:
            delegate = delegate.delegate
        else:
            return None


async def read_body_bytes(stream: ReadIntoIOStream, nbytes: int, initial_nbytes: int = INITIAL_BODY_NBYTES) -> bytes:
    """Receive exactly ``nbytes`` from ``stream`` into one new ``bytes``.

    Bytes already read ahead are copied once; the rest are received with
    ``recv_into`` straight into the buffer of an `io.BytesIO` that
    ``getvalue()`` then returns without a copy (CPython; other
    implementations copy once more).  The buffer starts at
    ``initial_nbytes`` and doubles while bytes arrive, each growth a
    ``realloc`` plus zero-filling of the new part only, so memory committed
    stays within about twice what was received.  Gives the event loop a turn
    after each `YIELD_NBYTES` that arrived without waiting.

    :raises IncompleteReadError: the stream closed first.
    """
    buf = io.BytesIO()
    filled = 0
    work = 0
    while filled < nbytes:
        size = min(nbytes, max(initial_nbytes, 2 * filled))
        buf.seek(size - 1)
        buf.write(b"\0")  # grow: realloc, zero-fill [filled, size)
        with buf.getbuffer() as view:
            future = stream.read_into(view[filled:size])
        # (no view of buf is left once the read is done: read_into releases
        # its own, so the next write may resize and getvalue need not copy)
        work = work + size - filled if future.done() else 0
        await future
        filled = size
        if work >= YIELD_NBYTES:
            work = 0
            await asyncio.sleep(0)
    return buf.getvalue()


class _GatherWrite:
    """Stands in for a connection's stream during one ``write_headers`` call:
    the one ``write(head)`` that Tornado makes there becomes
    ``writelines((head, tail()))``; everything else goes to the stream."""

    __slots__ = ("_stream", "_tail")

    def __init__(self, stream: ReadIntoIOStream, tail: Callable[[], bytes]) -> None:
        self._stream = stream
        self._tail = tail

    def write(self, data: bytes) -> Any:
        return self._stream.writelines((data, self._tail()))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class ReadIntoHTTP1Connection(HTTP1Connection):
    """Tornado's server-side HTTP/1.x connection, receiving request bodies
    with ``read_into`` (see the module docstring).

    It adds methods only, no state, so `ReadIntoHTTPServer` gives this class
    to the connection object that Tornado's own serving loop built.

    .. versionadded:: 0.1
    """

    def write_headers(self, start_line: Any, headers: Any, chunk: bytes | None = None) -> Any:
        """As stock, but a ``chunk`` of at least `GATHER_MIN_NBYTES` leaves
        with the header block in one gather write, by reference (stock copies
        it after the header block into one new ``bytes``)."""
        stream = self.stream
        if chunk is None or len(chunk) < GATHER_MIN_NBYTES or not isinstance(stream, ReadIntoIOStream):
            return super().write_headers(start_line, headers, chunk)
        # Tornado builds the header block, sets the Content-Length and
        # chunked-encoding state, then makes exactly one stream.write(head):
        # the chunk is framed (_format_chunk) at that point, with that state.
        self.stream = _GatherWrite(stream, lambda: self._format_chunk(chunk))  # type: ignore[assignment]
        try:
            return super().write_headers(start_line, headers)
        finally:
            self.stream = stream

    async def _read_fixed_body(self, content_length: int, delegate: Any) -> None:
        stream = self.stream
        sink = _body_sink(delegate) if isinstance(stream, ReadIntoIOStream) else None
        if sink is None or self.is_client:
            await super()._read_fixed_body(content_length, delegate)
            return
        if type(sink) is _HandlerDelegate and sink.stream_request_body:
            await self._read_streamed_body(content_length, delegate)
            return
        name = "chunks" if type(sink) is _HandlerDelegate else "_chunks"
        chunks = getattr(sink, name)
        if len(chunks) or type(chunks) not in (list, bytearray):
            await super()._read_fixed_body(content_length, delegate)
            return
        assert isinstance(stream, ReadIntoIOStream)
        body = await read_body_bytes(stream, content_length)
        if self._write_finished:
            return  # the response is already finished: drop the body, as stock does
        # The sink's finish() sets request.body = bytes(chunks) (Tornado
        # 6.6: a bytearray) or b"".join(chunks) (6.5: a list); both return
        # an exact bytes object itself, without copying it.
        setattr(sink, name, [body] if type(chunks) is list else body)

    async def _read_streamed_body(self, content_length: int, delegate: Any) -> None:
        """Receive a fixed-length body into one reused buffer of at most
        `STREAM_RECV_NBYTES` (one ``recv_into`` of whatever has arrived per
        read) and hand it to ``delegate.data_received`` in ``bytes`` pieces
        of at most ``params.chunk_size`` (one copy each)."""
        stream = self.stream
        assert isinstance(stream, ReadIntoIOStream)
        chunk_nbytes = self.params.chunk_size
        buf = bytearray(min(content_length, max(STREAM_RECV_NBYTES, chunk_nbytes)))
        view = memoryview(buf)
        work = 0
        try:
            while content_length > 0:
                future = stream.read_into(view[: min(len(buf), content_length)], partial=True)
                waited = not future.done()
                nbytes = await future
                content_length -= nbytes
                for start in range(0, nbytes, chunk_nbytes):
                    if self._write_finished:
                        break  # the response is finished: divert the rest, as stock does
                    with _ExceptionLoggingContext(app_log):
                        ret = delegate.data_received(view[start : min(nbytes, start + chunk_nbytes)].tobytes())
                        if ret is not None:
                            await ret
                work = 0 if waited else work + nbytes
                if work >= YIELD_NBYTES:
                    work = 0
                    await asyncio.sleep(0)
        finally:
            view.release()


class ReadIntoHTTPServer(ReadIntoTCPServer, HTTPServer):
    """A drop-in `tornado.httpserver.HTTPServer` whose connections are
    `ReadIntoIOStream`\\ s (`SSLReadIntoIOStream` with ``ssl_options``)::

        server = ReadIntoHTTPServer(app, max_body_size=1 << 30)
        server.listen(8888)

    Takes the same arguments as `HTTPServer`.  Fixed-length request bodies
    are received with ``read_into`` (see `ReadIntoHTTP1Connection`).  To pass
    extra stream arguments, override `ReadIntoTCPServer.make_stream`.

    .. versionadded:: 0.1
    """

    def start_request(self, server_conn: object, request_conn: Any) -> Any:
        # Tornado's serving loop builds a stock HTTP1Connection per request
        # (HTTP1ServerConnection._server_request_loop names the class); our
        # subclass only overrides a method, so it can take over the object.
        if type(request_conn) is HTTP1Connection and isinstance(request_conn.stream, ReadIntoIOStream):
            request_conn.__class__ = ReadIntoHTTP1Connection
        return super().start_request(server_conn, request_conn)
