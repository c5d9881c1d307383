import array
import asyncio
import contextlib
import fcntl
import logging
import ssl
import termios
import threading

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

#: How much earlier than its deadline a timer may fire, measured on the loop's
#: own clock: asyncio runs a timer up to ``loop._clock_resolution`` early and
#: uvloop's clock counts whole milliseconds.  Lower bounds ("the timeout did
#: not fire before its deadline") allow this much; upper bounds on elapsed
#: time are never asserted (how fast a machine is is no behaviour).
CLOCK_SLACK_S = 0.005


async def until(condition):
    """Let the event loop turn until ``condition()`` holds: a state that the
    loop itself brings about (a read pending, a byte count reached), never a
    guess of how long that takes.  The test's own timeout bounds a hang."""
    while not condition():
        await asyncio.sleep(0)


def bytes_waiting(sock) -> int:
    """Bytes in ``sock``'s kernel receive queue, not yet read (FIONREAD):
    "the message has arrived whole" as a fact, not as a sleep."""
    buf = array.array("i", [0])
    fcntl.ioctl(sock.fileno(), termios.FIONREAD, buf)
    return buf[0]


def connect_attempts(monkeypatch, module):
    """Record every connection attempt made through ``module.open_stream``
    (`tornado_readinto.channel.comm` or `tornado_readinto.dask.backend`): a list of
    ``"connected"`` / ``"failed"``, one per attempt, in order.  Says "refused
    at once, not retried" as a count instead of a duration."""
    attempts = []
    real = module.open_stream

    async def open_stream(*args, **kwargs):
        try:
            stream = await real(*args, **kwargs)
        except BaseException:
            attempts.append("failed")
            raise
        attempts.append("connected")
        return stream

    monkeypatch.setattr(module, "open_stream", open_stream)
    return attempts


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


class HeldCalls:
    """Counts the held calls (wrapping `_gilheld.recv_into` and `writev`,
    and the compiled build's untimed native calls, which are the same
    functions), recording where each recv was asked to land."""

    def __init__(self, monkeypatch):
        from tornado_readinto.core import _gilheld, _sockcalls
        from tornado_readinto.diagnostics.testing import buffer_address

        self.recvs = []  # (address, requested, received or None)
        self.writes = []  # bytes sent per writev
        recv_into, writev = _gilheld.recv_into, _gilheld.writev

        def counting_recv_into(fd, view):
            try:
                received = recv_into(fd, view)
            except BlockingIOError:
                self.recvs.append((buffer_address(view), len(view), None))
                raise
            self.recvs.append((buffer_address(view), len(view), received))
            return received

        def counting_writev(fd, buffers):
            sent = writev(fd, buffers)
            self.writes.append(sent)
            return sent

        monkeypatch.setattr(_gilheld, "recv_into", counting_recv_into)
        monkeypatch.setattr(_gilheld, "writev", counting_writev)
        if _sockcalls._NATIVE_RECV_INTO is not None:
            monkeypatch.setattr(_sockcalls, "_NATIVE_RECV_INTO", counting_recv_into)
            monkeypatch.setattr(_sockcalls, "_NATIVE_WRITEV", counting_writev)

    def clear(self):
        self.recvs.clear()
        self.writes.clear()


@pytest.fixture
def stream_clock(monkeypatch):
    """An explicit clock for the streams (their core reads ``perf_counter``
    for busy polling, `tornado_readinto.core._policy` for how long a short
    recv proves a socket empty, and `tornado_readinto.core._sockcalls` to time
    socket calls).  It stands still unless the test moves it, so a test that
    counts recvs does not depend on how fast the machine runs: a stalled
    test process would otherwise make a stream retry a recv it had proved
    empty (`~tornado_readinto.face.iostream.DRAINED_VALID_S`)."""
    clock = Clock()
    patch_stream_clock(monkeypatch, clock)
    return clock


def patch_stream_clock(monkeypatch, clock):
    """Make the streams' core (its proof that a socket is empty, and its
    socket calls) read ``clock`` for ``perf_counter``."""
    from tornado_readinto.core import _policy, _sockcalls

    monkeypatch.setattr(_policy, "perf_counter", clock)  # (the policy's, whose proof it times)
    monkeypatch.setattr(_sockcalls, "perf_counter", clock)


@pytest.fixture(autouse=True)
def _gil_uncontended():
    """Every test starts with the GIL-keeping socket calls off (their switch
    is process-wide, and a test that saw a stall must not change the next)."""
    from tornado_readinto.core import _gilheld

    _gilheld.held_until = 0.0
    yield
    _gilheld.held_until = 0.0


class TrackingAllocator:
    """A frame allocator that records every request in ``calls`` and hands
    it to ``allocate`` (default ``bytearray``; a ``BufferPool``, say)."""

    def __init__(self, allocate=bytearray):
        self.calls = []
        self._allocate = allocate

    def __call__(self, nbytes):
        self.calls.append(nbytes)
        return self._allocate(nbytes)


@contextlib.contextmanager
def thread_until_stopped(run):
    """Run ``run(stop)`` in a daemon thread for the duration of the block;
    on exit ``stop`` (a ``threading.Event``) is set and the thread joined."""
    stop = threading.Event()
    thread = threading.Thread(target=run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def gil_holding_thread():
    """A thread running pure Python (it holds the GIL but at the switch
    interval), as a dask worker's task thread does."""

    def spin(stop):
        while not stop.is_set():
            sum(range(1000))

    return thread_until_stopped(spin)


def inject_cpu_limits(monkeypatch, affinity=2, v2=None, v1=None, count=2):
    """Make `tornado_readinto.core._cpus` read these CPU limits (affinity, cgroup
    v2 and v1 quotas in CPUs, cpu_count; None: not known) and forget what it
    had cached; the caller clears the cache again when done."""
    from tornado_readinto.core import _cpus

    monkeypatch.setattr(_cpus, "affinity_cpus", lambda: affinity)
    monkeypatch.setattr(_cpus, "cgroup_v2_cpus", lambda: v2)
    monkeypatch.setattr(_cpus, "cgroup_v1_cpus", lambda: v1)
    monkeypatch.setattr(_cpus.os, "cpu_count", lambda: count)
    _cpus.usable_cpus.cache_clear()
    _cpus.parallel_cpus.cache_clear()
