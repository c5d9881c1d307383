import asyncio
import logging
import ssl

import pytest

# Tornado's own test runner silences the access log; its ExpectLog-based tests
# (which we reuse against our classes) fail on unexpected INFO records otherwise.
logging.getLogger("tornado.access").setLevel(logging.CRITICAL)


@pytest.fixture(autouse=True)
def _tornado_logs_enabled():
    """Importing dask.distributed (some test modules do) sets the "tornado"
    logger to CRITICAL and "tornado.application" to ERROR; Tornado's
    ExpectLog tests, which several modules reuse, need their warnings."""
    loggers = [logging.getLogger(name) for name in ("tornado", "tornado.application")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.NOTSET)
    yield
    for logger, level in zip(loggers, levels):
        logger.setLevel(level)


LOOPS = ["asyncio", "uvloop"]


def new_event_loop(loop_name="asyncio"):
    """A fresh event loop: asyncio's default, or uvloop's."""
    if loop_name == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def run(coro, timeout=30, loop="asyncio"):
    """Run one test coroutine on a fresh event loop (``"asyncio"`` or
    ``"uvloop"``), bounded in time."""
    if loop == "asyncio":
        return asyncio.run(asyncio.wait_for(coro, timeout))
    event_loop = new_event_loop(loop)
    asyncio.set_event_loop(event_loop)
    try:
        return event_loop.run_until_complete(asyncio.wait_for(coro, timeout))
    finally:
        pending = asyncio.all_tasks(event_loop)
        for task in pending:
            task.cancel()
        event_loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        event_loop.run_until_complete(event_loop.shutdown_asyncgens())
        asyncio.set_event_loop(None)
        event_loop.close()


@pytest.fixture(params=LOOPS)
def loop_name(request):
    """Every test that takes it runs on asyncio's default loop and on uvloop."""
    return request.param


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


class Clock:
    """An explicit clock: ``now`` stays put until a test moves it, or
    advances by ``step`` at every reading (time as work done)."""

    def __init__(self, now=100.0, step=0.0):
        self.now = now
        self.step = step

    def __call__(self):
        self.now += self.step
        return self.now


@pytest.fixture
def stream_clock(monkeypatch):
    """An explicit clock for the streams (`tornado_readinto.iostream` reads
    ``perf_counter`` for busy polling and for how long a short recv proves a
    socket empty).  It stands still unless the test moves it, so a test that
    counts recvs does not depend on how fast the machine runs: a stalled
    test process would otherwise make a stream retry a recv it had proved
    empty (`~tornado_readinto.iostream.DRAINED_VALID_S`)."""
    from tornado_readinto import iostream

    clock = Clock()
    monkeypatch.setattr(iostream, "perf_counter", clock)
    return clock
