"""Addresses as strings: ``scheme://location``, ``host:port`` and socket
addresses (pure: no sockets, no Tornado).

The one place where `tornado_readinto.channel.comm` and the dask backend
(`tornado_readinto.dask.backend`) parse and print addresses, as
``distributed.comm.addressing`` is for distributed.  An IPv6 host is written
in brackets (``[::1]:8786``), as in URLs and in distributed.

.. versionadded:: 0.1
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Final

__all__ = [
    "COMM_SCHEMES",
    "parse_address",
    "parse_host_port",
    "unparse_host_port",
    "sockaddr_to_address",
    "contact_host",
]

#: The schemes of `tornado_readinto.channel.comm`.
COMM_SCHEMES: Final = ("tcp", "tls", "unix")

# Wildcard hosts a listener may be bound to -> the loopback host to reach it.
_WILDCARD_TO_LOOPBACK: Final = {"0.0.0.0": "127.0.0.1", "::": "::1"}


def parse_address(address: str, schemes: Collection[str] = COMM_SCHEMES) -> tuple[str, str]:
    """Split ``"scheme://location"`` into ``(scheme, location)``.

    :arg schemes: the schemes accepted (default: ``tcp``, ``tls``, ``unix``).
    :raises TypeError: ``address`` is not a ``str``.
    :raises ValueError: no scheme, a scheme not in ``schemes``, or a
        ``unix://`` address without a path.
    """
    if not isinstance(address, str):
        raise TypeError(f"address must be a str, not {type(address).__name__}")
    scheme, sep, loc = address.partition("://")
    if not sep:
        raise ValueError(f"address {address!r} has no scheme; expected tcp://host:port, tls://host:port or unix:///path")
    if scheme not in schemes:
        raise ValueError(f"unknown scheme {scheme!r} in {address!r}; expected one of {', '.join(schemes)}")
    if scheme == "unix" and not loc:
        raise ValueError(f"address {address!r} has no path")
    return scheme, loc


def parse_host_port(loc: str, default_port: int | None = None, *, address: str | None = None) -> tuple[str, int]:
    """``"host:port"``, ``"[v6host]:port"``, or either without the port (then
    ``default_port``) -> ``(host, port)``.

    :arg address: the whole address, for error messages (default: ``loc``).
    :raises ValueError: no port and no ``default_port``, a port that is not
        an integer in 0..65535, or an IPv6 host without brackets.
    """
    where = loc if address is None else address
    if loc.startswith("["):
        host, sep, rest = loc[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"invalid address {where!r}")
        port_str = rest[1:]
    elif loc.count(":") > 1:
        raise ValueError(f"invalid address {where!r}: an IPv6 host needs brackets, like [::1]:8786")
    else:
        host, _, port_str = loc.partition(":")
    if not port_str:
        if default_port is None:
            raise ValueError(f"address {where!r} has no port")
        return host, default_port
    try:
        port = int(port_str)
    except ValueError:
        raise ValueError(f"invalid port {port_str!r} in {where!r}") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} out of range in {where!r}")
    return host, port


def unparse_host_port(host: str, port: int | None = None) -> str:
    """``(host, port)`` -> ``"host:port"`` (``"[v6host]:port"``); just the
    host (bracketed if IPv6) when ``port`` is None."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return host if port is None else f"{host}:{port}"


def sockaddr_to_address(prefix: str, sockaddr: Any) -> str:
    """``prefix`` + the location of a ``getsockname()``/``getpeername()``/
    ``accept()`` address: ``host:port`` for an IP address (tuple), the path
    for a Unix socket (``str``; ``bytes`` in Linux's abstract namespace;
    empty for an unnamed socket).

    :arg prefix: e.g. ``"tcp://"`` or ``"readinto://"``.
    """
    if isinstance(sockaddr, tuple):
        return prefix + unparse_host_port(sockaddr[0], sockaddr[1])
    if isinstance(sockaddr, bytes):
        sockaddr = sockaddr.decode(errors="replace")
    return prefix + (sockaddr or "")


def contact_host(host: str) -> str:
    """The host to connect to for a listener bound to ``host``: a wildcard
    (``0.0.0.0``, ``::``) becomes loopback, any other is kept."""
    return _WILDCARD_TO_LOOPBACK.get(host, host)
