# cython: annotation_typing=False
"""`FaceCore`: the Tornado face's per-message state, in C; and `EagerFuture`,
the Future of a read whose waiter may run in the loop turn that completes it.

`tornado_readinto.face.iostream.ReadIntoIOStream` is the face: a Tornado
``IOStream`` subclass.  This object is its half that runs per message: it
owns the read and write Futures, the registration state Tornado keeps in
``_state``, the connecting flag and the READ callback that the asyncio loop
calls directly.  It drives one `tornado_readinto.core._streamcore.StreamCore`
(`io`: the mechanism, which knows no event loop, no Future and no face) and
asks the face for what is rare through `FaceCalls`, the one table of what
this object may call on its face (as an asyncio transport calls its
protocol): it reaches for nothing else of the face's but its public
``error``, ``socket`` and ``close``.  Calls go one way below: the face and
this object call the mechanism; the mechanism returns or raises, and calls
neither.

Strategy:

* Typed fields.  Compiled (Cython's pure-Python mode with
  ``_facecore.pxd``), a message's state lives in C fields of one extension
  type that holds the mechanism, its read state and its policy in typed
  fields (C calls between them), and the hot paths (`read_into_future`, `read_bytes_future`,
  `read_message_future`, `read_ready`, `write_future`) are C calls that look
  nothing up in an instance ``__dict__``.  Uncompiled, the same file is the
  pure-Python twin and the reference.
* The face keeps Tornado's attribute names: ``_read_future``, ``_state``,
  ``_closed``, ``_connecting``, ``_write_futures`` and
  ``max_write_buffer_size`` are properties over this object's fields (and
  the write queue's, over the mechanism's), so
  Tornado's own methods (``_add_io_state``, ``_maybe_add_error_listener``,
  ``connect``...) read and write the same state.
* What is rare stays on the face and is called through `FaceCalls`:
  registering interest (``add_io_state``, ``update_state``), the error
  policy (``fail``), the error listener, the general event dispatch, and
  TLS's handshake (a face whose ``_readable``/``_writable`` are not the
  plain ones is called for those: `FaceCalls.plain_events`).
* A read that has to wait gets an exact ``asyncio.Future`` whose done
  callback (`on_read_done`) closes the stream if it was cancelled; where an
  eager wake-up pays (asyncio's own loop, or a contended GIL in a process
  that can run at least two threads at once) it gets an
  `_EagerReadFuture` instead, whose waiters run in the readiness callback's
  loop turn (see `EagerFuture`, below).
"""

from __future__ import annotations

import asyncio
import contextvars
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from tornado import ioloop
from tornado.concurrent import Future

from ..core._readcore import PENDING
from ..core._streamcore import CORKED, EOF, SEND, CoreFailure, StreamCore
from ..errors import BufferBusyError
from ._tornado_compat import StreamClosedError, UnsatisfiableReadError, future_set_result_unless_cancelled

__all__ = ["EagerFuture", "FaceCalls", "FaceCore", "run_callbacks"]

_READ = ioloop.IOLoop.READ
_WRITE = ioloop.IOLoop.WRITE
_ERROR = ioloop.IOLoop.ERROR


# -- the eager Future ---------------------------------------------------------

_Callback = Callable[[Any], object]
_Kept = tuple[_Callback, "contextvars.Context | None"]


class EagerFuture(Future):  # type: ignore[type-arg]
    """A Future whose producer may wake its waiters in the same loop turn: it
    keeps its own done callbacks.

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


class _ClosesOnCancel:
    """Mixin of the eager read Future: cancelling it closes its stream."""

    __slots__ = ()
    #: The `FaceCore` whose pending read this is (its stream closes on a
    #: cancel), or None once the read completed.
    closes: Any

    def cancel(self, msg: Any = None) -> bool:
        cancelled: bool = super().cancel(msg)  # type: ignore[misc]
        if cancelled:
            core = self.closes
            self.closes = None
            if core is not None:
                core.on_read_cancelled(self)
        return cancelled


class _EagerReadFuture(_ClosesOnCancel, EagerFuture):
    """The Future of one read whose waiter, when the readiness callback
    completes the read, runs in the same loop turn (see
    `EagerFuture`); cancelling it closes its stream at once:
    made on asyncio's own loop, and on others (uvloop) in processes that can
    run at least two threads at once and where the GIL was ever seen
    contended."""

    __slots__ = ("closes",)

    def pend_for(self, core: Any) -> None:
        """Make this the pending read of ``core``: no waiter kept yet, and
        a cancel closes ``core``'s stream."""
        self._eager_callbacks = None  # set: reading an unset slot raises (and catches) an AttributeError
        self.closes = core


class LoopShared:
    """What the streams of one loop share (`loop_shared`): an idle stream
    holds none of it on its own.

    * ``resolved``: the Future, already resolved to None, that the streams
      return for every write sent (or corked) at once.  Awaiting it, or adding
      a done callback (which runs on the loop's next iteration), works as with
      any done Future.
    * ``context``: the ``contextvars.Context`` (empty) that a parked read's
      cancellation callback (`FaceCore.on_read_done`) runs in.  Given to
      ``add_done_callback``, it spares the Future a copy of the caller's
      context per read (``add_done_callback`` without one makes a new
      ``Context``, an object the cyclic GC tracks, that lives as long as the
      read waits).  The loop runs its callbacks one at a time, in its own
      thread, so they never enter it twice at once.  The cancellation path
      (the stream's close, its close callback's scheduling) therefore sees
      no context variables of the reader's, and a ``ContextVar.set`` made
      on it stays in this context for the loop's later cancellations, as
      one made in a readiness callback stays in the context asyncio copied
      when the fd was registered.
    """

    __slots__ = ("resolved", "context", "__weakref__")

    def __init__(self, loop: Any) -> None:
        self.resolved: Any = Future(loop=loop)
        self.resolved.set_result(None)
        self.context: Any = contextvars.Context()


#: Each loop's `LoopShared`, by ``id(loop)``: held by its streams, and gone
#: with the last of them (its Future keeps the loop alive, so the id cannot
#: be another loop's while the entry exists).
_SHARED: weakref.WeakValueDictionary[int, LoopShared] = weakref.WeakValueDictionary()


def loop_shared(loop: Any) -> LoopShared:
    """The `LoopShared` of ``loop``: one per loop, made by its first stream."""
    key = id(loop)
    shared = _SHARED.get(key)
    if shared is None:
        shared = _SHARED[key] = LoopShared(loop)
    return shared


def _retrieve(future: Future[Any]) -> None:
    """Mark a Future's exception retrieved (its read raised to the caller)."""
    if not future.cancelled():
        future.exception()


def _writable_bytes_view(buf: Any) -> memoryview:
    """A 1-D, ``'B'``-format view over all of ``buf``'s bytes.

    :raises TypeError: ``buf`` has no buffer interface, is read-only or is not
        C-contiguous.
    """
    view = memoryview(buf)
    if view.readonly:
        view.release()
        raise TypeError(f"read_into needs a writable buffer, got read-only {type(buf).__name__}")
    if not view.c_contiguous:
        view.release()
        raise TypeError(f"read_into needs a C-contiguous buffer, got a strided {type(buf).__name__}")
    if view.format == "B" and view.ndim == 1:
        return view
    if view.nbytes == 0:  # cast() refuses shapes with a zero in them
        view.release()
        return memoryview(bytearray())
    with view:
        return view.cast("B")


class FaceCalls:
    """What a `FaceCore` may call on its face: the face's rare paths, as
    the functions of the face's class, each called with the face first.

    One per face class (the face makes it, see
    ``ReadIntoIOStream._face_calls``), so that a stream holds none of its
    own: a method replaced on one stream instance after it was made is not
    seen here.  Read-only once made.

    .. versionadded:: 0.1
    """

    __slots__ = (
        "fail",
        "failed_read",
        "add_io_state",
        "listen_for_close",
        "dispatch",
        "readable",
        "writable",
        "update_state",
        "uncork",
        "plain_events",
    )

    def __init__(
        self,
        *,
        fail: Any,
        failed_read: Any,
        add_io_state: Any,
        listen_for_close: Any,
        dispatch: Any,
        readable: Any,
        writable: Any,
        update_state: Any,
        uncork: Any,
        plain_events: bool,
    ) -> None:
        #: ``fail(face, error, where) -> bool``: the stream's one error
        #: policy (log, record, close); True when the caller must raise on.
        self.fail = fail
        #: ``failed_read(face, error, where) -> Future``: a read whose start
        #: failed; its Future fails as the stream closes.
        self.failed_read = failed_read
        #: ``add_io_state(face, events)``: watch ``events`` too (Tornado's).
        self.add_io_state = add_io_state
        #: ``listen_for_close(face)``: watch for the peer closing once
        #: nothing else is watched (Tornado's ``_maybe_add_error_listener``).
        self.listen_for_close = listen_for_close
        #: ``dispatch(face, fd, events)``: the general readiness callback.
        self.dispatch = dispatch
        #: ``readable(face)``, ``writable(face)``: a READ or WRITE event,
        #: where the face handles them (TLS): see `plain_events`.
        self.readable = readable
        self.writable = writable
        #: ``update_state(face)``: register what the stream waits for now.
        self.update_state = update_state
        #: ``uncork(face)``: send what the cork holds (a loop callback).
        self.uncork = uncork
        #: The face's ``readable``/``writable`` are the plain ones (not
        #: TLS's, not a subclass's): the core runs them itself.
        self.plain_events = plain_events


class FaceCore:
    """The face's per-message state over one `StreamCore`, and its hot
    paths (see the module's strategy).

    Not thread-safe: it belongs to one stream, on its event loop's thread.
    Its options (`face`, `loop`, `io`, `calls`, `drops_on_error`) are
    settled in ``__init__``; the compiled build makes them read-only.

    .. versionadded:: 0.1
    """

    __slots__ = (
        "face",
        "loop",
        "io",
        "calls",
        "drops_on_error",
        "read_future",
        "state",
        "connecting",
        "in_events",
        "woken",
        "shared",
        "filled_future",
        "filled_nbytes",
        "write_futures",
        "max_write_nbytes",
        "done_cb",
    )

    def __init__(
        self,
        face: Any,
        loop: Any,
        io: StreamCore,
        *,
        calls: FaceCalls,
        drops_on_error: bool = False,
    ) -> None:
        """``face``, ``loop``, ``io``, ``calls`` (the face's `FaceCalls`)
        and ``drops_on_error``: all settled here, once."""
        #: The `ReadIntoIOStream` whose state this is.
        self.face: Any = face
        #: Its asyncio loop (given to every Future made here).
        self.loop: Any = loop
        #: The stream's mechanism: the receive loop and the write queue.
        self.io = io
        #: What this object may call on the face (its class's `FaceCalls`).
        self.calls = calls
        #: The loop may stop watching the socket after an error event, once
        #: it ran the READ callback (uvloop's ``add_reader``: a poll handle
        #: that saw ``EPOLLERR`` runs its reader once more, then closes), so a
        #: READ event receives until EAGAIN, EOF or the error (`readable_event`).
        self.drops_on_error = drops_on_error
        #: Tornado's ``_read_future``: the pending read's Future, or None.
        self.read_future: Any = None
        #: Tornado's ``_state``: the events registered with the IOLoop, or None.
        self.state: Any = None
        #: Tornado's ``_connecting``.
        self.connecting = False
        #: True while a readiness callback of the stream runs.
        self.in_events = False
        #: ``(future, callbacks)`` that the readiness callback runs as it
        #: returns (an eager read it completed), or None.
        self.woken: Any = None
        #: What the loop's streams share: the resolved Future that writes
        #: sent at once return, the context of the cancellation callback.
        self.shared = loop_shared(loop)
        #: The resolved Future of the last ``read_into`` that the bytes read
        #: ahead filled, and its byte count (-1: none).
        self.filled_future: Any = None
        self.filled_nbytes = -1
        #: Tornado's ``_write_futures``: ``(write index, Future)`` in order,
        #: or None while no write waits (an idle stream keeps no deque).
        self.write_futures: Any = None
        #: Tornado's ``max_write_buffer_size`` (None: no limit).
        self.max_write_nbytes: Any = None
        #: `on_read_done`, bound once (a plain read Future's done callback).
        self.done_cb: Any = self.on_read_done

    @property
    def reads(self) -> Any:
        """The stream's read state (``io.reads``)."""
        return self.io.reads

    @property
    def policy(self) -> Any:
        """The stream's heuristics (``io.policy``)."""
        return self.io.policy

    # -- reads -----------------------------------------------------------------

    def read_into_future(self, buf: Any, partial: bool = False) -> Any:
        """The face's ``read_into``: see `ReadIntoIOStream.read_into`."""
        reads = self.io.reads
        if type(buf) is bytearray:  # always writable, contiguous and of format 'B'
            # Bytes read ahead that fill it need no memoryview.
            if self.read_future is None and reads.fill(buf):
                return self.filled(len(buf))
            view = memoryview(buf)
        else:
            view = _writable_bytes_view(buf)
        if self.read_future is not None:
            view.release()  # the read is refused
            return self.busy()
        try:
            result = reads.read_into(view, partial)
        except Exception as e:
            return self.start_failed(e)
        if result is PENDING:
            return self.started(result)
        return self.filled(result)

    def filled(self, nbytes: int) -> Any:
        """The Future of a ``read_into`` that the bytes read ahead filled:
        already resolved to ``nbytes``, and the same one while the count
        repeats (a framed protocol's frames of one size, each read from the
        read-ahead buffer), so that none is made."""
        future = self.filled_future
        if future is None or self.filled_nbytes != nbytes:
            future = self.filled_future = Future(loop=self.loop)
            future.set_result(nbytes)
            self.filled_nbytes = nbytes
        self.listen_if_idle()
        return future

    def read_bytes_future(self, num_bytes: int, partial: bool = False) -> Any:
        """The face's ``read_bytes``: see `ReadIntoIOStream.read_bytes`."""
        if num_bytes < 0:
            raise ValueError(f"read_bytes needs num_bytes >= 0, got {num_bytes}")
        if self.read_future is not None:
            return self.busy()
        try:
            result = self.io.reads.read_bytes(num_bytes, partial)
        except Exception as e:
            return self.start_failed(e)
        return self.started(result)

    def read_message_future(self, reader: Any) -> Any:
        """The face's ``read_message`` once its checks passed: see
        `ReadIntoIOStream.read_message`."""
        if self.read_future is not None:
            return self.busy()
        try:
            result = self.io.reads.read_message(reader)
        except Exception as e:
            return self.start_failed(e)
        return self.started(result)

    def start_failed(self, error: Exception) -> Any:
        """A read's start raised ``error``: a `BufferBusyError` is raised on
        to the caller; anything else (a ``max_bytes`` broken, a reader that
        rejected the bytes read ahead) fails the read's Future as the stream
        closes."""
        if isinstance(error, BufferBusyError):
            raise error
        return self.calls.failed_read(self.face, error, "read" if isinstance(error, UnsatisfiableReadError) else "data")

    def busy(self) -> Any:
        """A read started while one is pending: never returns.

        :raises StreamClosedError: the stream closed (the pending read was
            cancelled and that closed it).
        :raises BufferBusyError: else.
        """
        pending = self.read_future
        if pending.cancelled():  # its done callback has not run yet
            self.on_read_cancelled(pending)
        if self.io.closed:
            raise StreamClosedError(real_error=self.face.error)
        raise BufferBusyError("a read is already in progress on this stream")

    def started(self, result: Any) -> Any:
        """The rest of every read, once the read state's ``read_*`` returned
        ``result`` (see ``ReadIntoIOStream._read``): the read's Future."""
        if result is not PENDING:
            future: Any = Future(loop=self.loop)
            future.set_result(result)
            self.listen_if_idle()
            return future
        io = self.io
        if io.policy.eager_future():
            future = _EagerReadFuture(loop=self.loop)
            future.pend_for(self)
        else:
            # An exact Future, which a task awaits through asyncio's fast
            # path (a subclass costs the task generic method calls per
            # await).  Its cancellation reaches the stream through a done
            # callback, which complete() removes.
            future = Future(loop=self.loop)
            future.add_done_callback(self.done_cb, context=self.shared.context)
        self.read_future = future
        if io.closed:
            # Nothing more will come: raise, as stock does (its Future stays
            # pending); the read ends, which releases a read_into buffer.
            error = self.face.error
            io.reads.connection_lost(error)
            future.add_done_callback(_retrieve)
            raise StreamClosedError(real_error=error)
        state = self.state
        registered = state is not None and state & _READ != 0
        try:
            if not io.policy.skip_receive(registered):
                io.policy.confirmed()  # whatever this receive ends on shows it
                result = io.receive()
                if result is not PENDING:
                    if result is EOF:
                        self.face.close(False)  # the pending read ends
                    else:
                        self.complete(result)
                    return future
                if io.closed:  # (a replaced read_from_fd may close the stream)
                    return future
            if io.park():
                self.calls.add_io_state(self.face, _WRITE)
            if not registered:
                self.calls.add_io_state(self.face, _READ)
        except CoreFailure as e:
            self.calls.fail(self.face, e.error, e.where)
        except Exception as e:
            if self.calls.fail(self.face, e, "read"):
                future.add_done_callback(_retrieve)
                raise
        return future

    def complete(self, result: Any) -> None:
        """Resolve the pending read's Future to ``result``."""
        future = self.read_future
        if future is not None:
            if type(future) is _EagerReadFuture:
                if future.cancelled():
                    self.on_read_cancelled(future)
                    return
                future.closes = None
            elif not future.remove_done_callback(self.done_cb) and future.cancelled():
                # A plain Future whose done callback was scheduled (so no
                # longer there to remove) and has not run yet.
                self.on_read_cancelled(future)
                return
            self.read_future = None
            if self.in_events and self.woken is None and type(future) is not Future and isinstance(future, EagerFuture):
                # In the readiness callback: its waiters run as it returns.
                callbacks = future.set_result_eager(result)
                if callbacks is not None:
                    self.woken = (future, callbacks)
            else:
                future.set_result(result)
        self.listen_if_idle()

    def listen_if_idle(self) -> None:
        """After a read or write that left nothing registered but errors:
        the face's ``listen_for_close`` (Tornado's
        ``_maybe_add_error_listener``), which watches for the peer closing."""
        state = self.state
        if state is None or state == _ERROR:
            self.calls.listen_for_close(self.face)

    def on_read_done(self, future: Any) -> None:
        """The done callback of a plain read Future (see `started`), on the
        loop's next iteration: if the Future was cancelled, the stream
        closes (unless `complete` or a new read saw it first)."""
        if future.cancelled():
            self.on_read_cancelled(future)

    def on_read_cancelled(self, future: Any) -> None:
        """The pending read's Future was cancelled: the stream closes."""
        if self.read_future is future and not self.io.closed:
            self.read_future = None
            # Drop what was read ahead too: it belongs to the abandoned read.
            self.io.reads.discard()
            cancelled = asyncio.CancelledError("a read was cancelled, so the stream was closed")
            self.calls.fail(self.face, cancelled, "cancel")

    def read_would_wait(self) -> bool:
        """True when a read started now would certainly wait for the event
        loop (see ``ReadIntoIOStream.read_would_wait``).  No syscall."""
        if self.io.reads.buffered_nbytes:
            return False
        state = self.state
        return self.io.policy.skip_receive(state is not None and state & _READ != 0)

    def readable_event(self) -> None:
        """A READ event: receive for the pending read (or read ahead).

        Where the loop may stop watching the socket after an error event
        (`drops_on_error`: it ran this callback once more, then dropped the
        socket), an event whose receive ended on a short ``recv`` has not
        shown that the socket is still watched: the socket's error (a peer
        that sent its last bytes and reset the connection) comes only from
        the next ``recv`` or send.  So a read left waiting receives again
        now, until EAGAIN, EOF or the error, and so does an event that only
        read ahead (no read waits, and none may come: the close callback
        must still run); after an event that completed a read, the next
        read does (the socket counts as ``unconfirmed``), unless a send came
        first, as a reply does.  Cost: one ``recv`` more (EAGAIN) per such
        event that leaves a read waiting or only reads ahead, or that no
        send follows before the next read; none on asyncio's own loops,
        which never drop a socket."""
        io = self.io
        policy = io.policy
        policy.confirmed()  # (this event shows the socket is watched)
        completed = False
        while True:
            try:
                result = io.receive()
            except UnsatisfiableReadError:
                raise  # the event handler's policy
            except CoreFailure as e:
                self.calls.fail(self.face, e.error, e.where)
                return
            except Exception as e:
                self.calls.fail(self.face, e, "event")
                return
            if result is not PENDING:
                if result is EOF:
                    self.face.close(False)  # the pending read ends
                    return
                self.complete(result)
                completed = True
            if not (self.drops_on_error and policy.ended_short()) or io.closed:
                break
            if completed:  # its waiter reads next, or sends: that confirms
                policy.unconfirm()
                break
        if result is PENDING and self.read_future is not None and not io.closed:
            try:
                left = io.park()
            except CoreFailure as e:
                self.calls.fail(self.face, e.error, e.where)
                return
            if left:
                self.calls.add_io_state(self.face, _WRITE)

    def read_ready(self) -> None:
        """The READ callback that the asyncio loop calls directly (see
        ``ReadIntoIOStream._read_ready``)."""
        face = self.face
        io = self.io
        calls = self.calls
        if self.in_events or io.closed or self.connecting:
            calls.dispatch(face, face.socket, _READ)
            return
        self.in_events = True
        try:
            io.policy.data_ready()
            if calls.plain_events:
                self.readable_event()
            else:
                calls.readable(face)
            if not io.closed and self.read_future is None and io.reads.buffered_nbytes >= io.reads.read_chunk_size:
                calls.update_state(face)  # the read-ahead is full: READ goes
        except Exception as e:
            if calls.fail(face, e, "events"):
                raise
        finally:
            self.end_events()

    def end_events(self) -> None:
        """A readiness callback of the stream returns: the waiters of the
        read it completed (kept by `complete`) run now, in this loop turn."""
        self.in_events = False
        woken = self.woken
        if woken is not None:
            self.woken = None
            run_callbacks(woken[0], woken[1], self.loop)

    # -- writes ----------------------------------------------------------------

    def write_future(self, buffers: Any) -> Any:
        """The face's ``writelines``: see `ReadIntoIOStream.writelines`."""
        io = self.io
        if io.closed:
            raise StreamClosedError(real_error=self.face.error)
        connecting = self.connecting
        status = io.writelines(buffers, connecting, self.max_write_nbytes)
        if status <= CORKED:
            # Sent at once, or corked: the loop's one resolved Future.
            if status:
                self.loop.call_soon(self.calls.uncork, self.face)
            self.listen_if_idle()
            return self.shared.resolved
        future: Any = Future(loop=self.loop)
        futures = self.write_futures
        if futures is None:
            futures = self.write_futures = deque()
        futures.append((io.write_index, future))
        if not connecting:
            if status == SEND:
                if self.calls.plain_events:
                    self.writable_event()
                else:
                    self.calls.writable(self.face)
            if io.write_buffer:
                self.calls.add_io_state(self.face, _WRITE)
            self.calls.listen_for_close(self.face)
        return future

    def writable_event(self) -> None:
        """A WRITE event (or a write to send now): send what is queued, then
        resolve the writes whose bytes all left.  A failed send closes the
        stream (the face's error policy)."""
        try:
            self.io.send_queued()
        except CoreFailure as e:
            self.calls.fail(self.face, e.error, e.where)
        done_index = self.io.done_index
        futures = self.write_futures
        if futures is None:
            return
        while futures and futures[0][0] <= done_index:
            future_set_result_unless_cancelled(futures.popleft()[1], None)
        if not futures:
            self.write_futures = None  # no write waits: no deque kept

    def uncork(self) -> bool:
        """Send what the cork holds; True if bytes are left queued (the face
        waits for WRITE).  A failed send closes the stream."""
        try:
            return self.io.uncork()
        except CoreFailure as e:
            self.calls.fail(self.face, e.error, e.where)
            return False
