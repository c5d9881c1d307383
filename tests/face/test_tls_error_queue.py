"""A TLS connection that fails leaves OpenSSL's per-thread error queue empty,
so the thread's other connections read on (see `tornado_readinto.face._sslerrors`).

The failure this guards: on CPython 3.14/3.15 with OpenSSL 3.6, a peer that
connects, sends and aborts makes the server's ``recv_into`` raise
``BrokenPipeError`` (OpenSSL could not send its TLS 1.3 session tickets) and
leaves ``unexpected eof while reading`` queued; the server thread's next
``SSL_read`` on a healthy connection then reports that entry, which ``ssl``
turns into an end of stream.  A dask scheduler lost its client and workers
that way whenever a nanny closed its registration comm.  With OpenSSL 3.0
(CPython 3.11 here) nothing is left queued, and the tests pass either way.
"""

from __future__ import annotations

import ctypes

import pytest

from tornado_readinto.channel.comm import connect, listen
from tornado_readinto.face import _sslerrors

from ..conftest import run

SHORT_CONNECTIONS = 20


LIBCRYPTO = _sslerrors.libcrypto()
ERR_PEEK_ERROR = LIBCRYPTO.ERR_peek_error
ERR_PEEK_ERROR.argtypes = []
ERR_PEEK_ERROR.restype = ctypes.c_ulong


def _queue_an_error() -> None:
    """Queue one entry on this thread (OpenSSL 3's ``ERR_raise``: a macro
    over ``ERR_new`` and ``ERR_set_error``; library 20 is ERR_LIB_SSL)."""
    LIBCRYPTO.ERR_new()
    LIBCRYPTO.ERR_set_error(ctypes.c_int(20), ctypes.c_int(65), None)


def test_sslerrors_reaches_the_ssl_modules_libcrypto():
    assert _sslerrors.AVAILABLE
    _sslerrors.clear()
    assert ERR_PEEK_ERROR() == 0


def test_tls_comms_read_on_after_another_connection_failed(loop_name, tls_contexts):
    """One long-lived comm does a round trip after each of 20 short ones that
    connect, send and abort.  Every round trip arrives, and whenever the
    server's handler sees a short comm's read fail, the loop thread's OpenSSL
    error queue is already empty (counted: entries left after a failure)."""
    server_ctx, client_ctx = tls_contexts
    failures: list[str] = []
    left_queued: list[int] = []

    async def handler(comm):
        try:
            while True:
                await comm.write(await comm.read())
        except OSError as exc:
            failures.append(type(exc).__name__)
            left_queued.append(ERR_PEEK_ERROR())
            comm.abort()

    async def main():
        listener = await listen("tls://127.0.0.1:0", handler, ssl_context=server_ctx)
        try:
            address = listener.contact_address
            long_lived = await connect(address, ssl_context=client_ctx, timeout=10)
            for i in range(SHORT_CONNECTIONS):
                short = await connect(address, ssl_context=client_ctx, timeout=10)
                await short.write({"register": i, "pad": b"x" * 1000})
                short.abort()
                await long_lived.write({"i": i})
                assert await long_lived.read() == {"i": i}
            await long_lived.close()
        finally:
            listener.stop()

    run(main(), loop=loop_name)
    assert failures, "no short connection's read failed on the server"
    assert left_queued == [0] * len(left_queued)


@pytest.mark.parametrize("closes_for", ["an error", "a plain close"])
def test_a_closing_tls_stream_empties_the_error_queue(tls_contexts, closes_for):
    """The stream empties the queue as it closes (whatever is queued then,
    by whichever connection of the thread)."""
    from tornado_readinto import SSLReadIntoIOStream

    async def main():
        import socket

        a, b = socket.socketpair()
        stream = SSLReadIntoIOStream(a, ssl_options=tls_contexts[0])  # server side: wrapped now
        try:
            _queue_an_error()
            assert ERR_PEEK_ERROR() != 0
            stream.close(exc_info=BrokenPipeError() if closes_for == "an error" else False)
            assert ERR_PEEK_ERROR() == 0
        finally:
            b.close()

    run(main())
