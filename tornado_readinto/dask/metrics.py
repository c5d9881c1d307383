"""What the switched comms of this process have done: counters a user can
see from outside (`tornado_readinto.dask.prometheus` on dask's
``/metrics``, `tornado_readinto.dask.switch.verify`, ``python -m
tornado_readinto --address``).

Counting costs nothing on the receive path: each stream already counts its
bytes and receive calls (C fields of its core), each comm adds one to an
integer per message it reads or writes, and the process-wide figures are
summed only when asked (`snapshot`): over the comms still open, plus the
totals that each comm folded in when it closed.  No lock: every count is
made on the comm's event loop thread, and a snapshot taken on another
thread (a scrape) reads integers.

.. versionadded:: 0.1
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, Final

from ..errors import FrameTooLargeError, FramingError
from ..wire.allocators import recycling_allocator

if TYPE_CHECKING:
    from ..face.iostream import ReadIntoIOStream

__all__ = ["COMM_METRICS", "CommFigures", "CommMetrics", "FIGURES", "MESSAGE_FIGURES", "STREAM_FIGURES", "snapshot"]

#: The figures of one comm that the comm counts itself, once per message
#: (attributes of its `CommFigures`).
MESSAGE_FIGURES: Final = ("messages_received", "messages_sent")

#: The figures of one comm that its stream counts (attributes of the
#: stream, a `tornado_readinto.face.iostream.ReadIntoIOStream`): bytes each
#: way (headers included), receive calls, bytes received straight into
#: their frames.
STREAM_FIGURES: Final = ("nbytes_received", "nbytes_sent", "receive_calls", "nbytes_received_in_place")

#: The figures a snapshot sums over the comms, in the order they are reported.
FIGURES: Final = MESSAGE_FIGURES + STREAM_FIGURES


class CommFigures:
    """One comm's figures: the messages it read whole and queued whole (counted
    by the comm, once per message) and its `stream`, whose own counts
    (`STREAM_FIGURES`) are read when asked.  Owned by the comm; it outlives
    it only until `CommMetrics` has added it to the closed comms' totals.
    """

    __slots__ = ("messages_received", "messages_sent", "stream")

    def __init__(self, stream: ReadIntoIOStream) -> None:
        self.messages_received = 0
        self.messages_sent = 0
        self.stream = stream

    def add_to(self, totals: dict[str, int]) -> None:
        """Add each of `FIGURES` to ``totals``."""
        for name in MESSAGE_FIGURES:
            totals[name] += getattr(self, name)
        stream = self.stream
        for name in STREAM_FIGURES:
            totals[name] += getattr(stream, name)


class CommMetrics:
    """The process-wide figures of the switched comms (one instance:
    `COMM_METRICS`)."""

    __slots__ = ("opened", "refused", "_open", "_closed")

    def __init__(self) -> None:
        #: Comms made so far (connected or accepted).
        self.opened = 0
        #: Messages refused by the frame limits or malformed, by reason: the
        #: limit's name (``"max_frame_nbytes"``…) or ``"malformed"``.
        self.refused: Counter[str] = Counter()
        self._open: set[CommFigures] = set()
        # FIGURES summed over the comms that have closed.
        self._closed: dict[str, int] = dict.fromkeys(FIGURES, 0)

    def comm_opened(self, figures: CommFigures) -> None:
        """A comm was made, with ``figures``: counted among the open comms
        until `comm_closed`, which the comm calls when it closes or, from its
        finalizer, when it is garbage unclosed.  O(1)."""
        self.opened += 1
        self._open.add(figures)

    def comm_closed(self, figures: CommFigures) -> None:
        """The comm of ``figures`` closed: they join the closed comms'
        totals (once; later calls do nothing).  O(1)."""
        if figures in self._open:
            self._open.discard(figures)
            figures.add_to(self._closed)

    def message_refused(self, error: BaseException) -> None:
        """A comm's read failed on ``error``: count it if the peer's header
        was refused (`FrameTooLargeError`, by limit) or malformed (another
        `FramingError`)."""
        if isinstance(error, FrameTooLargeError):
            self.refused[error.field] += 1
        elif isinstance(error, FramingError):
            self.refused["malformed"] += 1

    def snapshot(self) -> dict[str, Any]:
        """The figures now: ``comms_opened``, ``comms_open``, each of
        `FIGURES` over every comm made so far, ``refused`` (by reason), and
        the recycling allocator's ``allocator_hits``, ``allocator_misses``
        and ``allocator_retained_nbytes``.  O(open comms)."""
        totals = dict(self._closed)
        open_comms = list(self._open)  # (a copy: a comm may close meanwhile)
        for figures in open_comms:
            figures.add_to(totals)
        return {
            "comms_opened": self.opened,
            "comms_open": len(open_comms),
            **totals,
            "refused": dict(self.refused),
            "allocator_hits": recycling_allocator.hits,
            "allocator_misses": recycling_allocator.misses,
            "allocator_retained_nbytes": recycling_allocator.nbytes_retained,
        }


#: This process's figures.
COMM_METRICS: Final = CommMetrics()


def snapshot() -> dict[str, Any]:
    """`COMM_METRICS`'s figures now (see `CommMetrics.snapshot`)."""
    return COMM_METRICS.snapshot()
