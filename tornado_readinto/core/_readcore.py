# cython: annotation_typing=False, warn.unreachable=False
"""`ReadCore`: the read state machine of a stream, with no socket and no loop.

Strategy:

* The core has the shape of an ``asyncio.BufferedProtocol``.  An engine asks
  it where the next received bytes go (`ReadCore.get_buffer`), receives into
  that view (``sock.recv_into(view)`` from a readable callback), and says
  how many arrived
  (`ReadCore.buffer_updated`), which completes the pending read when it can.
  `ReadCore.eof_received` and `ReadCore.connection_lost` end the stream.
* Starting a read (`ReadCore.read_into`, `ReadCore.read_bytes`,
  `ReadCore.read_until`, `ReadCore.read_until_regex`,
  `ReadCore.read_until_close`, `ReadCore.read_message`) returns its result at
  once when the bytes already read ahead satisfy it (no `get_buffer`, no
  syscall), else `PENDING`; at most one read is pending.  Every method that
  can complete a read returns its result or `PENDING`, so the engine resolves
  one Future per read and never asks twice.
* The core holds read-ahead storage only while bytes are read ahead: valid
  bytes live in ``_ra[_start : _start + buffered_nbytes]``, and the moment
  the last of them is consumed (or a receive brought none) the storage goes
  back to the process's `ReadAheadPool` of its size, from which the next
  receive takes it again (the same ``bytearray``, in C, when nothing else
  took it in between).  An idle stream holds none (`storage_nbytes` is 0).
  The storage grows only for a pending read that needs more room (a big
  ``read_bytes``, a long ``read_until`` line); storage of another size than
  ``read_chunk_size`` is freed, never pooled.
* Storage goes back to the pool only when no view of it is alive: every
  view the core lent out (`get_buffer`) or made is released first, and a
  view that is still exported or referenced elsewhere keeps its storage out
  of the pool for good (it is freed when the last holder lets go), so that
  no buffer is ever written by one stream while another's view can see it.
* ``read_into`` copies what is already read ahead into the caller's buffer
  (bounded: at most one read-ahead buffer), then hands out the *unfilled
  tail of the caller's buffer* while `DIRECT_READ_MIN_NBYTES` or more are
  missing, so large frames are received in place and never copied in user
  space; a smaller remainder goes through the read-ahead buffer, where one
  receive may also bring the next message.  ``read_message`` does the same
  with the buffers a `MessageReader` hands out.
* A ``read_until`` search resumes where the last one stopped: a line that
  arrives in many small pieces is scanned once, not once per piece.
* Errors (`StreamBufferFullError`, ``UnsatisfiableReadError``, a reader's
  `FramingError`) leave the pending read in place: the owner closes the
  stream, and `connection_lost` turns the error into the exception the read
  fails with, exactly as Tornado's ``IOStream`` does.

The limits are Tornado's: ``max_buffer_size`` bounds the read-ahead bytes
(never a ``read_into`` buffer), ``read_chunk_size`` sizes the read-ahead
buffer and bounds what is read ahead while no read is pending.
"""

from __future__ import annotations

import enum
import sys
from re import Pattern
from typing import TYPE_CHECKING, Any, Final

from ..errors import (
    BufferBusyError,
    IncompleteReadError,
    ReadIntoError,
    StreamBufferFullError,
    StreamClosedError,
    UnsatisfiableReadError,
)
from ..wire.framing import _ANY_NBYTES, NEED_DATA, FrameReader, MessageReader

if TYPE_CHECKING:
    from .. import _cyshim as cython
else:
    try:
        import cython  # resolved by Cython when compiled
    except ModuleNotFoundError:
        from .. import _cyshim as cython
if not cython.compiled:  # (compiled: their C twins, cimported in _readcore.pxd)
    from .._native import copy_into, reusable_view

__all__ = [
    "ReadCore",
    "ReadAheadPool",
    "ReadOptions",
    "read_ahead_pool",
    "read_options",
    "PENDING",
    "DIRECT_READ_MIN_NBYTES",
    "POOL_MAX_NBYTES",
    "SPARE_MAX_NBYTES",
]

#: A ``read_into`` whose missing bytes are at least this many is received
#: straight into the caller's buffer; a smaller remainder goes through the
#: read-ahead buffer (one receive can then also bring the next message).
#: 16 KiB = one TLS record, and a quarter of the 64 KiB default read chunk.
DIRECT_READ_MIN_NBYTES: Final = 16 * 1024  # bytes

#: The most bytes of free read-ahead storage the process keeps for reuse,
#: per buffer size (16 buffers of the default 64 KiB): what idle streams
#: cost in buffers, whatever their number, once a burst has passed.  A
#: buffer given back to a full pool is freed.
POOL_MAX_NBYTES: Final = 1024 * 1024  # bytes

#: The most bytes read ahead that `ReadCore.spare_storage` moves out of a
#: pool buffer into storage of their own size when the pool has run dry.
SPARE_MAX_NBYTES: Final = 16 * 1024  # bytes

#: Tornado's defaults (``BaseIOStream.__init__``).
DEFAULT_MAX_BUFFER_SIZE: Final = 104857600  # bytes (100 MB)
DEFAULT_READ_CHUNK_SIZE: Final = 64 * 1024  # bytes


class _Sentinel(enum.Enum):
    # An enum member is the sentinel idiom type checkers understand.
    PENDING = "PENDING"
    EOF = "EOF"

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__


#: Returned by the methods of `ReadCore` when the pending read is not
#: complete yet (compare with ``is``: a read's result may be falsy).
PENDING: Final = _Sentinel.PENDING

#: Returned by `tornado_readinto.core._streamcore.StreamCore.receive` when the
#: peer closed: the stream's owner closes it (which ends a pending read).
EOF: Final = _Sentinel.EOF

# Read modes (the pending read's kind).
_IDLE: Final = 0
_INTO: Final = 1
_BYTES: Final = 2
_UNTIL: Final = 3
_REGEX: Final = 4
_CLOSE: Final = 5
_MESSAGE: Final = 6

# A read_until's max_bytes of None: no limit.
_NO_LIMIT: Final = sys.maxsize


def _max_bytes(max_bytes: int | None) -> int:
    """A read_until's ``max_bytes`` as a C size: None (and any count past
    the largest) is `_NO_LIMIT`."""
    return _NO_LIMIT if max_bytes is None or max_bytes > _NO_LIMIT else max_bytes


# Handed out when nothing may be received (idle, read-ahead full).
_NO_ROOM: Final = memoryview(bytearray())


class _ForeignReader(FrameReader):
    """A `MessageReader` that is not a `FrameReader`, as one.

    The core holds its pending reader as a `FrameReader`, a C type in the
    compiled build, whose methods the core then calls in C.  Any other reader
    goes through this forwarder: one call more per call, and the reader's own
    results and errors.
    """

    __slots__ = ("reader",)

    def __init__(self, reader: MessageReader) -> None:
        # No FrameReader state of its own: the core calls only what is below.
        self.reader = reader

    @property
    def in_message(self) -> bool:
        return self.reader.in_message

    @property
    def expected_nbytes(self) -> int:
        return self.reader.expected_nbytes

    @property
    def received_nbytes(self) -> int:
        return self.reader.received_nbytes

    def describe_progress(self) -> str:
        return self.reader.describe_progress()

    def next_nbytes(self) -> int:
        return _ANY_NBYTES  # (get_buffer says: a MessageReader has no next_nbytes)

    def get_buffer(self) -> memoryview:
        return self.reader.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.reader.buffer_updated(nbytes)

    def feed(self, data: Any) -> int:
        return self.reader.feed(data)

    def next_message(self) -> Any:
        return self.reader.next_message()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {self.reader!r}>"


class ReadAheadPool:
    """Free read-ahead storage of one size, shared by the streams of the
    process: whole ``bytearray`` buffers of `buffer_nbytes` bytes, each kept
    with the one ``memoryview`` of it that its core slices, most recently
    given back last (so the next take gets it again, still warm).

    A core takes a buffer when a receive needs storage and gives it back
    once nothing is read ahead (see `ReadCore.storage_nbytes`): O(1), a list
    pop and append (C calls in the compiled build).  At most `max_buffers`
    are kept; the rest are freed.  Thread-safe where the GIL is held: each
    take and give is one list operation.

    .. versionadded:: 0.1
    """

    __slots__ = ("buffer_nbytes", "max_buffers", "misses", "_free")

    def __init__(self, buffer_nbytes: int, max_buffers: int) -> None:
        #: The size of every buffer of this pool.
        self.buffer_nbytes = buffer_nbytes
        #: The most free buffers kept.
        self.max_buffers = max_buffers
        #: Takes that found no free buffer (a new one was made): from the
        #: second on, streams hold several buffers at once, and a core
        #: gives its buffer back early where it can (`ReadCore.spare_storage`).
        self.misses = 0
        # memoryviews over whole bytearrays of buffer_nbytes bytes
        self._free: list[memoryview] = []

    @property
    def free_nbytes(self) -> int:
        """Bytes of the free buffers the pool keeps."""
        return len(self._free) * self.buffer_nbytes

    def clear(self) -> None:
        """Free every buffer the pool keeps."""
        del self._free[:]

    def has_free(self) -> bool:
        """True if a take now would get a kept buffer."""
        return bool(self._free)

    def take(self) -> memoryview | None:
        """The view of the buffer given back last, which leaves the pool; or
        None, counted in `misses`, if none is kept.  O(1)."""
        free = self._free
        if free:
            try:
                return free.pop()
            except IndexError:  # (the pure build: another thread took the last one)
                pass
        self.misses += 1
        return None

    def give_back(self, ra: bytearray, view: memoryview) -> bool:
        """Keep ``ra`` for the next `take` if it is of the pool's size, fewer
        than `max_buffers` are kept and no view of it is alive elsewhere;
        True if it was kept.  ``view``, its owner's one view of it, is then
        released (a holder of that view object finds it released); when
        ``ra`` is not kept, ``view`` is the owner's to release.  O(1): a
        length test, a release and a list append."""
        if len(ra) != self.buffer_nbytes or len(self._free) >= self.max_buffers:
            return False
        kept = reusable_view(ra, view)
        if kept is None:
            return False
        self._free.append(kept)
        return True

    def __repr__(self) -> str:
        return f"<ReadAheadPool of {len(self._free)} free buffers of {self.buffer_nbytes} bytes>"


# The pools of the process, by buffer size.
_POOLS: dict = {}


def read_ahead_pool(buffer_nbytes: int) -> ReadAheadPool:
    """The process's `ReadAheadPool` of buffers of ``buffer_nbytes`` bytes
    (made on first use; at most `POOL_MAX_NBYTES` bytes of free buffers)."""
    pool = _POOLS.get(buffer_nbytes)
    if pool is None:
        pool = _POOLS.setdefault(
            buffer_nbytes, ReadAheadPool(buffer_nbytes, max(1, POOL_MAX_NBYTES // max(1, buffer_nbytes)))
        )
    return pool  # type: ignore[no-any-return]


class ReadOptions:
    """The settings a `ReadCore` reads with, settled when it is made, and the
    `ReadAheadPool` of their read-ahead size.  Immutable: a core whose
    settings change gets another (`read_options`), and cores made with the
    same settings share one.

    .. versionadded:: 0.1
    """

    __slots__ = ("read_chunk_size", "max_buffer_size", "direct_min_nbytes", "pool")

    def __init__(self, read_chunk_size: int, max_buffer_size: int, direct_min_nbytes: int) -> None:
        if read_chunk_size < 2:
            raise ValueError(f"read_chunk_size must be >= 2 bytes, got {read_chunk_size}")
        if direct_min_nbytes < 1:
            raise ValueError(f"direct_min_nbytes must be >= 1 byte, got {direct_min_nbytes}")
        #: The read-ahead buffer's usual size, and the most bytes read ahead
        #: while no read is pending (Tornado's ``read_chunk_size``).
        self.read_chunk_size = read_chunk_size
        #: The most bytes read ahead (Tornado's ``max_buffer_size``; a
        #: ``read_into`` target does not count).  Any number: dask passes a float.
        self.max_buffer_size = max_buffer_size
        #: Missing bytes from which a pending read receives in place.
        self.direct_min_nbytes = direct_min_nbytes
        #: Where read-ahead storage of ``read_chunk_size`` bytes comes from
        #: and goes back to.
        self.pool = read_ahead_pool(read_chunk_size)

    def __repr__(self) -> str:
        return (
            f"ReadOptions(read_chunk_size={self.read_chunk_size}, max_buffer_size={self.max_buffer_size}, "
            f"direct_min_nbytes={self.direct_min_nbytes})"
        )


# The options in use, by their settings (a process uses a few: Tornado's
# defaults, dask's).  Bounded: past _OPTIONS_MAX, made afresh each time.
_OPTIONS: dict = {}
_OPTIONS_MAX: Final = 64


def read_options(read_chunk_size: int, max_buffer_size: int, direct_min_nbytes: int) -> ReadOptions:
    """The `ReadOptions` of these settings: the one already in use when
    there is one (a dict lookup), else a new one.

    :raises ValueError: ``read_chunk_size`` < 2 or ``direct_min_nbytes`` < 1.
    """
    key = (read_chunk_size, max_buffer_size, direct_min_nbytes)
    options = _OPTIONS.get(key)
    if options is None:
        options = ReadOptions(read_chunk_size, max_buffer_size, direct_min_nbytes)
        if len(_OPTIONS) < _OPTIONS_MAX:
            _OPTIONS[key] = options
    return options  # type: ignore[no-any-return]


def _new_bytearray(nbytes: int) -> bytearray:
    """A zeroed bytearray of ``nbytes`` bytes with one byte of spare capacity
    (so that the pure build's test of `reusable_view` costs no reallocation)."""
    ra = bytearray(nbytes + 1)
    del ra[-1]
    return ra


class ReadCore:
    """The read side of one stream: its read-ahead buffer and its one pending
    read, with no socket and no event loop.

    Feeding it (what an engine does)::

        view = core.get_buffer()
        nbytes = sock.recv_into(view)      # 0 would mean EOF
        result = core.buffer_updated(nbytes)
        if result is not PENDING:
            future.set_result(result)

    A view from `get_buffer` is valid until the next call on the core.

    Not thread-safe: one core belongs to one stream.

    :arg read_chunk_size: the read-ahead buffer's usual size, and the most
        bytes read ahead while no read is pending (Tornado's
        ``read_chunk_size``).
    :arg max_buffer_size: the most bytes the read-ahead buffer may hold
        (Tornado's ``max_buffer_size``); a ``read_into`` target does not
        count.
    :arg direct_min_nbytes: a pending read missing at least this many bytes
        has them received straight into its own buffer; a smaller remainder
        goes through the read-ahead buffer.

    .. versionadded:: 0.1
    """

    __slots__ = (
        "options",
        "buffered_nbytes",
        "eof",
        "_ra",
        "_ra_view",
        "_start",
        "_mode",
        "_target",
        "_filled",
        "_nbytes",
        "_partial",
        "_pattern",
        "_scanned",
        "_reader",
        "_lent",
        "lent_in_place",
    )

    def __init__(
        self,
        read_chunk_size: int = DEFAULT_READ_CHUNK_SIZE,
        max_buffer_size: int = DEFAULT_MAX_BUFFER_SIZE,
        direct_min_nbytes: int = DIRECT_READ_MIN_NBYTES,
    ) -> None:
        #: The settings the reads run with (see the class docstring): one
        #: immutable object, shared by the cores made with the same ones.
        self.options = read_options(read_chunk_size, max_buffer_size, direct_min_nbytes)
        #: Bytes read ahead and not consumed yet.
        self.buffered_nbytes = 0
        #: True once `eof_received` was called: no more bytes will come.
        self.eof = False
        self._ra: bytearray | None = None  # read-ahead storage
        self._ra_view: memoryview | None = None  # long-lived view of _ra
        self._start = 0  # first valid byte in _ra
        self._mode = _IDLE
        self._target: memoryview | None = None  # read_into's buffer ('B', 1-D)
        self._filled = 0  # bytes of _target filled
        # read_into / read_bytes: bytes wanted; read_until(_regex): the most
        # bytes before the end of the match (sys.maxsize: no limit).
        self._nbytes = 0
        self._partial = False
        # read_until's delimiter (bytes) or read_until_regex's compiled pattern.
        self._pattern: Any = None
        # Buffered bytes already searched in vain by the pending read_until.
        self._scanned = 0
        # The pending read_message's reader (another MessageReader than a
        # FrameReader is held as a _ForeignReader).
        self._reader: FrameReader | None = None
        # The view handed out by the last get_buffer (released by the next
        # call).
        self._lent: memoryview | None = None
        #: Whether the view the last `get_buffer` handed out is the pending
        #: read's own buffer (a ``read_into`` target, a reader's frame): the
        #: bytes received into it are received in place, never copied.
        self.lent_in_place = False

    # -- settings ----------------------------------------------------------------

    @property
    def read_chunk_size(self) -> int:
        """The read-ahead buffer's usual size; may be changed between reads."""
        return self.options.read_chunk_size

    @read_chunk_size.setter
    def read_chunk_size(self, nbytes: int) -> None:
        options = self.options
        self.options = read_options(nbytes, options.max_buffer_size, options.direct_min_nbytes)

    @property
    def max_buffer_size(self) -> int:
        """The most bytes read ahead; may be changed between reads."""
        return self.options.max_buffer_size  # type: ignore[no-any-return]

    @max_buffer_size.setter
    def max_buffer_size(self, nbytes: int) -> None:
        options = self.options
        self.options = read_options(options.read_chunk_size, nbytes, options.direct_min_nbytes)

    @property
    def direct_min_nbytes(self) -> int:
        """Missing bytes from which a read receives in place."""
        return self.options.direct_min_nbytes

    # -- state -----------------------------------------------------------------

    @property
    def reading(self) -> bool:
        """True while a read is pending."""
        return self._mode != _IDLE

    @property
    def storage_nbytes(self) -> int:
        """Bytes of receive storage this core holds: its read-ahead buffer's
        size while bytes are read ahead (or a receive is under way), else 0.
        A ``read_into`` target or a reader's frame is the caller's, never
        counted here."""
        ra = self._ra
        return 0 if ra is None else len(ra)

    def peek_buffered(self) -> bytes:
        """A copy of the bytes read ahead and not consumed yet."""
        if not self.buffered_nbytes:
            return b""
        assert self._ra_view is not None
        start = self._start
        return self._ra_view[start : start + self.buffered_nbytes].tobytes()

    def replace_buffered(self, data: Any) -> None:
        """Make ``data`` (bytes-like) the bytes read ahead, dropping any that
        were.  For a stream's owner that hands bytes back (Tornado code that
        assigns ``_read_buffer``).

        :raises BufferBusyError: a read is pending.
        """
        if self._mode != _IDLE:
            raise BufferBusyError("cannot replace the read-ahead bytes while a read is pending")
        with memoryview(data) as view, view.cast("B") as raw:
            nbytes = raw.nbytes
            self.buffered_nbytes = self._start = 0
            if not nbytes:
                self._release_read_ahead()
                return
            self._reserve(nbytes)
            assert self._ra_view is not None
            self._ra_view[:nbytes] = raw
            self.buffered_nbytes = nbytes

    def discard(self) -> None:
        """Drop the pending read (without completing it) and every byte read
        ahead: for a stream that is closing after a cancelled read."""
        self._end_read()
        self.buffered_nbytes = self._start = 0
        self._release_read_ahead()

    # -- starting reads ----------------------------------------------------------

    def read_into(self, view: memoryview, partial: bool = False) -> Any:
        """Start a read that fills ``view``; return the number of bytes read
        if the bytes read ahead complete it, else `PENDING`.

        Bytes read ahead are copied into ``view`` first (one copy); the rest
        land through `get_buffer`: straight into ``view``'s unfilled tail while
        ``direct_min_nbytes`` (`DIRECT_READ_MIN_NBYTES`) or more are missing, through the read-ahead
        buffer for a smaller remainder.  Never counted against
        ``max_buffer_size``; never writes past ``view``.

        :arg view: a writable, 1-D, ``'B'``-format memoryview.  The core takes
            it over and releases it when the read ends.
        :arg partial: complete as soon as at least one byte was read.
        :raises BufferBusyError: a read is pending.
        """
        if self._mode != _IDLE:
            raise BufferBusyError("a read is already in progress on this stream")
        nbytes = len(view)  # (its nbytes: the view is 1-D 'B')
        size = self.buffered_nbytes
        # All of it read ahead (a header, a small frame of a buffered
        # message) is the shortest path: one copy, then done below.
        take = size if size < nbytes else nbytes
        if take:
            self._take_into(view, 0, take)
        if take == nbytes or (partial and take):
            view.release()
            return take
        self._mode = _INTO
        self._target = view
        self._filled = take
        self._nbytes = nbytes
        self._partial = partial
        return PENDING

    def fill(self, buf: bytearray) -> bool:
        """``read_into(memoryview(buf))`` for the case where the bytes read
        ahead fill all of ``buf``, a non-empty ``bytearray``, and no read is
        pending: copy them in and return True, with no ``memoryview`` of
        ``buf`` made (the face's shortest path); else return False and change
        nothing.  Cost: one copy."""
        nbytes = len(buf)
        if self._mode != _IDLE or not self.buffered_nbytes >= nbytes > 0:
            return False
        self._take_into(buf, 0, nbytes)
        return True

    def read_bytes(self, num_bytes: int, partial: bool = False) -> Any:
        """Start a read of ``num_bytes`` bytes (with ``partial``: of 1 to
        ``num_bytes``); return them as ``bytes`` if the bytes read ahead
        complete it, else `PENDING`.

        The result is copied once out of the read-ahead buffer, which grows to
        hold it (never past ``max_buffer_size + 1`` bytes).

        :raises ValueError: ``num_bytes`` is negative.
        :raises BufferBusyError: a read is pending.
        """
        if num_bytes < 0:
            raise ValueError(f"read_bytes needs num_bytes >= 0, got {num_bytes}")
        if self._mode != _IDLE:
            raise BufferBusyError("a read is already in progress on this stream")
        size = self.buffered_nbytes
        if size >= num_bytes or (partial and size):
            return self._take(num_bytes if num_bytes < size else size)
        self._mode = _BYTES
        self._nbytes = num_bytes
        self._partial = partial
        return PENDING

    def read_until(self, delimiter: bytes, max_bytes: int | None = None) -> Any:
        """Start a read up to and including ``delimiter``; return those bytes
        if they are read ahead already, else `PENDING`.

        Each search resumes where the last one stopped.

        :raises UnsatisfiableReadError: more than ``max_bytes`` bytes come
            before the end of the delimiter (the read stays pending: close
            the stream).
        :raises BufferBusyError: a read is pending.
        """
        self._start_search(_UNTIL, delimiter, max_bytes)
        if self.buffered_nbytes:
            return self._find_delimiter()
        return PENDING

    def read_until_regex(self, regex: Pattern[bytes], max_bytes: int | None = None) -> Any:
        """Start a read up to the end of the first match of ``regex``; return
        those bytes if they are read ahead already, else `PENDING`.

        A regular expression cannot resume a search: a search covers all the
        bytes read ahead.  Within one receive loop of the engine
        (``buffer_updated(n, more=True)``) it runs only once those bytes have
        doubled since the last search, and `search` runs the one put off
        when the loop ends: O(log n) searches per loop, as Tornado does.

        :arg regex: a compiled ``bytes`` pattern.
        :raises UnsatisfiableReadError: more than ``max_bytes`` bytes come
            before the end of a match (the read stays pending: close the
            stream).
        :raises BufferBusyError: a read is pending.
        """
        self._start_search(_REGEX, regex, max_bytes)
        if self.buffered_nbytes:
            return self._find_regex()
        return PENDING

    def _start_search(self, mode: int, pattern: Any, max_bytes: int | None) -> None:
        """Make the read pending a search for ``pattern`` (``mode`` `_UNTIL`
        or `_REGEX`), of nothing searched yet.

        :raises BufferBusyError: a read is pending.
        """
        if self._mode != _IDLE:
            raise BufferBusyError("a read is already in progress on this stream")
        self._mode = mode
        self._pattern = pattern
        self._nbytes = _max_bytes(max_bytes)
        self._scanned = 0  # bytes read ahead at the last search that failed

    def read_until_close(self) -> Any:
        """Start a read of everything until EOF; return it at once if
        `eof_received` was called already, else `PENDING` (the bytes are
        delivered by `eof_received`).

        :raises BufferBusyError: a read is pending.
        """
        if self._mode != _IDLE:
            raise BufferBusyError("a read is already in progress on this stream")
        if self.eof:
            return self._take(self.buffered_nbytes)
        self._mode = _CLOSE
        return PENDING

    def read_message(self, reader: MessageReader) -> Any:
        """Start reading one message with ``reader``; return what its
        ``next_message()`` returned if the bytes read ahead complete the
        message, else `PENDING`.

        Bytes read ahead are handed to ``reader.feed()`` (which copies them
        once and stops at the end of the message).  Then `get_buffer` hands
        out ``reader.get_buffer()`` while it is at least
        ``direct_min_nbytes`` long (a large frame), else the read-ahead
        buffer, whose bytes are fed on.

        :raises BufferBusyError: a read is pending.
        :raises Exception: what the reader raises (e.g. `FramingError`); the
            read stays pending: close the stream.
        """
        if self._mode != _IDLE:
            raise BufferBusyError("a read is already in progress on this stream")
        self._mode = _MESSAGE
        if type(reader) is not FrameReader and not isinstance(reader, FrameReader):  # (exact type first: no call)
            reader = _ForeignReader(reader)
        self._reader = reader
        if self.buffered_nbytes:
            return self._feed_reader(reader)
        return PENDING

    # -- the BufferedProtocol shape ----------------------------------------------

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Where the next received bytes go: a writable view, valid until the
        next call on the core.

        * a pending ``read_into`` missing ``direct_min_nbytes`` or more:
          the unfilled tail of its buffer (exactly the missing bytes);
        * a pending ``read_message`` whose reader asks for that many or more:
          the reader's own buffer;
        * otherwise the free tail of the read-ahead buffer, which is first
          made to have room for at least half a ``read_chunk_size`` (a pending
          ``read_bytes``: for all its missing bytes, up to one byte past
          ``max_buffer_size``).  While no read is pending, the view is bounded
          so that at most ``read_chunk_size`` bytes are read ahead, and empty
          when that many are: receive nothing then.

        Cost: one memoryview slice, none when the view is the whole
        read-ahead buffer (nothing read ahead: the usual case between
        messages); sometimes a compaction (one move of the bytes read ahead)
        or a new read-ahead buffer.

        :arg sizehint: ignored (the core knows how much it needs).
        :raises Exception: what a pending read's ``reader.get_buffer()``
            raises (close the stream).
        """
        if self._lent is not None:
            self._drop_lent()
        mode = self._mode
        options = self.options
        if mode == _INTO:
            if self._nbytes - self._filled >= options.direct_min_nbytes:
                view = self._target[self._filled :]  # type: ignore[index]
                self._lent = view
                self.lent_in_place = True
                return view
        elif mode == _MESSAGE:
            assert self._reader is not None
            # (no view made and nothing allocated for a stage that is too
            # small to receive in place: a header, a small frame)
            if self._reader.next_nbytes() >= options.direct_min_nbytes:
                view = self._reader.get_buffer()
                if len(view) >= options.direct_min_nbytes:
                    self._lent = view
                    self.lent_in_place = True
                    return view
                view.release()
        size = self.buffered_nbytes
        if mode == _IDLE:
            # Read ahead, but never past read_chunk_size bytes.
            room = options.read_chunk_size - size
            if room <= 0:
                self.lent_in_place = False
                return _NO_ROOM
            self._reserve(options.read_chunk_size // 2)
            ra = self._ra
            assert ra is not None and self._ra_view is not None
            end = self._start + size
            stop = end + room
            if end == 0 and stop >= len(ra):
                view = self._ra_view  # the whole buffer: no slice made
            else:
                view = self._ra_view[end : stop if stop < len(ra) else len(ra)]
        else:
            if mode == _BYTES:
                # Room for the whole pending read, but never more than one
                # byte past max_buffer_size (enough to detect the overflow).
                want = min(self._nbytes, options.max_buffer_size + 1) - size
                half = options.read_chunk_size // 2
                self._reserve(want if want > half else half)
            else:
                half = options.read_chunk_size // 2
                ra = self._ra
                if ra is None or self._start + size + half > len(ra):  # else the room is there
                    self._reserve(half)
            assert self._ra_view is not None
            end = self._start + size
            view = self._ra_view if end == 0 else self._ra_view[end:]
        self._lent = view
        self.lent_in_place = False
        return view

    def buffer_updated(self, nbytes: int, more: bool = False) -> Any:
        """Record that ``nbytes`` bytes were received into the view from the
        last `get_buffer`; return the pending read's result if they complete
        it, else `PENDING`.

        ``more=True`` says that the engine receives again at once (its
        receive loop goes on): a ``read_until_regex`` search may then wait
        until the bytes read ahead have doubled, and the engine must call
        `search` when the loop ends.

        Cost: for a direct receive O(1); else what completing the read costs
        (one copy of its bytes out of the read-ahead buffer, a resumed
        delimiter search, a regex search, or a ``reader.feed``).

        :raises StreamBufferFullError: more than ``max_buffer_size`` bytes
            are read ahead (close the stream).
        :raises UnsatisfiableReadError: a ``read_until``'s ``max_bytes`` was
            exceeded (close the stream).
        :raises Exception: what a ``read_message`` reader raises (close the
            stream).
        """
        lent = self._lent
        if lent is None or nbytes > len(lent):
            handed = 0 if lent is None else len(lent)
            raise ValueError(f"buffer_updated({nbytes}) but the last get_buffer() handed out {handed} bytes")
        self._lent = None  # as _drop_lent, inline (once per receive)
        if self.lent_in_place or lent is not self._ra_view:
            try:
                lent.release()
            except BufferError:
                pass
        # Dropped now: a reference to the core's own view, alive while this
        # call gives the storage back (a message completed), would keep it
        # from its pool (the compiled build's test counts references).
        lent = None
        mode = self._mode
        if mode == _INTO and not self.lent_in_place and nbytes:
            # A small read_into (a header) completed from the read-ahead
            # buffer, the common case: copy its missing bytes out.
            size = self.buffered_nbytes + nbytes
            filled = self._filled
            missing = self._nbytes - filled
            if missing < size <= self.options.max_buffer_size:
                # As _take_into, inline (once per message; a call would cost
                # the pure build more than the rest of this path).
                start = self._start
                copy_into(self._target, filled, self._ra_view, start, missing)
                self.buffered_nbytes = size - missing
                self._start = start + missing
                self._filled = self._nbytes
                if size == missing:
                    self._release_read_ahead()  # nothing left read ahead
                return self._finish_into()
        if self.lent_in_place:
            if mode == _INTO:
                filled = self._filled + nbytes
                self._filled = filled
                if filled == self._nbytes or (self._partial and filled):
                    return self._finish_into()
                return PENDING
            reader = self._reader
            assert reader is not None
            reader.buffer_updated(nbytes)
            message = reader.next_message()
            if message is NEED_DATA:
                return PENDING
            self._end_read()
            return message
        if not nbytes:
            if not self.buffered_nbytes:
                self._release_read_ahead()
            return PENDING
        size = self.buffered_nbytes + nbytes
        self.buffered_nbytes = size
        if size > self.options.max_buffer_size:
            raise StreamBufferFullError("Reached maximum read buffer size")
        if mode == _IDLE or mode == _CLOSE:
            return PENDING
        if mode == _BYTES:
            wanted = self._nbytes
            if size >= wanted or self._partial:
                return self._finish_take(wanted if wanted < size else size)
            return PENDING
        if mode == _INTO:
            filled = self._filled
            missing = self._nbytes - filled
            take = missing if missing < size else size
            self._take_into(self._target, filled, take)
            self._filled = filled = filled + take
            if filled == self._nbytes or self._partial:
                return self._finish_into()
            return PENDING
        if mode == _UNTIL:
            return self._find_delimiter()
        if mode == _REGEX:
            if more and self.buffered_nbytes < 2 * self._scanned:
                return PENDING  # searched when doubled, or by search()
            return self._find_regex()
        assert self._reader is not None
        return self._feed_reader(self._reader)

    def search(self) -> Any:
        """The engine's receive loop ended: run the ``read_until_regex``
        search that ``buffer_updated(n, more=True)`` put off, if any; return
        the pending read's result or `PENDING`.  O(1) otherwise.

        :raises UnsatisfiableReadError: as `buffer_updated`.
        """
        if self._mode == _REGEX and self._scanned < self.buffered_nbytes:
            return self._find_regex()
        return PENDING

    def eof_received(self, clean: bool = True) -> Any:
        """No more bytes will come (the peer closed, or the stream is
        closing); return the pending read's result if it completes now, else
        `PENDING` (end it with `connection_lost`).

        As Tornado's ``IOStream.close``: ``read_until_close`` completes with
        every byte read ahead if ``clean`` (a close or a connection reset, not
        an error); any other read completes if the bytes it has satisfy it (a
        partial read with some bytes, a delimiter already found).

        :arg clean: False when the stream closes because of an error.
        """
        self.eof = True
        if self._lent is not None:
            self._drop_lent()
        mode = self._mode
        if mode == _CLOSE:
            if not clean:
                return PENDING
            return self._finish_take(self.buffered_nbytes)
        if mode == _INTO:
            filled = self._filled
            if filled == self._nbytes or (self._partial and filled):
                return self._finish_into()
        elif mode == _BYTES:
            size = self.buffered_nbytes
            wanted = self._nbytes
            if size >= wanted or (self._partial and size):
                return self._finish_take(wanted if wanted < size else size)
        elif (mode == _UNTIL or mode == _REGEX) and self.buffered_nbytes:
            try:
                return self._find_delimiter() if mode == _UNTIL else self._find_regex()
            except UnsatisfiableReadError:
                pass
        return PENDING

    def connection_lost(self, real_error: BaseException | None = None) -> BaseException | None:
        """The stream is closed: end the pending read and return the exception
        it fails with (None if no read was pending).  A read-ahead buffer
        with nothing left in it is given back.

        * ``read_into``/``read_bytes``: `IncompleteReadError` with the
          expected and received byte counts;
        * ``read_message``: ``real_error`` itself if it is the reader's
          rejection of the data (a `ReadIntoError` that is not a
          ``StreamClosedError``), `IncompleteReadError` from the reader's
          progress in the middle of a message, else ``StreamClosedError``;
        * the others: ``StreamClosedError`` (Tornado's).

        Every exception carries ``real_error`` as its ``real_error``.
        """
        self.eof = True
        mode = self._mode
        error: BaseException | None
        if mode == _IDLE:
            error = None
        elif mode == _INTO:
            error = IncompleteReadError(self._nbytes, self._filled, real_error=real_error)
        elif mode == _BYTES:
            error = IncompleteReadError(self._nbytes, self.buffered_nbytes, real_error=real_error)
        elif mode == _MESSAGE:
            reader = self._reader
            assert reader is not None
            if isinstance(real_error, ReadIntoError) and not isinstance(real_error, StreamClosedError):
                error = real_error
            elif reader.in_message:
                error = IncompleteReadError(
                    reader.expected_nbytes,
                    reader.received_nbytes,
                    reader.describe_progress(),
                    real_error=real_error,
                )
            else:
                error = StreamClosedError(real_error=real_error)
        else:
            error = StreamClosedError(real_error=real_error)
        self._end_read()
        if not self.buffered_nbytes:
            self._release_read_ahead()
        return error

    # -- completing reads --------------------------------------------------------

    def _drop_lent(self) -> None:
        """Forget the view `get_buffer` handed out last, and release it (a
        read's own buffer may then be resized; read-ahead storage may go
        back to its pool), unless the engine still holds an export of it
        (uvloop releases its export only after ``buffer_updated`` returns):
        it then goes with its last reference (and storage it pins never goes
        back to the pool).  ``_ra_view`` itself, lent whole, is only
        dropped: the core keeps it while it holds the storage."""
        lent = self._lent
        assert lent is not None
        self._lent = None
        if self.lent_in_place or lent is not self._ra_view:
            try:
                lent.release()
            except BufferError:
                pass

    def _end_read(self) -> None:
        """Back to idle; the target (if any) is released."""
        if self._lent is not None:
            self._drop_lent()
        target = self._target
        if target is not None:
            self._target = None
            target.release()  # the caller may resize its buffer now
        self._mode = _IDLE
        self._filled = 0
        self._reader = None
        self._pattern = None
        self._scanned = 0

    def _finish_into(self) -> int:
        filled = self._filled
        target = self._target
        self._target = None
        target.release()  # type: ignore[union-attr]
        self._mode = _IDLE
        self._filled = 0
        return filled

    def _finish_take(self, nbytes: int) -> bytes:
        self._mode = _IDLE
        self._pattern = None
        self._scanned = 0
        return self._take(nbytes)

    def _find_delimiter(self) -> Any:
        """Search the bytes read ahead for the pending delimiter, from where
        the last search stopped."""
        delimiter = self._pattern
        assert delimiter is not None and self._ra is not None
        size = self.buffered_nbytes
        start = self._start
        resume = self._scanned - len(delimiter) + 1
        loc = self._ra.find(delimiter, start + resume if resume > 0 else start, start + size)
        if loc != -1:
            end = loc - start + len(delimiter)
            self._check_limit(delimiter, end)
            return self._finish_take(end)
        self._scanned = size
        self._check_limit(delimiter, size)
        return PENDING

    def _find_regex(self) -> Any:
        regex = self._pattern
        assert regex is not None and self._ra_view is not None
        size = self.buffered_nbytes
        start = self._start
        with self._ra_view[start : start + size] as data:
            match = regex.search(data)
        if match is not None:
            end = match.end()
            self._check_limit(regex, end)
            return self._finish_take(end)
        self._scanned = size
        self._check_limit(regex, size)
        return PENDING

    def _check_limit(self, delimiter: bytes | Pattern[bytes], size: int) -> None:
        max_bytes = self._nbytes
        if size > max_bytes:
            # Tornado's message, word for word.
            raise UnsatisfiableReadError(f"delimiter {delimiter!r} not found within {max_bytes} bytes")

    def _feed_reader(self, reader: FrameReader) -> Any:
        """Hand the bytes read ahead to the pending ``reader``."""
        assert self._ra_view is not None
        start = self._start
        data = self._ra_view[start : start + self.buffered_nbytes]
        try:  # (not `with`: the C compiler cannot tell that a C count set in it is set after it)
            consumed = reader.feed(data)
        finally:
            data.release()
        self._take_nbytes(consumed)
        message = reader.next_message()
        if message is NEED_DATA:
            return PENDING
        self._mode = _IDLE
        self._reader = None
        return message

    # -- the read-ahead buffer -----------------------------------------------

    def _reserve(self, free_nbytes: int) -> None:
        """Make room for at least ``free_nbytes`` after the buffered bytes:
        compact (one move of the buffered bytes) or reallocate."""
        size = self.buffered_nbytes
        ra = self._ra
        capacity = len(ra) if ra is not None else 0
        if size + free_nbytes <= capacity:
            start = self._start
            if start + size + free_nbytes > capacity:
                assert self._ra_view is not None
                self._ra_view[:size] = self._ra_view[start : start + size]
                self._start = 0
            return
        chunk = self.options.read_chunk_size
        new_capacity = max(size + free_nbytes, 2 * capacity, chunk)
        new_capacity = min(new_capacity, max(size + free_nbytes, self.options.max_buffer_size + chunk))
        new_view = self._take_storage(new_capacity)
        if size:
            assert self._ra_view is not None
            start = self._start
            new_view[:size] = self._ra_view[start : start + size]
        self._release_read_ahead()
        self._ra, self._ra_view, self._start = new_view.obj, new_view, 0  # type: ignore[assignment]

    def spare_storage(self) -> None:
        """Between reads, when the pool has no free buffer left and has run
        dry before (`ReadAheadPool.misses` ≥ 2): move the few bytes read
        ahead (at most `SPARE_MAX_NBYTES`) into storage of their own size
        and give the pool buffer back.

        Why: on a loop that runs every readiness callback of a turn before
        the tasks they wake (uvloop), each stream that received a small
        message holds a pool buffer until its task reads it; with more such
        streams than the pool keeps, every message cost a new zeroed buffer
        (and its free).  This costs one copy of those few bytes instead;
        nothing where streams take turns with one buffer (asyncio's loop,
        whose reads wake their task in the readiness callback).  O(1)
        otherwise."""
        pool = self.options.pool
        size = self.buffered_nbytes
        ra = self._ra
        if (
            pool.has_free()
            or pool.misses < 2
            or not size
            or size > SPARE_MAX_NBYTES
            or self._mode != _IDLE
            or ra is None
            or len(ra) != pool.buffer_nbytes
        ):
            return
        start = self._start
        assert self._ra_view is not None
        own = bytearray(self._ra_view[start : start + size])
        self._release_read_ahead()
        self._ra, self._ra_view, self._start = own, memoryview(own), 0

    def has_read(self) -> bool:
        """True while a read is pending."""
        return self._mode != _IDLE

    def release_if_empty(self) -> None:
        """Give the read-ahead storage back if it holds no bytes: an idle
        stream holds none.  O(1)."""
        if not self.buffered_nbytes and self._ra is not None:
            self._release_read_ahead()

    def needed_for_sure(self, left: int) -> int:
        """After a receive into the last `get_buffer` view left ``left`` bytes
        of it unfilled and the read waiting: the bytes the pending read is
        sure to need, ``left`` if that view was its own buffer's rest (a
        ``read_into`` that is not partial, a `FrameReader`'s frame), else 0
        (another reader's buffer may be larger than its message)."""
        if self.lent_in_place and (not self._partial if self._mode == _INTO else type(self._reader) is FrameReader):
            return left
        return 0

    def _take_storage(self, capacity: int) -> memoryview:
        """A view over whole new storage of ``capacity`` bytes: a buffer of
        the pool when ``capacity`` is ``read_chunk_size`` and the pool has
        one (a list pop), else a new ``bytearray``."""
        options = self.options
        if capacity == options.read_chunk_size:
            pool = options.pool
            view = pool.take()
            if view is not None:
                return view
        return memoryview(_new_bytearray(capacity))

    def _take_into(self, dst: Any, dst_start: int, nbytes: int) -> None:
        """Copy the first ``nbytes`` bytes read ahead (there are that many)
        into ``dst[dst_start : dst_start + nbytes]`` and take them: the read
        core's one copy out of the read-ahead buffer."""
        start = self._start
        copy_into(dst, dst_start, self._ra_view, start, nbytes)
        size = self.buffered_nbytes
        if size > nbytes:
            self.buffered_nbytes = size - nbytes
            self._start = start + nbytes
        else:  # the last of them: no storage held
            self.buffered_nbytes = 0
            self._release_read_ahead()

    def _take_nbytes(self, nbytes: int) -> None:
        size = self.buffered_nbytes - nbytes
        self.buffered_nbytes = size
        if size:
            self._start += nbytes
            return
        self._release_read_ahead()  # nothing left read ahead: no storage held

    def _take(self, nbytes: int) -> bytes:
        if not nbytes:
            return b""
        assert self._ra_view is not None and nbytes <= self.buffered_nbytes
        start = self._start
        data = self._ra_view[start : start + nbytes].tobytes()
        self._take_nbytes(nbytes)
        return data

    def _release_read_ahead(self) -> None:
        """Give the read-ahead storage back (its bytes are consumed or
        dropped): to the pool of its size, unless a view of it is still
        alive anywhere (exported, sliced or referenced: the storage is then
        freed when its last holder lets go, and never reused), or it is not
        of the pool's size, or the pool is full.  Every view the core lent
        out is released first.  O(1): in the compiled build a few C field
        reads and a list append."""
        if self._lent is not None:
            self._drop_lent()
        self._start = 0
        view = self._ra_view
        if view is None:
            return
        ra = self._ra
        self._ra = self._ra_view = None
        if self.options.pool.give_back(ra, view):  # type: ignore[arg-type]
            return
        try:
            view.release()
        except BufferError:
            pass
