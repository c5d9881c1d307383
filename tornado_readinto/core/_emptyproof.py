"""The proof that a stream's socket is empty: one heuristic of the stream,
in one small object (`EmptyProof`).

A read that finds no bytes read ahead would try a ``recv`` before parking;
when the socket is known to be empty, that ``recv`` can only fail with
EAGAIN.  A receive proves the socket empty when it fails with EAGAIN (plain
sockets: on TLS "want read" proves nothing), or when it returns fewer bytes
than asked (plain sockets: the kernel gave all it had; TLS: fewer than a
full record).  The proof then holds while:

* no READ event came since (`data_ready`),
* READ is registered with the loop, whose level-triggered selector will
  report new data (the caller says so: `holds`),
* less than ``valid_s`` passed since the receive or since the stream's last
  write (`wrote`: a request/response peer answers only after it), and
* nothing left it unconfirmed (`unconfirmed`: a loop that may stop
  watching a socket after an error event ran a READ callback whose receive
  ended short; the next receive or send confirms the socket is watched).

Switched off (``valid_s=0``), the proof never holds, and every read tries
the socket first.  Each stream's policy
(`tornado_readinto.core._policy.StreamPolicy`) keeps one `EmptyProof` and tells
it what happened through the hooks below; it holds no socket and makes no
syscall (`holds` reads the clock only when the rest already holds).

The compiled build types this module with ``_emptyproof.pxd``: its fields
are C fields, its hooks C calls from the policy.
"""

from __future__ import annotations

from time import perf_counter
from typing import Final

__all__ = ["DRAINED_VALID_S", "EmptyProof"]

#: How long a receive proves a socket empty.  A read that starts later tries
#: ``recv`` before waiting for the event loop: when the loop thread was held
#: up this long (by a thread holding the GIL: a hand-off takes up to the 5 ms
#: switch interval), the peer has most likely answered, and a read completed
#: inline costs no poll, no parked Future and no extra loop turn.
DRAINED_VALID_S: Final = 1e-3  # seconds


class EmptyProof:
    """Whether the last receive proved the socket empty, and for how long
    that holds (see the module's docstring).

    :arg valid_s: how long a proof holds after its receive or the last
        write (default `DRAINED_VALID_S`; 0: never, the heuristic off).
    :raises ValueError: for a negative ``valid_s``.
    """

    __slots__ = ("valid_s", "readable", "short", "unconfirmed", "at")

    def __init__(self, valid_s: float = DRAINED_VALID_S) -> None:
        if not valid_s >= 0:
            raise ValueError(f"valid_s must be >= 0 seconds, got {valid_s}")
        #: How long a proof holds (0: never).
        self.valid_s = valid_s
        #: False only after a receive proved the socket empty; a READ event
        #: sets it back.
        self.readable = True
        #: The last receive ended on such a proof by a short ``recv`` (not
        #: on EAGAIN, EOF or an error).
        self.short = False
        #: See the module's docstring: the proof is not used until a
        #: receive or a send confirms the socket is still watched.
        self.unconfirmed = False
        #: When the proof was made, or the last write (``perf_counter``).
        self.at = 0.0

    def holds(self, read_registered: bool) -> bool:
        """True when a receive now would only fail with EAGAIN: the proof
        is there, confirmed, READ is registered and the window has not
        passed.  No syscall."""
        return (
            not self.readable and not self.unconfirmed and read_registered and perf_counter() - self.at < self.valid_s
        )

    def receiving(self) -> None:
        """A receive starts: what it ends on decides `short` again."""
        self.short = False

    def emptied(self, short: bool) -> None:
        """The receive just made proved the socket empty: by a short
        ``recv`` (``short``) or by EAGAIN."""
        self.readable = False
        self.short = short
        self.at = perf_counter()

    def ended(self) -> None:
        """The peer closed: nothing more can arrive (the proof never
        matters again, so its window is not started)."""
        self.readable = False

    def data_ready(self) -> None:
        """A READ event (or decrypted bytes that may sit in a TLS object):
        the socket has data."""
        self.readable = True

    def wrote(self) -> None:
        """The stream writes: a request/response peer answers only after
        this, so a proof's window starts again here."""
        if not self.readable:
            self.at = perf_counter()
