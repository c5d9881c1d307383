"""The pure build's side of every difference between the two builds.

Each function here has a C twin of the same name and result in
``_native.pxd``, inline in the compiled modules that cimport it; a module
that uses them imports these under ``if not cython.compiled:``, its one
build switch, and its call sites carry none.  This module is never compiled,
and imports nothing of the package: the core and the wire format both use it.
"""

from __future__ import annotations

import struct
from typing import Any

__all__ = ["copy_into", "message_header_of", "small_lengths", "reusable_view"]

_U64 = struct.Struct("<Q")


def copy_into(dst: Any, dst_start: int, src: Any, src_start: int, nbytes: int) -> None:
    """``dst[dst_start : dst_start + nbytes] = src[src_start : src_start + nbytes]``
    (``src`` a 1-D ``'B'`` memoryview, ``dst`` one or a ``bytearray``)."""
    dst[dst_start : dst_start + nbytes] = src[src_start : src_start + nbytes]


def message_header_of(frames: Any) -> tuple[bytes, int]:
    """The header of a message of ``frames`` and the bytes the whole message
    takes on the wire (see `tornado_readinto.wire.framing.message_header`).

    :raises ValueError: ``frames`` yielded a number of frames other than its
        length.
    """
    nframes = len(frames)
    # The rule plainly (the C twin skips the export for bytes and bytearray).
    sizes = [memoryview(frame).nbytes for frame in frames]
    if len(sizes) != nframes:
        raise ValueError("frames changed size while the header was written")
    return struct.pack(f"<{nframes + 1}Q", nframes, *sizes), 8 * (1 + nframes) + sum(sizes)


def small_lengths(view: Any, offset: int, end: int, max_nframes: int) -> tuple[tuple[int, ...], int, int] | None:
    """``(lengths, total, largest)`` of the message header at
    ``view[offset:end]``: its frame sizes, their sum and the largest; None
    unless the header is all there, of 1 to ``max_nframes`` frames, each
    under ``2**56`` bytes.  No limit is checked here."""
    if offset < 0 or end < offset + 8 or end > len(view):
        return None
    (nframes,) = _U64.unpack_from(view, offset)
    if not 0 < nframes <= max_nframes or end - offset < 8 * (nframes + 1):
        return None
    lengths = struct.unpack_from(f"<{nframes}Q", view, offset + 8)
    largest = max(lengths)
    if largest >= 1 << 56:
        return None
    return lengths, sum(lengths), largest


def reusable_view(ra: bytearray, view: memoryview) -> memoryview | None:
    """A view of ``ra`` to keep for another stream, or None when any view of
    it may be alive elsewhere.  ``view`` (the core's one view of ``ra``) is
    released first (a holder of that view object finds it released); ``ra``
    is then unshared if it can still be resized, which it was made to do
    without a reallocation (one byte of spare capacity)."""
    try:
        view.release()
    except BufferError:
        return None  # exported: it goes with its holder
    try:
        ra.append(0)
    except BufferError:
        return None
    del ra[-1]
    return memoryview(ra)
