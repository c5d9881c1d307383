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

Serving loop (`ReadIntoHTTP1ServerConnection`), per keep-alive request:

* Stock Tornado guards each wait for request headers with
  ``gen.with_timeout`` (``idle_connection_timeout``, 3600 s by default): a
  timer made and cancelled, an extra Future and two extra callbacks per
  request.  Here one timer per connection enforces the same deadline: each
  header read only notes when it started, the timer re-arms itself for the
  latest deadline when it fires early, and it closes the connection if the
  headers of the read it watches are still missing at that read's deadline.
* Stock yields to the event loop after every request (``asyncio.sleep(0)``)
  so that a client that pipelines requests cannot hold the loop.  Here the
  loop yields only when the next read could finish without waiting (bytes
  are read ahead, or the socket was not proven empty); otherwise that read
  parks and the loop gets its turn there, one callback and one task step
  fewer per request.

Responses: Tornado's ``write_headers(start_line, headers, chunk)`` copies the
first body chunk after the header block into one new ``bytes`` (``data +=
chunk``), for a ``RequestHandler`` the whole body of a response written at
once.  For chunks of at least `GATHER_MIN_NBYTES`, header block and chunk go
to `ReadIntoIOStream.writelines` instead: one gather ``sendmsg``, the chunk
sent by reference, no copy and no fresh allocation of its size.
"""

from __future__ import annotations

import asyncio
import copy
import io
from collections.abc import Callable, Mapping
from typing import Any

from tornado.ioloop import IOLoop
from tornado.iostream import IOStream, StreamClosedError, UnsatisfiableReadError
from tornado.log import app_log, gen_log

from ._tornado_entry_points import (
    HTTP1Connection,
    HTTP1ServerConnection,
    HTTPServer,
    _CallableAdapter,
    _ExceptionLoggingContext,
    _GzipMessageDelegate,
    _HandlerDelegate,
    _HTTPRequestContext,
    _ProxyAdapter,
    _RoutingDelegate,
)
from .iostream import ReadIntoIOStream
from .tcpserver import ReadIntoTCPServer

__all__ = [
    "ReadIntoHTTPServer",
    "ReadIntoHTTP1Connection",
    "ReadIntoHTTP1ServerConnection",
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

    `ReadIntoHTTP1ServerConnection` builds one per request.

    .. versionadded:: 0.1
    """

    def __init__(self, *args: Any, header_timeout: _HeaderTimeout | None = None, **kwargs: Any) -> None:
        """As Tornado's ``HTTP1Connection``; ``header_timeout``: the serving
        loop's header deadline, stopped once the request's headers have
        arrived (None: no deadline)."""
        super().__init__(*args, **kwargs)
        self._header_timeout = header_timeout

    def _parse_headers(self, data: bytes) -> Any:
        header_timeout = self._header_timeout
        if header_timeout is not None:
            header_timeout.stop()
        return super()._parse_headers(data)

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


class _HeaderTimeout:
    """Closes a server connection whose request headers are still missing
    ``timeout`` seconds after the read that waits for them started, as
    Tornado's ``header_timeout`` does, with one timer per connection instead
    of one per request.

    `start` costs one clock read and `stop` one attribute store; the timer
    fires at most once per ``timeout`` while requests keep coming (it then
    re-arms for the newest deadline) and not at all while none is awaited.
    """

    __slots__ = ("_io_loop", "_timeout", "_conn", "_deadline", "_handle")

    def __init__(self, io_loop: IOLoop, timeout: float) -> None:
        self._io_loop = io_loop
        self._timeout = timeout
        self._conn: HTTP1Connection | None = None  # whose headers are awaited
        self._deadline = 0.0
        self._handle: object | None = None

    def start(self, conn: HTTP1Connection) -> None:
        """``conn`` starts waiting for request headers now."""
        self._conn = conn
        self._deadline = deadline = self._io_loop.time() + self._timeout
        if self._handle is None:
            self._handle = self._io_loop.call_at(deadline, self._expire)

    def stop(self) -> None:
        """The headers arrived."""
        self._conn = None

    def cancel(self) -> None:
        """The connection is done: drop the timer (and with it the last
        reference the loop holds to the connection)."""
        self._conn = None
        if self._handle is not None:
            self._io_loop.remove_timeout(self._handle)
            self._handle = None

    def _expire(self) -> None:
        self._handle = None
        conn = self._conn
        if conn is None:
            return  # no headers awaited: the next start() arms again
        if self._io_loop.time() < self._deadline:
            self._handle = self._io_loop.call_at(self._deadline, self._expire)
            return
        self._conn = None
        conn.close()  # as stock: quietly; the pending read fails, the loop ends


class ReadIntoHTTP1ServerConnection(HTTP1ServerConnection):
    """Tornado's HTTP/1.x server connection with a leaner serving loop for a
    `ReadIntoIOStream` (see the module docstring, "Serving loop"): requests
    are read by `ReadIntoHTTP1Connection`\\ s, the header timeout is one
    timer per connection, and the loop yields between requests only when the
    next read would not wait.  Behaviour is stock: the same delegate calls,
    the same timeouts, the same errors logged, connections closed the same
    way.

    .. versionadded:: 0.1
    """

    def __init__(self, stream: ReadIntoIOStream, params: Any = None, context: object | None = None) -> None:
        super().__init__(stream, params, context)
        # The requests' own header timeout is off: _HeaderTimeout enforces it.
        self._request_params = copy.copy(self.params)
        self._request_params.header_timeout = None

    async def _server_request_loop(self, delegate: Any) -> None:
        stream = self.stream
        assert isinstance(stream, ReadIntoIOStream)
        timeout = self.params.header_timeout
        header_timeout = _HeaderTimeout(stream.io_loop, timeout) if timeout is not None else None
        try:
            while True:
                conn = ReadIntoHTTP1Connection(
                    stream, False, self._request_params, self.context, header_timeout=header_timeout
                )
                request_delegate = delegate.start_request(self, conn)
                if header_timeout is not None:
                    header_timeout.start(conn)
                try:
                    keep_going = await conn.read_response(request_delegate)
                except (StreamClosedError, UnsatisfiableReadError, asyncio.CancelledError):
                    return
                except Exception:
                    gen_log.error("Uncaught exception", exc_info=True)
                    conn.close()
                    return
                if not keep_going:
                    return
                if not stream.read_would_wait():
                    await asyncio.sleep(0)  # the next read may not wait: yield here
        finally:
            if header_timeout is not None:
                header_timeout.cancel()
            delegate.on_close(self)


class ReadIntoHTTPServer(ReadIntoTCPServer, HTTPServer):
    """A drop-in `tornado.httpserver.HTTPServer` whose connections are
    `ReadIntoIOStream`\\ s (`SSLReadIntoIOStream` with ``ssl_options``)::

        server = ReadIntoHTTPServer(app, max_body_size=1 << 30)
        server.listen(8888)

    Takes the same arguments as `HTTPServer`, and ``stream_kwargs``: extra
    keyword arguments for every stream, for example ``{"busy_poll_s": 0}``
    (`ReadIntoTCPServer.stream_kwargs`; ``install(stream_kwargs=...)`` passes
    it).  Each connection is served by a `ReadIntoHTTP1ServerConnection`, and
    fixed-length request bodies are received with ``read_into`` (see
    `ReadIntoHTTP1Connection`).  To choose the stream class, override
    `ReadIntoTCPServer.make_stream`.

    .. versionadded:: 0.1
    """

    def initialize(self, *args: Any, stream_kwargs: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().initialize(*args, **kwargs)
        if stream_kwargs:
            self.stream_kwargs = dict(stream_kwargs)

    def handle_stream(self, stream: IOStream, address: Any) -> None:
        """Serve ``stream`` with a `ReadIntoHTTP1ServerConnection` (a stream
        of another class gets stock `HTTPServer.handle_stream`)."""
        if not isinstance(stream, ReadIntoIOStream):
            super().handle_stream(stream, address)
            return
        context = _HTTPRequestContext(stream, address, self.protocol, self.trusted_downstream)
        conn = ReadIntoHTTP1ServerConnection(stream, self.conn_params, context)
        self._connections.add(conn)
        conn.start_serving(self)
