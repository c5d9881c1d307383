# cython: annotation_typing=False
"""`StreamPolicy`: every receive and send heuristic of one stream, behind a
few named hooks.

The stream's mechanism (`tornado_readinto.core._streamcore.StreamCore`: the
receive loop and the write queue) and the face's per-message half
(`tornado_readinto.face._facecore.FaceCore`) decide nothing by themselves: they
tell this object what happened and ask it what to do through the hooks
named below, and neither reads or sets a heuristic's state.  It holds:

* the proof that the socket is empty (`tornado_readinto.core._emptyproof.EmptyProof`):
  `skip_receive`, `receiving`, `drained`, `ended`, `keep_receiving`,
  `ended_short`, `unconfirm`, `data_ready`, `may_have_data`, `wrote`,
  `confirmed`;
* the receive low-water mark of large waits
  (`tornado_readinto.core._lowat.LowWaterMark`): `parked`, `read_done`;
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
hook is a C call.
"""

from __future__ import annotations

from time import perf_counter
from typing import Any, Final

from . import _gilheld
from ._emptyproof import DRAINED_VALID_S, EmptyProof
from ._lowat import LowWaterMark

__all__ = ["CORK_MAX_NBYTES", "StreamPolicy"]

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

    __slots__ = ("proof", "lowat", "busy_poll", "eager", "eager_contended", "cork_max_nbytes")

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
        #: Whether the socket is proved empty.
        self.proof = EmptyProof(empty_proof_s)
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
        EAGAIN (the socket is proved empty).  No syscall."""
        return self.proof.holds(read_registered)

    def receiving(self) -> None:
        """A receive starts."""
        self.proof.receiving()

    def drained(self, short: bool) -> None:
        """The receive proved the socket empty: by a short ``recv``
        (``short``) or by EAGAIN."""
        self.proof.emptied(short)

    def ended(self) -> None:
        """The peer closed."""
        self.proof.ended()

    def ended_short(self) -> bool:
        """The last receive ended on a short ``recv`` that proved the socket
        empty (not on EAGAIN, EOF or an error)."""
        return self.proof.short

    def unconfirm(self) -> None:
        """A READ event on a loop that may stop watching a socket after an
        error event ended on a short ``recv``: the proof is not used until a
        receive or a send confirms the socket is still watched."""
        self.proof.unconfirmed = True

    def keep_receiving(self) -> bool:
        """A receive that left the pending read waiting: True unless the
        socket was just proved empty (then the read parks)."""
        return self.proof.readable

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
        self.proof.data_ready()
        poll = self.busy_poll
        if poll is not None and poll.parked_at:
            poll.data_came(perf_counter())

    def may_have_data(self) -> None:
        """Decrypted bytes may sit in the TLS object (its handshake just
        ended): the next read tries the socket."""
        self.proof.data_ready()

    # -- the send ----------------------------------------------------------------

    def wrote(self) -> None:
        """The stream writes (a request/response peer answers after this)."""
        self.proof.wrote()

    def confirmed(self) -> None:
        """A send reached the socket: it is still watched (see
        `tornado_readinto.core._emptyproof`)."""
        self.proof.unconfirmed = False

    # -- the read's Future ---------------------------------------------------------

    def eager_future(self) -> bool:
        """True when the read that waits now gets an eager Future."""
        return self.eager or (self.eager_contended and _gilheld.held_until != 0.0)

    def off(self) -> None:
        """The socket is no longer the stream's: never touch it again."""
        self.lowat.off()
