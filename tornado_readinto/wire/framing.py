# cython: annotation_typing=False, warn.unreachable=False
"""The wire format of framed messages: header packing and an incremental reader.

A message is a list of frames (byte strings, possibly empty; a message may also
have no frames at all)::

    message = nframes:u64le, nbytes[0]:u64le ... nbytes[nframes-1]:u64le,
              frame[0] ... frame[nframes-1]

This module does no I/O and imports neither Tornado nor ``socket``: the stream
layer (``iostream.py``), a test loop or an ``asyncio.BufferedProtocol`` can all
drive the same `FrameReader`.

.. versionadded:: 0.1
"""

# Strategy:
#
# Writing is trivial: `pack_header` turns the frame sizes into one small
# ``bytes``; the frames themselves are sent as they are, by reference, so this
# module never touches payload bytes on the way out.
#
# distributed's tcp:// comm sends one more field first, P (a u64: the prelude
# plus the leading frames it sends together, `prefixed_message_header`); with
# ``nosplit_prefix`` the COUNT stage takes it too, and P is checked against
# the lengths once they arrive, but never used as a size.
#
# Reading is a state machine with four stages, each of which needs an exactly
# known number of bytes:
#
#   COUNT    8 bytes: nframes (16: P, nframes)     -> check max_frames
#   LENGTHS  8 * nframes bytes: the frame sizes    -> check max_frame_nbytes
#                                                     and max_message_nbytes
#   FRAMES   each frame, in order, straight into a buffer from the allocator
#   DONE     a complete message waits for next_message()
#
# Because each stage knows how many bytes it needs, the reader can always say
# exactly where the next bytes must land (`FrameReader.get_buffer`, the
# ``asyncio.BufferedProtocol`` shape): the stream layer then calls
# ``recv_into`` on that view and the payload is written once, by the kernel,
# into the buffer the user keeps.  `FrameReader.get_buffers` hands out several
# frames at once for ``recvmsg_into``.  Bytes that were already read ahead
# (a bounded buffer that usually holds several small messages) go through
# `FrameReader.feed`, which copies them into place and stops at the message
# boundary, so the rest stays in the read-ahead buffer for the next message.
#
# Every size from the peer is checked against the limits before anything is
# allocated for it: nframes before the lengths buffer, all lengths before the
# first frame buffer.  The frame buffers themselves are allocated lazily, one
# frame at a time (or a few ahead, for get_buffers), so a peer that announces
# a large message and then stalls holds at most the frames it has started.
#
# Errors: anything wrong on the wire raises FramingError (never an assert);
# after any error the reader is "poisoned" and every later call raises
# FramingError, because the byte stream can no longer be resynchronized.  The
# stream layer closes the connection.
#
# Compiled, FrameReader is typed by framing.pxd (C fields for the stage and
# the positions, cdef helpers, cpdef methods that ReadCore calls in C).  Sizes
# from the wire and the limits stay Python ints until they have passed the
# limits: a u64 need not fit a C size.

from __future__ import annotations

import enum
import operator
import struct
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

from ..errors import FrameTooLargeError, FramingError

#: More bytes than any buffer holds (what `FrameReader.next_nbytes` says
#: where `FrameReader.get_buffer` would raise).
_ANY_NBYTES: Final = 1 << 62

if TYPE_CHECKING:
    from .. import _cyshim as cython
else:
    try:
        import cython  # resolved by Cython when compiled
    except ModuleNotFoundError:
        from .. import _cyshim as cython
if not cython.compiled:  # (compiled: their C twins, cimported in framing.pxd)
    from .._native import copy_into, message_header_of, small_lengths

__all__ = [
    "DEFAULT_MAX_FRAMES",
    "DEFAULT_MAX_FRAME_NBYTES",
    "DEFAULT_MAX_MESSAGE_NBYTES",
    "NEED_DATA",
    "Allocator",
    "FrameLimits",
    "FrameReader",
    "MessageReader",
    "frame_limits",
    "frames_nbytes",
    "message_header",
    "nosplit_nbytes",
    "pack_header",
    "prefixed_message_header",
]

# -- wire format ------------------------------------------------------------

#: Byte order and size of every header field: an unsigned 64-bit little-endian
#: integer.  dask.distributed packs the same fields with struct format ``"Q"``
#: (``distributed/protocol/utils.py``, ``pack_frames_prelude``), which is
#: *native* byte order; so on little-endian hosts (x86-64, aarch64: everything
#: dask runs on in practice) our messages are byte-for-byte its
#: ``pack_frames(frames)`` and either side decodes the other's.  We pin ``<``
#: so that a big-endian host still speaks the same wire format.
U64_FORMAT: Final = "<Q"
_U64: Final = struct.Struct(U64_FORMAT)

#: Size of the ``nframes`` field.
COUNT_NBYTES: Final = _U64.size  # 8

#: Size of each ``nbytes[i]`` field.
LENGTH_NBYTES: Final = _U64.size  # 8


#: Size of the optional ``P`` field in front of a message (``nosplit_prefix``):
#: distributed's ``tcp://`` comm sends it first (see `prefixed_message_header`).
PREFIX_NBYTES: Final = _U64.size  # 8


def _lengths_format(nframes: int) -> str:
    """The struct format of ``nframes`` little-endian u64 lengths."""
    return f"<{nframes}Q"


# Compiled lengths structs of small messages (see _SMALL_LENGTHS_NFRAMES),
# which saves building and looking up a format string per message.
_LENGTHS_STRUCTS: dict[int, struct.Struct] = {}


def _lengths_struct(nframes: int) -> struct.Struct:
    compiled = _LENGTHS_STRUCTS.get(nframes)
    if compiled is None:
        compiled = struct.Struct(_lengths_format(nframes))
        if nframes <= _SMALL_LENGTHS_NFRAMES:
            _LENGTHS_STRUCTS[nframes] = compiled
    return compiled


# -- limits ------------------------------------------------------------------

#: Default maximum number of frames in one message: 1 Mi, as in the "Limits"
#: section of DESIGN.md.  The lengths header of such a message is 8 MiB, the
#: largest buffer a peer can make the reader allocate before any frame.
DEFAULT_MAX_FRAMES: Final = 1 << 20

#: Default maximum size of one frame: 64 GiB, i.e. no tighter than the message
#: limit below.  Lower it per stream to bound what one frame may allocate.
DEFAULT_MAX_FRAME_NBYTES: Final = 64 << 30

#: Default maximum total size of the frames of one message (the header is not
#: counted): 64 GiB, as in the "Limits" section of DESIGN.md.  Generous, but
#: finite: a hostile header of ``2**63`` bytes is refused before allocation.
DEFAULT_MAX_MESSAGE_NBYTES: Final = 64 << 30

#: Messages with at most this many frames parse their lengths header in a
#: buffer that the reader allocates once and reuses: 64 frames = 512 bytes
#: (a dask message has a handful of frames: a header and one per buffer).
_SMALL_LENGTHS_NFRAMES: Final = 64

#: Where the count stage sits in a reader's scratch buffer (P and nframes),
#: before the small lengths.
_SCRATCH_COUNT_NBYTES: Final = PREFIX_NBYTES + COUNT_NBYTES


# -- the NEED_DATA sentinel --------------------------------------------------


class _NeedDataType(enum.Enum):
    # An enum member is the sentinel idiom type checkers understand:
    # ``if msg is NEED_DATA: ...`` narrows ``msg`` to the frame list after it.
    NEED_DATA = "NEED_DATA"

    def __repr__(self) -> str:
        return "NEED_DATA"

    __str__ = __repr__


#: Returned by `FrameReader.next_message` when the current message is not
#: complete yet.  Compare with ``is``: a message of zero frames is ``[]``,
#: which is falsy too.
NEED_DATA: Final = _NeedDataType.NEED_DATA

#: Where a frame's bytes land.  Called with ``nbytes`` (> 0); must return a
#: writable, C-contiguous buffer of at least ``nbytes`` bytes (a bytearray, a
#: numpy array of any dtype, an mmap, a memoryview...).  The reader uses
#: ``memoryview(buf).cast("B")[:nbytes]`` of it (compiled, a memoryview of
#: that shape that nothing but the reader holds is used as it is).  See
#: `tornado_readinto.wire.allocators`.
Allocator = Callable[[int], Any]


# -- writing -----------------------------------------------------------------


def pack_header(frame_nbytes: Sequence[int]) -> bytes:
    """Return the header of a message whose frames have these sizes.

    Send it followed by the frames themselves.  ``pack_header(frames_nbytes(frames))
    + b"".join(frames)`` is ``distributed.protocol.utils.pack_frames(frames)``
    on a little-endian host.

    Cost: one ``bytes`` of ``8 * (len(frame_nbytes) + 1)`` bytes; no copy of
    any frame.

    :arg frame_nbytes: the size in bytes of each frame, in order.
    :raises ValueError: if a size is negative or does not fit in 64 bits.

    .. versionadded:: 0.1
    """
    nframes = len(frame_nbytes)
    try:
        return _lengths_struct(nframes + 1).pack(nframes, *frame_nbytes)
    except struct.error as exc:
        raise ValueError(f"frame sizes must be integers in [0, 2**64): {exc}") from None


def frames_nbytes(frames: Iterable[Any]) -> list[int]:
    """Return the size in bytes of each frame (``memoryview(frame).nbytes``).

    ``len()`` would be wrong for typed buffers: a numpy ``float64`` array of
    ``n`` items is ``8 * n`` bytes.

    Cost: one short-lived memoryview per frame that is not ``bytes``,
    ``bytearray`` or ``memoryview``; no copy.

    .. versionadded:: 0.1
    """
    return [
        len(frame)
        if type(frame) is bytes or type(frame) is bytearray
        else frame.nbytes
        if type(frame) is memoryview
        else memoryview(frame).nbytes
        for frame in frames
    ]


def message_header(frames: Sequence[Any]) -> tuple[bytes, int]:
    """Return the header of a message of these frames and the bytes the
    whole message takes on the wire (header included):
    ``(pack_header(frames_nbytes(frames)), 8 * (1 + len(frames)) + sum(frame sizes))``.

    Cost: the header ``bytes`` only, made in one pass over the frames (in
    the compiled build with no list of sizes, each size read from the
    frame's buffer export); no copy of any frame.

    :raises TypeError: ``frames`` has no length (an iterator), or a frame is
        not a bytes-like object.
    :raises ValueError: a frame is a released ``memoryview``, or ``frames``
        yielded a number of frames other than its length.

    .. versionadded:: 0.1
    """
    return message_header_of(frames)  # type: ignore[no-any-return]


def nosplit_nbytes(frames: Sequence[Any], frame_nbytes: Sequence[int]) -> int:
    """Return the bytes of the leading frames that distributed's ``tcp://``
    comm sends (and its reader receives) together with the prelude.

    This is ``frames_nbytes_nosplit`` of ``distributed/comm/tcp.py``
    (``_add_frames_header``), rule for rule: ``bytes`` frames (and
    memoryviews of ``bytes``) are always included; the first other buffer is
    included unless what precedes it is over ``max(2048, 5 % of it)``; its
    shards (views of the same object) follow it; the first frame after that
    which is another buffer ends the run.

    Cost: one pass over the frames, no copy.

    .. versionadded:: 0.1
    """
    total = 0
    first_uncompressed: object = None
    for frame, nbytes in zip(frames, frame_nbytes):
        buffer = frame.obj if isinstance(frame, memoryview) else frame
        if not isinstance(buffer, bytes):
            if first_uncompressed is None:
                if total > max(2048, nbytes * 0.05):
                    break
                first_uncompressed = buffer
            elif first_uncompressed is not buffer:
                break
        total += nbytes
    return total


def prefixed_message_header(frames: Sequence[Any]) -> tuple[bytes, int]:
    """`message_header` for distributed's ``tcp://`` byte stream: the header
    starts with ``P:u64le``, the prelude's size plus `nosplit_nbytes`, exactly
    as ``distributed/comm/tcp.py`` computes it, so that a stock receiver
    reads the same single-buffer prefix that a stock sender would give it::

        message = P, nframes, nbytes[0] ... nbytes[nframes-1], frame[0] ... frame[nframes-1]

    Returns the header and the bytes the whole message takes on the wire
    (what ``TCP.write`` returns).

    Cost: the header ``bytes`` and one pass over the frames; no copy of any
    frame.

    .. versionadded:: 0.1
    """
    nbytes = frames_nbytes(frames)
    nframes = len(nbytes)
    prelude_nbytes = COUNT_NBYTES + LENGTH_NBYTES * nframes
    prefix = prelude_nbytes + nosplit_nbytes(frames, nbytes)
    try:
        header = _lengths_struct(nframes + 2).pack(prefix, nframes, *nbytes)
    except struct.error as exc:
        raise ValueError(f"frame sizes must be integers in [0, 2**64): {exc}") from None
    return header, PREFIX_NBYTES + prelude_nbytes + sum(nbytes)


# -- reading -----------------------------------------------------------------

# The reader's stages (see "Strategy" above).
_COUNT: Final = 0
_LENGTHS: Final = 1
_FRAMES: Final = 2
_DONE: Final = 3
_POISONED: Final = 4


def _empty_frame() -> memoryview:
    # A fresh writable empty view per zero-length frame: never shared, so one
    # caller's ``view.release()`` cannot break another's frame.
    return memoryview(bytearray())


def _check_limit(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, not {value}")
    return value


class FrameLimits:
    """The limits a `FrameReader` holds each message's header to, before
    anything is allocated for it: immutable, and shared by the readers made
    with the same ones (`frame_limits`).  The one place each limit is
    checked.

    :raises ValueError: for a negative limit.
    :raises TypeError: for a limit that is not an int.

    .. versionadded:: 0.1
    """

    __slots__ = ("max_frames", "max_frame_nbytes", "max_message_nbytes")

    def __init__(
        self,
        max_frames: int = DEFAULT_MAX_FRAMES,
        max_frame_nbytes: int = DEFAULT_MAX_FRAME_NBYTES,
        max_message_nbytes: int = DEFAULT_MAX_MESSAGE_NBYTES,
    ) -> None:
        #: The most frames a message may have.
        self.max_frames = _check_limit("max_frames", max_frames)
        #: The largest frame, in bytes.
        self.max_frame_nbytes = _check_limit("max_frame_nbytes", max_frame_nbytes)
        #: The largest total of a message's frame sizes, in bytes.
        self.max_message_nbytes = _check_limit("max_message_nbytes", max_message_nbytes)

    def admits(self, nframes: Any, total: Any, largest: Any) -> bool:
        """True if a message of ``nframes`` frames, ``total`` bytes of them,
        the largest ``largest``, is within every limit.  O(1)."""
        return (
            nframes <= self.max_frames  # type: ignore[no-any-return]
            and total <= self.max_message_nbytes
            and largest <= self.max_frame_nbytes
        )

    def count_error(self, nframes: Any) -> FrameTooLargeError | None:
        """The error for a header that announces ``nframes`` frames, or None
        if that many are allowed."""
        if nframes > self.max_frames:
            return FrameTooLargeError("max_frames", nframes, self.max_frames)
        return None

    def lengths_error(self, total: Any, largest: Any) -> FrameTooLargeError | None:
        """The error for frame sizes summing to ``total``, the largest
        ``largest``, or None if they are allowed."""
        if largest > self.max_frame_nbytes:
            return FrameTooLargeError("max_frame_nbytes", largest, self.max_frame_nbytes)
        if total > self.max_message_nbytes:
            return FrameTooLargeError("max_message_nbytes", total, self.max_message_nbytes)
        return None

    def __repr__(self) -> str:
        return (
            f"FrameLimits(max_frames={self.max_frames}, max_frame_nbytes={self.max_frame_nbytes}, "
            f"max_message_nbytes={self.max_message_nbytes})"
        )


# The limits in use, by value (a process uses a few: the defaults, dask's).
# Bounded: past _LIMITS_MAX, made afresh each time.
_LIMITS: dict = {}
_LIMITS_MAX: Final = 64


def frame_limits(
    max_frames: int = DEFAULT_MAX_FRAMES,
    max_frame_nbytes: int = DEFAULT_MAX_FRAME_NBYTES,
    max_message_nbytes: int = DEFAULT_MAX_MESSAGE_NBYTES,
) -> FrameLimits:
    """The `FrameLimits` of these values: the one already in use when there
    is one (a dict lookup), else a new one.

    :raises ValueError: for a negative limit.
    :raises TypeError: for a limit that is not an int.
    """
    # (the types too: True == 1, and a bool is refused)
    key: tuple = (type(max_frames), max_frames, type(max_frame_nbytes), max_frame_nbytes)
    key += (type(max_message_nbytes), max_message_nbytes)
    limits = _LIMITS.get(key)
    if limits is None:
        limits = FrameLimits(max_frames, max_frame_nbytes, max_message_nbytes)
        if len(_LIMITS) < _LIMITS_MAX:
            _LIMITS[key] = limits
    return limits  # type: ignore[no-any-return]


class MessageReader(Protocol):
    """What `ReadIntoIOStream.read_message` drives: the shape of
    `FrameReader` (an ``asyncio.BufferedProtocol``-like incremental reader)."""

    @property
    def in_message(self) -> bool: ...

    @property
    def expected_nbytes(self) -> int: ...

    @property
    def received_nbytes(self) -> int: ...

    def describe_progress(self) -> str: ...

    def get_buffer(self) -> memoryview: ...

    def buffer_updated(self, nbytes: int) -> None: ...

    def feed(self, data: Any) -> int: ...

    def next_message(self) -> Any: ...


class FrameReader:
    """Incremental reader of framed messages, fed by a byte stream.

    The reader has the shape of an ``asyncio.BufferedProtocol``: ask it where
    the next bytes go (`get_buffer`, `get_buffers`), receive into that view,
    tell it how many bytes arrived (`buffer_updated`); or give it bytes you
    already hold (`feed`).  When `next_message` returns a list of frames
    instead of `NEED_DATA`, the message is complete and the reader starts on
    the next one.

    A recv_into loop::

        reader = FrameReader(allocator)
        while True:
            msg = reader.next_message()
            if msg is not NEED_DATA:
                return msg
            view = reader.get_buffer()
            nbytes = sock.recv_into(view)
            if nbytes == 0:
                raise IncompleteReadError(reader.expected_nbytes,
                                          reader.received_nbytes,
                                          reader.describe_progress())
            reader.buffer_updated(nbytes)

    Costs: the payload is written once, into the allocator's buffers (by
    ``recv_into``, or by `feed`'s copy).  Per message, besides those buffers,
    the reader allocates only small objects (the frame list, the lengths
    tuple, memoryviews) and, for a message of more than 64 frames whose
    lengths do not arrive whole, an ``8 * nframes``-byte lengths buffer.

    Not thread-safe: one reader belongs to one stream.

    :arg allocator: called once per non-empty frame, with its size, once the
        header has passed the limits; see `Allocator`.  Default: ``bytearray``
        (zero-filled: a memset per frame; `tornado_readinto.wire.allocators` has
        faster ones).  Zero-length frames do not call it.
    :arg max_frames: the most frames a message may have.
    :arg max_frame_nbytes: the largest frame, in bytes.
    :arg max_message_nbytes: the largest total of a message's frame sizes, in
        bytes (the header is not counted).
    :arg nosplit_prefix: each message starts with distributed's ``tcp://``
        field ``P`` (see `prefixed_message_header`): the reader checks that P
        is the prelude plus whole leading frames (else `FramingError`) and
        otherwise ignores it: every frame still lands in its own buffer.

        .. versionadded:: 0.1
    :raises ValueError: for a negative limit.
    :raises TypeError: for a limit that is not an int, or an allocator that is
        not callable.

    .. versionadded:: 0.1
    """

    __slots__ = (
        # the allocator and the limits
        "_allocator",
        "limits",
        # 8 when each message starts with tcp.py's P field, else 0
        "_prefix_nbytes",
        # the buffer of split headers, reused for every message
        "_scratch",
        # the error that poisoned the reader, or None
        "_error",
        # the current message (see _reset)
        "_stage",
        "_filled",
        "_nframes",
        "_prefix",
        "_lengths_view",
        "_lengths",
        "_frames",
        "_frame_index",
        "_expected",
        "_received",
        "_handed",
        # weakly referable, as before it had slots
        "__weakref__",
    )

    def __init__(
        self,
        allocator: Allocator | None = None,
        *,
        max_frames: int = DEFAULT_MAX_FRAMES,
        max_frame_nbytes: int = DEFAULT_MAX_FRAME_NBYTES,
        max_message_nbytes: int = DEFAULT_MAX_MESSAGE_NBYTES,
        nosplit_prefix: bool = False,
    ) -> None:
        if allocator is not None and not callable(allocator):
            raise TypeError(f"allocator must be callable, not {type(allocator).__name__}")
        self._allocator: Allocator = bytearray if allocator is None else allocator
        #: The limits each header is held to (`FrameLimits`).
        self.limits = frame_limits(max_frames, max_frame_nbytes, max_message_nbytes)
        self._prefix_nbytes = PREFIX_NBYTES if nosplit_prefix else 0
        # Where a count, or the lengths of a message of at most 64 frames,
        # that arrive split are gathered: [0:16] the count (P and nframes),
        # [16:] the lengths.  Allocated once per reader, the first time a
        # header arrives split or is received in place (rare: an idle reader
        # that never saw that holds none), and reused.
        self._scratch: memoryview | None = None
        self._error: BaseException | None = None
        self._reset()

    def _reset(self) -> None:
        self._stage = _COUNT
        # bytes received of the current piece: the count (COUNT), the
        # lengths (LENGTHS) or the frame being filled (FRAMES)
        self._filled = 0
        self._nframes: int | None = None
        self._prefix = 0  # the P field (nosplit_prefix), an int from the wire
        self._lengths_view: memoryview | None = None
        self._lengths: tuple[int, ...] = ()
        # the frames, made when the lengths are known: an idle reader holds
        # no list (one object less for the cyclic GC per waiting stream)
        self._frames: list[memoryview] = None  # type: ignore[assignment]  # (None between messages)
        # index of the frame being filled
        self._frame_index = 0
        self._expected = self._prefix_nbytes + COUNT_NBYTES
        self._received = 0
        # bytes handed out by the last get_buffer()/get_buffers()
        self._handed = 0

    # -- introspection (for error messages) ---------------------------------

    @property
    def max_frames(self) -> int:
        """The most frames a message may have."""
        return self.limits.max_frames  # type: ignore[no-any-return]

    @property
    def max_frame_nbytes(self) -> int:
        """The largest frame, in bytes."""
        return self.limits.max_frame_nbytes  # type: ignore[no-any-return]

    @property
    def max_message_nbytes(self) -> int:
        """The largest total of a message's frame sizes, in bytes."""
        return self.limits.max_message_nbytes  # type: ignore[no-any-return]

    @property
    def in_message(self) -> bool:
        """True once any byte of a message has arrived, until `next_message`
        returns it.  At EOF, ``in_message`` means the peer closed mid-message."""
        return self._stage != _COUNT or self._filled > 0

    @property
    def nframes(self) -> int | None:
        """The current message's frame count, or None until it has arrived."""
        return self._nframes

    @property
    def frame_index(self) -> int:
        """Index of the frame being received (0 while the header is, and
        ``nframes`` once the message is complete)."""
        return self._frame_index

    @property
    def expected_nbytes(self) -> int:
        """Size of the current message as far as it is known: 8 until the
        frame count arrives, then header size until the lengths arrive, then
        header and frames."""
        return self._expected

    @property
    def received_nbytes(self) -> int:
        """Bytes of the current message received so far, header included."""
        return self._received

    def describe_progress(self) -> str:
        """What the reader is waiting for, for error messages: ``"frame count"``,
        ``"frame lengths"``, ``"frame 3 of 5"``, ``"no message"``,
        ``"complete message"`` or ``"failed message"``."""
        stage = self._stage
        if stage == _COUNT:
            return "frame count" if self._filled else "no message"
        if stage == _LENGTHS:
            return "frame lengths"
        if stage == _FRAMES:
            return f"frame {self._frame_index} of {self._nframes}"
        if stage == _DONE:
            return "complete message"
        return "failed message"

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.describe_progress()}, "
            f"{self._received} of {self._expected} bytes>"
        )

    # -- the BufferedProtocol-shaped interface -------------------------------

    def next_nbytes(self) -> Any:
        """How many bytes `get_buffer` would hand out now, with no view made
        and nothing allocated: what a receive engine asks to choose between
        receiving in place and through its read-ahead buffer.  Where
        `get_buffer` would raise (a complete message waiting, a poisoned
        reader), a size larger than any buffer, so that the engine calls it
        and sees the error.  O(1)."""
        stage = self._stage
        if stage == _FRAMES:
            return self._lengths[self._frame_index] - self._filled
        if stage == _COUNT:
            return self._prefix_nbytes + COUNT_NBYTES - self._filled
        if stage == _LENGTHS:
            return LENGTH_NBYTES * self._nframes - self._filled  # type: ignore[operator]
        return _ANY_NBYTES

    def get_buffer(self) -> memoryview:
        """Return a writable view of exactly the bytes the current stage still
        needs: the rest of the 8-byte frame count, the rest of the
        ``8 * nframes``-byte lengths, or the rest of the current frame.

        Receive into it (``sock.recv_into(view)``), then call `buffer_updated`
        with the number of bytes received.  A view is only valid until the
        next call on the reader.

        Cost: one memoryview slice.  The first view into a frame calls the
        allocator for it; the first view into the lengths of a message of more
        than 64 frames allocates a ``bytearray`` of ``8 * nframes`` bytes
        (``nframes`` has been checked against ``max_frames``).

        :raises RuntimeError: if a complete message is waiting: call
            `next_message` first (an empty view would make ``recv_into``
            return 0, which looks like EOF).
        :raises FramingError: if the reader failed earlier.
        """
        if self._error is not None:
            self._check_usable()  # raises
        stage = self._stage
        if stage == _FRAMES:
            view = self._current_frame()[self._filled :]
        elif stage == _COUNT:
            view = self._get_count_view()[self._filled :]
        elif stage == _LENGTHS:
            view = self._get_lengths_view()[self._filled :]
        else:
            raise RuntimeError("a complete message is waiting: call next_message() before get_buffer()")
        self._handed = view.nbytes
        return view

    def get_buffers(self, max_buffers: int) -> list[memoryview]:
        """Return up to ``max_buffers`` writable views for ``recvmsg_into``.

        While frames are being received: the rest of the current frame, then
        the following non-empty frames of the same message, whole (so one
        syscall can fill several frames and never reads past the message).
        While the header is being received: ``[self.get_buffer()]``.  Then
        call `buffer_updated` with the total number of bytes received.

        Cost: one slice, plus an allocator call for every frame handed out for
        the first time (frames are allocated ahead, in order).

        :raises ValueError: if ``max_buffers < 1``.
        :raises RuntimeError: if a complete message is waiting.
        :raises FramingError: if the reader failed earlier.
        """
        if max_buffers < 1:
            raise ValueError(f"max_buffers must be >= 1, not {max_buffers}")
        if self._stage != _FRAMES:
            return [self.get_buffer()]
        if self._error is not None:
            self._check_usable()  # raises
        first = self._current_frame()[self._filled :]
        views = [first]
        handed = first.nbytes
        lengths = self._lengths
        index = self._frame_index + 1
        nframes = len(lengths)
        while len(views) < max_buffers and index < nframes:
            self._allocate_through(index)
            if lengths[index]:
                views.append(self._frames[index])
                handed += lengths[index]
            index += 1
        self._handed = handed
        return views

    def buffer_updated(self, nbytes: int) -> None:
        """Record that ``nbytes`` bytes were written into the view(s) handed
        out by the last `get_buffer` or `get_buffers` call, from the start
        (for `get_buffers`: filling each view before the next).

        Cost: O(1), plus the header parse and limit checks when a header stage
        completes (O(nframes) for the lengths).

        :raises ValueError: if ``nbytes`` is negative or more than was handed
            out (each view may be reported only once).
        :raises FrameTooLargeError: if the completed header is over a limit.
        :raises FramingError: if the reader failed earlier.
        """
        if self._error is not None:
            self._check_usable()  # raises
        if type(nbytes) is not int:
            nbytes = operator.index(nbytes)
        if nbytes < 0:
            raise ValueError(f"buffer_updated() got a negative nbytes: {nbytes}")
        handed = self._handed
        if nbytes > handed:
            raise ValueError(
                f"buffer_updated({nbytes}) but the last get_buffer()/get_buffers() "
                f"handed out {handed} bytes"
            )
        self._handed = 0
        if nbytes == 0:
            return
        self._received += nbytes
        stage = self._stage
        if stage == _FRAMES:
            self._frames_received(nbytes)
        elif stage == _COUNT:
            self._filled += nbytes
            if self._filled == self._prefix_nbytes + COUNT_NBYTES:
                self._got_count_at(self._get_count_view(), 0)
        else:  # _LENGTHS: DONE hands out nothing, so nbytes == 0 returned above
            self._filled += nbytes
            lengths_view = self._get_lengths_view()
            if self._filled == lengths_view.nbytes:
                nframes = len(lengths_view) // LENGTH_NBYTES
                self._got_lengths(_lengths_struct(nframes).unpack(lengths_view))

    def feed(self, data: Any) -> int:
        """Consume bytes of the stream from ``data`` (any C-contiguous
        bytes-like object, e.g. a memoryview of a read-ahead buffer), up to
        the end of the current message at most, and return how many bytes
        were consumed.

        Bytes after the end of the message are left alone: keep them and
        feed them again after `next_message`.  Returns 0 if a complete message
        is already waiting.

        Cost: frame bytes are copied once, into the allocator's buffers (which
        are allocated as their first byte arrives).  A header stage found
        whole in ``data`` is parsed in place, without a copy; a header split
        across calls is copied into the reader's own small buffer.

        :raises FrameTooLargeError: if a header is over a limit.
        :raises FramingError: if the reader failed earlier.
        """
        if self._error is not None:
            self._check_usable()  # raises
        self._handed = 0  # views handed out earlier no longer describe the state
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        end = view.nbytes
        count_nbytes = self._prefix_nbytes + COUNT_NBYTES
        if self._stage == _COUNT and not self._filled and end >= count_nbytes + LENGTH_NBYTES:
            consumed = self._feed_whole_message(view, end)
            if consumed:
                return consumed
        pos = 0
        try:
            while pos < end:
                stage = self._stage
                if stage == _FRAMES:
                    index = self._frame_index
                    frames = self._frames
                    frame = frames[index] if index < len(frames) else self._current_frame()
                    filled = self._filled
                    take = min(len(frame) - filled, end - pos)
                    frame[filled : filled + take] = view[pos : pos + take]
                    pos += take
                    self._frames_received(take)
                elif stage == _COUNT:
                    filled = self._filled
                    if filled == 0 and end - pos >= count_nbytes:
                        pos += count_nbytes
                        self._got_count_at(view, pos - count_nbytes)
                    else:
                        take = min(count_nbytes - filled, end - pos)
                        count_view = self._get_count_view()
                        count_view[filled : filled + take] = view[pos : pos + take]
                        pos += take
                        self._filled = filled + take
                        if self._filled == count_nbytes:
                            self._got_count_at(count_view, 0)
                elif stage == _LENGTHS:
                    filled = self._filled
                    nframes = self._nframes
                    assert nframes is not None  # internal invariant of the _LENGTHS stage
                    need = LENGTH_NBYTES * nframes
                    if filled == 0 and end - pos >= need:
                        lengths = _lengths_struct(nframes).unpack_from(view, pos)
                        pos += need
                        self._got_lengths(lengths)
                    else:
                        lengths_view = self._get_lengths_view()
                        take = min(need - filled, end - pos)
                        lengths_view[filled : filled + take] = view[pos : pos + take]
                        pos += take
                        self._filled = filled + take
                        if self._filled == need:
                            self._got_lengths(_lengths_struct(nframes).unpack(lengths_view))
                else:  # _DONE: never consume bytes of the next message
                    break
        finally:
            # feed() never crosses a message boundary, so every consumed byte
            # belongs to the current message
            self._received += pos
        return pos

    def _feed_whole_message(self, view: memoryview, end: int) -> int:
        """The short path of `feed`: if ``view`` starts with a whole message
        of at most 64 frames that passes the limits, copy its frames into
        their buffers and return its size; else return 0 (and change
        nothing) for the general path, which also reports what is wrong."""
        offset = self._prefix_nbytes
        parsed = small_lengths(view, offset, end, _SMALL_LENGTHS_NFRAMES)
        if parsed is None:
            return 0
        lengths, total, largest = parsed
        nframes = len(lengths)
        header_nbytes = offset + COUNT_NBYTES + LENGTH_NBYTES * nframes
        message_nbytes = header_nbytes + total
        if end < message_nbytes or not self.limits.admits(nframes, total, largest):
            return 0
        if offset and not _prefix_ok(_U64.unpack_from(view, 0)[0], lengths):
            return 0  # the general path reports it
        self._nframes = nframes
        self._lengths = lengths
        self._expected = message_nbytes
        self._stage = _FRAMES
        frames = self._frames = []
        pos = header_nbytes
        for index, nbytes in enumerate(lengths):
            if nbytes:
                frame = self._allocate(index, nbytes)  # poisons the reader on error
                copy_into(frame, 0, view, pos, nbytes)
                pos += nbytes
            else:
                frame = _empty_frame()
            frames.append(frame)
        self._frame_index = nframes
        self._received = message_nbytes
        self._stage = _DONE
        return message_nbytes

    def next_message(self) -> list[memoryview] | Literal[_NeedDataType.NEED_DATA]:
        """Return the frames of the current message if it is complete, and
        start on the next one; else return `NEED_DATA`.

        The frames are writable ``memoryview`` objects of format ``"B"``, one
        per frame, each over its own allocator buffer (zero-length frames get
        a fresh empty view; the allocator is not called for them).  The
        caller owns them; the reader keeps no reference.

        Cost: O(1).

        :raises FramingError: if the reader failed earlier.
        """
        if self._error is not None:
            self._check_usable()  # raises
        if self._stage != _DONE:
            return NEED_DATA
        frames = self._frames
        self._reset()
        return frames

    # -- internals -----------------------------------------------------------

    def _check_usable(self) -> None:
        """Raise if the reader failed earlier (callers test ``_error`` first:
        this runs per call on the hot path)."""
        if self._error is not None:
            error = self._error
            raise FramingError(
                f"frame reader is unusable after an earlier error ({type(error).__name__}: {error})"
            ) from error

    def _poison(self, error: BaseException) -> BaseException:
        """Mark the reader failed; return ``error`` for the caller to raise."""
        self._error = error
        self._stage = _POISONED
        self._handed = 0
        return error

    def _get_scratch(self) -> memoryview:
        scratch = self._scratch
        if scratch is None:
            nbytes = _SCRATCH_COUNT_NBYTES + LENGTH_NBYTES * _SMALL_LENGTHS_NFRAMES
            scratch = self._scratch = memoryview(bytearray(nbytes))
        return scratch

    def _get_count_view(self) -> memoryview:
        return self._get_scratch()[: self._prefix_nbytes + COUNT_NBYTES]

    def _get_lengths_view(self) -> memoryview:
        view = self._lengths_view
        if view is None:
            nframes = self._nframes
            assert nframes is not None  # internal invariant of the _LENGTHS stage
            if nframes <= _SMALL_LENGTHS_NFRAMES:
                start = _SCRATCH_COUNT_NBYTES
                view = self._get_scratch()[start : start + LENGTH_NBYTES * nframes]
            else:
                view = memoryview(bytearray(LENGTH_NBYTES * nframes))
            self._lengths_view = view
        return view

    def _got_count_at(self, view: Any, pos: int) -> None:
        """The count stage is whole in ``view`` at ``pos``: P (with
        ``nosplit_prefix``), then nframes."""
        if self._prefix_nbytes:
            self._prefix = _U64.unpack_from(view, pos)[0]
            pos += PREFIX_NBYTES
        self._got_count(_U64.unpack_from(view, pos)[0])

    def _got_count(self, nframes: int) -> None:
        error = self.limits.count_error(nframes)
        if error is not None:
            raise self._poison(error)
        if self._prefix_nbytes and self._prefix < COUNT_NBYTES + LENGTH_NBYTES * nframes:
            raise self._poison(_prefix_error(self._prefix, nframes))
        self._nframes = nframes
        self._filled = 0
        if nframes == 0:
            if self._prefix_nbytes and self._prefix != COUNT_NBYTES:
                raise self._poison(_prefix_error(self._prefix, 0))
            self._frames = []
            self._stage = _DONE
        else:
            self._stage = _LENGTHS
            self._expected += LENGTH_NBYTES * nframes

    def _got_lengths(self, lengths: tuple[int, ...]) -> None:
        # All limits are checked before the first frame is allocated.
        total = sum(lengths)
        error = self.limits.lengths_error(total, max(lengths))
        if error is not None:
            raise self._poison(error)
        if self._prefix_nbytes and not _prefix_ok(self._prefix, lengths):
            raise self._poison(_prefix_error(self._prefix, len(lengths)))
        self._lengths = lengths
        self._lengths_view = None  # drop a large lengths buffer right away
        self._filled = 0
        self._expected += total
        self._frames = []
        self._stage = _FRAMES
        self._frame_index = 0
        self._filled = 0
        self._frames_received(0)  # step over leading zero-length frames

    def _frames_received(self, nbytes: int) -> None:
        """Advance the frame position by ``nbytes`` (which may complete several
        frames), stepping over zero-length frames; DONE after the last one."""
        lengths = self._lengths
        index = self._frame_index
        filled = self._filled + nbytes
        if filled < lengths[index]:  # fast path: the frame goes on
            self._filled = filled
            return
        nframes = len(lengths)
        while filled >= lengths[index]:
            filled -= lengths[index]
            index += 1
            if index == nframes:
                break
        self._frame_index = index
        self._filled = filled
        if index == nframes:
            self._allocate_through(nframes - 1)  # trailing zero-length frames
            self._stage = _DONE
        elif index:
            self._allocate_through(index - 1)  # zero-length frames just stepped over

    def _current_frame(self) -> memoryview:
        index = self._frame_index
        if len(self._frames) <= index:
            self._allocate_through(index)
        return self._frames[index]

    def _allocate_through(self, last: int) -> None:
        """Make sure frames ``0 .. last`` have their buffers, allocating in order."""
        frames = self._frames
        lengths = self._lengths
        while len(frames) <= last:
            index = len(frames)
            nbytes = lengths[index]
            frames.append(self._allocate(index, nbytes) if nbytes else _empty_frame())

    def _allocate(self, index: int, nbytes: int) -> memoryview:
        try:
            buf = self._allocator(nbytes)
            if type(buf) is bytearray and len(buf) == nbytes:
                return memoryview(buf)  # writable, 'B', contiguous, the size asked
            # A view of its own, even of a memoryview: a caller's ``release()``
            # of its frame then never releases the allocator's.
            view = memoryview(buf)
            if view.readonly:
                raise ValueError("the allocator returned a read-only buffer")
            if view.format != "B" or view.ndim != 1:
                view = view.cast("B")  # TypeError unless C-contiguous
            elif not view.c_contiguous:
                raise ValueError("the allocator returned a non-contiguous buffer")
            if view.nbytes != nbytes:
                if view.nbytes < nbytes:
                    raise ValueError(
                        f"the allocator returned {view.nbytes} bytes for frame {index} of {nbytes} bytes"
                    )
                view = view[:nbytes]
        except BaseException as exc:
            # The stream is mid-message: it cannot go on without this frame.
            self._poison(exc)
            raise
        return view



def _prefix_ok(prefix: int, lengths: tuple[int, ...]) -> bool:
    """Whether ``prefix`` (tcp.py's P) is the prelude of a message of these
    frame sizes plus some whole leading frames, as every stock sender writes
    it.  A stock reader would ``assert`` on any other P, or first allocate
    whatever it says; this reader never uses P for a size."""
    remaining = prefix - COUNT_NBYTES - LENGTH_NBYTES * len(lengths)
    for nbytes in lengths:
        if remaining <= 0:
            break
        remaining -= nbytes
    return remaining == 0


def _prefix_error(prefix: int, nframes: int) -> FramingError:
    prelude_nbytes = COUNT_NBYTES + LENGTH_NBYTES * nframes
    return FramingError(
        f"bad message prefix: P={prefix} is not the {prelude_nbytes}-byte prelude of {nframes} frames "
        "plus whole leading frames"
    )
