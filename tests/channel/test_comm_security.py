"""TLS and transport-security behaviour of the comm layer: mutual TLS,
plain TCP against a TLS listener, and require_encryption."""

import asyncio
import ssl

import pytest
import trustme

from tornado_readinto import CommClosedError
from tornado_readinto.channel.comm import connect, listen

from ..conftest import run
from .test_comm import echo_handler as _echo


@pytest.fixture(scope="module")
def mutual_tls():
    """A CA, a server context that requires client certificates, and two
    client contexts: one with a certificate from that CA, one without."""
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(server_ctx)
    ca.configure_trust(server_ctx)
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    with_cert = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca.configure_trust(with_cert)
    ca.issue_cert("client.example").configure_cert(with_cert)
    without_cert = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca.configure_trust(without_cert)
    return server_ctx, with_cert, without_cert


def test_comm_mutual_tls_refuses_client_without_certificate(mutual_tls):
    async def main():
        server_ctx, with_cert, without_cert = mutual_tls
        handled = []

        async def handler(comm):
            handled.append(comm.peer_address)
            await _echo(comm)

        listener = await listen("tls://127.0.0.1:0", handler, ssl_context=server_ctx, handshake_timeout=2)
        try:
            with pytest.raises(CommClosedError) as info:
                comm = await connect(listener.contact_address, ssl_context=without_cert, timeout=3)
                await comm.write("no cert")  # TLS 1.3: the refusal may surface on first use
                await comm.read()
            assert "certificate" in str(info.value).lower() or "closed" in str(info.value).lower()
            assert handled == []  # the handler never saw the unauthenticated peer
            async with await connect(listener.contact_address, ssl_context=with_cert, timeout=3) as comm:
                await comm.write({"hello": b"x" * 100_000})
                assert bytes((await comm.read())["hello"]) == b"x" * 100_000
            assert len(handled) == 1
        finally:
            listener.stop()

    run(main())


def test_comm_plain_tcp_to_tls_listener_fails_cleanly_on_both_sides(tls_contexts):
    async def main():
        server_ctx, client_ctx = tls_contexts
        handled = []

        async def handler(comm):
            handled.append(comm)
            await _echo(comm)

        listener = await listen("tls://127.0.0.1:0", handler, ssl_context=server_ctx, handshake_timeout=1)
        try:
            plain = listener.contact_address.replace("tls://", "tcp://")
            with pytest.raises(CommClosedError):
                await connect(plain, timeout=2)
            assert handled == []
            # the listener is unharmed: a TLS client is served right after
            async with await connect(listener.contact_address, ssl_context=client_ctx, timeout=3) as comm:
                await comm.write([1, 2, 3])
                assert await comm.read() == [1, 2, 3]
        finally:
            listener.stop()
        await asyncio.sleep(0)

    run(main())


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:0", "unix:///tmp/tornado-readinto-never.sock"])
def test_comm_require_encryption_refuses_non_tls_addresses(address):
    async def main():
        with pytest.raises(ValueError, match="require_encryption=True refuses"):
            await listen(address, _echo, require_encryption=True)
        with pytest.raises(ValueError, match="require_encryption=True refuses"):
            await connect(address.replace(":0", ":1"), require_encryption=True, timeout=1)

    run(main())


def test_comm_require_encryption_accepts_tls(tls_contexts):
    async def main():
        server_ctx, client_ctx = tls_contexts
        listener = await listen("tls://127.0.0.1:0", _echo, ssl_context=server_ctx, require_encryption=True)
        try:
            comm = await connect(listener.contact_address, ssl_context=client_ctx, require_encryption=True, timeout=3)
            await comm.write("ok")
            assert await comm.read() == "ok"
            await comm.close()
        finally:
            listener.stop()

    run(main())
