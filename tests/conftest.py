import asyncio
import logging
import ssl

import pytest

# Tornado's own test runner silences the access log; its ExpectLog-based tests
# (which we reuse against our classes) fail on unexpected INFO records otherwise.
logging.getLogger("tornado.access").setLevel(logging.CRITICAL)


def run(coro, timeout=30):
    """Run one test coroutine on a fresh event loop, bounded in time."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


@pytest.fixture(scope="session")
def tls_contexts():
    """(server_ctx, client_ctx) from a throwaway CA made by trustme, valid for
    127.0.0.1, ::1 and localhost, with verification and hostname checks on."""
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "::1", "localhost")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server_ctx)
    client_ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca.configure_trust(client_ctx)
    return server_ctx, client_ctx
