"""The two implementations of the GIL-keeping socket calls, side by side:
the compiled build's native calls (``tornado_readinto.core._gilheld_native``) and
their ctypes twin (`_gilheld.recv_into_ctypes`, `_gilheld.writev_ctypes`),
which the pure build runs.

The native module is a second copy of the ctypes logic, so the same seeded
random scripts drive both over real sockets (a socketpair and a 127.0.0.1
TCP connection), and each must give the same trace: return counts, bytes,
exception types and errnos.  Each run is also checked on its own (the bytes
received are the bytes sent, and every buffer is released after every call),
so that two equally wrong copies do not pass.  The compiled build is the
default one, so the native calls run for real wherever the suite runs
compiled (in CI); the ctypes ones run everywhere."""

from __future__ import annotations

import errno
import os
import random
import select
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import tornado_readinto
from tornado_readinto.core import _gilheld

from ..conftest import bytes_waiting

#: recv_into(fd, view) and writev(fd, buffers) of one implementation.
Calls = tuple[Callable[[int, Any], int], Callable[[int, Any], int]]

CTYPES: Calls = (_gilheld.recv_into_ctypes, _gilheld.writev_ctypes)

#: Bytes written and not yet read stay under this, and a writev sends at
#: most WRITE_NBYTES, so that every writev is taken whole by the kernel (a
#: socketpair's or loopback TCP's buffers hold far more): its count is then
#: the caller's total, on both implementations, and not the kernel's mood.
PENDING_NBYTES = 16 * 1024  # bytes
WRITE_NBYTES = 8 * 1024  # bytes


@pytest.fixture
def native() -> Calls:
    """The native calls: present whenever the compiled build runs."""
    if not tornado_readinto.COMPILED:
        pytest.skip("the pure build runs: it has no native calls")
    from tornado_readinto.core import _gilheld_native

    return _gilheld_native.recv_into, _gilheld_native.writev


def make_pair(transport: str) -> tuple[socket.socket, socket.socket]:
    """A connected non-blocking pair: ``(writer, reader)``."""
    if transport == "socketpair":
        a, b = socket.socketpair()
    else:
        with socket.create_server(("127.0.0.1", 0)) as listener:
            a = socket.create_connection(listener.getsockname())
            b, _ = listener.accept()
    a.setblocking(False)
    b.setblocking(False)
    return a, b


def wait_for_bytes(sock: socket.socket, nbytes: int) -> None:
    """Until ``nbytes`` wait in ``sock``'s receive queue (loopback TCP may
    deliver a moment after the send returns): the reads that follow then
    see exactly what was sent."""
    deadline = time.monotonic() + 10
    while bytes_waiting(sock) < nbytes:
        assert time.monotonic() < deadline, f"{bytes_waiting(sock)} of {nbytes} bytes arrived"
        select.select([sock], [], [], 0.01)


def outcome(call: Callable[..., int], *args: Any) -> Any:
    """``call(*args)``'s count, or its exception as ``(type name, errno)``
    (for a BufferError, its message: both implementations name the
    buffer)."""
    try:
        return call(*args)
    except BufferError as exc:
        return ("BufferError", str(exc))
    except (OSError, TypeError, ValueError) as exc:
        return (type(exc).__name__, getattr(exc, "errno", None))


# -- the buffers ---------------------------------------------------------------


@dataclass
class Exported:
    """The buffers of one call and what checks that the call let them go:
    their reference counts, the memoryviews the test made (``release()``
    fails on a memoryview still exported) and the bytearrays under them
    (resizing fails while any export is held)."""

    objects: list[Any] = field(default_factory=list)
    views: list[memoryview] = field(default_factory=list)
    bytearrays: list[bytearray] = field(default_factory=list)
    refcounts: list[int] = field(default_factory=list)

    def add(self, obj: Any, base: bytearray | None = None) -> Any:
        if not (type(obj) is bytes and len(obj) <= 1):  # shared singletons: others count them too
            self.objects.append(obj)
        if isinstance(obj, memoryview):
            self.views.append(obj)
        if isinstance(obj, bytearray):
            self.bytearrays.append(obj)
        if base is not None:
            self.bytearrays.append(base)
        return obj

    def before(self) -> None:
        self.refcounts = [sys.getrefcount(obj) for obj in self.objects]

    def check_released(self) -> None:
        assert [sys.getrefcount(obj) for obj in self.objects] == self.refcounts, "a reference was kept"
        for view in self.views:
            view.release()  # BufferError if the call left it exported
        for buf in self.bytearrays:
            buf.append(0)  # BufferError if the call left it exported
            del buf[-1]


def random_buffer(rng: random.Random, exported: Exported) -> tuple[Any, bytes]:
    """A random C-contiguous buffer for writev, and the bytes it holds."""
    n = rng.choice([0, 0, 1, rng.randint(2, 64), rng.randint(65, 2048)])
    data = rng.randbytes(n)
    kind = rng.choice(["bytes", "bytearray", "bytes-slice", "bytearray-slice", "u1", "wide", "2d", "read-only", "cast"])
    if kind == "bytes":
        buf: Any = data
    elif kind == "bytearray":
        buf = bytearray(data)
    elif kind == "bytes-slice":  # read-only, at an offset
        buf = memoryview(b"<<" + data + b">>>")[2 : 2 + n]
    elif kind == "bytearray-slice":  # writable, at an offset
        base = bytearray(b"<" + data + b">>")
        return exported.add(memoryview(base)[1 : 1 + n], base), data
    elif kind == "u1":
        buf = np.frombuffer(data, dtype=np.uint8).copy()
    elif kind == "wide":  # sized in bytes, not items
        dtype = np.dtype(rng.choice(["<u2", "<i4", "<f8"]))
        buf = np.frombuffer(data[: n - n % dtype.itemsize], dtype=dtype).copy()
    elif kind == "2d":
        rows = rng.randint(1, 4)
        buf = np.frombuffer(data[: n - n % rows], dtype=np.uint8).copy().reshape(rows, -1)
    elif kind == "read-only":
        buf = np.frombuffer(data, dtype=np.uint8).copy()
        buf.setflags(write=False)
    else:  # a memoryview cast to 4-byte items
        base = bytearray(data[: n - n % 4])
        return exported.add(memoryview(base).cast("I"), base), bytes(base)
    return exported.add(buf), memoryview(buf).tobytes()


def non_contiguous_buffer(rng: random.Random, exported: Exported) -> Any:
    """A buffer writev must refuse (never empty: an empty one is skipped)."""
    kind = rng.choice(["numpy-step", "bytes-reversed", "fortran", "bytearray-step"])
    if kind == "numpy-step":
        return exported.add(np.arange(rng.randint(4, 100), dtype=rng.choice(["u1", "i8"]))[:: rng.randint(2, 3)])
    if kind == "bytes-reversed":
        return exported.add(memoryview(rng.randbytes(rng.randint(2, 50)))[::-1])
    if kind == "fortran":
        return exported.add(np.zeros((rng.randint(2, 5), rng.randint(2, 5)), dtype=np.uint8, order="F"))
    base = bytearray(rng.randbytes(rng.randint(4, 50)))
    return exported.add(memoryview(base)[::2], base)


def recv_target(rng: random.Random, nbytes: int, exported: Exported) -> Any:
    """A writable C-contiguous target of ``nbytes`` bytes or a little more
    (a float64 array holds a whole number of items)."""
    kind = rng.choice(["bytearray", "bytearray-slice", "u1", "u1-slice", "f8"])
    if kind == "bytearray":
        return exported.add(bytearray(nbytes))
    if kind == "bytearray-slice":
        base = bytearray(nbytes + 7)
        offset = rng.randint(0, 7)
        return exported.add(memoryview(base)[offset : offset + nbytes], base)
    if kind == "u1":
        return exported.add(np.zeros(nbytes, dtype=np.uint8))
    if kind == "u1-slice":
        return exported.add(np.zeros(nbytes + 5, dtype=np.uint8)[3 : 3 + nbytes])
    return exported.add(np.zeros(-(-nbytes // 8), dtype="f8").data)  # a memoryview of float64


def unfillable_target(rng: random.Random, exported: Exported) -> Any:
    """A target recv_into must refuse: read-only, non-contiguous or empty."""
    kind = rng.choice(["bytes", "bytes-view", "read-only-array", "step", "numpy-step", "empty", "empty-array"])
    if kind == "bytes":
        return exported.add(rng.randbytes(10))
    if kind == "bytes-view":
        return exported.add(memoryview(rng.randbytes(10)))
    if kind == "read-only-array":
        array = np.zeros(10, dtype=np.uint8)
        array.setflags(write=False)
        return exported.add(array)
    if kind == "step":
        base = bytearray(20)
        return exported.add(memoryview(base)[::2], base)
    if kind == "numpy-step":
        return exported.add(np.zeros(20, dtype=np.uint8)[::2])
    if kind == "empty":
        return exported.add(bytearray())
    return exported.add(np.zeros(0, dtype=np.uint8))


# -- the scripts -------------------------------------------------------------------


def run_script(seed: int, transport: str, calls: Calls) -> list[Any]:
    """A random sequence of writev and recv_into calls (good and bad
    buffers, an empty socket), then the peer closes or resets and both calls
    run against the dead connection.  Returns the trace; asserts on the way
    that the bytes received are the bytes sent and every buffer is released."""
    recv_into, writev = calls
    rng = random.Random(seed)
    writer, reader = make_pair(transport)
    trace: list[Any] = []
    sent_bytes = bytearray()
    received = bytearray()
    pending = 0  # written, not yet read
    try:
        for _ in range(rng.randint(4, 16)):
            op = rng.choice(["writev", "writev", "recv", "recv", "recv", "bad-writev", "bad-recv"])
            exported = Exported()
            if op in ("writev", "bad-writev"):
                buffers: list[Any] = []
                data: list[bytes] = []
                for _ in range(rng.randint(0, 12)):
                    buf, held = random_buffer(rng, exported)
                    if sum(map(len, data)) + len(held) > WRITE_NBYTES or pending + len(held) > PENDING_NBYTES:
                        break
                    buffers.append(buf)
                    data.append(held)
                if op == "bad-writev":
                    buffers.insert(rng.randint(0, len(buffers)), non_contiguous_buffer(rng, exported))
                exported.before()
                result = outcome(writev, writer.fileno(), buffers)
                if op == "bad-writev":
                    assert result[0] == "BufferError", result  # and nothing sent: the next recvs show it
                else:
                    assert result == sum(map(len, data)), result  # every byte taken
                    sent_bytes += b"".join(data)
                    pending += result
                    wait_for_bytes(reader, pending)
                trace.append((op, len(buffers), result))
            elif op == "recv":
                nbytes = rng.choice([1, rng.randint(2, 100), rng.randint(101, 3 * WRITE_NBYTES)])
                target = recv_target(rng, nbytes, exported)
                exported.before()
                result = outcome(recv_into, reader.fileno(), target)
                if pending:
                    assert result == min(memoryview(target).nbytes, pending), (result, pending)
                    received += memoryview(target).cast("B")[:result]
                    pending -= result
                else:
                    assert result == ("BlockingIOError", errno.EAGAIN), result
                trace.append((op, nbytes, result))
            else:
                target = unfillable_target(rng, exported)
                exported.before()
                result = outcome(recv_into, reader.fileno(), target)
                assert result[0] in ("TypeError", "ValueError"), result
                trace.append((op, type(target).__name__, result))
            exported.check_released()
        assert received == sent_bytes[: len(received)]  # in order, byte for byte

        # The reader goes away: closed (FIN, or RST with unread bytes) or reset.
        ending = rng.choice(["close", "reset"])
        if ending == "reset":
            reader.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        reader.close()
        for _ in range(3):  # the first write may land before the RST comes back
            trace.append(("dead-writev", outcome(writev, writer.fileno(), [b"x" * 100, bytearray(10)])))
        for _ in range(2):
            trace.append(("dead-recv", outcome(recv_into, writer.fileno(), bytearray(10))))
        assert any(isinstance(step[1], tuple) and step[1][1] in (errno.EPIPE, errno.ECONNRESET) for step in trace[-5:])
    finally:
        writer.close()
        reader.close()
    return trace


@pytest.mark.parametrize("transport", ["socketpair", "tcp"])
@pytest.mark.parametrize("seed", range(40))
def test_native_and_ctypes_calls_agree_on_random_scripts(native, transport, seed):
    expected = run_script(seed, transport, CTYPES)
    assert run_script(seed, transport, native) == expected


@pytest.mark.parametrize("transport", ["socketpair", "tcp"])
def test_the_ctypes_calls_pass_the_scripts_on_their_own(transport):
    """The ctypes twin's own checks, in any build (the pure build has no
    native calls to compare it with)."""
    for seed in range(10):
        run_script(seed, transport, CTYPES)


# -- the errors one by one, in each implementation -------------------------------


@pytest.fixture(params=["ctypes", "native"])
def calls(request) -> Calls:
    if request.param == "ctypes":
        return CTYPES
    return request.getfixturevalue("native")


def test_an_empty_socket_raises_eagain(calls):
    recv_into, _ = calls
    writer, reader = make_pair("socketpair")
    with writer, reader:
        with pytest.raises(BlockingIOError) as info:
            recv_into(reader.fileno(), bytearray(10))
        assert info.value.errno == errno.EAGAIN


def test_a_full_socket_takes_part_then_raises_eagain(calls):
    """The only count compared loosely: how much a full socket takes is the
    kernel's (the scripts stay below that)."""
    _, writev = calls
    writer, reader = make_pair("socketpair")
    with writer, reader:
        big = bytearray(64 * 1024 * 1024)
        assert 0 < writev(writer.fileno(), [b"head", big]) < len(big)
        with pytest.raises(BlockingIOError) as info:
            writev(writer.fileno(), [big])
        assert info.value.errno == errno.EAGAIN


def test_errors_leave_no_buffer_exported_while_the_exception_lives(calls):
    """EBADF, EPIPE, BufferError and EAGAIN: while the exception (and its
    traceback, which a stream may keep as its ``error``) is still held,
    every buffer of the call can be released or resized."""
    recv_into, writev = calls

    def check(call, exception, errno_=None):
        base = bytearray(b"writable base")
        writable, read_only, view = bytearray(b"writable"), memoryview(b"read-only"), memoryview(base)[2:]
        with pytest.raises(exception) as info:
            call([writable, read_only, view, b"bytes"])
        assert errno_ is None or info.value.errno == errno_
        writable += b"!"  # resizable: not exported
        read_only.release()  # BufferError if still exported
        view.release()
        base += b"!"

    sock = socket.socket()
    closed_fd = sock.fileno()
    sock.close()
    check(lambda buffers: writev(closed_fd, buffers), OSError, errno.EBADF)
    check(lambda buffers: recv_into(closed_fd, buffers[0]), OSError, errno.EBADF)
    check(lambda buffers: recv_into(closed_fd, buffers[2]), OSError, errno.EBADF)
    check(lambda buffers: writev(closed_fd, buffers + [np.arange(10)[::2]]), BufferError)
    writer, reader = make_pair("socketpair")
    with writer, reader:
        check(lambda buffers: recv_into(reader.fileno(), buffers[0]), BlockingIOError, errno.EAGAIN)
        check(lambda buffers: recv_into(reader.fileno(), buffers[2]), BlockingIOError, errno.EAGAIN)
        reader.close()
        check(lambda buffers: writev(writer.fileno(), buffers), BrokenPipeError, errno.EPIPE)


def test_a_closed_fd_raises_ebadf(calls):
    recv_into, writev = calls
    sock = socket.socket()
    fd = sock.fileno()
    sock.close()
    with pytest.raises(OSError) as info:
        os.fstat(fd)  # closed, and not reused since
    assert info.value.errno == errno.EBADF
    with pytest.raises(OSError) as info:
        recv_into(fd, bytearray(10))
    assert info.value.errno == errno.EBADF and type(info.value) is OSError
    with pytest.raises(OSError) as info:
        writev(fd, [b"abc", bytearray(10)])
    assert info.value.errno == errno.EBADF and type(info.value) is OSError


def test_over_iov_max_buffers_raise_einval(calls):
    """The kernel's limit, not a local one: empty buffers count too."""
    _, writev = calls
    writer, reader = make_pair("socketpair")
    with writer, reader:
        one = bytearray(1)
        buffers = [b"x", one, b""] * (os.sysconf("SC_IOV_MAX") // 3 + 1)
        with pytest.raises(OSError) as info:
            writev(writer.fileno(), buffers)
        assert info.value.errno == errno.EINVAL
        one += b"!"  # released


def test_non_buffers_raise_typeerror(calls):
    recv_into, writev = calls
    with pytest.raises(TypeError):
        recv_into(0, 5)
    with pytest.raises(TypeError):
        writev(0, [b"x", "text"])
    with pytest.raises(TypeError):
        writev(0, (b for b in [b"x"]))  # a sequence: len() and indexing


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs setitimer")
def test_a_signal_mid_call_is_handled_and_the_call_retried(calls):
    """A blocking recv interrupted by SIGALRM (EINTR): the Python handler
    runs (here it sends the bytes the call then receives) and the call is
    retried; a handler's exception ends the call instead."""

    class Stop(Exception):
        pass

    def stop(signum, frame):
        raise Stop

    recv_into, _ = calls
    previous = signal.getsignal(signal.SIGALRM)
    writer, reader = socket.socketpair()  # blocking
    try:
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 10, 0))  # a bound, if no signal
        signal.signal(signal.SIGALRM, lambda signum, frame: writer.send(b"sent by the handler"))
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        target = bytearray(100)
        assert recv_into(reader.fileno(), target) == 19
        assert target[:19] == b"sent by the handler"

        signal.signal(signal.SIGALRM, stop)
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with pytest.raises(Stop):
            recv_into(reader.fileno(), target)
        target += b"!"  # released
    finally:
        writer.close()
        reader.close()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# -- which implementation runs --------------------------------------------------------------


def test_the_compiled_build_runs_the_native_calls():
    if tornado_readinto.COMPILED:
        from tornado_readinto.core import _gilheld_native

        assert _gilheld.NATIVE is True
        assert _gilheld.recv_into is _gilheld_native.recv_into and _gilheld.writev is _gilheld_native.writev
    else:
        assert _gilheld.NATIVE is False
        assert _gilheld.recv_into is _gilheld.recv_into_ctypes and _gilheld.writev is _gilheld.writev_ctypes


_REPORT_CALLS = textwrap.dedent(
    """
    import socket
    import tornado_readinto
    from tornado_readinto.core import _gilheld
    try:
        import tornado_readinto.core._gilheld_native
    except ModuleNotFoundError:
        native_imports = False
    else:
        native_imports = True
    a, b = socket.socketpair()
    sent = _gilheld.writev(a.fileno(), [b"ping"])
    target = bytearray(10)
    received = _gilheld.recv_into(b.fileno(), target)
    print(tornado_readinto.COMPILED, _gilheld.NATIVE, _gilheld.recv_into.__name__, _gilheld.writev.__name__,
          native_imports, sent, bytes(target[:received]))
    """
)


def test_the_pure_build_runs_the_ctypes_calls():
    """``TORNADO_READINTO_NO_EXTENSIONS=1``: even where the native module is
    built, the pure build refuses it and ``_gilheld`` runs ctypes."""
    env = {**os.environ, "TORNADO_READINTO_NO_EXTENSIONS": "1"}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    result = subprocess.run(
        [sys.executable, "-c", _REPORT_CALLS], env=env, cwd=root, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False", "recv_into_ctypes", "writev_ctypes", "False", "4", "b'ping'"]


_REPORT_OTHER_THREADS = textwrap.dedent(
    """
    import threading
    import tornado_readinto
    from tornado_readinto.core import busypoll
    started, stop = threading.Event(), threading.Event()
    worker = threading.Thread(target=lambda: (started.set(), stop.wait(10)))
    seen = [threading.active_count(), busypoll.other_threads()]
    worker.start()
    started.wait(10)
    seen.append(busypoll.other_threads())
    stop.set()
    worker.join(10)
    seen.append(busypoll.other_threads())
    print(tornado_readinto.COMPILED, busypoll.other_threads.__name__, *seen)
    """
)


@pytest.mark.parametrize("build", ["default", "pure"])
def test_other_threads_agrees_with_threading_as_threads_come_and_go(build: str) -> None:
    """``busypoll.other_threads``, in a fresh process with no other thread:
    False alone, True while a second thread runs, False again once it has
    ended.  The compiled build's is the native walk of the interpreter's
    thread states; the pure build's is ``threading.active_count() > 1``."""
    env = dict(os.environ)
    env.pop("TORNADO_READINTO_NO_EXTENSIONS", None)
    if build == "pure":
        env["TORNADO_READINTO_NO_EXTENSIONS"] = "1"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    result = subprocess.run(
        [sys.executable, "-c", _REPORT_OTHER_THREADS], env=env, cwd=root, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    compiled, name, *seen = result.stdout.split()
    assert seen == ["1", "False", "True", "False"]
    if build == "pure":
        assert (compiled, name) == ("False", "_active_threads_other")
    elif tornado_readinto.COMPILED:
        assert (compiled, name) == ("True", "other_threads")
