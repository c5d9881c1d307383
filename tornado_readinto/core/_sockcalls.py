# cython: annotation_typing=False
"""The receive and send calls on a plain socket, with the GIL-keeping
heuristic: one heuristic of the core, in one small object (`SocketCalls`).

A dask worker's event loop shares the GIL with task threads that run
Python.  Each ``recv_into`` or ``sendmsg`` of the socket's own methods lets
the GIL go while the kernel copies; taking it back can wait for the other
thread's switch interval (5 ms), for a call that took microseconds.  So:

* While the GIL is seen to be contended (`tornado_readinto.core._gilheld`'s
  ``held_until``), a real socket's calls of up to `HOLD_MAX_NBYTES` are
  `tornado_readinto.core._gilheld`'s, which keep it.
* Otherwise each such call is the socket's own, timed (two ``perf_counter``
  reads): one that took far longer than its copy is a stall, noted
  process-wide (``_gilheld.note_stall``), which turns the kept calls on for
  a while (and, on uvloop, the eager wake-up of `tornado_readinto.face._facecore`).
* In the compiled build, in a process with no other Python thread (none can
  want the GIL), such calls are native calls that keep the GIL, untimed:
  they cost less than the socket's methods (the pure build's ctypes twins
  cost more).  Whether another thread exists is looked at again every
  `PROBE_EVERY` calls.
* A larger call (a big frame received in place, a large send) is always the
  socket's own, untimed: it releases the GIL while the kernel copies (and
  faults in fresh pages), and its time says nothing about a stall.

The core keeps one `SocketCalls` per plain stream and makes every receive
(`recv_into`) and gathered send (`sendmsg`) through it.  With
``keep_gil=False`` (a socket whose methods a wrapper or subclass replaced,
or the heuristic switched off) every call is the socket's own; small ones
are still timed, so that the process still notices a contended GIL.  The
compiled build types this module with ``_sockcalls.pxd``: the core's calls
into it are C calls.
"""

from __future__ import annotations

import socket
from time import perf_counter
from typing import TYPE_CHECKING, Any, Final

from . import _gilheld
from .busypoll import other_threads

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["HOLD_MAX_NBYTES", "PROBE_EVERY", "SocketCalls"]

#: Receives into, and sends of, at most this many bytes may keep the GIL
#: (see the module's docstring): a non-blocking call that copies this much
#: returns within microseconds, sooner than a GIL hand-off could.  Larger
#: ones use the socket's own methods, untimed.
HOLD_MAX_NBYTES: Final = 64 * 1024  # bytes

#: The calls are untimed only in a process with no other Python thread;
#: where one exists they go the timed way (the socket's method, or the held
#: call while the GIL is known to be contended), so that a stall shows that
#: another thread wants the GIL.  Which holds is looked at again every this
#: many calls.
PROBE_EVERY: Final = 32  # calls

# The native calls of the compiled build (None in the pure build, whose
# ctypes twins cost more than the socket's methods).
_NATIVE_RECV_INTO: Any = _gilheld.recv_into if _gilheld.NATIVE else None
_NATIVE_WRITEV: Any = _gilheld.writev if _gilheld.NATIVE else None

_MIN_STALL_S: Final = _gilheld.MIN_STALL_S
_COPY_S_PER_BYTE: Final = _gilheld.COPY_S_PER_BYTE


class SocketCalls:
    """The ``recv_into`` and ``sendmsg`` of one plain socket, keeping the GIL
    where that pays (see the module's docstring).

    :arg sock: the socket, or None (a TLS stream's core: never called).
    :arg keep_gil: ``sock`` is a real socket whose own C methods may be
        replaced by `tornado_readinto.core._gilheld`'s calls (False: always the
        socket's own, small ones timed).

    Not thread-safe: one belongs to one stream, on its event loop's thread.

    .. versionadded:: 0.1
    """

    __slots__ = ("sock", "fd", "keep_gil", "untimed")

    def __init__(self, sock: socket.socket | None, keep_gil: bool = False) -> None:
        #: The socket (None: none, or `off` was called).
        self.sock: socket.socket = sock  # type: ignore[assignment]
        #: The calls may keep the GIL (a real socket's own methods).
        self.keep_gil = keep_gil and sock is not None
        #: Its fd, for the native calls (with ``keep_gil``; else -1).  The
        #: held calls ask the socket (-1 once it is closed: EBADF).
        self.fd = sock.fileno() if self.keep_gil else -1  # type: ignore[union-attr]
        #: Native calls left before the next timed one (see `PROBE_EVERY`):
        #: above 0 untimed, below 0 timed, 0 looks at the threads again.
        self.untimed = 0

    def recv_into(self, view: memoryview) -> int | None:
        """One ``recv_into(view)``: the byte count, None on EAGAIN, 0 at EOF
        (Tornado's ``read_from_fd`` contract).

        Cost: up to `HOLD_MAX_NBYTES`, one native ``recv`` (compiled, no
        other thread), else the socket's method and two ``perf_counter``
        reads, or a held ``recv`` and one; larger, the socket's method alone.

        :raises OSError: the receive failed.
        """
        if _NATIVE_RECV_INTO is not None and self._untimed(len(view)):
            try:
                return _NATIVE_RECV_INTO(self.fd, view)  # type: ignore[no-any-return]
            except BlockingIOError:
                return None
        sock = self.sock
        if len(view) > HOLD_MAX_NBYTES:  # a large copy releases the GIL; its time is no stall
            try:
                return sock.recv_into(view)
            except BlockingIOError:
                return None
        start = perf_counter()
        if self.keep_gil and start < _gilheld.held_until:
            try:
                return _gilheld.recv_into(sock.fileno(), view)  # type: ignore[no-any-return]
            except BlockingIOError:
                return None
        try:
            received = sock.recv_into(view)
        except BlockingIOError:
            received = None
        end = perf_counter()
        if end - start > _MIN_STALL_S + (received or 0) * _COPY_S_PER_BYTE:
            if _gilheld.stalled(end - start, received or 0):
                _gilheld.note_stall(end)
        return received

    def sendmsg(self, buffers: Sequence[Any], nbytes: int) -> int:
        """``sendmsg(buffers)`` (``nbytes`` in all): the bytes sent, an int
        (as the socket's ``sendmsg`` returns; a wrapper's must too).  Same
        choice of call, and cost, as `recv_into` (a native ``writev``).

        :raises BlockingIOError: the send buffer is full.
        :raises OSError: the send failed.
        """
        if _NATIVE_WRITEV is not None and self._untimed(nbytes):
            return _NATIVE_WRITEV(self.fd, buffers)  # type: ignore[no-any-return]
        sock = self.sock
        if nbytes > HOLD_MAX_NBYTES:  # a large copy releases the GIL; its time is no stall
            return sock.sendmsg(buffers)
        start = perf_counter()
        if self.keep_gil and start < _gilheld.held_until:
            return _gilheld.writev(sock.fileno(), buffers)  # type: ignore[no-any-return]
        sent = sock.sendmsg(buffers)
        end = perf_counter()
        if end - start > _MIN_STALL_S + sent * _COPY_S_PER_BYTE:
            if _gilheld.stalled(end - start, sent):
                _gilheld.note_stall(end)
        return sent

    def _untimed(self, nbytes: int) -> bool:
        """Whether a call of ``nbytes`` goes as a native call, untimed: up to
        `HOLD_MAX_NBYTES`, with ``keep_gil``, in a process with no other
        Python thread (none can want the GIL, so there is no stall to watch
        for).  Where one exists every call is timed, as in the pure build,
        so that a stall is seen at once."""
        if not self.keep_gil or nbytes > HOLD_MAX_NBYTES:
            return False
        left = self.untimed
        if left > 0:
            self.untimed = left - 1
            return True
        if left < 0:
            self.untimed = left + 1
            return False
        if other_threads():
            self.untimed = 1 - PROBE_EVERY
            return False
        self.untimed = PROBE_EVERY - 1
        return True

    def off(self) -> None:
        """The socket now belongs to another stream (``start_tls``): never
        call it again."""
        self.sock = None  # type: ignore[assignment]
        self.keep_gil = False
        self.fd = -1

    def socket_closed(self) -> None:
        """The socket is closed.  Its fd number may already name another
        socket of the process, so no call uses the number again: a call now
        is the closed socket's own method, which raises ``OSError``
        (``EBADF``), as on a closed stock socket."""
        self.keep_gil = False
        self.fd = -1
