"""distributed's own ``tcp://`` and ``tls://`` schemes, served by this package.

The classes of `tornado_readinto.dask.backend` under distributed's scheme
names: the same addresses, ``Security`` contexts, ``connect``/``listen``
arguments and Backend API as ``distributed.comm.tcp``, and its byte stream
(tcp.py's ``P`` field included, see `tornado_readinto.wire.framing.prefixed_message_header`),
so that a stock peer cannot tell the difference.  Nothing here registers
a backend itself: `tornado_readinto.dask.switch` puts `InPlaceTCPBackend` and
`InPlaceTLSBackend` in ``distributed.comm.registry.backends`` when switched
on.  Importing this module makes the comms virtual subclasses of
distributed's ``TCP`` and ``TLS`` comm classes (see the end of the module).

This module imports distributed; ``import tornado_readinto`` never does.

.. versionadded:: 0.1
"""

from __future__ import annotations

from typing import ClassVar

from distributed.comm import tcp as _stock_tcp

from .backend import (
    ReadIntoComm,
    ReadIntoTCPBackend,
    ReadIntoTCPConnector,
    ReadIntoTCPListener,
    ReadIntoTLSBackend,
    ReadIntoTLSComm,
    ReadIntoTLSConnector,
    ReadIntoTLSListener,
)

__all__ = [
    "InPlaceTCPBackend",
    "InPlaceTCPConnector",
    "InPlaceTCPListener",
    "InPlaceTLSBackend",
    "InPlaceTLSConnector",
    "InPlaceTLSListener",
]


class _TCPScheme:
    """distributed's ``tcp://`` scheme name (and its TLS sibling's, for the
    encryption error), in place of the ``readinto://`` plug-in's."""

    prefix: ClassVar[str] = "tcp://"
    tls_scheme: ClassVar[str] = "tls"


class _TLSScheme(_TCPScheme):
    """distributed's ``tls://`` scheme name."""

    prefix: ClassVar[str] = "tls://"


class InPlaceTCPConnector(_TCPScheme, ReadIntoTCPConnector):
    """Connects to ``tcp://host:port`` (any peer: stock distributed or this package)."""


class InPlaceTLSConnector(_TLSScheme, ReadIntoTLSConnector):
    """Connects to ``tls://host:port`` with the ``ssl_context`` of the connection args."""


class InPlaceTCPListener(_TCPScheme, ReadIntoTCPListener):
    """Listens on ``tcp://host:port``."""


class InPlaceTLSListener(_TLSScheme, ReadIntoTLSListener):
    """Listens on ``tls://host:port`` with the ``ssl_context`` of the listen args."""


class InPlaceTCPBackend(ReadIntoTCPBackend):
    """The ``tcp`` scheme, in place of ``distributed.comm.tcp.TCPBackend``."""

    _connector_class = InPlaceTCPConnector
    _listener_class = InPlaceTCPListener


class InPlaceTLSBackend(ReadIntoTLSBackend):
    """The ``tls`` scheme, in place of ``distributed.comm.tcp.TLSBackend``."""

    _connector_class = InPlaceTLSConnector
    _listener_class = InPlaceTLSListener


# The comms of the switched schemes are distributed's tcp:// and tls:// comms
# as far as ``isinstance`` can tell: code written against the stock classes
# (distributed's own test utilities, ``utils_test.LockedComm``, assert
# ``isinstance(comm, TCP)`` before wrapping one) keeps working.  A virtual
# subclass (``ABC.register``) inherits nothing; it only answers isinstance.
# It is registered when this module is imported, i.e. in switched processes.
_stock_tcp.TCP.register(ReadIntoComm)
_stock_tcp.TLS.register(ReadIntoTLSComm)
