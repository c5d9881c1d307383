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
* The protocol never raises into the loop: an error closes the stream, with
  the error as its ``error``, as the selector engine does.
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import TYPE_CHECKING, Final, cast

if TYPE_CHECKING:  # pragma: no cover
    from .iostream import ReadIntoIOStream

__all__ = ["ENGINES", "ENV_VAR", "StreamProtocol", "attach", "choose_engine"]

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

    def __init__(self, stream: ReadIntoIOStream) -> None:
        self._stream: ReadIntoIOStream | None = stream
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
        if stream is None:  # pragma: no cover - closed and let go already
            transport.close()
            return
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


async def attach(loop: asyncio.AbstractEventLoop, protocol: StreamProtocol, sock: socket.socket) -> None:
    """Make ``loop``'s transport for the connected ``sock``, with
    ``protocol`` (its ``connection_made`` hands the transport over)."""
    stream = protocol._stream
    if stream is None or stream._closed:
        return
    if "read_from_fd" in vars(stream):
        # Replaced on the instance (as Tornado's tests do): the selector
        # engine calls it, the transport would not.
        stream._fall_back_to_selector()
        return
    protocol.started = True
    await loop.connect_accepted_socket(lambda: protocol, sock)
