"""`ReadIntoTCPClient`: a `tornado.tcpclient.TCPClient` whose ``connect``
resolves to a `ReadIntoIOStream`.

Stock `TCPClient.connect` builds its plain stream in the private
``TCPClient._create_stream`` and converts it with ``stream.start_tls``; this
subclass overrides the former (a copy that calls `ReadIntoTCPClient.make_stream`)
and relies on `ReadIntoIOStream.start_tls`, which returns an
`SSLReadIntoIOStream`.  Resolution, happy eyeballs (RFC 6555), ``timeout``,
``source_ip`` and ``source_port`` are stock, but a numeric host (an IP
address) is resolved inline: Tornado's default resolver on asyncio's loop
calls ``loop.getaddrinfo``, which starts an executor thread that then stays,
and a process with another thread never busy-polls (see
`tornado_readinto.core.busypoll`).
"""

from __future__ import annotations

import socket
from typing import Any, cast

from tornado.concurrent import Future
from tornado.netutil import Resolver

from ._net import resolve_numeric
from ._tornado_compat import IOStream
from ._tornado_entry_points import TCPClient
from .iostream import ReadIntoIOStream

__all__ = ["ReadIntoTCPClient"]


class _NumericHostResolver(Resolver):
    """Resolves a numeric host inline (no thread, no syscall); hands any
    other name to ``resolver``, which it owns."""

    def initialize(self, resolver: Resolver) -> None:  # type: ignore[override]
        self.resolver = resolver

    def close(self) -> None:
        self.resolver.close()

    async def resolve(  # type: ignore[override]
        self, host: str, port: int, family: socket.AddressFamily = socket.AF_UNSPEC
    ) -> list[tuple[int, Any]]:
        numeric = resolve_numeric(host, port, family)
        if numeric is not None:
            return numeric  # type: ignore[return-value]
        return await self.resolver.resolve(host, port, family)


class ReadIntoTCPClient(TCPClient):
    """A drop-in `tornado.tcpclient.TCPClient` whose `connect` resolves to a
    `ReadIntoIOStream`, or to an `SSLReadIntoIOStream` when ``ssl_options``
    is given::

        stream = await ReadIntoTCPClient().connect("127.0.0.1", 8888)
        tls = await ReadIntoTCPClient().connect(
            "example.com", 443, ssl_options=ssl.create_default_context()
        )

    Takes the same arguments as `TCPClient`; failures raise what stock
    raises (``OSError`` such as ``ConnectionRefusedError``, `TimeoutError`,
    `ssl.SSLError`).  Override `make_stream` to choose the stream class or its
    arguments (the TLS stream is made from it by
    `ReadIntoIOStream.start_tls`).

    .. versionadded:: 0.1
    """

    def __init__(self, resolver: Resolver | None = None, *, own_resolver: bool = False) -> None:
        """``own_resolver``: whether `close` closes a given ``resolver`` too
        (a resolver made here always is)."""
        if resolver is not None:
            super().__init__(resolver)
            self._own_resolver = own_resolver
            return
        # Numeric hosts inline, names through Tornado's default resolver;
        # both are this client's to close.
        super().__init__(_NumericHostResolver(resolver=Resolver()))
        self._own_resolver = True

    @classmethod
    def from_tcp_client(cls, client: TCPClient) -> ReadIntoTCPClient:
        """A `ReadIntoTCPClient` that takes over ``client``'s resolver (and
        its duty to close it, if ``client`` owned it)."""
        return cls(resolver=client.resolver, own_resolver=client._own_resolver)

    def make_stream(self, sock: socket.socket, max_buffer_size: int | None = None) -> ReadIntoIOStream:
        """Build the stream for a new, not yet connected, socket.

        :arg sock: a fresh non-connected socket (bound when ``source_ip`` or
            ``source_port`` was given).
        :arg max_buffer_size: as passed to `connect`.
        """
        return ReadIntoIOStream(sock, max_buffer_size=max_buffer_size)

    # A copy of TCPClient._create_stream (Tornado 6.5/6.6) in which the
    # stream is built by make_stream.
    def _create_stream(
        self,
        max_buffer_size: int | None,
        af: socket.AddressFamily,
        addr: tuple,  # type: ignore[type-arg]
        source_ip: str | None = None,
        source_port: int | None = None,
    ) -> tuple[IOStream, Future[IOStream]]:
        source_port_bind = source_port if isinstance(source_port, int) else 0
        source_ip_bind = source_ip
        if source_port_bind and not source_ip:
            # A source port without a source IP: bind to loopback of the
            # family being tried, as stock does.
            source_ip_bind = "::1" if af == socket.AF_INET6 else "127.0.0.1"
        socket_obj = socket.socket(af)
        try:
            if source_port_bind or source_ip_bind:
                socket_obj.bind((source_ip_bind, source_port_bind))
            stream = self.make_stream(socket_obj, max_buffer_size)
        except BaseException:
            socket_obj.close()
            raise
        return stream, cast("Future[IOStream]", stream.connect(addr))
