# cython: annotation_typing=False
"""`EagerFuture`: a Future whose producer may wake its waiters in the same
loop turn.

Why: an asyncio Future schedules its done callbacks with ``loop.call_soon``,
so a task awaiting a read that the loop's readiness callback completes runs
only in the loop's *next* iteration, after another poll of the selector.
Each poll releases the GIL (asyncio's ``epoll.poll``; on uvloop, each return
from libuv to Python takes it back), and while another thread runs Python
(a dask worker's tasks) each release can cost the loop thread a hand-off of
up to the switch interval (5 ms).  A received message should cost one wait
(for the network), not two.

How: a task that awaits a Future subclass registers its wake-up through the
public ``add_done_callback`` (asyncio's C and Python tasks both call it for
any Future-like object that is not exactly ``asyncio.Future``).  An
`EagerFuture` keeps those callbacks itself.  Resolved the ordinary way
(`set_result`, `set_exception`, `cancel`), it schedules them with
``call_soon`` as any Future does.  Resolved with `set_result_eager`, it hands
them to the producer, who runs them with `run_callbacks` once it is back
at a safe point (its own state consistent;
for a stream: at the end of its readiness callback).  They run at once only
where asyncio itself could run a task step (no task of the loop is running:
`asyncio.current_task` is None); otherwise, as usual, on the next turn.

Only public asyncio API: ``add_done_callback``, ``remove_done_callback``,
``call_soon``, ``current_task``, ``call_exception_handler``; it works the
same on asyncio's loop and uvloop.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from typing import Any

from tornado.concurrent import Future

__all__ = ["EagerFuture", "run_callbacks"]

_Callback = Callable[[Any], object]
_Kept = tuple[_Callback, "contextvars.Context | None"]


class EagerFuture(Future):  # type: ignore[type-arg]
    """A Future that keeps its own done callbacks (see the module docstring)."""

    # None until the first add_done_callback (most reads complete before
    # anyone waits: no list for them), and again once they were handed out.
    __slots__ = ("_eager_callbacks",)
    _eager_callbacks: list[_Kept] | None

    def add_done_callback(self, fn: _Callback, *, context: contextvars.Context | None = None) -> None:
        if self.done():
            super().add_done_callback(fn, context=context)  # scheduled now, as asyncio does
            return
        callbacks = getattr(self, "_eager_callbacks", None)
        if callbacks is None:
            self._eager_callbacks = [(fn, context)]
        else:
            callbacks.append((fn, context))

    def remove_done_callback(self, fn: _Callback) -> int:
        mine = self._take() or []
        kept = [(f, c) for f, c in mine if f != fn]
        if kept:
            self._eager_callbacks = kept
        return len(mine) - len(kept) + super().remove_done_callback(fn)

    def set_result(self, result: Any) -> None:
        super().set_result(result)
        self._schedule()

    def set_exception(self, exception: Any) -> None:
        super().set_exception(exception)
        self._schedule()

    def cancel(self, msg: Any = None) -> bool:
        cancelled = super().cancel(msg)
        if cancelled:
            self._schedule()
        return cancelled

    def set_result_eager(self, result: Any) -> list[_Kept] | None:
        """Resolve to ``result`` without scheduling the waiters' callbacks:
        return them (None if there are none), for the producer to pass to
        `run_callbacks` (it must)."""
        super().set_result(result)
        return self._take()

    def _take(self) -> list[_Kept] | None:
        """The kept callbacks (None: none), no longer kept."""
        callbacks = getattr(self, "_eager_callbacks", None)
        if callbacks is not None:
            self._eager_callbacks = None
        return callbacks

    def _schedule(self) -> None:
        callbacks = self._take()
        if callbacks is not None:
            call_soon = self.get_loop().call_soon
            for fn, context in callbacks:
                call_soon(fn, self, context=context)


def run_callbacks(future: EagerFuture, callbacks: list[_Kept], loop: asyncio.AbstractEventLoop) -> None:
    """Run ``callbacks`` (from ``future.set_result_eager``) in order, now if
    no task of ``loop`` is running (else schedule them); an exception in one
    is reported to the loop's exception handler, as a scheduled callback's
    would be."""
    if asyncio.current_task(loop) is not None:
        for fn, context in callbacks:
            loop.call_soon(fn, future, context=context)
        return
    for fn, context in callbacks:
        try:
            if context is None:
                fn(future)
            else:
                context.run(fn, future)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            loop.call_exception_handler(
                {"message": f"exception in callback {fn!r} of {future!r}", "exception": exc, "future": future}
            )
