"""`ReadIntoTCPServer`: a `tornado.tcpserver.TCPServer` whose connections are
`ReadIntoIOStream`\\ s.

Tornado has no setting for the stream class a server builds (upstream declined
one, tornadoweb/tornado#2171), so this subclass replaces the one private method
that builds it, ``TCPServer._handle_connection``, with a copy that calls the
public `ReadIntoTCPServer.make_stream` hook.  Everything else (``listen``,
``bind``/``start``, ``add_sockets``, ``stop``, ``ssl_options`` as a dict or an
`ssl.SSLContext`, ``max_buffer_size``, ``read_chunk_size``, and the logging of
TLS handshake errors by the stream) is stock.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any

from tornado import gen
from tornado.ioloop import IOLoop
from tornado.log import app_log
from tornado.util import errno_from_exception

from ._net import bind_tcp_sockets  # noqa: F401 - re-exported (it lived here)
from ._tornado_compat import ssl_wrap_socket
from ._tornado_entry_points import TCPServer
from .iostream import ReadIntoIOStream, SSLReadIntoIOStream

__all__ = ["ReadIntoTCPServer", "HandshakingTCPServer", "bind_tcp_sockets", "DEFAULT_TLS_HANDSHAKE_TIMEOUT"]

logger = logging.getLogger(__name__)

#: Seconds a `HandshakingTCPServer` connection may spend in its TLS handshake.
DEFAULT_TLS_HANDSHAKE_TIMEOUT = 10.0  # seconds (distributed's connect timeout is of this order)


class ReadIntoTCPServer(TCPServer):
    """A drop-in `tornado.tcpserver.TCPServer` whose `handle_stream` receives
    a `ReadIntoIOStream`, or an `SSLReadIntoIOStream` when ``ssl_options`` is
    given.

    Takes the same arguments as `TCPServer` and behaves the same way::

        class EchoServer(ReadIntoTCPServer):
            async def handle_stream(self, stream, address):
                buf = bytearray(4096)
                while True:
                    try:
                        n = await stream.read_into(buf, partial=True)
                    except StreamClosedError:
                        return
                    await stream.write(memoryview(buf)[:n])

    Override `make_stream` to choose the stream class or its arguments (for
    example ``busy_poll_s``).

    .. versionadded:: 0.1
    """

    #: Extra keyword arguments the default `make_stream` passes to each
    #: stream, for example ``{"busy_poll_s": 0.0}``; set it on the instance
    #: before the server starts.
    stream_kwargs: Mapping[str, Any] = MappingProxyType({})

    def make_stream(self, connection: socket.socket, address: Any) -> ReadIntoIOStream:
        """Build the stream for an accepted connection.

        The default builds a `ReadIntoIOStream` (an `SSLReadIntoIOStream`,
        whose handshake has not started yet, when ``ssl_options`` is set) with
        the server's ``max_buffer_size`` and ``read_chunk_size`` and
        `stream_kwargs`.  Subclasses
        may return any `ReadIntoIOStream` over ``connection``; an exception is
        logged and the connection dropped, as stock `TCPServer` does.

        :arg connection: the accepted socket, already wrapped in an
            `ssl.SSLSocket` (handshake pending) when ``ssl_options`` is set.
        :arg address: the peer address, as passed to `handle_stream`.
        """
        kwargs: dict[str, Any] = dict(
            max_buffer_size=self.max_buffer_size, read_chunk_size=self.read_chunk_size, **self.stream_kwargs
        )
        if self.ssl_options is not None:
            return SSLReadIntoIOStream(connection, **kwargs)
        return ReadIntoIOStream(connection, **kwargs)

    # A copy of TCPServer._handle_connection (Tornado 6.5/6.6) in which the
    # stream is built by make_stream.
    def _handle_connection(self, connection: socket.socket, address: Any) -> None:
        if self.ssl_options is not None:
            try:
                connection = ssl_wrap_socket(
                    connection,
                    self.ssl_options,
                    server_side=True,
                    do_handshake_on_connect=False,
                )
            except ssl.SSLError as err:
                if err.args[0] == ssl.SSL_ERROR_EOF:
                    return connection.close()
                raise
            except OSError as err:
                # A connection closed right after it was made (a port scan):
                # see tornadoweb/tornado#750.
                if errno_from_exception(err) in (errno.ECONNABORTED, errno.EINVAL):
                    return connection.close()
                raise
        try:
            stream = self.make_stream(connection, address)
            future = self.handle_stream(stream, address)
            if future is not None:
                if asyncio.iscoroutine(future):
                    _run_handler(future)
                else:
                    IOLoop.current().add_future(gen.convert_yielded(future), lambda f: f.result())
        except Exception:
            app_log.error("Error in connection callback", exc_info=True)


#: The tasks of `handle_stream` coroutines that have not ended (held here,
#: as Tornado holds the tasks it makes, so that none is collected while it
#: runs).
_HANDLERS: set[asyncio.Task[Any]] = set()


def _run_handler(coro: Any) -> None:
    """Run a `handle_stream` coroutine to its end in one task with one done
    callback (`_handler_done`).  Stock ``TCPServer`` wraps it in
    ``gen.convert_yielded`` and ``IOLoop.add_future`` (a lambda, a partial
    and their Futures' callbacks: about 0.9 KiB per connection for as long as
    the connection lives); the same end with none of them."""
    task = IOLoop.current().asyncio_loop.create_task(coro)  # type: ignore[attr-defined]
    _HANDLERS.add(task)
    task.add_done_callback(_handler_done)


def _handler_done(task: asyncio.Task[Any]) -> None:
    """A `handle_stream` task ended: what it raised is logged, as Tornado's
    IOLoop logs a failed callback."""
    _HANDLERS.discard(task)
    if not task.cancelled() and task.exception() is not None:
        app_log.error("Exception in callback %r", task, exc_info=task.exception())


class HandshakingTCPServer(ReadIntoTCPServer):
    """A `ReadIntoTCPServer` that runs ``await handler(stream, address)`` in a
    task for each connection, once its TLS handshake (if any) has finished.

    This is the accept path of `tornado_readinto.channel.comm.listen` and of the dask
    backend's listeners:

    * ``TCP_NODELAY`` is set on TCP connections (``nodelay=True``);
    * with ``ssl_context``, a connection whose handshake fails or takes longer
      than ``tls_handshake_timeout`` seconds is logged (a warning) and
      dropped; the handler never sees it;
    * an exception escaping the handler is logged and its stream closed;
    * `stop` also closes connections still in their TLS handshake (running
      handlers go on);
    * ``stream_kwargs`` (for example ``{"busy_poll_s": 0.0}``) go to every
      stream (`ReadIntoTCPServer.stream_kwargs`).

    .. versionadded:: 0.1
    """

    def __init__(
        self,
        handler: Callable[[ReadIntoIOStream, Any], Awaitable[None]],
        *,
        ssl_context: ssl.SSLContext | None = None,
        tls_handshake_timeout: float = DEFAULT_TLS_HANDSHAKE_TIMEOUT,
        nodelay: bool = True,
        stream_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(ssl_options=ssl_context, **kwargs)
        if stream_kwargs:
            self.stream_kwargs = dict(stream_kwargs)
        self.handler = handler
        self.tls_handshake_timeout = tls_handshake_timeout
        self.nodelay = nodelay
        #: Set by `stop`.
        self.stopped = False
        self._tasks: set[asyncio.Future[None]] = set()
        self._handshaking: set[ReadIntoIOStream] = set()

    def make_stream(self, connection: socket.socket, address: Any) -> ReadIntoIOStream:
        if self.nodelay and connection.family in (socket.AF_INET, socket.AF_INET6):
            try:
                connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass  # the peer is already gone: the first read will say so
        return super().make_stream(connection, address)

    def handle_stream(self, stream: ReadIntoIOStream, address: Any) -> None:  # type: ignore[override]
        if self.stopped:  # accepted in the same loop iteration as stop()
            stream.close()
            return
        task = asyncio.ensure_future(self._serve(stream, address))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def stop(self) -> None:
        """Stop accepting, close the listening sockets and drop connections
        still in their TLS handshake; running handlers go on.  Idempotent."""
        if self.stopped:
            return
        self.stopped = True
        super().stop()
        for stream in list(self._handshaking):
            stream.close()

    async def _serve(self, stream: ReadIntoIOStream, address: Any) -> None:
        if isinstance(stream, SSLReadIntoIOStream):
            self._handshaking.add(stream)
            try:
                await asyncio.wait_for(stream.wait_for_handshake(), self.tls_handshake_timeout)
            except (TimeoutError, OSError) as exc:
                real = getattr(exc, "real_error", None) or exc
                logger.warning("TLS handshake with %r failed: %s: %s", address, type(real).__name__, real)
                stream.close()
                return
            finally:
                self._handshaking.discard(stream)
        if self.stopped:
            stream.close()
            return
        try:
            await self.handler(stream, address)
        except Exception:
            logger.exception("error handling connection from %r", address)
            stream.close()
