"""The exception hierarchy of tornado_readinto.

Every exception subclasses a builtin (or Tornado's ``StreamClosedError``) as well
as `ReadIntoError`, so that existing ``except ValueError`` /
``except StreamClosedError`` clauses keep working.  Each exception builds its
message from its own fields: lower case, with the numbers, no final period.
"""

from __future__ import annotations

# The one module that names Tornado's stream exceptions for the core (which
# raises them, as a drop-in stream must, and imports them from here, never
# from Tornado or the face), with stand-ins where Tornado is absent.
try:
    from tornado.iostream import StreamBufferFullError, StreamClosedError, UnsatisfiableReadError
except ImportError:  # pragma: no cover - exercised by the purity test only
    # The pure modules (framing, writebuffer, allocators) must import without
    # Tornado.  StreamClosedError is an OSError subclass, so OSError keeps the
    # same ``except`` behaviour in that (Tornado-less) situation.
    class StreamClosedError(OSError):  # type: ignore[no-redef]
        def __init__(self, real_error: BaseException | None = None) -> None:
            super().__init__("Stream is closed")
            self.real_error = real_error

    class StreamBufferFullError(Exception):  # type: ignore[no-redef]
        """More bytes than a buffer's limit."""

    class UnsatisfiableReadError(Exception):  # type: ignore[no-redef]
        """A read that cannot be satisfied (``max_bytes``)."""

__all__ = [
    "ReadIntoError",
    "FramingError",
    "FrameTooLargeError",
    "IncompleteReadError",
    "BufferBusyError",
    "CommClosedError",
    "CommTimeoutError",
    "HandshakeError",
    "NotSwitchedError",
]


class ReadIntoError(Exception):
    """Base class of every error this package raises; never raised bare."""


class FramingError(ReadIntoError, ValueError):
    """The peer sent a header that does not describe a valid message."""


class FrameTooLargeError(FramingError):
    """A header field is over its configured limit.

    Raised before anything is allocated for the message.

    :ivar field: the limit's name, e.g. ``"max_frame_nbytes"``.
    :ivar value: what the header asked for.
    :ivar limit: the configured limit.
    """

    def __init__(self, field: str, value: int, limit: int) -> None:
        self.field = field
        self.value = value
        self.limit = limit
        super().__init__(f"header asks for {field.replace('max_', '')} = {value}, over {field} = {limit}")


class IncompleteReadError(ReadIntoError, StreamClosedError):  # type: ignore[misc,valid-type]
    """The stream closed before a read was complete.

    Also a `tornado.iostream.StreamClosedError`, so code written for stock
    Tornado catches it.

    :ivar expected: bytes the read needed.
    :ivar received: bytes that had arrived when the stream closed.
    :ivar what: what was being read, e.g. ``"frame 3"`` (may be empty).
    """

    def __init__(
        self,
        expected: int,
        received: int,
        what: str = "",
        real_error: BaseException | None = None,
    ) -> None:
        super().__init__(real_error=real_error)
        self.expected = expected
        self.received = received
        self.what = what
        of = f" of {what}" if what else ""
        msg = f"peer closed connection after {received} of {expected} bytes{of}"
        if real_error is not None:
            msg += f" ({type(real_error).__name__}: {real_error})"
        self.args = (msg,)

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.expected, self.received, self.what))


class BufferBusyError(ReadIntoError, RuntimeError):
    """A second read started while one is in progress on the same stream, or
    a buffer was resized while views of it were exported."""


class CommClosedError(ReadIntoError, OSError):
    """A `tornado_readinto.channel.comm.Comm` is closed, or its connection broke.

    An ``OSError`` (``IOError``), like ``distributed.comm.CommClosedError``;
    the low-level cause (``StreamClosedError``, `IncompleteReadError`, an
    ``ssl.SSLError``…) is chained as ``__cause__``.
    """


class CommTimeoutError(CommClosedError, TimeoutError):
    """`tornado_readinto.channel.comm.connect` gave up after its timeout, or a read
    waited longer than the comm's ``read_timeout`` (the comm was aborted).

    Both a `CommClosedError` and a ``TimeoutError``, so either ``except``
    clause catches it; the last connection error is chained.
    """


class HandshakeError(CommClosedError):
    """The peer was reached but the two ends cannot talk: its TLS certificate
    was refused, or it speaks another protocol or protocol version.

    Retrying does not help, so `tornado_readinto.channel.comm.connect` raises it at
    once instead of retrying until its timeout.
    """


class ReadTimeoutError(ReadIntoError, TimeoutError):
    """A read waited longer than its idle timeout without receiving a byte;
    the stream was closed.

    :ivar timeout: the idle timeout, in seconds.
    :ivar what: what was being read, e.g. ``"frame 2 of 4"``.
    """

    def __init__(self, timeout: float, what: str = "") -> None:
        self.timeout = timeout
        self.what = what
        during = f" while reading {what}" if what else ""
        super().__init__(f"no data for {timeout:g} s{during}; connection closed")

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.timeout, self.what))


class NotSwitchedError(ReadIntoError, RuntimeError):
    """`tornado_readinto.dask.switch.verify` (with ``strict=True``) found
    processes of the cluster whose comms are stock distributed's.

    :ivar stock: the stock processes, each named as in the report's
        ``"stock"`` list, e.g. ``"scheduler tls://10.0.0.5:8786"`` or
        ``"nanny tcp://10.0.0.7:40321"``.
    :ivar nprocesses: how many processes were asked (the client included).

    .. versionadded:: 0.1
    """

    def __init__(self, stock: list[str], nprocesses: int) -> None:
        self.stock = list(stock)
        self.nprocesses = nprocesses
        super().__init__(f"{len(self.stock)} of {nprocesses} processes are stock: {', '.join(self.stock)}")

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.stock, self.nprocesses))
