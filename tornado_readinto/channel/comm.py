"""dask-like message comms over `FramedStream`, usable without dask.

::

    async def handler(comm: Comm) -> None:
        msg = await comm.read()
        await comm.write({"echo": msg})
        await comm.close()

    listener = await listen("tcp://127.0.0.1:0", handler)
    comm = await connect(listener.contact_address)
    await comm.write({"op": "ping", "data": numpy.arange(10**7)})
    print(await comm.read())

Addresses are ``tcp://host:port``, ``tls://host:port`` (with an
``ssl_context=``) and ``unix:///path``.  A `Comm` carries *messages*: Python
structures of ``dict``, ``list``, ``tuple``, ``str``, ``int``, ``float``,
``bool``, ``None``, bytes-like objects and numpy arrays, nested freely.

Wire format of one message (on top of the framed layer of
`tornado_readinto.wire.framing`, i.e. one framed message per comm message):

* frame 0: the message serialized with msgpack, where every large buffer is
  replaced by a placeholder (a msgpack ExtType) that names its frame;
* frames 1..n: the out-of-band buffers, in order of first appearance, sent by
  reference and received straight into their own allocator buffers.

The placeholders, msgpack ``ExtType(code, data)`` whose ``data`` is itself
msgpack (nothing but these codes is ever turned into an object):

``ExtType(1, index)``
    A bytes-like buffer in frame ``index``; received as a writable
    ``memoryview`` over that frame (no copy).
``ExtType(2, [data, dtype, shape, order])``
    A numpy array (``shape`` a list) or numpy scalar (``shape`` nil).
    ``data`` is a frame index (out of band) or the raw bytes (inline);
    ``dtype`` a whitelisted ``dtype.str`` such as ``"<f8"`` (booleans,
    integers, floats, complex, datetimes: never objects, strings or
    structured dtypes); ``order`` is ``"C"`` or ``"F"``.  Out-of-band arrays
    are received with ``numpy.frombuffer`` over the frame (no copy, writable).
``ExtType(3, [items])``
    A tuple (msgpack has none).
``ExtType(4, [data, [indices]])``
    A pickle (protocol 5), only when both ends opened the comm with
    ``allow_pickle=True``; ``data`` is a frame index or the pickle bytes,
    ``indices`` the frames of its out-of-band ``PickleBuffer`` objects.

Every placeholder from the peer is validated (frame index in range and used
once, dtype against a whitelist, ``shape`` times ``itemsize`` equal to the
frame size, every frame referenced); a bad one raises `FramingError` and
aborts the comm.  A pickle placeholder on a comm that did not opt in with
``allow_pickle=True`` is refused the same way: untrusted bytes never reach
``pickle``.

Handshake: right after connecting (and the TLS handshake), each end sends one
message of one frame, the msgpack map ``{"protocol": "tornado_readinto",
"version": PROTOCOL_VERSION, "allow_pickle": bool}``, then reads the
other's (at most `HANDSHAKE_MAX_NBYTES`, within a timeout).  Another
protocol or version raises `HandshakeError` naming both and closes.

Backpressure: `Comm.write` returns once the message is queued, without
waiting for it to be sent; if the stream already holds more than
``write_high_water_nbytes`` unsent bytes (`WRITE_HIGH_WATER_NBYTES` by
default) it first waits until they are sent, so the queue holds at most that
plus one message.

.. versionadded:: 0.1
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
import ssl
from collections.abc import Awaitable, Callable
from typing import Any, Final

from tornado.iostream import StreamClosedError

from ..errors import (
    BufferBusyError,
    CommClosedError,
    CommTimeoutError,
    FramingError,
    HandshakeError,
    ReadTimeoutError,
)
from ..face._net import bind_unix_socket, check_encryption, listen_tcp, open_stream, unlink_unix_socket
from ..face.iostream import ReadIntoIOStream
from ..face.tcpserver import HandshakingTCPServer
from ..wire.addressing import contact_host, parse_address, parse_host_port, sockaddr_to_address
from ..wire.allocators import recycling_allocator
from ..wire.framing import (
    DEFAULT_MAX_FRAME_NBYTES,
    DEFAULT_MAX_FRAMES,
    DEFAULT_MAX_MESSAGE_NBYTES,
    Allocator,
    FrameReader,
)
from ..wire.message import (  # noqa: F401 - EXT_* are re-exported for tests and users
    EXT_BUFFER,
    EXT_NDARRAY,
    EXT_PICKLE,
    EXT_TUPLE,
    OUT_OF_BAND_MIN_NBYTES,
    _packb,
    _unpackb,
    decode_message,
    encode_message,
)
from ._channel import WRITE_HIGH_WATER_NBYTES, FramedChannel
from .framed import FramedStream

__all__ = [
    "Comm",
    "Listener",
    "connect",
    "listen",
    "open_stream",
    "encode_message",
    "decode_message",
    "parse_address",
    "CommClosedError",
    "CommTimeoutError",
    "HandshakeError",
    "PROTOCOL_NAME",
    "PROTOCOL_VERSION",
    "OUT_OF_BAND_MIN_NBYTES",
    "WRITE_HIGH_WATER_NBYTES",
]

logger = logging.getLogger(__name__)

#: Name sent in the handshake; a peer that sends another one is refused.
PROTOCOL_NAME: Final = "tornado_readinto"

#: Version of the message format (placeholders, handshake).  Both ends must
#: send the same one; bump it on any incompatible change.
PROTOCOL_VERSION: Final = 1


#: Default seconds `connect` keeps trying (connection, TLS and comm handshake).
DEFAULT_CONNECT_TIMEOUT: Final = 10.0  # seconds

#: Default seconds a listener waits for the TLS and comm handshakes of an
#: accepted connection before dropping it.
DEFAULT_HANDSHAKE_TIMEOUT: Final = 10.0  # seconds

#: Largest handshake message accepted from a peer (one frame).  A handshake
#: is a small dict; the bound keeps an unauthenticated peer from making us
#: allocate more than this before it has proven it speaks our protocol.
HANDSHAKE_MAX_NBYTES: Final = 64 * 1024  # bytes

#: Listen backlog: connections the kernel queues before we accept them (it
#: caps this at net.core.somaxconn, 4096 on Linux >= 5.4).  dask uses 2048
#: (``distributed.comm.socket-backlog``): a worker may get a connection from
#: every other worker at once.
LISTEN_BACKLOG: Final = 2048

# connect() retry delays: "full jitter" exponential backoff (a random delay
# in [0, min(cap, base * 2**attempt)]), as in AWS's "Exponential Backoff And
# Jitter" and dask's connect(); capped so a peer that comes up is found soon.
_BACKOFF_BASE: Final = 0.01  # seconds
_BACKOFF_MAX: Final = 1.0  # seconds

Handler = Callable[["Comm"], Awaitable[None] | None]


# -- the comm ---------------------------------------------------------------------


class Comm(FramedChannel):
    """One established message connection.

    Get one from `connect` or from a `listen` handler.  One `read` and any
    number of `write` calls may run at a time.

    :arg stream: the connected stream; the comm owns it.
    :arg local_address: this end's address (``tcp://host:port``…).
    :arg peer_address: the other end's address.
    :arg allow_pickle: send objects msgpack cannot handle as pickles (only if
        the peer allows them too) and unpickle received ones.  Only for
        peers you trust: unpickling runs arbitrary code.
    :arg allocator: where received frames land (see
        `tornado_readinto.wire.allocators`; default: the process-wide
        `~tornado_readinto.wire.allocators.recycling_allocator`, no memset, and
        large buffers are reused once the message no longer references them).
    :arg max_frames: passed to `FramedStream`.
    :arg max_frame_nbytes: passed to `FramedStream`.
    :arg max_message_nbytes: passed to `FramedStream`.
    :arg read_timeout: idle timeout of `read`, in seconds: a read during which
        no byte arrives for this long (up to 1.5 times this long: it is
        checked every half timeout, see `FramedStream`'s
        ``read_idle_timeout``) aborts the comm and raises `CommTimeoutError`.
        A large message that keeps arriving never times out.  ``None`` (the
        default) waits forever.
    :arg write_high_water_nbytes: `write` first waits for the queue to drain
        when more bytes than this are already queued (default
        `WRITE_HIGH_WATER_NBYTES`).
    :arg out_of_band_min_nbytes: buffers this large travel as their own
        frames (default `OUT_OF_BAND_MIN_NBYTES`).

    .. versionadded:: 0.1
    """

    def __init__(
        self,
        stream: ReadIntoIOStream,
        local_address: str,
        peer_address: str,
        *,
        allow_pickle: bool = False,
        allocator: Allocator | None = recycling_allocator,
        max_frames: int = DEFAULT_MAX_FRAMES,
        max_frame_nbytes: int = DEFAULT_MAX_FRAME_NBYTES,
        max_message_nbytes: int = DEFAULT_MAX_MESSAGE_NBYTES,
        read_timeout: float | None = None,
        write_high_water_nbytes: int = WRITE_HIGH_WATER_NBYTES,
        out_of_band_min_nbytes: int = OUT_OF_BAND_MIN_NBYTES,
    ) -> None:
        self._stream = stream
        self._framed = FramedStream(
            stream,
            allocator=allocator,
            max_frames=max_frames,
            max_frame_nbytes=max_frame_nbytes,
            max_message_nbytes=max_message_nbytes,
            read_idle_timeout=read_timeout,
        )
        self._local_address = local_address
        self._peer_address = peer_address
        self._allow_pickle = bool(allow_pickle)
        self._send_pickles = False  # set by the handshake: both ends allow it
        self._read_timeout = read_timeout
        self._high_water = write_high_water_nbytes
        self._oob_min_nbytes = out_of_band_min_nbytes
        self._closed = False
        #: The handshake dict the peer sent (``protocol``, ``version``,
        #: ``allow_pickle``); empty before the handshake.
        self.peer_info: dict[str, Any] = {}

    # -- properties ---------------------------------------------------------------

    @property
    def local_address(self) -> str:
        """This end's address, e.g. ``tcp://127.0.0.1:40123``."""
        return self._local_address

    @property
    def peer_address(self) -> str:
        """The other end's address, e.g. ``tcp://127.0.0.1:8786``."""
        return self._peer_address

    @property
    def stream(self) -> ReadIntoIOStream:
        """The underlying stream (do not read from or write to it)."""
        return self._stream

    def __repr__(self) -> str:
        state = "closed" if self.closed() else "open"
        return f"<{type(self).__name__} {state} local={self._local_address} peer={self._peer_address}>"

    async def __aenter__(self) -> Comm:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()

    # -- I/O --------------------------------------------------------------------

    def _closed_error(self, exc: BaseException, doing: str) -> BaseException | None:
        # What FramedChannel._fail raises for a failed read, write or flush.
        if isinstance(exc, ReadTimeoutError):
            return CommTimeoutError(
                f"no data from {self._peer_address} for read_timeout={self._read_timeout} s; comm aborted ({exc})"
            )
        if not isinstance(exc, StreamClosedError):
            return None  # a cancellation, a bad message…: raised as it is
        if self._closed:
            return CommClosedError(f"{doing} closed {self!r}")
        if doing == "read from" and isinstance(exc.real_error, FramingError):
            return exc.real_error  # the stream was closed by an earlier FramingError: report it
        return self._broken_error(exc, doing)

    def _broken_error(self, exc: BaseException, doing: str) -> CommClosedError:
        return CommClosedError(f"{doing} {self!r} failed: {type(exc).__name__}: {exc}")

    async def read(self) -> Any:
        """Receive one message.

        Costs one Future and, for a small message already read ahead, no
        syscall; large frames are received with ``recv_into`` straight into
        their buffers, and buffers and numpy arrays of the message are views
        of them (no copy).

        Any error in the middle of a read (including cancellation and the
        ``read_timeout``) aborts the comm: it cannot be trusted any more.

        :raises CommClosedError: the comm is closed or the connection broke
            (the cause is chained).
        :raises CommTimeoutError: no byte arrived for ``read_timeout`` seconds.
        :raises FramingError: the peer sent something that is not a valid
            message (the comm is aborted).
        :raises BufferBusyError: another read is in progress (this comm is
            not affected).
        """
        if self._closed:
            raise CommClosedError(f"read on closed {self!r}")
        try:
            frames = await self._framed.read_frames()
        except BufferBusyError:
            raise  # another read is in progress; this call changed nothing
        except BaseException as exc:
            self._fail(exc, "read from")
        try:
            return decode_message(frames, allow_pickle=self._allow_pickle)
        except BaseException as exc:
            self._fail(exc, "decode from")

    async def write(self, msg: Any) -> int:
        """Send one message; return the bytes it takes on the wire (framing
        header included).

        The message is queued and as much as the socket takes is sent at
        once; the call returns without waiting for the rest.  If more than
        ``write_high_water_nbytes`` were already queued, it first waits until
        the stream has sent them (backpressure), so a sent frame is freed
        once the caller drops the message.  Buffers and numpy
        arrays of ``msg`` at least ``out_of_band_min_nbytes`` long are sent by
        reference: do not modify them until `flush` (or a later write that
        waited) returns.

        Costs one walk over ``msg`` and one msgpack pass (see
        `encode_message`), one Future, and gather ``sendmsg`` calls.

        :raises TypeError: ``msg`` holds an object that cannot be sent;
            nothing was sent and the comm stays usable.
        :raises CommClosedError: the comm is closed or the connection broke.
            A write that fails (or is cancelled) after queuing aborts the comm.
        """
        if self.closed():
            raise CommClosedError(f"write on closed {self!r}")
        frames = encode_message(msg, allow_pickle=self._send_pickles, out_of_band_min_nbytes=self._oob_min_nbytes)
        try:
            return await self._framed.send_frames(frames, high_water_nbytes=self._high_water)
        except BaseException as exc:
            self._fail(exc, "write to")

    async def flush(self) -> None:
        """Wait until everything written so far was handed to the kernel
        (the caller's buffers are then free to change).

        :raises CommClosedError: the comm is closed or the connection broke.
        """
        if self.closed():
            raise CommClosedError(f"flush on closed {self!r}")
        try:
            await self._stream.write(b"")
        except BaseException as exc:
            self._fail(exc, "flush of")

    async def close(self) -> None:
        """Send what is still queued, then close.  Idempotent.

        Waits as long as the peer takes to accept the queued bytes; bound it
        with ``asyncio.wait_for`` if needed (cancellation aborts the comm).
        Errors while flushing are swallowed: the comm ends closed either way.
        """
        flushing = self._begin_close()
        if flushing is not None:
            await flushing

    # -- handshake ----------------------------------------------------------------

    async def handshake(self, timeout: float) -> None:
        """Exchange and check protocol handshakes (both ends write first, then
        read, so neither waits for the other): once, before any other
        message (`connect` and the `Listener` do).  The peer may send at most
        one frame of ``HANDSHAKE_MAX_NBYTES`` bytes.

        :raises CommTimeoutError: no handshake within ``timeout`` seconds.
        :raises HandshakeError: the peer does not speak this protocol.
        :raises CommClosedError: the connection broke (the comm is aborted
            on every failure).
        """
        local = {"protocol": PROTOCOL_NAME, "version": PROTOCOL_VERSION, "allow_pickle": self._allow_pickle}
        # A tight reader for the one handshake frame: an unknown peer cannot
        # make us allocate more than HANDSHAKE_MAX_NBYTES.
        reader = FrameReader(
            bytearray,
            max_frames=1,
            max_frame_nbytes=HANDSHAKE_MAX_NBYTES,
            max_message_nbytes=HANDSHAKE_MAX_NBYTES,
        )
        future = None
        try:
            self._framed.write_frames([_packb(local)])
            future = self._stream.read_message(reader)
            frames = await asyncio.wait_for(future, timeout)
        except TimeoutError as exc:
            self.abort()
            if future is not None and future.cancelled():  # wait_for expired
                raise CommTimeoutError(f"no handshake from {self._peer_address} within {timeout} s") from exc
            raise self._broken_error(exc, "handshake with") from exc
        except FramingError as exc:
            self.abort()
            raise HandshakeError(f"{self._peer_address} does not speak {PROTOCOL_NAME}: {exc}") from exc
        except StreamClosedError as exc:
            if isinstance(exc.real_error, FramingError):  # (read ahead: see read())
                self.abort()
                raise HandshakeError(f"{self._peer_address} does not speak {PROTOCOL_NAME}: {exc.real_error}") from exc
            self._fail(exc, "handshake with")
        except BaseException:
            self.abort()
            raise
        try:
            if len(frames) != 1:
                raise ValueError(f"{len(frames)} frames")
            remote = _unpackb(frames[0])
            if type(remote) is not dict:
                raise ValueError(f"a {type(remote).__name__}, not a dict")
        except Exception as exc:
            self.abort()
            raise HandshakeError(f"{self._peer_address} does not speak {PROTOCOL_NAME}: bad handshake ({exc})") from exc
        protocol, version = remote.get("protocol"), remote.get("version")
        if protocol != PROTOCOL_NAME or version != PROTOCOL_VERSION:
            self.abort()
            raise HandshakeError(
                f"{self._peer_address} speaks protocol {protocol!r} version {version!r}, "
                f"we speak {PROTOCOL_NAME!r} version {PROTOCOL_VERSION}"
            )
        self.peer_info = remote
        self._send_pickles = self._allow_pickle and remote.get("allow_pickle") is True


# -- connecting -------------------------------------------------------------------


async def _connect_once(
    scheme: str,
    loc: str,
    address: str,
    ssl_context: ssl.SSLContext | None,
    server_hostname: str | None,
    handshake_timeout: float,
    comm_kwargs: dict[str, Any],
) -> Comm:
    stream = await open_stream(scheme, loc, address, ssl_context=ssl_context, server_hostname=server_hostname)
    try:
        local = sockaddr_to_address(f"{scheme}://", stream.socket.getsockname())
        peer = address if scheme == "unix" else sockaddr_to_address(f"{scheme}://", stream.socket.getpeername())
        comm = Comm(stream, local, peer, **comm_kwargs)
    except BaseException:
        stream.close()
        raise
    await comm.handshake(handshake_timeout)  # aborts the comm on failure
    return comm


async def connect(
    address: str,
    *,
    timeout: float = DEFAULT_CONNECT_TIMEOUT,
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    require_encryption: bool = False,
    **kwargs: Any,
) -> Comm:
    """Connect to ``address`` and return a `Comm` once both handshakes (TLS,
    then the comm protocol) are done.

    Failed attempts (refused, reset, unreachable, DNS errors, a peer that
    does not answer) are retried with exponential backoff and full jitter
    (10 ms doubling, at most 1 s per wait) until ``timeout`` seconds have
    passed since the call.

    :arg address: ``tcp://host:port``, ``tls://host:port`` or ``unix:///path``.
    :arg timeout: seconds for the whole call, retries included.
    :arg ssl_context: required for ``tls://`` (and refused otherwise), e.g.
        ``ssl.create_default_context(cafile=…)``.  Its own settings apply:
        with the default ``check_hostname=True`` the server's certificate must
        match ``server_hostname``.
    :arg server_hostname: the name to verify the TLS certificate against
        (default: the host of ``address``).
    :arg require_encryption: refuse any address but ``tls://``.
    :arg kwargs: passed to `Comm`: ``allow_pickle``, ``allocator``,
        ``max_frames``, ``max_frame_nbytes``, ``max_message_nbytes``,
        ``read_timeout``, ``write_high_water_nbytes``,
        ``out_of_band_min_nbytes``.
    :raises ValueError: a malformed address, ``ssl_context`` missing for
        ``tls://`` / given for another scheme, or a non-TLS address with
        ``require_encryption=True``.
    :raises TypeError: an unknown keyword argument.
    :raises CommTimeoutError: (a `CommClosedError` and a ``TimeoutError``) no
        connection within ``timeout``; names the address and the timeout, the
        last attempt's error is chained.
    :raises HandshakeError: the server's certificate was refused, or it
        speaks another protocol or version (not retried).
    """
    scheme, loc = parse_address(address)
    _check_security(address, scheme, ssl_context, require_encryption)
    if scheme != "unix":
        parse_host_port(loc, address=address)  # fail now on a malformed address
    _check_comm_kwargs(kwargs)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    attempt = 0
    last_exc: BaseException | None = None
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        try:
            return await asyncio.wait_for(
                _connect_once(scheme, loc, address, ssl_context, server_hostname, remaining, kwargs),
                remaining,
            )
        except HandshakeError:
            raise
        except (TimeoutError, OSError) as exc:
            if last_exc is None or exc.args:  # a bare TimeoutError (wait_for) says less than an earlier error
                last_exc = exc
        attempt += 1
        remaining = deadline - loop.time()
        delay = random.uniform(0, min(_BACKOFF_MAX, _BACKOFF_BASE * 2**attempt, max(remaining, 0)))
        logger.debug("connecting to %s failed (%r); retrying in %.3f s", address, last_exc, delay)
        await asyncio.sleep(delay)
    if last_exc is None or not str(last_exc):
        cause = " (the last attempt did not finish in time)"
    else:
        cause = f" (last error: {type(last_exc).__name__}: {last_exc})"
    raise CommTimeoutError(f"timed out connecting to {address} after {timeout} s{cause}") from last_exc


_COMM_KWARGS: Final = frozenset(inspect.signature(Comm.__init__).parameters) - {
    "self",
    "stream",
    "local_address",
    "peer_address",
}


def _check_security(address: str, scheme: str, ssl_context: ssl.SSLContext | None, require_encryption: bool) -> None:
    check_encryption(
        address, tls=scheme == "tls", tls_scheme="tls", ssl_context=ssl_context, require_encryption=require_encryption
    )


def _check_comm_kwargs(kwargs: dict[str, Any]) -> None:
    unknown = sorted(set(kwargs) - _COMM_KWARGS)
    if unknown:
        raise TypeError(f"unexpected keyword arguments {unknown}; Comm takes {sorted(_COMM_KWARGS)}")


# -- listening --------------------------------------------------------------------


class Listener:
    """Accepts connections and runs a handler with a `Comm` for each.

    Create it with `listen`.  The handler runs once the TLS and protocol
    handshakes are done; it owns the comm (close it when done).  A
    connection whose handshakes fail or time out is dropped and logged; the
    handler never sees it.

    .. versionadded:: 0.1
    """

    def __init__(
        self,
        address: str,
        handler: Handler,
        *,
        ssl_context: ssl.SSLContext | None = None,
        require_encryption: bool = False,
        handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT,
        backlog: int = LISTEN_BACKLOG,
        **kwargs: Any,
    ) -> None:
        scheme, loc = parse_address(address)
        _check_security(address, scheme, ssl_context, require_encryption)
        _check_comm_kwargs(kwargs)
        self._scheme = scheme
        self._loc = loc
        self._address = address
        self._handler = handler
        self._handshake_timeout = handshake_timeout
        self._backlog = backlog
        self._comm_kwargs = kwargs
        self._server = HandshakingTCPServer(
            self._on_stream, ssl_context=ssl_context, tls_handshake_timeout=handshake_timeout
        )
        self._unix_id: tuple[int, int] | None = None
        self._bound: Any = None
        self._handshaking: set[Comm] = set()
        self._tasks: set[asyncio.Future[None]] = set()
        if scheme != "unix":
            self._host, self._port = parse_host_port(loc, default_port=0, address=address)

    async def start(self) -> None:
        """Bind and listen (`listen` calls it).

        :raises OSError: the address cannot be bound.
        """
        if self._scheme == "unix":
            sock, self._unix_id = bind_unix_socket(self._loc, self._backlog)
            self._server.add_socket(sock)
            self._bound = self._loc
            return
        self._bound = listen_tcp(self._server, self._host, self._port, self._backlog)

    def stop(self) -> None:
        """Stop listening: close the listening sockets (and remove the Unix
        socket file, if it is still ours) and drop connections that are still
        handshaking.  Established comms are not affected.  Idempotent."""
        if self._server.stopped:
            return
        self._server.stop()
        for comm in list(self._handshaking):
            comm.abort()
        if self._unix_id is not None:
            unlink_unix_socket(self._loc, self._unix_id)

    @property
    def listen_address(self) -> str:
        """The bound address, e.g. ``tcp://0.0.0.0:40123`` (the actual port
        when listening on port 0)."""
        if self._scheme == "unix":
            return f"unix://{self._loc}"
        return sockaddr_to_address(f"{self._scheme}://", self._bound)

    @property
    def contact_address(self) -> str:
        """An address to connect to: `listen_address` with a wildcard host
        (``0.0.0.0``, ``::``) replaced by loopback (``127.0.0.1``, ``::1``)."""
        if self._scheme == "unix":
            return self.listen_address
        host, port = self._bound
        return sockaddr_to_address(f"{self._scheme}://", (contact_host(host), port))

    def __repr__(self) -> str:
        state = "stopped" if self._server.stopped else "listening"
        where = self.listen_address if self._bound is not None else self._address
        return f"<{type(self).__name__} {state} {where}>"

    async def __aenter__(self) -> Listener:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        self.stop()

    async def _on_stream(self, stream: ReadIntoIOStream, address: Any) -> None:
        scheme = self._scheme
        peer = sockaddr_to_address(f"{scheme}://", address)
        if stream.closed():
            logger.info("dropping connection from %s: closed before its handshake", peer)
            return
        if scheme == "unix":
            local = self.listen_address
        else:
            local = sockaddr_to_address(f"{scheme}://", stream.socket.getsockname())
        comm = Comm(stream, local, peer, **self._comm_kwargs)
        self._handshaking.add(comm)
        try:
            await comm.handshake(self._handshake_timeout)
        except (OSError, FramingError) as exc:
            logger.info("dropping connection from %s: %s", peer, exc)
            return
        finally:
            self._handshaking.discard(comm)
        if self._server.stopped:
            comm.abort()
            return
        try:
            result = self._handler(comm)
            if inspect.isawaitable(result):
                await result
        except (CommClosedError, FramingError) as exc:
            logger.info("handler for %r ended: %s: %s", comm, type(exc).__name__, exc)
        except Exception:
            logger.exception("handler for %r failed", comm)
            comm.abort()


async def listen(
    address: str,
    handler: Handler,
    *,
    ssl_context: ssl.SSLContext | None = None,
    **kwargs: Any,
) -> Listener:
    """Listen on ``address`` and call ``await handler(comm)`` for each
    connection; return the `Listener`, already listening.

    :arg address: ``tcp://host:port`` (port 0 or none: an ephemeral port;
        empty host: all interfaces), ``tls://host:port`` or
        ``unix:///path``.  A Unix socket file is created with mode 0o600;
        a stale one (nobody listening) is replaced; it is removed on
        `Listener.stop`.
    :arg handler: a coroutine function (or plain function) taking the `Comm`.
    :arg ssl_context: required for ``tls://`` (a server context with its
        certificate loaded; set ``verify_mode=CERT_REQUIRED`` for mutual TLS).
    :arg kwargs: ``require_encryption`` (refuse any address but ``tls://``),
        ``handshake_timeout`` (seconds for the TLS and protocol
        handshakes of each connection, default 10), ``backlog``, and the
        `Comm` options (``allow_pickle``, ``allocator``, limits,
        ``read_timeout``…) applied to every accepted comm.
    :raises ValueError: a malformed address or ``ssl_context`` mismatch.
    :raises OSError: the address cannot be bound (``EADDRINUSE``…).
    """
    listener = Listener(address, handler, ssl_context=ssl_context, **kwargs)
    await listener.start()
    return listener
