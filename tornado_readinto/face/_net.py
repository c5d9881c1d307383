"""Where comms get their sockets: resolve and connect, bind TCP and Unix
listening sockets, and check an address against the TLS settings.

The one socket-side module of `tornado_readinto.channel.comm` and of the dask
backend (`tornado_readinto.dask.backend`); it knows nothing of messages
(no msgpack, no distributed).  Connections are `ReadIntoIOStream`\\ s
(`SSLReadIntoIOStream` over TLS); accepted ones come from a
`~tornado_readinto.face.tcpserver.HandshakingTCPServer` the caller makes.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import ssl
import stat
import sys
import tempfile
from collections.abc import Mapping
from typing import Any, Final

from tornado.iostream import StreamClosedError
from tornado.netutil import bind_sockets
from tornado.tcpserver import TCPServer

from ..errors import CommClosedError, HandshakeError
from ..wire.addressing import parse_host_port
from .iostream import ReadIntoIOStream, SSLReadIntoIOStream

__all__ = [
    "resolve",
    "resolve_numeric",
    "open_stream",
    "bind_tcp_sockets",
    "listen_tcp",
    "bind_unix_socket",
    "unlink_unix_socket",
    "check_encryption",
    "set_tcp_keepalive",
]

logger = logging.getLogger(__name__)

# Binding port 0 on both families can race (see bind_tcp_sockets).
_BIND_ATTEMPTS: Final = 5

# A Unix socket path must fit sockaddr_un.sun_path (108 bytes on Linux,
# 104 on the BSDs and macOS), including the terminating NUL.
_UNIX_PATH_MAX: Final = 104 if sys.platform == "darwin" or "bsd" in sys.platform else 108

# TCP keepalive: probes sent over the second half of the budget.
_KEEPALIVE_PROBES: Final = 5
#: tcp.py's fixed probe count (Windows' unsettable default, used everywhere).
_DISTRIBUTED_KEEPALIVE_PROBES: Final = 10



# -- connecting -------------------------------------------------------------------


def _distinct(infos: Any) -> list[tuple[socket.AddressFamily, Any]]:
    seen: list[tuple[socket.AddressFamily, Any]] = []
    for family, _, _, _, sockaddr in infos:
        if (family, sockaddr) not in seen:
            seen.append((family, sockaddr))
    return seen


def resolve_numeric(
    host: str, port: int, family: socket.AddressFamily = socket.AF_UNSPEC
) -> list[tuple[socket.AddressFamily, Any]] | None:
    """The distinct ``(family, sockaddr)`` pairs of a numeric host (an IP
    address) for a stream socket, inline: no thread, no syscall; None for a
    name, which needs a resolver."""
    flags = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV
    try:
        return _distinct(socket.getaddrinfo(host, port, family, socket.SOCK_STREAM, flags=flags))
    except socket.gaierror:
        return None


async def resolve(host: str, port: int) -> list[tuple[socket.AddressFamily, Any]]:
    """``getaddrinfo`` for a stream socket: the distinct ``(family,
    sockaddr)`` pairs, in the resolver's order.  A numeric host is resolved
    inline (`resolve_numeric`); a name goes to the loop's resolver (a thread
    pool).

    :raises socket.gaierror: the name does not resolve.
    """
    numeric = resolve_numeric(host, port)
    if numeric is not None:
        return numeric
    return _distinct(await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM))


def _real_error(exc: BaseException) -> BaseException:
    return getattr(exc, "real_error", None) or exc


async def open_stream(
    scheme: str,
    loc: str,
    address: str,
    *,
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    stream_kwargs: Mapping[str, Any] | None = None,
) -> ReadIntoIOStream:
    """Open a `ReadIntoIOStream` to ``loc``: one connection attempt (TCP or
    Unix connect, each resolved address in turn, then the TLS handshake with
    ``ssl_context``), with no protocol handshake.  `connect` and the dask
    backend's connector open their streams with it.  ``stream_kwargs`` (for
    example ``{"busy_poll_s": 0.0}``) go to the stream's constructor.

    :arg scheme: ``"unix"`` for a Unix socket at ``loc``; anything else means
        TCP to ``loc`` = ``host:port`` (TLS when ``ssl_context`` is given).
    :arg address: the whole address, for error messages.
    :raises HandshakeError: the peer's TLS certificate was refused.
    :raises OSError: (including ``StreamClosedError``) the attempt failed.

    .. versionadded:: 0.1
    """
    stream: ReadIntoIOStream
    kwargs = stream_kwargs or {}
    if scheme == "unix":
        stream = ReadIntoIOStream(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM), **kwargs)
        try:
            await stream.connect(loc)
        except BaseException:
            stream.close()
            raise
        return stream
    host, port = parse_host_port(loc, address=address)
    errors: list[BaseException] = []
    for family, sockaddr in await resolve(host, port):
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if ssl_context is not None:
            stream = SSLReadIntoIOStream(sock, ssl_options=ssl_context, **kwargs)
        else:
            stream = ReadIntoIOStream(sock, **kwargs)
        try:
            if isinstance(stream, SSLReadIntoIOStream):
                await stream.connect(sockaddr, server_hostname=server_hostname or host)
            else:
                await stream.connect(sockaddr)
        except (StreamClosedError, ssl.SSLError) as exc:
            stream.close()
            if isinstance(_real_error(exc), ssl.SSLCertVerificationError):
                raise HandshakeError(f"TLS handshake with {address} failed: {_real_error(exc)}") from exc
            errors.append(exc)
            continue
        except BaseException:
            stream.close()
            raise
        return stream
    if not errors:
        raise OSError(errno.EADDRNOTAVAIL, f"{host!r} resolves to no address")
    real = _real_error(errors[-1])
    raise CommClosedError(f"cannot connect to {address}: {type(real).__name__}: {real}") from errors[-1]


# -- listening --------------------------------------------------------------------


def bind_tcp_sockets(host: str, port: int, backlog: int = 128) -> list[socket.socket]:
    """`tornado.netutil.bind_sockets` for ``host:port`` (all interfaces for
    ``""``), retried when an ephemeral port 0 races with another bind.

    Tornado binds IPv4 and IPv6 to the same ephemeral port; now and then the
    port it got for one family is taken in the other (``EADDRINUSE``).

    :raises OSError: the address cannot be bound.
    """
    for attempt in range(_BIND_ATTEMPTS):
        try:
            return bind_sockets(port, address=host or None, backlog=backlog)
        except OSError as exc:
            if port != 0 or exc.errno != errno.EADDRINUSE or attempt == _BIND_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def listen_tcp(server: TCPServer, host: str, port: int, backlog: int) -> tuple[str, int]:
    """Bind ``host:port`` (`bind_tcp_sockets`), hand the sockets to
    ``server`` and return the bound ``(host, port)``: the IPv4 one when
    bound to both families (as distributed does), the actual port for 0.

    :raises OSError: the address cannot be bound.
    """
    sockets = bind_tcp_sockets(host, port, backlog)
    server.add_sockets(sockets)
    inet = [s for s in sockets if s.family == socket.AF_INET] or sockets
    bound_host, bound_port = inet[0].getsockname()[:2]
    return bound_host, bound_port


def _remove_stale_unix_socket(path: str) -> None:
    """Remove ``path`` if it is a socket nobody listens on.

    :raises FileExistsError: ``path`` exists and is not a socket.
    :raises OSError: (``EADDRINUSE``) a live server listens on ``path``.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise FileExistsError(errno.EEXIST, f"{path} exists and is not a socket; not replacing it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.setblocking(False)
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        os.unlink(path)  # stale: left behind by a process that died
        return
    except FileNotFoundError:
        return
    except BlockingIOError:
        pass  # a live server with a full backlog
    finally:
        probe.close()
    raise OSError(errno.EADDRINUSE, f"a server is already listening on unix socket {path}")


def bind_unix_socket(path: str, backlog: int) -> tuple[socket.socket, tuple[int, int]]:
    """Bind and listen on a Unix socket at ``path``, mode 0o600 from the
    start; return it with the file's ``(st_dev, st_ino)`` (for
    `unlink_unix_socket`).  A stale socket file at ``path`` (nobody
    listening) is replaced.

    The socket is bound inside a fresh private (0o700) directory next to
    ``path``, made 0o600 there and hard-linked into place (no window in which
    another user could connect, and an existing ``path`` is never
    clobbered).  If that directory's path is too long for ``sun_path``, the
    socket is bound at ``path`` and chmod-ed right away.

    :raises FileExistsError: ``path`` exists and is not a socket.
    :raises OSError: (``EADDRINUSE``) a live server listens on ``path``, or
        another bind error.
    """
    _remove_stale_unix_socket(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        tmpdir = tempfile.mkdtemp(prefix=".trsock-", dir=os.path.dirname(os.path.abspath(path)))
        try:
            tmp_path = os.path.join(tmpdir, "s")
            if len(os.fsencode(tmp_path)) < _UNIX_PATH_MAX:
                sock.bind(tmp_path)
                os.chmod(tmp_path, 0o600)
                try:
                    os.link(tmp_path, path)
                except FileExistsError:
                    raise OSError(errno.EADDRINUSE, f"{path} appeared while binding") from None
                except OSError:
                    os.rename(tmp_path, path)  # a filesystem without hard links
            else:
                sock.bind(path)
                os.chmod(path, 0o600)
        finally:
            try:
                os.unlink(os.path.join(tmpdir, "s"))
            except FileNotFoundError:
                pass
            os.rmdir(tmpdir)
        sock.setblocking(False)
        sock.listen(backlog)
        st = os.stat(path)
    except BaseException:
        sock.close()
        raise
    return sock, (st.st_dev, st.st_ino)


def unlink_unix_socket(path: str, file_id: tuple[int, int]) -> None:
    """Remove the socket file at ``path`` if it is still the one
    `bind_unix_socket` made (``file_id``), not one another server put there
    since.  Errors are ignored."""
    try:
        st = os.lstat(path)
        if (st.st_dev, st.st_ino) == file_id:
            os.unlink(path)
    except OSError:
        pass


# -- TLS settings and socket options -----------------------------------------------


def check_encryption(
    address: str,
    *,
    tls: bool,
    tls_scheme: str,
    ssl_context: object,
    require_encryption: bool,
    refuse_unused_context: bool = True,
    encryption_error: type[Exception] = ValueError,
    context_error: type[Exception] = ValueError,
) -> None:
    """The one place where an address is checked against the TLS settings.

    :arg address: the whole address, for messages.
    :arg tls: whether ``address`` is a TLS one.
    :arg tls_scheme: the TLS scheme to suggest, e.g. ``"tls"``.
    :arg refuse_unused_context: refuse an ``ssl_context`` for a non-TLS
        address (distributed passes its context to every scheme: the dask
        backend ignores it there).
    :arg encryption_error: raised when ``require_encryption`` refuses a
        non-TLS address (distributed raises ``RuntimeError``).
    :arg context_error: raised when a TLS address has no ``ssl.SSLContext``
        (distributed's TLS comm raises ``TypeError``).
    :raises ValueError: ``refuse_unused_context`` and a context given for a
        non-TLS address; or as above.
    """
    if require_encryption and not tls:
        raise encryption_error(
            f"encryption required: require_encryption=True refuses {address}; use a {tls_scheme}:// address"
        )
    if tls and not isinstance(ssl_context, ssl.SSLContext):
        raise context_error(f"{address} needs an ssl_context argument of type ssl.SSLContext, got {ssl_context!r}")
    if not tls and ssl_context is not None and refuse_unused_context:
        raise ValueError(f"ssl_context given for {address}; use a {tls_scheme}:// address")


def keepalive_schedule(timeout_s: int, *, like_distributed: bool = False) -> tuple[int, int, int]:
    """``(idle, interval, probes)`` in seconds for a dead-peer budget of
    ``timeout_s`` (> 0): half the budget idle, then probes over the other
    half; or, ``like_distributed``, ``distributed/comm/tcp.py``'s
    ``set_tcp_timeout`` schedule (10 probes, a quarter idle, the rest to the
    last probe), where stock allows it: stock asserts ``timeout_s >= 11``,
    and below that this falls back to the first schedule."""
    if like_distributed and timeout_s >= _DISTRIBUTED_KEEPALIVE_PROBES + 1:
        nprobes = _DISTRIBUTED_KEEPALIVE_PROBES
        idle = max(2, timeout_s // 4)
        interval = max(1, (timeout_s - idle) // nprobes)
        return timeout_s - interval * nprobes, interval, nprobes
    idle = max(1, timeout_s // 2)
    return idle, max(1, (timeout_s - idle) // _KEEPALIVE_PROBES), _KEEPALIVE_PROBES


def set_tcp_keepalive(sock: socket.socket, timeout_s: int, *, like_distributed: bool = False) -> None:
    """Let the kernel notice a dead peer on an idle connection within
    ``timeout_s`` seconds: keepalive probes (`keepalive_schedule`).  Nothing
    for ``timeout_s <= 0``; an ``OSError`` (a socket already gone) is logged
    at debug level.

    ``TCP_USER_TIMEOUT`` is not set, unlike stock ``tcp.py``: on Linux it
    aborted healthy connections after zero-window episodes (why, and what
    this trades: "Dead peers" in ``docs/reliability.rst``)."""
    if timeout_s <= 0:
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if hasattr(socket, "TCP_KEEPIDLE"):
            idle, interval, nprobes = keepalive_schedule(timeout_s, like_distributed=like_distributed)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, nprobes)
    except OSError as exc:
        logger.debug("could not set TCP keepalive on %r: %s", sock, exc)
