# cython: annotation_typing=False
"""`StreamPolicy`: every receive and send heuristic of one stream, behind a
few named hooks.

The stream's mechanism (`tornado_readinto.core._streamcore.StreamCore`: the
receive loop and the write queue) and the face's per-message half
(`tornado_readinto.face._facecore.FaceCore`) decide nothing by themselves: they
tell this object what happened and ask it what to do through the hooks
named below, and neither reads or sets a heuristic's state.  It holds:

* the proof that the socket is empty (its own fields, see the comments
  below): `skip_receive`, `receiving`, `drained`, `ended`,
  `keep_receiving`, `ended_short`, `unconfirm`, `data_ready`,
  `may_have_data`, `wrote`, `confirmed`: each one call, no forward;
* the receive low-water mark of large waits
  (`LowWaterMark`, below): `parked`, `read_done`;
* busy polling (`tornado_readinto.core.busypoll.BusyPoll`): `parked`,
  `data_ready`;
* eager read Futures (`eager_future`);
* the cork of small replies written while more input is read ahead
  (`cork_max_nbytes`).

The other two heuristics are switched here too but live where their state
is: the GIL-keeping socket calls (`tornado_readinto.core._sockcalls.SocketCalls`'s
``keep_gil``, settled with the socket) and the read-ahead storage lent by the
process's pool (`tornado_readinto.core._readcore.ReadAheadPool`).

Each heuristic is switchable alone, at construction: ``empty_proof_s=0``,
``lowat=False`` (or ``TORNADO_READINTO_RCVLOWAT=0``), ``busy_poll=None``,
``eager=False, eager_contended=False``, ``cork_max_nbytes=0``.  Nothing is
assigned afterwards.  The compiled build types this module with
``_policy.pxd``: the mechanism holds the policy in a typed field, so every
hook is a C call, and the policy its low-water mark, so that one's are
too.  The two classes share this one module: a policy decision is one
module away from the mechanism.
"""

from __future__ import annotations

import os
import socket
import sys
from time import perf_counter
from typing import Any, Final

from . import _gilheld

__all__ = [
    "CORK_MAX_NBYTES",
    "StreamPolicy",
    "DRAINED_VALID_S",
    "ENABLED",
    "ENV_VAR",
    "RCVLOWAT_MIN_MISSING",
    "RCVLOWAT_NBYTES",
    "LowWaterMark",
    "lowat_applies",
]


# -- the proof that the socket is empty ------------------------------------
# The proof that a stream's socket is empty: one heuristic of the stream,
# kept in the policy's own fields (`StreamPolicy.readable`, `short`,
# `unconfirmed`, `proved_at`), so that each of its decisions is one call.
#
# A read that finds no bytes read ahead would try a ``recv`` before parking;
# when the socket is known to be empty, that ``recv`` can only fail with
# EAGAIN.  A receive proves the socket empty when it fails with EAGAIN (plain
# sockets: on TLS "want read" proves nothing), or when it returns fewer bytes
# than asked (plain sockets: the kernel gave all it had; TLS: fewer than a
# full record).  The proof then holds while:
#
# * no READ event came since (`StreamPolicy.data_ready`),
# * READ is registered with the loop, whose level-triggered selector will
#   report new data (the caller says so: `StreamPolicy.skip_receive`),
# * less than ``empty_proof_s`` passed since the receive or since the
#   stream's last write (`StreamPolicy.wrote`: a request/response peer
#   answers only after it), and
# * nothing left it unconfirmed (`StreamPolicy.unconfirm`: a loop that may
#   stop watching a socket after an error event ran a READ callback whose
#   receive ended short; the next receive or send confirms the socket is
#   watched: `StreamPolicy.confirmed`).
#
# Switched off (``empty_proof_s=0``), the proof never holds, and every read
# tries the socket first.  The proof holds no socket and makes no syscall
# (`StreamPolicy.skip_receive` reads the clock only when the rest already
# holds).

#: How long a receive proves a socket empty.  A read that starts later tries
#: ``recv`` before waiting for the event loop: when the loop thread was held
#: up this long (by a thread holding the GIL: a hand-off takes up to the 5 ms
#: switch interval), the peer has most likely answered, and a read completed
#: inline costs no poll, no parked Future and no extra loop turn.
DRAINED_VALID_S: Final = 1e-3  # seconds


# -- the receive low-water mark --------------------------------------------
# The receive low-water mark of a large wait: one heuristic of the stream, in
# one small object (`LowWaterMark`).
#
# A read that waits for `RCVLOWAT_MIN_MISSING` bytes or more of its own
# buffer sets the socket's ``SO_RCVLOWAT`` to what it still needs, at most
# `RCVLOWAT_NBYTES`: Linux then holds epoll's READ event back until that many
# bytes are queued, so a large transfer costs one ``recv_into`` and one loop
# wake-up per `RCVLOWAT_NBYTES` instead of one per arriving segment batch, and
# the last wake-up of a read comes when its last byte has arrived.  Smaller
# waits, and the receive that completes the read, set it back to 1 (any
# byte).  Plain TCP sockets on Linux 4.18+ only (`lowat_applies`); a
# ``setsockopt`` that fails turns the marks off for that socket, and
# ``TORNADO_READINTO_RCVLOWAT=0`` in the environment (`ENV_VAR`, read at
# import) turns them off for every stream of the process, for A/B
# measurements (a worker process inherits it).
#
# Each stream's policy (`tornado_readinto.core._policy.StreamPolicy`) keeps one
# `LowWaterMark` and calls it where a read parks (`wait`) and where a read
# completes (`reset`).  Its hooks are C calls
# from the policy in the compiled build.

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


# -- the policy ----------------------------------------------------------

#: The most bytes of replies a stream holds back while more input is
#: already read ahead (see `StreamCore.writelines`): one coalescing chunk of
#: the write buffer.
CORK_MAX_NBYTES: Final = 64 * 1024  # bytes


class StreamPolicy:
    """The heuristics of one stream (see the module's docstring).

    Not thread-safe: it belongs to one stream, on its event loop's thread.

    :arg sock: the socket the receive low-water mark is set on, or None.
    :arg empty_proof_s: how long a receive proves the socket empty (0: the
        proof is off, every read tries the socket first).
    :arg lowat: large waits may set ``SO_RCVLOWAT`` (plain TCP on Linux
        only, whatever this says).
    :arg busy_poll: the busy-poll policy told when a read parks, or None.
    :arg eager: reads that wait get an eager Future (asyncio's own loop).
    :arg eager_contended: ...also once the GIL was seen contended.
    :arg cork_max_nbytes: the most bytes of small replies held back while
        more input is read ahead (0: no cork).
    :raises ValueError: a negative ``empty_proof_s``.
    """

    __slots__ = (
        "empty_proof_s", "readable", "short", "unconfirmed", "proved_at",  # the proof that the socket is empty
        "lowat", "busy_poll", "eager", "eager_contended", "cork_max_nbytes",  # the other heuristics
    )  # fmt: skip

    def __init__(
        self,
        sock: Any = None,
        *,
        empty_proof_s: float = DRAINED_VALID_S,
        lowat: bool = True,
        busy_poll: Any = None,
        eager: bool = False,
        eager_contended: bool = False,
        cork_max_nbytes: int = CORK_MAX_NBYTES,
    ) -> None:
        if not empty_proof_s >= 0:
            raise ValueError(f"empty_proof_s must be >= 0 seconds, got {empty_proof_s}")
        # -- the proof that the socket is empty (see the module's comments) --
        #: How long a receive proves the socket empty (0: never).
        self.empty_proof_s = empty_proof_s
        #: False only after a receive proved the socket empty; a READ event
        #: sets it back.
        self.readable = True
        #: The last receive ended on such a proof by a short ``recv`` (not
        #: on EAGAIN, EOF or an error).
        self.short = False
        #: The proof is not used until a receive or a send confirms the
        #: socket is still watched.
        self.unconfirmed = False
        #: When the proof was made, or the last write (``perf_counter``).
        self.proved_at = 0.0
        # -- the other heuristics --
        #: The receive low-water mark of large waits.
        self.lowat = LowWaterMark(sock, lowat)
        #: The busy-poll policy (`tornado_readinto.core.busypoll.BusyPoll`), or None.
        self.busy_poll: Any = busy_poll
        #: Reads that wait get an eager Future.
        self.eager = eager
        #: ...also once the GIL was seen contended in the process.
        self.eager_contended = eager_contended
        #: The most bytes the cork holds (0: none).
        self.cork_max_nbytes = cork_max_nbytes

    # -- the receive -------------------------------------------------------------

    def skip_receive(self, read_registered: bool) -> bool:
        """A read is starting: True when a receive now would only fail with
        EAGAIN: the socket is proved empty, the proof is confirmed, READ is
        registered (``read_registered``) and the proof's window has not
        passed.  No syscall; a clock read only when the rest holds."""
        return (
            not self.readable
            and not self.unconfirmed
            and read_registered
            and perf_counter() - self.proved_at < self.empty_proof_s
        )

    def receiving(self) -> None:
        """A receive starts: what it ends on decides `ended_short` again."""
        self.short = False

    def drained(self, short: bool) -> None:
        """The receive proved the socket empty: by a short ``recv``
        (``short``) or by EAGAIN.  One clock read."""
        self.readable = False
        self.short = short
        self.proved_at = perf_counter()

    def ended(self) -> None:
        """The peer closed: nothing more can arrive (the proof never
        matters again, so its window is not started)."""
        self.readable = False

    def ended_short(self) -> bool:
        """The last receive ended on a short ``recv`` that proved the socket
        empty (not on EAGAIN, EOF or an error)."""
        return self.short

    def unconfirm(self) -> None:
        """A READ event on a loop that may stop watching a socket after an
        error event ended on a short ``recv``: the proof is not used until a
        receive or a send confirms the socket is still watched."""
        self.unconfirmed = True

    def keep_receiving(self) -> bool:
        """A receive that left the pending read waiting: True unless the
        socket was just proved empty (then the read parks)."""
        return self.readable

    def read_done(self) -> None:
        """A receive completed the pending read: its mark goes."""
        self.lowat.reset()

    def parked(self, wait_nbytes: int) -> None:
        """The pending read waits for the socket, surely missing
        ``wait_nbytes`` bytes of its own buffer (0: not known): set the
        low-water mark of a large wait, or else let the busy-poll policy
        spin (never while another thread holds the GIL).  Costs a
        ``setsockopt`` when the mark changes, two clock reads with busy
        polling."""
        if self.lowat.wait(wait_nbytes):
            return  # a long wait for the mark: no spin
        poll = self.busy_poll
        if poll is not None:
            now = perf_counter()
            if now >= _gilheld.held_until:  # contended GIL: no spinning, no bookkeeping
                poll.parked(now)

    def data_ready(self) -> None:
        """A READ event: the socket has data (the busy-poll policy learns
        how long a parked read waited)."""
        self.readable = True
        poll = self.busy_poll
        if poll is not None and poll.parked_at:
            poll.data_came(perf_counter())

    def may_have_data(self) -> None:
        """Decrypted bytes may sit in the TLS object (its handshake just
        ended): the next read tries the socket."""
        self.readable = True

    # -- the send ----------------------------------------------------------------

    def wrote(self) -> None:
        """The stream writes: a request/response peer answers only after
        this, so a proof's window starts again here (one clock read, only
        while a proof stands)."""
        if not self.readable:
            self.proved_at = perf_counter()

    def confirmed(self) -> None:
        """A receive or a send reached the socket: it is still watched (see
        `unconfirm`)."""
        self.unconfirmed = False

    # -- the read's Future ---------------------------------------------------------

    def eager_future(self) -> bool:
        """True when the read that waits now gets an eager Future."""
        return self.eager or (self.eager_contended and _gilheld.held_until != 0.0)

    def off(self) -> None:
        """The socket is no longer the stream's: never touch it again."""
        self.lowat.off()
