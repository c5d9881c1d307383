"""The transport engine: a stream's bytes carried by the event loop's own
transport (``asyncio.BufferedProtocol``), on asyncio's loop or uvloop.

Strategy:

* The stream's read core already has the ``BufferedProtocol`` shape
  (`tornado_readinto._readcore.ReadCore`), so the protocol here only
  forwards: the loop calls `StreamProtocol.get_buffer`, receives into the view
  the core hands out (on uvloop in C, without a Python ``recv_into``), and
  calls `StreamProtocol.buffer_updated`, which completes the pending read.
  A large ``read_into`` target is handed out as it is, so the loop receives
  straight into it.
* The transport is made from the stream's connected socket with
  ``loop.connect_accepted_socket`` (public API of both loops), when the
  stream first needs it: its first read, a close callback, or a write the
  kernel did not take at once.  That takes a loop iteration or two; writes
  made meanwhile wait in the stream's write buffer.
* The loop's transport reads whenever it is not paused, so the stream pauses
  it while no read is pending and the read-ahead buffer is full (the core
  would have no room to hand out), and resumes it when a read starts.
* Writes still try one ``sendmsg`` of the caller's buffers first while the
  transport holds nothing (the stream owns the socket; the transport does
  not care who writes while its own buffer is empty).  What the kernel does
  not take goes to ``transport.writelines`` by reference.  The transport's
  high-water mark is 0, so ``pause_writing`` says "bytes are queued" and
  ``resume_writing`` says "all of them were sent": the stream's write
  Futures resolve then, as Tornado's do once their bytes left.
* The protocol never raises into the loop, and never closes the stream
  while the loop is inside a receive (aborting there stops libuv's reading
  under its feet): an error closes the stream afterwards, with the error as
  its ``error``, as the selector engine does.
* `TransportEngine` is the stream's half of the engine: a mixin of
  `~tornado_readinto.iostream.ReadIntoIOStream` holding every method that
  runs only on this engine (and the hooks that branch to it).
"""

from __future__ import annotations

import asyncio
import os
import socket
from time import perf_counter
from typing import TYPE_CHECKING, Any, Final, cast

from tornado import ioloop
from tornado.log import gen_log

from ._readcore import PENDING, ReadCore
from ._tornado_compat import IOStream, StreamBufferFullError, UnsatisfiableReadError

if TYPE_CHECKING:  # pragma: no cover
    from .busypoll import BusyPoll
    from .writebuffer import ChunkedWriteBuffer

__all__ = [
    "ENGINES",
    "ENV_VAR",
    "TRANSPORT_PIECE_NBYTES",
    "StreamProtocol",
    "TransportEngine",
    "attach",
    "choose_engine",
]

#: The most bytes of a write that the kernel did not take at once handed
#: (copied) to the transport at a time; the rest is sent from the stream's
#: queue once the transport has sent them.
TRANSPORT_PIECE_NBYTES: Final = 64 * 1024  # bytes

_READ: Final = ioloop.IOLoop.READ
_WRITE: Final = ioloop.IOLoop.WRITE
_ERROR: Final = ioloop.IOLoop.ERROR

#: The engines a plain `ReadIntoIOStream` can run on.
ENGINES: Final = ("selector", "transport")

#: Environment variable naming the default engine (``selector``,
#: ``transport`` or ``auto``), read when `choose_engine` is called.
ENV_VAR: Final = "TORNADO_READINTO_ENGINE"

#: Socket families the loops' transports take (``connect_accepted_socket``).
_FAMILIES: Final = tuple(
    getattr(socket, name) for name in ("AF_INET", "AF_INET6", "AF_UNIX") if hasattr(socket, name)
)

# Handed to a loop that asks for a buffer after the stream closed: what lands
# there is dropped (the stream is closed; the transport is closing).
_SCRATCH: Final = memoryview(bytearray(256))


def choose_engine(engine: str | None, sock: socket.socket) -> str:
    """The engine a stream on ``sock`` runs on.

    ``engine`` None means the default: the `ENV_VAR` environment variable, or
    ``auto``.  ``auto`` is the selector engine on every loop: the transport
    engine costs about the same CPU per small message (0.74-1.21x the
    selector engine's over three runs), but while another thread holds the
    GIL its throughput is 1.5-9x lower, since the loop's own receive releases the GIL on every read (see
    the documentation's performance page).  The transport engine needs a
    ``socket.socket`` (not a wrapper: its methods would not be called) of a
    family the loops' transports take; other sockets run on the selector
    engine whatever is asked.

    :raises ValueError: ``engine`` is not one of `ENGINES`, ``auto`` or None.
    """
    if engine is None:
        engine = os.environ.get(ENV_VAR) or "auto"
    if engine == "auto":
        engine = "selector"
    elif engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)} or 'auto', got {engine!r}")
    if engine == "transport" and (
        not isinstance(sock, socket.socket)
        or sock.family not in _FAMILIES
        or sock.type != socket.SOCK_STREAM
        or not hasattr(sock, "sendmsg")
    ):
        return "selector"  # a wrapper's methods would not be called; a family no transport takes
    return engine


class StreamProtocol(asyncio.BufferedProtocol):
    """The ``BufferedProtocol`` of one stream on the transport engine: it
    forwards the loop's calls to the stream's read core and write path.

    Cost per receive: two Python calls from the loop (``get_buffer``,
    ``buffer_updated``), no copy for a direct ``read_into``.
    """

    __slots__ = ("_stream", "_core", "started", "sock", "_failed")

    def __init__(self, stream: TransportEngine) -> None:
        self._stream: TransportEngine | None = stream
        self._core = stream._core
        #: True once `attach` began to make the transport: from then on the
        #: transport machinery owns the socket and closes it.
        self.started = False
        #: The socket the transport is made from.
        self.sock = stream.socket
        # What a read core's get_buffer raised: the stream closes with it
        # once the loop is out of its receive (see get_buffer).
        self._failed: BaseException | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        stream = self._stream
        assert stream is not None  # only connection_lost, which comes after, lets it go
        # uvloop's transports have the Transport methods without the base class.
        stream._transport_made(cast(asyncio.Transport, transport))

    def get_buffer(self, sizehint: int) -> memoryview:
        # Never close the stream in here: aborting the transport stops its
        # reading in the middle of a receive, which libuv does not survive.
        stream = self._stream
        if stream is None or stream._closed or self._failed is not None:
            return _SCRATCH
        core = self._core
        try:
            view = core.get_buffer()
            if not len(view):
                # Idle with a full read-ahead before the pause took effect
                # (a pause asked in connection_made): one more receive.
                view = core.get_overflow_buffer()
        except Exception as e:  # a reader's get_buffer failed, or no memory
            self._failed = e
            stream._loop.call_soon(self._close_failed)  # if the receive ends in EAGAIN
            return _SCRATCH
        return view

    def buffer_updated(self, nbytes: int) -> None:
        stream = self._stream
        if stream is None or stream._closed:
            return
        if self._failed is not None:
            self._close_failed()  # the bytes went to the scratch buffer
            return
        stream._transport_received(nbytes)

    def _close_failed(self) -> None:
        stream = self._stream
        if stream is not None and not stream._closed:
            stream.close(exc_info=self._failed)

    def eof_received(self) -> bool:
        stream = self._stream
        if stream is not None and not stream._closed:
            stream.close()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        stream, self._stream = self._stream, None
        if stream is not None and not stream._closed:
            stream.close(exc_info=exc if exc is not None else False)

    def pause_writing(self) -> None:
        stream = self._stream
        if stream is not None:
            stream._write_paused = True

    def resume_writing(self) -> None:
        stream = self._stream
        if stream is not None:
            stream._transport_drained()


async def attach(loop: asyncio.AbstractEventLoop, protocol: StreamProtocol) -> None:
    """Make ``loop``'s transport for the protocol's connected socket
    (``protocol.sock``); its ``connection_made`` hands the transport over."""
    stream = protocol._stream
    if stream is None or stream._closed:
        return
    if "read_from_fd" in vars(stream):
        # Replaced on the instance (as Tornado's tests do): the selector
        # engine calls it, the transport would not.
        stream._fall_back_to_selector()
        return
    protocol.started = True
    await loop.connect_accepted_socket(lambda: protocol, protocol.sock)


class TransportEngine(IOStream):
    """The transport engine's half of a `~tornado_readinto.iostream.ReadIntoIOStream`:
    a mixin (first base of the stream class) with the methods that make the
    transport, take what it receives and hand it what the kernel could not
    take, and Tornado's hooks that branch to them (``_add_io_state``,
    ``close_fd``).  A stream on the selector engine goes straight to
    Tornado's own hooks.
    """

    if TYPE_CHECKING:  # what the stream class provides
        _core: ReadCore
        _write_buffer: ChunkedWriteBuffer  # type: ignore[assignment]
        _loop: asyncio.AbstractEventLoop
        _busy_poll: BusyPoll | None
        _cork_nbytes: int
        _use_transport: bool
        engine: str
        nbytes_received: int
        _protocol: StreamProtocol | None
        _transport: asyncio.Transport | None
        _attach_task: asyncio.Task[None] | None
        _write_paused: bool
        _transport_held: int
        _reading_paused: bool

        def _complete(self, result: Any) -> None: ...
        def _read_parked(self) -> None: ...

    def _add_io_state(self, state: int) -> None:
        """Tornado's hook: wait for ``state`` on the selector.  On the transport
        engine (once connected) the transport reads and writes instead: it is
        made if need be, and its reading resumed."""
        if not self._use_transport or self._connecting:
            super()._add_io_state(state)
            return
        if self._closed:
            return
        if self._protocol is None:
            self._attach_transport()
        elif self._reading_paused and state & _READ:
            self._resume_reading()

    def _attach_transport(self) -> None:
        """Start making the loop's transport for this stream's socket (see
        `attach`); it arrives in
        `_transport_made` a loop iteration or two later."""
        # The selector is done with this socket (it may have served connect()).
        if self._state is not None:
            self.io_loop.remove_handler(self.fileno())
        # Never None again: Tornado's _maybe_add_error_listener has nothing to add.
        self._state = _READ | _ERROR
        protocol = self._protocol = StreamProtocol(self)
        loop = self._loop
        task = self._attach_task = loop.create_task(attach(loop, protocol))
        task.add_done_callback(self._attach_done)

    def _attach_done(self, task: asyncio.Task[None]) -> None:
        self._attach_task = None
        if task.cancelled():  # by close_fd, or by a loop shutting down
            if not self._closed:
                self.close()
            return
        error = task.exception()
        if error is None:
            return
        if self._transport is None and self._protocol is not None:
            # No transport owns the socket (a failed transport has already
            # closed or detached it, which makes this a no-op).
            self._protocol.sock.close()
        if not self._closed:
            self.close(exc_info=error)

    def _fall_back_to_selector(self) -> None:
        """Run on the selector engine after all (the transport was not made):
        a ``read_from_fd`` set on the instance, which only that engine calls."""
        self._use_transport = False
        self.engine = "selector"
        self._protocol = None
        self._state = None
        if self._read_future is not None:
            self._add_io_state(_READ)
        if self._write_buffer:
            self._add_io_state(_WRITE)
        self._maybe_add_error_listener()

    def _connected_for_transport(self, fd: Any) -> None:
        """A selector event of a stream on the transport engine: only
        ``connect()`` waits on the selector; once connected, the transport
        takes over."""
        try:
            if self._connecting:
                self._handle_connect()
        except Exception as e:
            gen_log.error("Uncaught exception, closing connection.", exc_info=True)
            self.close(exc_info=e)
            raise
        if self._closed or self._connecting:
            return
        self._attach_transport()

    def _transport_made(self, transport: asyncio.Transport) -> None:
        """The transport exists (``connection_made``): send what waited."""
        if self._closed:
            transport.abort()
            return
        self._transport = transport
        # pause_writing once anything is queued, resume_writing once all left.
        transport.set_write_buffer_limits(high=0)
        core = self._core
        if not core.reading and core.buffered_nbytes >= core.read_chunk_size:
            self._pause_reading()
        if self._write_buffer:
            self._handle_write()

    def _transport_received(self, nbytes: int) -> None:
        """``buffer_updated``: the transport received ``nbytes`` into the
        view the core handed out."""
        self.nbytes_received += nbytes
        core = self._core
        poll = self._busy_poll
        try:
            result = core.buffer_updated(nbytes)
        except StreamBufferFullError as e:
            # Logged as the selector engine (and stock) log it.
            gen_log.error("Reached maximum read buffer size")
            gen_log.warning("error on read: %s", e)
            self.close(exc_info=e)
            return
        except UnsatisfiableReadError as e:
            gen_log.info("Unsatisfiable read, closing connection: %s", e)
            self.close(exc_info=e)
            return
        except Exception as e:  # the reader rejected the bytes (FramingError…)
            self.close(exc_info=e)
            return
        if poll is not None and poll.parked_at:
            poll.data_came(perf_counter())
        if result is not PENDING:
            self._complete(result)
        elif self._read_future is not None:
            self._read_parked()
        if not core.reading and core.buffered_nbytes >= core.read_chunk_size and not self._closed:
            self._pause_reading()  # no room to hand out until a read starts

    def _pause_reading(self) -> None:
        transport = self._transport
        if transport is not None and not self._reading_paused:
            self._reading_paused = True
            transport.pause_reading()

    def _resume_reading(self) -> None:
        transport = self._transport
        if transport is not None and self._reading_paused:
            self._reading_paused = False
            transport.resume_reading()

    def _write_piece_to_transport(self) -> bool:
        """The kernel took only part of what is queued: hand the transport a
        copy of the next `TRANSPORT_PIECE_NBYTES` (it sends them once the
        socket is writable, then calls ``resume_writing``).  The caller's
        buffers stay in the stream's own queue, so a close releases them at
        once, and the rest is sent from there with ``sendmsg``, zero-copy.

        Returns True if the transport sent the piece at once (counted as
        sent: the caller sends on), else False (held: ``resume_writing``
        counts it; or nothing to hand over, or the transport is closing).
        """
        transport = self._transport
        if transport is None:
            if self._protocol is None and not self._closed:
                self._attach_transport()
            return False  # _transport_made sends what is queued
        write_buffer = self._write_buffer
        if self._write_paused or not write_buffer:
            return False
        with write_buffer.peek(TRANSPORT_PIECE_NBYTES) as view:
            piece = bytes(view)
        write_buffer.advance(len(piece))
        try:
            transport.write(piece)
        except Exception as e:  # the transport is closing: so is the stream
            self.close(exc_info=e)
            return False
        if self._write_paused:  # pause_writing: the transport holds it
            self._transport_held = len(piece)
            return False
        if transport.is_closing():
            # Dropped, or its send failed: connection_lost closes the stream
            # and fails the writes; nothing more is sent meanwhile.
            self._write_paused = True
            return False
        self._total_write_done_index += len(piece)
        return True

    def _transport_drained(self) -> None:
        """``resume_writing``: the piece handed to the transport was sent;
        send on from the stream's queue."""
        self._write_paused = False
        self._total_write_done_index += self._transport_held
        self._transport_held = 0
        if not self._closed:
            self._handle_write()

    def close_fd(self) -> None:
        """As stock: close the socket.  On the transport engine the transport
        owns the socket once it is being made: it is aborted (unsent bytes
        are dropped, as stock drops them) and closes the socket itself."""
        protocol = self._protocol
        if protocol is None:
            super().close_fd()
            return
        transport = self._transport
        if transport is not None:
            transport.abort()
        elif not protocol.started:
            task = self._attach_task
            if task is not None:
                task.cancel()
            self.socket.close()
        # else the transport is being made: _transport_made aborts it.
        self.socket = None  # type: ignore[assignment]

