"""Lower bounds, not products.

Two are the leanest streams that do the per-message work ours does, served
by the same ``readinto`` benchmark code (``read_into`` the 16-byte head,
then each frame; one ``writelines``):

* ``bound-floor``: a readiness-callback stream with no Tornado: the loop's
  ``add_reader`` calls it, one ``recv_into`` per event into a read-ahead
  buffer (a frame missing 64 KiB or more straight into its own buffer), a
  Future per read that waits, ``sendmsg`` for writes.
* ``bound-tornado``: the same stream dispatched as a Tornado stream is
  (``IOLoop.add_handler``), doing the other per-message duties of
  `ReadIntoIOStream`'s default settings: the readable hint and the "socket
  proved empty" timestamp (restarted at each write, as ours), the busy-poll
  policy (the real `BusyPoll`), the GIL-stall checks around ``recv`` and
  ``sendmsg`` (two ``perf_counter`` reads each) and the received-bytes
  count.  It leaves out the cork test, the event handler's connect
  test and the error listener.

Neither has limits, a cancellation policy, other read modes or error
handling beyond closing; a real stream needs those, so what these cost per
message bounds from below what any stream with that contract costs.

The third has no stream and no coroutine at all:

* ``bound-raw``: the loop's ``add_reader`` calls a function that receives
  what arrived into one buffer and sends it straight back (``recv_into``,
  ``send``), with no parsing and no Future.  What is left is the event
  loop's own turn and the two syscalls: the floor under any echo on that
  loop, the ``BufferedProtocol`` anchor's included.

``python -m benchmarks.opcodes --impl bound-floor,bound-tornado,bound-raw,asyncio-streams,readinto``
counts their bytecodes; ``benchmarks.load`` times them.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence
from time import perf_counter
from typing import Any

from tornado.ioloop import IOLoop
from tornado.iostream import StreamClosedError

from tornado_readinto.core import _gilheld
from tornado_readinto.core._streamcore import _total_nbytes
from tornado_readinto.core.busypoll import BUSY_POLL_BUDGET_S, BusyPoll, spinner_for
from tornado_readinto.face import iostream as _iostream

from ._common import U64
from ._protocol import AsyncioProtocol
from ._tornado import ReadInto

#: The read-ahead buffer (a frame that does not fit is received in place).
READ_AHEAD_NBYTES = 256 << 10
#: A pending read missing this many bytes or more receives into its own buffer.
DIRECT_NBYTES = 64 << 10
#: Ours: how long a recv that found the socket empty counts as proof.
DRAINED_VALID_S = _iostream.DRAINED_VALID_S


class FloorStream:
    """See the module docstring: ``read_into`` and ``writelines`` on a
    non-blocking socket, from the loop's readiness callback."""

    def __init__(self, sock: socket.socket, **_: Any) -> None:
        self._sock = sock
        self._fd = sock.fileno()
        self._loop = asyncio.get_running_loop()
        self._buf = bytearray(READ_AHEAD_NBYTES)
        self._view = memoryview(self._buf)
        self._start = self._end = 0
        self._target: memoryview | None = None
        self._filled = 0
        self._future: asyncio.Future[int] | None = None
        self._sent: asyncio.Future[None] | None = None  # shared by writes sent at once
        self._closed = False
        self._paused = False  # full read-ahead, no read pending: not watching
        self._sending: asyncio.Future[None] | None = None  # the rest of a partial send
        self._watch()

    # -- what the bound-tornado subclass changes --------------------------------

    def _watch(self) -> None:
        self._loop.add_reader(self._fd, self._readable)

    def _unwatch(self) -> None:
        self._loop.remove_reader(self._fd)

    def _recv(self, view: memoryview) -> int | None:
        try:
            return self._sock.recv_into(view)
        except BlockingIOError:
            return None

    def _park(self) -> None:
        """A read waits for the loop."""

    # -- the stream ------------------------------------------------------------

    def _readable(self) -> None:
        target = self._target
        filled = self._filled
        if target is not None and len(target) - filled >= DIRECT_NBYTES:
            try:
                n = self._recv(target[filled:])
            except OSError:
                n = 0
            if n:
                self._filled = filled = filled + n
                if filled == len(target):
                    self._finish(filled)
            elif n == 0:
                self.close()
            return
        start, end = self._start, self._end
        if start == end:
            self._start = self._end = start = end = 0
        elif end == len(self._buf):  # compact
            self._view[: end - start] = self._view[start:end]
            self._start, self._end = start, end = 0, end - start
            if end == len(self._buf):  # full and idle (target None)
                self._unwatch()  # (level-triggered: else called again at once)
                self._paused = True
                return
        try:
            n = self._recv(self._view[end:])
        except OSError:
            n = 0
        if n:
            self._end = end = end + n
            if target is not None:
                take = len(target) - filled
                if take > end - start:
                    take = end - start
                target[filled : filled + take] = self._view[start : start + take]
                self._start = start + take
                self._filled = filled = filled + take
                if filled == len(target):
                    self._finish(filled)
        elif n == 0:
            self.close()

    def _finish(self, nbytes: int) -> None:
        future = self._future
        assert future is not None and self._target is not None
        self._target.release()
        self._target = self._future = None
        future.set_result(nbytes)

    def read_into(self, buf: Any) -> asyncio.Future[int]:
        """Fill ``buf`` (a writable buffer); resolve to its size."""
        view = memoryview(buf)
        if type(buf) is not bytearray:
            view = view.cast("B")
        want = len(view)
        start = self._start
        take = self._end - start
        if take > want:
            take = want
        future: asyncio.Future[int] = self._loop.create_future()
        if take == want:
            view[:] = self._view[start : start + take]
            self._start = start + take
            view.release()
            future.set_result(want)
            return future
        if self._closed:
            raise StreamClosedError()
        if take:
            view[:take] = self._view[start : start + take]
            self._start = start + take
        self._target, self._filled, self._future = view, take, future
        if self._paused:
            self._paused = False
            self._watch()
        self._park()
        return future

    def writelines(self, buffers: Sequence[Any]) -> asyncio.Future[None]:
        """One ``sendmsg``; what the kernel does not take goes out with
        ``loop.sock_sendall``, and later writes queue behind it."""
        sending = self._sending
        if sending is not None and not sending.done():
            return self._send_after(sending, b"".join(map(bytes, buffers)))
        total = _total_nbytes(buffers)  # as ours
        sent = self._send(buffers)
        if sent == total:
            future = self._sent
            if future is None:
                future = self._sent = self._loop.create_future()
                future.set_result(None)
            return future
        return self._send_after(None, b"".join(map(bytes, buffers))[sent:])

    def _send(self, buffers: Sequence[Any]) -> int:
        try:
            return self._sock.sendmsg(buffers)
        except BlockingIOError:
            return 0

    def _send_after(self, before: asyncio.Future[None] | None, data: bytes) -> asyncio.Future[None]:
        async def send() -> None:
            if before is not None:
                await before
            await self._loop.sock_sendall(self._sock, data)

        self._sending = future = asyncio.ensure_future(send())
        return future

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._unwatch()
        self._sock.close()
        future = self._future
        if future is not None and not future.done():
            self._future = None
            future.set_exception(StreamClosedError())


class TornadoBoundStream(FloorStream):
    """`FloorStream` dispatched and bookkept as `ReadIntoIOStream` is (see
    the module docstring)."""

    def __init__(self, sock: socket.socket, **_: Any) -> None:
        self._io_loop = IOLoop.current()
        self._readable_hint = False
        self._drained_at = 0.0
        self.nbytes_received = 0
        super().__init__(sock)
        self._busy_poll = BusyPoll(BUSY_POLL_BUDGET_S, spinner_for(self._loop))

    def _watch(self) -> None:
        self._io_loop.add_handler(self._fd, self._events, IOLoop.READ)

    def _unwatch(self) -> None:
        self._io_loop.remove_handler(self._fd)

    def _events(self, fd: int, events: int) -> None:
        if self._closed:
            return
        self._readable_hint = True
        poll = self._busy_poll
        if poll.parked_at:
            poll.data_came(perf_counter())
        self._readable()

    def _recv(self, view: memoryview) -> int | None:
        start = perf_counter()
        received = super()._recv(view)
        end = perf_counter()
        if end - start > _gilheld.MIN_STALL_S + (received or 0) * _gilheld.COPY_S_PER_BYTE:  # as the core
            if _gilheld.stalled(end - start, received or 0):
                _gilheld.note_stall(end)
        if received is None or received < len(view):
            self._readable_hint = False
            self._drained_at = end
        if received:
            self.nbytes_received += received
        return received

    def _send(self, buffers: Sequence[Any]) -> int:
        if not self._readable_hint:
            self._drained_at = perf_counter()  # as ours: the peer answers after this write
        start = perf_counter()
        sent = super()._send(buffers)
        end = perf_counter()
        if end - start > _gilheld.MIN_STALL_S + sent * _gilheld.COPY_S_PER_BYTE:  # as the core
            if _gilheld.stalled(end - start, sent):
                _gilheld.note_stall(end)
        return sent

    def _park(self) -> None:
        now = perf_counter()
        if self._readable_hint or now - self._drained_at >= DRAINED_VALID_S:
            self._readable()  # the socket may have data: try it now
            if self._future is None:
                return
        if now >= _gilheld.held_until:
            self._busy_poll.parked(now)


class BoundFloor(ReadInto):
    """``readinto``'s benchmark code on `FloorStream`."""

    stream_class = FloorStream  # type: ignore[assignment]
    supports_tls = False


class BoundTornado(ReadInto):
    """``readinto``'s benchmark code on `TornadoBoundStream`."""

    stream_class = TornadoBoundStream  # type: ignore[assignment]
    supports_tls = False


#: `RawEcho` keeps this much of the first message to learn its size (the
#: count and up to 64 lengths).
_RAW_HEAD_NBYTES = U64.size * 65


class RawEcho(AsyncioProtocol):
    """``bound-raw`` (see the module docstring).  Its client side is the
    ``BufferedProtocol`` anchor's."""

    supports_tls = False

    @classmethod
    async def serve_connection(cls, sock: socket.socket, ssl_context: Any = None) -> int:
        """Echo bytes until the peer closes; return the messages echoed,
        counted by bytes from the first message's header (count, then
        lengths).  A send the socket does not take whole stops reading
        until WRITE events have sent the rest."""
        loop = asyncio.get_running_loop()
        closed: asyncio.Future[None] = loop.create_future()
        view = memoryview(bytearray(READ_AHEAD_NBYTES))
        fd = sock.fileno()
        head = bytearray()  # the first message's header, until its size is known
        state = {"echoed": 0, "msize": 0}
        pending: list[memoryview] = []  # the unsent rest of the last receive

        def size_of_first(data: memoryview) -> None:
            head.extend(data[: _RAW_HEAD_NBYTES - len(head)])
            if len(head) >= U64.size:
                nframes = U64.unpack_from(head)[0]
                end = U64.size * (1 + nframes)
                if len(head) >= end:
                    state["msize"] = end + sum(U64.unpack_from(head, U64.size * (1 + i))[0] for i in range(nframes))

        def finish(error: BaseException | None = None) -> None:
            loop.remove_reader(fd)
            loop.remove_writer(fd)
            if not closed.done():
                if error is None:
                    closed.set_result(None)
                else:
                    closed.set_exception(error)

        def send(data: memoryview) -> None:
            try:
                sent = sock.send(data)
            except BlockingIOError:
                sent = 0
            if sent < len(data):
                pending.append(data[sent:])
                loop.remove_reader(fd)
                loop.add_writer(fd, writable)

        def writable() -> None:
            try:
                rest = pending.pop()
                send(rest)
                if not pending:
                    loop.remove_writer(fd)
                    loop.add_reader(fd, readable)
            except OSError as e:
                finish(e)

        def readable() -> None:
            try:
                n = sock.recv_into(view)
            except BlockingIOError:
                return
            except OSError:
                n = 0
            if not n:
                finish()
                return
            if not state["msize"]:
                size_of_first(view[:n])
            state["echoed"] += n
            try:
                send(view[:n])
            except OSError as e:
                finish(e)

        loop.add_reader(fd, readable)
        try:
            await closed
        finally:
            finish()
            sock.close()
        return state["echoed"] // state["msize"] if state["msize"] else 0
