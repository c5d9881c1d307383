"""The receive low-water mark of a large wait: one heuristic of the stream, in
one small object (`LowWaterMark`).

A read that waits for `RCVLOWAT_MIN_MISSING` bytes or more of its own
buffer sets the socket's ``SO_RCVLOWAT`` to what it still needs, at most
`RCVLOWAT_NBYTES`: Linux then holds epoll's READ event back until that many
bytes are queued, so a large transfer costs one ``recv_into`` and one loop
wake-up per `RCVLOWAT_NBYTES` instead of one per arriving segment batch, and
the last wake-up of a read comes when its last byte has arrived.  Smaller
waits, and the receive that completes the read, set it back to 1 (any
byte).  Plain TCP sockets on Linux 4.18+ only (`lowat_applies`); a
``setsockopt`` that fails turns the marks off for that socket, and
``TORNADO_READINTO_RCVLOWAT=0`` in the environment (`ENV_VAR`, read at
import) turns them off for every stream of the process, for A/B
measurements (a worker process inherits it).

Each stream's policy (`tornado_readinto.core._policy.StreamPolicy`) keeps one
`LowWaterMark` and calls it where a read parks (`wait`) and where a read
completes (`reset`).  The compiled build types this module with
``_lowat.pxd``: its hooks are C calls from the policy.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any, Final

__all__ = ["ENABLED", "ENV_VAR", "RCVLOWAT_MIN_MISSING", "RCVLOWAT_NBYTES", "LowWaterMark", "lowat_applies"]

#: A read that waits for this many bytes or more of its own buffer has the
#: kernel wake the loop only once they, or `RCVLOWAT_NBYTES` of them, have
#: arrived (below it, a mark would cost two ``setsockopt`` calls to save at
#: most one wake-up).
RCVLOWAT_MIN_MISSING: Final = 64 * 1024  # bytes

#: The highest mark a wait sets: a larger one copies less of a transfer while
#: its bytes arrive, and was slower for 100 MiB reads in the echo benchmark.
RCVLOWAT_NBYTES: Final = 256 * 1024  # bytes

#: The environment variable that turns the marks off when set to 0 (for A/B
#: measurements; read once, at import).
ENV_VAR: Final = "TORNADO_READINTO_RCVLOWAT"

#: False where `ENV_VAR` turns the marks off.
ENABLED: Final = os.environ.get(ENV_VAR, "1") != "0"


def _lowat_kernel() -> bool:
    # Linux holds epoll's READ event back until SO_RCVLOWAT bytes are
    # queued; since 4.18 it also grows the receive buffer to fit the mark (or
    # caps the mark at half a locked buffer), so that the mark can always be
    # reached.  Older kernels do not: no marks there.
    if sys.platform != "linux":
        return False
    try:
        major, minor = (int(part) for part in os.uname().release.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (4, 18)


_LOWAT_PLATFORM: Final = _lowat_kernel()


def lowat_applies(sock: socket.socket | None) -> bool:
    """True for a TCP socket (or a wrapper with its ``family``, ``type`` and
    ``setsockopt``) on Linux, where ``SO_RCVLOWAT`` holds epoll's READ event
    back until the mark is reached."""
    return (
        _LOWAT_PLATFORM
        and getattr(sock, "family", None) in (socket.AF_INET, socket.AF_INET6)
        and getattr(sock, "type", None) == socket.SOCK_STREAM
        and hasattr(sock, "setsockopt")
    )


def _queued_nbytes(fd: int) -> int:
    # FIONREAD on a TCP socket: the bytes received by the kernel and not yet
    # read (Unix only, as the marks are).
    import fcntl
    import struct
    import termios

    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]  # type: ignore[no-any-return]


class LowWaterMark:
    """The ``SO_RCVLOWAT`` of one stream's socket (see the module's
    docstring).

    :arg sock: the socket, or None (no marks).
    :arg enabled: marks may be set (False: the heuristic off; also where
        `lowat_applies` says no or `ENV_VAR` turns the marks off).
    """

    __slots__ = ("sock", "ok", "mark")

    def __init__(self, sock: Any, enabled: bool = True) -> None:
        #: The socket the marks are set on, or None.
        self.sock = sock
        #: Marks may be set (False after a ``setsockopt`` failed).
        self.ok = enabled and ENABLED and lowat_applies(sock)
        #: The mark set last (1: the kernel's default).
        self.mark = 1

    def wait(self, missing: int) -> bool:
        """A read parks missing ``missing`` bytes of its own buffer, bytes
        it is sure to need: set the mark for it (``missing``, at most
        `RCVLOWAT_NBYTES`, from `RCVLOWAT_MIN_MISSING` missing bytes; else
        1).  The mark never exceeds what the read needs, so a peer that sends
        the message always reaches it.  True when a mark above 1 is set, so
        that nothing should spin for the bytes.  Costs a ``setsockopt`` when
        the mark changes: two or three per large read; none when marks are
        off."""
        if not self.ok:
            return False
        want = min(missing, RCVLOWAT_NBYTES) if missing >= RCVLOWAT_MIN_MISSING else 1
        if want != self.mark:
            self._set(want)
        return self.mark != 1

    def reset(self) -> None:
        """A read completed: the next one wakes on any byte again."""
        if self.mark != 1:
            self._set(1)

    def _set(self, nbytes: int) -> None:
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, nbytes)
        except OSError:
            # (a mark above 1 that failed left the socket at 1; a reset to 1
            # that failed cannot be retried any better)
            self.ok = False
            nbytes = 1
        self.mark = nbytes

    def unreported_nbytes(self) -> int:
        """Bytes that have arrived on the socket but cannot wake the loop
        yet because a mark is set: the kernel's count (``FIONREAD``, one
        ``ioctl``), or 0 when no mark is set (no syscall)."""
        if self.mark == 1 or self.sock is None:
            return 0
        try:
            return _queued_nbytes(self.sock.fileno())
        except OSError:
            return 0

    def off(self) -> None:
        """The socket is no longer this stream's: never touch it again."""
        self.ok = False
        self.sock = None
        self.mark = 1
