"""A dask.distributed comm backend over `FramedStream`: schemes ``readinto://``
(TCP) and ``readinto-tls://`` (TLS).

Registered through the ``distributed.comm.backends`` entry point group (see
``setup.cfg``), so that::

    LocalCluster(protocol="readinto://")
    Scheduler(protocol="readinto-tls://", security=Security(...))

work with no other change.  Only distributed's public comm API is used
(``Backend``, ``Connector``, ``BaseListener``, ``Comm``, ``CommClosedError``,
``to_frames``/``from_frames``, the address helpers); no private attribute of
distributed or of its TCP comm.

Wire format: one, the byte stream of distributed's own ``tcp://`` comm
(``distributed/comm/tcp.py``): each dask message is tcp.py's ``P`` field and
then a framed message of `tornado_readinto.wire.framing` whose frames are those
of distributed's ``to_frames`` (split into shards of
``distributed.comm.shard`` bytes, as tcp.py does), ``P`` computed exactly as
tcp.py computes it (`~tornado_readinto.wire.framing.prefixed_message_header`).
So the ``readinto://`` scheme is only another name for the same bytes, and
`tornado_readinto.dask.tcp` serves distributed's own ``tcp://`` and
``tls://`` with these classes, byte-compatible with stock peers.  Each frame
is received into its own buffer (`~tornado_readinto.wire.allocators.recycling_allocator`:
no memset, and buffers of 4 MiB and more are reused once nothing references
them, sparing the kernel's page zeroing), which the deserialized objects
(numpy arrays…) then use without a copy; every size is checked against the
limits before anything is allocated, and a bad ``P`` or length closes the
comm with a clear error.

This module imports distributed; ``import tornado_readinto`` never does.

.. versionadded:: 0.1
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import socket
import ssl
import weakref
from collections.abc import Awaitable, Callable, Generator
from typing import Any, ClassVar, Final, NoReturn

import dask
from dask.utils import parse_bytes, parse_timedelta
from distributed.comm.core import BaseListener, Comm, CommClosedError, Connector, FatalCommClosedError
from distributed.comm.registry import Backend
from distributed.comm.utils import ensure_concrete_host, from_frames, to_frames
from distributed.utils import ensure_ip, get_ip
from tornado.iostream import StreamClosedError

from ..channel._channel import WRITE_HIGH_WATER_NBYTES, FramedChannel
from ..channel.framed import FramedStream
from ..errors import FramingError, HandshakeError
from ..face._net import check_encryption, listen_tcp, open_stream, set_tcp_keepalive
from ..face.iostream import ReadIntoIOStream
from ..face.tcpserver import DEFAULT_TLS_HANDSHAKE_TIMEOUT, HandshakingTCPServer
from ..wire.addressing import parse_host_port, sockaddr_to_address, unparse_host_port
from ..wire.allocators import recycling_allocator
from .metrics import COMM_METRICS, CommFigures
from .switchinterval import apply_switch_interval, parse_switch_interval

__all__ = [
    "ReadIntoComm",
    "ReadIntoTLSComm",
    "ReadIntoTCPConnector",
    "ReadIntoTLSConnector",
    "ReadIntoTCPListener",
    "ReadIntoTLSListener",
    "ReadIntoTCPBackend",
    "ReadIntoTLSBackend",
    "convert_stream_closed_error",
    "stream_kwargs",
    "BUSY_POLL_CONFIG",
    "SWITCH_INTERVAL_CONFIG",
    "apply_configured_switch_interval",
]

logger = logging.getLogger(__name__)

#: dask config key of the shard size (``frame_split_size``) of distributed's
#: serializer, honoured as tcp.py honours it (64 MiB by default).  tcp.py
#: reads it once, at import; here every comm reads it when it is made.
SHARD_CONFIG: Final = "distributed.comm.shard"

#: dask config key of the busy-poll budget of the backend's streams (a
#: timedelta such as ``"50us"``, see
#: `~tornado_readinto.core.busypoll.BUSY_POLL_BUDGET_S`); unset or 0 means no busy
#: polling, the streams' default.  Read when a connection
#: is made or a listener starts; worker processes get it like any dask config
#: (``DASK_DISTRIBUTED__COMM__READINTO__BUSY_POLL=0`` in the environment).
BUSY_POLL_CONFIG: Final = "distributed.comm.readinto.busy-poll"

#: dask config keys of the frame limits of each comm's reads (see
#: `tornado_readinto.wire.framing.FrameLimits`): the most frames of a
#: message, the largest frame and the largest message, in bytes (``"1GiB"``
#: or an int).  Unset: the package's defaults (2**20 frames, 64 GiB, 64 GiB).
#: A message over one fails the read (the comm is aborted), is counted in
#: the process's refused messages (`tornado_readinto.dask.metrics`), and
#: nothing is allocated for it.  Read when a comm is made.
LIMIT_CONFIGS: Final = {
    "max_frames": "distributed.comm.readinto.max-frames",
    "max_frame_nbytes": "distributed.comm.readinto.max-frame-size",
    "max_message_nbytes": "distributed.comm.readinto.max-message-size",
}


#: dask config key of the interpreter's switch interval in processes that
#: use this backend (a timedelta such as ``"1ms"``); unset by default, and
#: then the interpreter is left alone.  Where it is set, the first connection
#: made or listener started through the backend applies it
#: (`tornado_readinto.dask.switchinterval.apply_switch_interval`: once, logged
#: once).  A worker started by a Nanny or ``dask worker`` gets it like any
#: dask config (``DASK_DISTRIBUTED__COMM__READINTO__SWITCH_INTERVAL=1ms``).
SWITCH_INTERVAL_CONFIG: Final = "distributed.comm.readinto.switch-interval"


def _config_seconds(key: str) -> float | None:
    """The duration at dask config ``key`` in seconds, None when unset.

    :raises ValueError: the value is not a duration >= 0.
    """
    value = dask.config.get(key, None)
    if value is None:
        return None
    try:
        seconds = parse_timedelta(value, default="seconds")
    except (ValueError, TypeError, KeyError, AttributeError):  # dask's parser raises all of these
        seconds = None
    if seconds is None or not seconds >= 0:
        raise ValueError(f"{key} must be a duration >= 0, got {value!r}")
    return float(seconds)


def apply_configured_switch_interval() -> bool:
    """Apply `SWITCH_INTERVAL_CONFIG` if it is set (see the key); True when
    the interval changed now.

    :raises ValueError: the value is not a duration from 50 us to 1 s.
    """
    seconds = parse_switch_interval(_config_seconds(SWITCH_INTERVAL_CONFIG), SWITCH_INTERVAL_CONFIG)
    return apply_switch_interval(seconds, SWITCH_INTERVAL_CONFIG)


def stream_kwargs() -> dict[str, Any]:
    """The stream arguments that dask config asks for (`BUSY_POLL_CONFIG`).
    Also applies `SWITCH_INTERVAL_CONFIG` where it is set: every connection
    and listener of the backend asks for these first.

    :raises ValueError: a configured value is not a duration >= 0 (or the
        switch interval not one from 50 us to 1 s).
    """
    apply_configured_switch_interval()
    seconds = _config_seconds(BUSY_POLL_CONFIG)
    if seconds is None:
        return {}
    return {"busy_poll_s": seconds}


#: The largest shard over TLS: distributed's TLS comm caps its shards at
#: ``C_INT_MAX`` (an OpenSSL 1.0.2 workaround); the same cap keeps the same frames.
_TLS_MAX_SHARD = (1 << 31) - 1  # bytes


def _shard_nbytes(tls: bool) -> int:
    nbytes = int(parse_bytes(dask.config.get(SHARD_CONFIG)))
    return min(_TLS_MAX_SHARD, nbytes) if tls else nbytes


def frame_limits() -> dict[str, int]:
    """The frame limits that dask config sets (`LIMIT_CONFIGS`), as
    `FramedStream` arguments; the unset ones are left out.

    :raises ValueError: a value that is not a size >= 0.
    """
    limits = {}
    for name, key in LIMIT_CONFIGS.items():
        value = dask.config.get(key, None)
        if value is None:
            continue
        try:
            nbytes = int(value) if name == "max_frames" else int(parse_bytes(value))
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{key} must be a size >= 0, got {value!r}") from exc
        if nbytes < 0:
            raise ValueError(f"{key} must be a size >= 0, got {value!r}")
        limits[name] = nbytes
    return limits


def convert_stream_closed_error(obj: Any, exc: BaseException) -> NoReturn:
    """Raise ``distributed.comm.CommClosedError`` for a low-level error: the
    one place where this backend translates errors (the cause is chained).

    A refused TLS certificate becomes ``FatalCommClosedError`` (distributed
    does not retry it); a `FramingError` (garbled data from the peer) reads
    "aborted stream on garbled data".
    """
    raise _comm_closed_error(obj, exc) from exc


def _comm_closed_error(obj: Any, exc: BaseException) -> CommClosedError:
    real = getattr(exc, "real_error", None)
    if isinstance(exc, HandshakeError) or isinstance(real or exc, ssl.SSLCertVerificationError):
        return FatalCommClosedError(
            f"in {obj}: TLS certificate verification failed ({real or exc}); check your security settings"
        )
    if isinstance(exc, FramingError) or isinstance(real, FramingError):
        return CommClosedError(f"in {obj}: aborted stream on garbled data: {real or exc}")
    if real is not None:
        return CommClosedError(f"in {obj}: {type(real).__name__}: {real}")
    return CommClosedError(f"in {obj}: {type(exc).__name__}: {exc}")


# Low-level errors that a comm read or write turns into CommClosedError.
_CONNECTION_ERRORS: Final = (StreamClosedError, ssl.SSLError, FramingError)


def _set_tcp_keepalive(sock: socket.socket) -> None:
    """Let the kernel notice a dead peer on an idle connection within
    ``distributed.comm.timeouts.tcp`` (30 s by default), with tcp.py's
    keepalive schedule, but without its ``TCP_USER_TIMEOUT``; see
    `tornado_readinto.face._net.set_tcp_keepalive`."""
    timeout_s = int(parse_timedelta(dask.config.get("distributed.comm.timeouts.tcp"), default="seconds"))
    set_tcp_keepalive(sock, timeout_s, like_distributed=True)


def _close_dangling(stream: ReadIntoIOStream, description: str, figures: CommFigures) -> None:
    """A comm is garbage without having released its stream: close the
    stream, and fold the comm's figures into the closed comms' totals."""
    if not stream.closed():
        logger.warning("closing dangling stream in %s", description)
        stream.close()
    COMM_METRICS.comm_closed(figures)


class ReadIntoComm(FramedChannel, Comm):
    """A ``distributed.comm.core.Comm`` over a `FramedStream`.

    :arg stream: the connected stream; the comm owns it.
    :arg local_addr: ``readinto://host:port`` of this end.
    :arg peer_addr: ``readinto://host:port`` of the other end.
    :arg deserialize: passed to distributed's ``from_frames``.

    .. versionadded:: 0.1
    """

    #: Whether ``max_shard_size`` takes TLS's cap (see `_TLS_MAX_SHARD`).
    _tls: ClassVar[bool] = False

    def __init__(self, stream: ReadIntoIOStream, local_addr: str, peer_addr: str, deserialize: bool = True) -> None:
        self._closed = False
        # distributed.comm.core.connect() reads these two attributes.
        self._local_addr = local_addr
        self._peer_addr = peer_addr
        self._stream = stream
        super().__init__(deserialize=deserialize)
        #: distributed's shard size at the time the comm was made (`SHARD_CONFIG`);
        #: the ``frame_split_size`` of each write.  Named as on tcp.py's comm,
        #: where code written for it sets it per comm.
        self.max_shard_size = _shard_nbytes(self._tls)
        self._framed = FramedStream(stream, allocator=recycling_allocator, nosplit_prefix=True, **frame_limits())
        self._extra: dict[str, Any] = {}
        if stream.socket is not None and stream.socket.family in (socket.AF_INET, socket.AF_INET6):
            stream.set_nodelay(True)
            _set_tcp_keepalive(stream.socket)
        self._read_extra()
        #: This comm's messages and bytes (`tornado_readinto.dask.metrics`).
        self.figures = CommFigures(stream)
        COMM_METRICS.comm_opened(self.figures)
        self._finalizer = weakref.finalize(self, _close_dangling, stream, repr(self), self.figures)
        self._finalizer.atexit = False

    def _read_extra(self) -> None:
        pass

    @property
    def local_address(self) -> str:
        return self._local_addr

    @property
    def peer_address(self) -> str:
        return self._peer_addr

    @property
    def extra_info(self) -> dict[str, Any]:
        return self._extra

    @property
    def stream(self) -> ReadIntoIOStream | None:
        """The `ReadIntoIOStream` under this comm while it is open; None once
        `close` or `abort` was called (as on distributed's TCP comm, whose
        ``stream`` code written for it reaches for)."""
        return None if self._closed else self._stream

    async def read(self, deserializers: Any = None) -> Any:
        """Receive one message: one `FramedStream.read_frames` (frames land in
        their own buffers), then distributed's ``from_frames``.

        :raises CommClosedError: the comm is closed, the connection broke or
            the peer sent garbled or truncated data (the comm is aborted).
        """
        if self._closed:
            raise CommClosedError(f"read on closed {self!r}")
        try:
            frames = await self._framed.read_frames()
        except BaseException as exc:
            COMM_METRICS.message_refused(exc)
            self._fail(exc, "read")
        self.figures.messages_received += 1
        try:
            return await from_frames(
                frames,
                deserialize=self.deserialize,
                deserializers=deserializers,
                allow_offload=self.allow_offload,
            )
        except EOFError as exc:
            # Frames garbled or truncated by the peer.
            self.abort()
            raise CommClosedError("aborted stream on truncated data") from exc

    async def write(self, msg: Any, serializers: Any = None, on_error: str | None = "message") -> int:
        """Send one message: distributed's ``to_frames``, then one
        `FramedStream.write_frames` (a gather write, buffers by reference).

        Returns without waiting for the bytes to be sent, as distributed's
        own comm does; if more than
        `~tornado_readinto.channel.comm.WRITE_HIGH_WATER_NBYTES` are already
        queued it first waits for the queue to drain (backpressure).

        :returns: the bytes of the message on the wire (header included).
        :raises CommClosedError: the comm is closed or the connection broke.
        """
        if self.closed():
            raise CommClosedError(f"write on closed {self!r}")
        frames = await to_frames(
            msg,
            allow_offload=self.allow_offload,
            serializers=serializers,
            on_error=on_error,
            context={"sender": self.local_info, "recipient": self.remote_info, **self.handshake_options},
            frame_split_size=self.max_shard_size,
        )
        try:
            nbytes = await self._framed.send_frames(frames, high_water_nbytes=WRITE_HIGH_WATER_NBYTES)
        except BaseException as exc:
            self._fail(exc, "write")
        self.figures.messages_sent += 1
        return nbytes

    def close(self) -> Awaitable[None]:  # type: ignore[override]
        """Send what is still queued, then close (idempotent).

        Works like distributed's TCP comm ``close`` (a ``gen.coroutine``):
        the comm is marked closed, and closed at once if nothing is queued,
        even if the result is never awaited.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop to flush on (e.g. a finalizer at exit)
            self.abort()
            return _ALREADY_DONE
        flushing = self._begin_close()
        return _ALREADY_DONE if flushing is None else asyncio.ensure_future(flushing)

    def abort(self) -> None:
        """Close at once, dropping what is still queued.  Idempotent."""
        super().abort()
        COMM_METRICS.comm_closed(self.figures)

    def _release(self) -> None:
        self._finalizer.detach()
        self._stream.close()
        COMM_METRICS.comm_closed(self.figures)

    def _closed_error(self, exc: BaseException, doing: str) -> BaseException | None:
        # What FramedChannel._fail raises: CommClosedError for a broken
        # connection or garbled data; anything else (a cancellation…) as it is.
        return _comm_closed_error(self, exc) if isinstance(exc, _CONNECTION_ERRORS) else None


class ReadIntoTLSComm(ReadIntoComm):
    """`ReadIntoComm` over TLS; ``extra_info`` holds the peer's certificate
    (``peercert``) and the ``cipher``."""

    _tls: ClassVar[bool] = True

    def _read_extra(self) -> None:
        sock: Any = self._stream.socket
        if sock is not None and hasattr(sock, "getpeercert"):
            self._extra.update(peercert=sock.getpeercert(), cipher=sock.cipher())


class _Done:
    """An awaitable that is already done (for `ReadIntoComm.close`)."""

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield  # a generator that returns at once


_ALREADY_DONE: Final = _Done()


class _EncryptionCheck:
    prefix: ClassVar[str]
    encrypted: ClassVar[bool]
    #: The scheme an error message suggests when encryption is required.
    tls_scheme: ClassVar[str] = "readinto-tls"

    def _check_encryption(self, address: str, connection_args: dict[str, Any]) -> ssl.SSLContext | None:
        """Check the connection args against this scheme, raising
        distributed's errors (``RuntimeError`` when encryption is required,
        ``TypeError`` without an ``ssl.SSLContext`` for TLS); return the TLS
        context, or None for plain TCP (which ignores a context it is given:
        ``Security`` hands one to every scheme)."""
        ssl_context = connection_args.get("ssl_context")
        check_encryption(
            self.prefix + address,
            tls=self.encrypted,
            tls_scheme=self.tls_scheme,
            ssl_context=ssl_context,
            require_encryption=bool(connection_args.get("require_encryption")),
            refuse_unused_context=False,
            encryption_error=RuntimeError,
            context_error=TypeError,
        )
        return ssl_context if self.encrypted else None


class ReadIntoTCPConnector(Connector, _EncryptionCheck):
    """Connects to ``readinto://host:port``.

    .. versionadded:: 0.1
    """

    prefix: ClassVar[str] = "readinto://"
    comm_class: ClassVar[type[ReadIntoComm]] = ReadIntoComm
    encrypted: ClassVar[bool] = False

    async def connect(self, address: str, deserialize: bool = True, **connection_args: Any) -> ReadIntoComm:
        """One connection attempt (distributed's ``connect`` retries).

        :raises CommClosedError: the connection failed.
        :raises FatalCommClosedError: the peer's TLS certificate was refused.
        """
        ssl_context = self._check_encryption(address, connection_args)
        ip, port = parse_host_port(address)
        try:
            stream = await open_stream(
                "tcp" if ssl_context is None else "tls",
                unparse_host_port(ip, port),
                self.prefix + address,
                ssl_context=ssl_context,
                server_hostname=connection_args.get("server_hostname") or ip,
                stream_kwargs=stream_kwargs(),
            )
        except (OSError, ssl.SSLError) as exc:  # StreamClosedError, HandshakeError, ours
            convert_stream_closed_error(self, exc)
        try:
            local_address = sockaddr_to_address(self.prefix, stream.socket.getsockname())
            return self.comm_class(stream, local_address, self.prefix + address, deserialize)
        except OSError as exc:
            stream.close()
            convert_stream_closed_error(self, exc)


class ReadIntoTLSConnector(ReadIntoTCPConnector):
    """Connects to ``readinto-tls://host:port`` with the ``ssl_context`` of the
    connection args (from ``Security.get_connection_args``).

    .. versionadded:: 0.1
    """

    prefix: ClassVar[str] = "readinto-tls://"
    comm_class: ClassVar[type[ReadIntoComm]] = ReadIntoTLSComm
    encrypted: ClassVar[bool] = True


class ReadIntoTCPListener(BaseListener, _EncryptionCheck):
    """Listens on ``readinto://host:port`` and hands each connection, after
    distributed's handshake, to ``comm_handler``.

    .. versionadded:: 0.1
    """

    prefix: ClassVar[str] = "readinto://"
    comm_class: ClassVar[type[ReadIntoComm]] = ReadIntoComm
    encrypted: ClassVar[bool] = False

    def __init__(
        self,
        address: str,
        comm_handler: Callable[[Comm], Any],
        deserialize: bool = True,
        allow_offload: bool = True,
        default_host: str | None = None,
        default_port: int = 0,
        **connection_args: Any,
    ) -> None:
        super().__init__()
        self._ssl_context = self._check_encryption(address, connection_args)
        self.ip, self.port = parse_host_port(address, default_port)
        self.default_host = default_host
        self.comm_handler = comm_handler
        self.deserialize = deserialize
        self.allow_offload = allow_offload
        self._server: HandshakingTCPServer | None = None
        self.bound_address: tuple[str, int] | None = None

    async def start(self) -> None:
        """Bind (port 0: an ephemeral port) and start accepting."""
        timeout = parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"), default="seconds")
        server = HandshakingTCPServer(
            self._handle_stream,
            ssl_context=self._ssl_context,
            tls_handshake_timeout=timeout or DEFAULT_TLS_HANDSHAKE_TIMEOUT,
            stream_kwargs=stream_kwargs(),
        )
        backlog = int(dask.config.get("distributed.comm.socket-backlog"))
        self.bound_address = listen_tcp(server, self.ip, self.port, backlog)
        self._server = server

    def stop(self) -> None:
        """Stop accepting; established comms are not affected."""
        server, self._server = self._server, None
        if server is not None:
            server.stop()

    def get_host_port(self) -> tuple[str, int]:
        """The bound ``(host, port)``.

        :raises ValueError: the listener was not started.
        """
        if self.bound_address is None:
            raise ValueError(f"invalid operation on non-started {type(self).__name__}")
        return self.bound_address

    @property
    def listen_address(self) -> str:
        return self.prefix + unparse_host_port(*self.get_host_port())

    @property
    def contact_address(self) -> str:
        host, port = self.get_host_port()
        host = ensure_concrete_host(host, default_host=self.default_host)
        return self.prefix + unparse_host_port(host, port)

    async def _handle_stream(self, stream: ReadIntoIOStream, address: Any) -> None:
        if self._server is None:
            # stopped after accepting: nobody would close this comm
            stream.close()
            return
        peer = sockaddr_to_address(self.prefix, address)
        try:
            local = sockaddr_to_address(self.prefix, stream.socket.getsockname())
        except OSError:
            stream.close()
            return
        comm = self.comm_class(stream, local, peer, self.deserialize)
        comm.allow_offload = self.allow_offload
        try:
            await self.on_connection(comm)
        except CommClosedError:
            logger.info("connection from %s closed before handshake completed", peer)
            return
        result = self.comm_handler(comm)
        if inspect.isawaitable(result):  # distributed's Server returns an awaitable
            await result


class ReadIntoTLSListener(ReadIntoTCPListener):
    """Listens on ``readinto-tls://host:port`` with the ``ssl_context`` of the
    listen args (from ``Security.get_listen_args``); the TLS handshake of each
    connection completes before distributed's handshake.

    .. versionadded:: 0.1
    """

    prefix: ClassVar[str] = "readinto-tls://"
    comm_class: ClassVar[type[ReadIntoComm]] = ReadIntoTLSComm
    encrypted: ClassVar[bool] = True


class _ReadIntoBackend(Backend):
    _connector_class: ClassVar[type[ReadIntoTCPConnector]]
    _listener_class: ClassVar[type[ReadIntoTCPListener]]

    def get_connector(self) -> ReadIntoTCPConnector:
        return self._connector_class()

    def get_listener(
        self, loc: str, handle_comm: Callable[[Comm], Any], deserialize: bool, **connection_args: Any
    ) -> ReadIntoTCPListener:
        return self._listener_class(loc, handle_comm, deserialize, **connection_args)

    def get_address_host(self, loc: str) -> str:
        return parse_host_port(loc)[0]

    def get_address_host_port(self, loc: str) -> tuple[str, int]:
        return parse_host_port(loc)

    def resolve_address(self, loc: str) -> str:
        host, port = parse_host_port(loc)
        return unparse_host_port(ensure_ip(host), port)

    def get_local_address_for(self, loc: str) -> str:
        host, _ = parse_host_port(loc)
        return unparse_host_port(get_ip(ensure_ip(host)), None)


class ReadIntoTCPBackend(_ReadIntoBackend):
    """The ``readinto`` scheme: plain TCP.

    .. versionadded:: 0.1
    """

    _connector_class = ReadIntoTCPConnector
    _listener_class = ReadIntoTCPListener


class ReadIntoTLSBackend(_ReadIntoBackend):
    """The ``readinto-tls`` scheme: TLS with distributed's ``Security`` contexts.

    .. versionadded:: 0.1
    """

    _connector_class = ReadIntoTLSConnector
    _listener_class = ReadIntoTLSListener
