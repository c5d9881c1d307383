"""Non-blocking socket calls that keep the GIL: ``recv`` and ``writev``.

Why: every ``socket`` method releases the GIL around its syscall, even on a
non-blocking socket where the call takes a microsecond.  While another thread
wants the GIL (a dask worker's task threads running Python), each release
hands the GIL over, and the event-loop thread waits up to the switch interval
(5 ms by default, more with several such threads) to get it back: a reply
costs one hand-off for its ``recv`` and one for its ``send``, on top of the
one that waiting in ``epoll_wait`` costs.  The calls here keep the GIL: a
non-blocking ``recv`` or ``writev`` returns at once, so holding the GIL for
it delays nobody, and the loop thread keeps running until it has to wait for
the network.

Two implementations, one contract (`recv_into`, `writev`; `NATIVE` says
which runs):

* the compiled build: a native call, ``tornado_readinto.core._gilheld_native``
  (Cython), which calls ``recv``/``writev`` straight from C with no
  ``nogil`` block: one call from Python into C, as a ``socket`` method is,
  and a buffer export per buffer;
* the pure build (``TORNADO_READINTO_NO_EXTENSIONS``, or no compiled
  build): a ctypes foreign call through `ctypes.PyDLL`, whose foreign calls
  keep the GIL (documented ctypes behaviour), plus a ctypes buffer export
  and an iovec built in Python per buffer: 1-3 us more per call than the
  ``socket`` method (`recv_into_ctypes`, `writev_ctypes`).

A ``socket`` method costs less than a ctypes call (the native call's cost
beside the ``socket`` method's has not been measured), so streams use these
only while the GIL is seen to be contended, with either implementation: a
stream times its ``socket`` calls (two ``perf_counter`` reads), and one that
took over the stall threshold (a non-blocking call takes microseconds; a
wait for the GIL takes about the switch interval) turns the held calls on
for the whole process (`note_stall`) for `HOLD_S`.  The threshold follows
the interpreter's switch interval (`stall_threshold`): `STALL_S` at the
default 5 ms, half the interval below that, so that a process that
shortened its interval (for example through the dask backend's
``switch-interval`` key) still tells its hand-offs from its calls.  Then
the next call goes through ``socket`` again, timed, as a probe: under
continuous contention that costs one hand-off per `HOLD_S`, and once the
other threads go idle the held calls stop.

Available on CPython on POSIX systems with a GIL (`AVAILABLE`); elsewhere the
streams keep the ``socket`` methods.  Errors are raised as the ``socket``
methods raise them: `OSError` with the ``errno``, so EAGAIN arrives as
`BlockingIOError`; EINTR is retried.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
import sysconfig
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

__all__ = [
    "AVAILABLE",
    "COPY_S_PER_BYTE",
    "ENV_VAR",
    "HOLD_S",
    "NATIVE",
    "MIN_STALL_S",
    "STALL_S",
    "held",
    "note_stall",
    "stall_threshold",
    "stalled",
    "recv_into",
    "writev",
]

#: A ``socket`` call on a non-blocking socket that took longer than this
#: (plus `COPY_S_PER_BYTE` per byte moved) waited for the GIL: a hand-off
#: costs up to the switch interval, 5 ms by default, while a call takes
#: microseconds plus its copy.  The most `stall_threshold` returns.
STALL_S = 2e-3  # seconds

#: The least `stall_threshold` returns, however short the switch interval:
#: a non-blocking call on a busy machine can take tens of microseconds.
MIN_STALL_S = 100e-6  # seconds

#: Time a call may spend copying, per byte, before it counts as a stall
#: (1 ms per MB: a slow memcpy).
COPY_S_PER_BYTE = 1e-9  # seconds per byte

#: How long the held calls stay on after a stall (`note_stall`).
HOLD_S = 1.0  # seconds


def _gil_enabled() -> bool:
    return not sysconfig.get_config_var("Py_GIL_DISABLED")


def _supported() -> bool:
    """CPython with a GIL on a POSIX system: where keeping the GIL around a
    syscall is possible and worth it."""
    return sys.implementation.name == "cpython" and os.name == "posix" and _gil_enabled()


class _PyBuffer(ctypes.Structure):
    """``Py_buffer`` (the buffer protocol's public struct)."""

    _fields_ = [  # noqa: RUF012 (ctypes declares fields this way)
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    ]


class _IOVec(ctypes.Structure):
    """``struct iovec``."""

    # char* rather than void*: a bytes object assigned to it is stored as a
    # pointer to its own storage (an int address is accepted too).
    _fields_ = [("iov_base", ctypes.c_char_p), ("iov_len", ctypes.c_size_t)]  # noqa: RUF012


def _load_ctypes() -> tuple[Any, Any, Any, Any] | None:
    if not _supported():
        return None
    try:
        libc = ctypes.PyDLL(None, use_errno=True)  # the process's own symbols
        c_recv = libc.recv
        c_writev = libc.writev
        get_buffer = ctypes.pythonapi.PyObject_GetBuffer
        release_buffer = ctypes.pythonapi.PyBuffer_Release
    except (OSError, AttributeError):  # pragma: no cover (no libc symbols)
        return None
    c_recv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    c_recv.restype = ctypes.c_ssize_t
    c_writev.argtypes = [ctypes.c_int, ctypes.POINTER(_IOVec), ctypes.c_int]
    c_writev.restype = ctypes.c_ssize_t
    get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
    get_buffer.restype = ctypes.c_int
    release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
    release_buffer.restype = None
    return c_recv, c_writev, get_buffer, release_buffer


#: The environment variable that turns the held calls off when set to 0
#: (for A/B measurements; read once, at import).
ENV_VAR = "TORNADO_READINTO_HOLD_GIL"


def _load_native() -> ModuleType | None:
    """``_gilheld_native`` where it imports: the compiled build (the pure
    build's meta-path finder refuses it, see ``tornado_readinto``)."""
    if not _supported():
        return None
    try:
        from . import _gilheld_native  # type: ignore[attr-defined]  # compiled only: no .py for mypy
    except ImportError:
        return None
    return _gilheld_native


# Both where they load: the ctypes calls are the pure build's, and the
# twin that tests/core/test_gilheld_native.py compares the native calls with.
_native = _load_native()
_funcs = _load_ctypes()

#: True when `recv_into` and `writev` are the native calls of the compiled
#: build (``_gilheld_native``), False when they are the ctypes calls.
NATIVE = _native is not None


def _active_threads_other() -> bool:
    """True while this process has a Python thread besides the caller's
    (``threading.active_count() > 1``, about 0.3 us)."""
    return threading.active_count() > 1


#: ``other_threads()``: True while this process has a Python thread besides
#: the caller's (busy polling and the stall test ask).  In the compiled build
#: ``_gilheld_native``'s walk of the interpreter's thread states (a few C
#: instructions), else ``threading.active_count() > 1``.
other_threads: Callable[[], bool] = _native.other_threads if _native is not None else _active_threads_other

#: True where these calls exist (CPython with a GIL on a POSIX system) and
#: `ENV_VAR` does not turn them off.
AVAILABLE = (NATIVE or _funcs is not None) and os.environ.get(ENV_VAR, "1") != "0"

if _funcs is not None:
    _c_recv, _c_writev, _get_buffer, _release_buffer = _funcs

_get_errno = ctypes.get_errno
_from_buffer = ctypes.c_char.from_buffer
_addressof = ctypes.addressof
_byref = ctypes.byref

#: perf_counter time until which streams use the held calls (process-wide:
#: the GIL is).
held_until = 0.0


def held(now: float) -> bool:
    """True while streams should use the held calls (``now`` is
    `time.perf_counter` seconds)."""
    return now < held_until


def stall_threshold(switch_interval: float | None = None) -> float:
    """How long a non-blocking ``socket`` call may take (before its copy)
    without counting as a wait for the GIL: half the switch interval
    (``sys.getswitchinterval()`` unless given), at least `MIN_STALL_S` and at
    most `STALL_S`.  A hand-off waits about one switch interval."""
    interval = sys.getswitchinterval() if switch_interval is None else switch_interval
    return min(STALL_S, max(MIN_STALL_S, 0.5 * interval))


def stalled(elapsed: float, nbytes: int) -> bool:
    """True when a non-blocking ``socket`` call that took ``elapsed`` seconds
    and moved ``nbytes`` bytes waited for the GIL (see `stall_threshold`).
    Callers test ``elapsed > MIN_STALL_S + nbytes * COPY_S_PER_BYTE`` first,
    so a quick call never reads the switch interval."""
    return elapsed > stall_threshold() + nbytes * COPY_S_PER_BYTE


def note_stall(now: float) -> None:
    """A ``socket`` call that ended at ``now`` (perf_counter seconds) took
    over the stall threshold (`stalled`): use the held calls for the next
    `HOLD_S`, where they exist and another Python thread does (without one,
    the stall was not a wait for the GIL but the machine's: a preempted
    process)."""
    global held_until
    if AVAILABLE and other_threads():
        held_until = now + HOLD_S


def _call(func: Any, *args: Any) -> int:
    """``func(*args)`` (a libc call returning -1 and setting errno on
    failure), retried on EINTR; errors raised as `OSError` with the errno,
    so EAGAIN becomes `BlockingIOError`."""
    while True:
        result: int = func(*args)
        if result >= 0:
            return result
        err = _get_errno()
        if err != errno.EINTR:
            raise OSError(err, os.strerror(err))


def recv_into_ctypes(fd: int, view: bytearray | memoryview) -> int:
    """``recv(fd, view, nbytes, 0)`` without releasing the GIL; the socket
    must be non-blocking and ``view`` writable, C-contiguous and not empty.
    Like ``socket.recv_into``, it fills up to the view's size in bytes
    (``nbytes``), whatever its item size.

    Returns the byte count (0 at EOF).
    :raises BlockingIOError: nothing to receive (EAGAIN).
    :raises OSError: any other error, with its ``errno``.
    :raises TypeError: ``view`` is read-only or not C-contiguous.
    :raises ValueError: ``view`` is empty.
    """
    source: Any = None
    target: Any = None
    try:
        source = view if type(view) is memoryview else memoryview(view)
        target = _from_buffer(source)  # exports the buffer until dropped
        return _call(_c_recv, fd, _addressof(target), source.nbytes, 0)
    finally:
        # An exception's traceback keeps this frame: it must not keep the
        # caller's buffer exported too.
        source = target = None


def writev_ctypes(fd: int, buffers: Sequence[Any]) -> int:
    """``writev(fd, buffers)`` without releasing the GIL, for a non-blocking
    socket; ``buffers`` are C-contiguous buffers (at most ``IOV_MAX``), sized
    in bytes.  Each stays exported until the call returns; nothing is
    copied; an empty one is skipped.  Returns the bytes sent.

    :raises BlockingIOError: the socket's send buffer is full (EAGAIN).
    :raises BufferError: a buffer is not C-contiguous (nothing is sent).
    :raises OSError: any other error (EPIPE, ECONNRESET...), with its ``errno``.
    """
    count = len(buffers)
    iov = (_IOVec * count)()
    exports: list[Any] = []  # keeps every buffer exported during the call
    read_only: list[_PyBuffer] = []
    view: Any = None
    target: Any = None
    try:
        for i in range(count):
            data = buffers[i]
            vec = iov[i]
            if type(data) is bytes:
                vec.iov_base = data  # the bytes' own storage; iov keeps a reference
                vec.iov_len = len(data)
                continue
            view = data if type(data) is memoryview else memoryview(data)
            nbytes = view.nbytes
            if not nbytes:
                continue
            if not view.c_contiguous:
                raise BufferError(f"writev: buffer {i} is not C-contiguous")
            if not view.readonly:
                target = _from_buffer(view)
                exports.append(target)
                vec.iov_base = _addressof(target)
            else:
                exported = _PyBuffer()
                _get_buffer(view, _byref(exported), 0)  # PyBUF_SIMPLE
                read_only.append(exported)
                vec.iov_base = exported.buf
            vec.iov_len = nbytes
        return _call(_c_writev, fd, iov, count)
    finally:
        for exported in read_only:
            _release_buffer(_byref(exported))
        # An exception's traceback keeps this frame: it must not keep the
        # caller's buffers exported too.
        exports.clear()
        view = target = None


#: ``recv_into(fd, view) -> int``: `recv_into_ctypes`'s contract, as a native
#: call in the compiled build (`NATIVE`).
recv_into: Callable[[int, Any], int]
#: ``writev(fd, buffers) -> int``: `writev_ctypes`'s contract, as a native
#: call in the compiled build (`NATIVE`).
writev: Callable[[int, Sequence[Any]], int]
if _native is not None:
    recv_into = _native.recv_into
    writev = _native.writev
else:
    recv_into = recv_into_ctypes
    writev = writev_ctypes
