"""Emptying OpenSSL's per-thread error queue after a TLS stream failed.

Why: OpenSSL keeps one error queue per thread, and ``SSL_get_error`` reads
it before it looks at the connection it is asked about: "the current
thread's error queue must be empty before the TLS/SSL I/O operation is
attempted, or SSL_get_error() will not work reliably" (SSL_get_error(3)).
CPython's ``ssl`` does not empty it before ``SSL_read_ex``/``SSL_write_ex``
(python/cpython#148594), and since it raises ``OSError`` for errors of
OpenSSL's ``ERR_LIB_SYS`` (CPython 3.12.8, 3.13.1, 3.14: python/cpython#127361)
it leaves the rest of the queue behind when it does.  OpenSSL 3.4 and later
report a failed send or receive that way: a peer that closed while this side
still had TLS 1.3 session tickets to send makes ``recv_into`` raise
``BrokenPipeError`` and leaves ``SSL_R_UNEXPECTED_EOF_WHILE_READING`` queued.
The next ``SSL_read`` of that thread, on any healthy connection, then reports
that stale entry instead of "want read": ``SSLEOFError``, which ``ssl``
turns into a read of 0 bytes, an end of stream.  On a dask scheduler one
nanny that closes its registration comm thus ends a worker's or the
client's connection (CPython 3.14 and 3.15 with OpenSSL 3.6; not 3.11 with
OpenSSL 3.0, which queues no such entry).

How: `clear` calls ``ERR_clear_error`` of the libcrypto that the ``ssl``
module itself uses (through ``_ssl``'s own handle, so never a second copy of
the library).  A TLS stream calls it when it closes, in the thread and the
loop callback where its error was raised, before any other connection of the
thread makes an OpenSSL call.  It costs one foreign call per TLS stream
closed and nothing per message.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

__all__ = ["AVAILABLE", "clear", "libcrypto"]


def libcrypto() -> ctypes.CDLL | None:
    """A handle that resolves the libcrypto the ``ssl`` module uses, or None
    where ``_ssl`` or ctypes cannot give one."""
    try:
        import _ssl

        path = getattr(_ssl, "__file__", None)
        # A shared _ssl module: its handle resolves the libcrypto it was
        # linked with.  Built into the interpreter: the interpreter's own.
        return ctypes.CDLL(path) if path else ctypes.CDLL(None)
    except (ImportError, OSError):
        return None


def _find_err_clear_error() -> Callable[[], None] | None:
    library = libcrypto()
    try:
        function = library.ERR_clear_error  # type: ignore[union-attr]
    except AttributeError:
        return None
    function.argtypes = []
    function.restype = None
    return function  # type: ignore[no-any-return]


_ERR_CLEAR_ERROR = _find_err_clear_error()

#: Whether `clear` can reach OpenSSL (False where ctypes or ``_ssl`` is missing).
AVAILABLE = _ERR_CLEAR_ERROR is not None


def clear() -> None:
    """Empty this thread's OpenSSL error queue (a no-op where `AVAILABLE` is
    False)."""
    if _ERR_CLEAR_ERROR is not None:
        _ERR_CLEAR_ERROR()
