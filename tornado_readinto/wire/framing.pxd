# Declarations for compiling framing.py with Cython in pure-Python mode (the
# compiled core): the same .py, typed by this file.  ReadCore (_readcore.pxd)
# cimports FrameReader, so that a read_message driven by a FrameReader calls
# it in C.
#
# The reader's stages (framing.py's "Strategy" has them in full):
#
#   8 bytes (16 with P)        8 * nframes bytes        each frame, in order
#   ---> COUNT ----------> LENGTHS --------------> FRAMES ----------------> DONE
#          ^   nframes == 0: DONE                                           |
#          +--------------------- next_message() --------------------------+
#
#   any error (a limit, an allocator's failure) ---> POISONED: every call raises
#
# What comes from the wire stays a Python int (object) until it has passed the
# limits: a u64 count or length may not fit a C Py_ssize_t, and the limits
# themselves are ints of any size.  Positions within buffers that exist (a
# view, a frame, the header buffers) are C sizes.

cimport cython

from cpython.buffer cimport PyBUF_FULL_RO, PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.long cimport PyLong_FromUnsignedLongLong
from cpython.pyport cimport PY_SSIZE_T_MAX
from cpython.ref cimport Py_INCREF, Py_REFCNT
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM

from tornado_readinto._bytecopy cimport _copy_c


cdef object _lengths_struct(object nframes)
cdef object _empty_frame()
cpdef tuple message_header(object frames)


# message_header's compiled branch: one pass over the frames, each size read
# from the object (bytes, bytearray) or its buffer export (anything else: a
# memoryview's, or what memoryview(frame).nbytes would see), written as a
# little-endian u64 straight into the header's bytes.  The pure build runs
# pack_header(frames_nbytes(frames)).
cdef inline void _put_u64le(unsigned char *out, unsigned long long value) noexcept:
    cdef int k
    for k in range(8):
        out[k] = <unsigned char>(value >> (8 * k))


cdef inline tuple _message_header_c(object frames):
    cdef Py_ssize_t nframes = len(frames)
    cdef Py_ssize_t index = 0
    cdef Py_ssize_t nbytes
    cdef Py_ssize_t total = 8 * (nframes + 1)
    cdef Py_buffer view
    cdef bytes header = PyBytes_FromStringAndSize(NULL, total)
    cdef unsigned char *out = <unsigned char *>PyBytes_AS_STRING(header)
    _put_u64le(out, <unsigned long long>nframes)
    for frame in frames:
        if index == nframes:  # more frames than len() said (a frame's export ran Python)
            raise ValueError("frames changed size while the header was written")
        if type(frame) is bytes:
            nbytes = PyBytes_GET_SIZE(frame)
        elif type(frame) is bytearray:
            nbytes = PyByteArray_GET_SIZE(frame)
        else:
            PyObject_GetBuffer(frame, &view, PyBUF_FULL_RO)
            nbytes = view.len
            PyBuffer_Release(&view)
        index += 1
        _put_u64le(out + 8 * index, <unsigned long long>nbytes)
        if nbytes > PY_SSIZE_T_MAX - total:
            raise OverflowError("the frames' total size does not fit in a Py_ssize_t")
        total += nbytes
    if index != nframes:
        raise ValueError("frames changed size while the header was written")
    return header, total


cdef inline unsigned long long _get_u64le(const unsigned char *p) noexcept:
    cdef unsigned long long value = 0
    cdef int k
    for k in range(8):
        value |= (<unsigned long long>p[k]) << (8 * k)
    return value


# FrameReader._feed_whole_message's header parse in the compiled build (the
# pure build unpacks with struct): the frame sizes of the message that
# `view[offset:end]` starts with (offset: 8 past tcp.py's P field, else 0), as a tuple of ints, with their sum and the largest
# written to *total and *largest; None unless the header is all there, of 1 to
# max_nframes frames (_SMALL_LENGTHS_NFRAMES), each under 2**56 bytes (a
# larger frame cannot be whole in memory: the general path reports it, or
# waits for it).  No limit is checked here.
cdef inline tuple _small_lengths_c(object view, Py_ssize_t offset, Py_ssize_t end, Py_ssize_t max_nframes,
                                   Py_ssize_t *total, Py_ssize_t *largest):
    cdef Py_buffer b
    cdef const unsigned char *p
    cdef unsigned long long nframes
    cdef unsigned long long length
    cdef Py_ssize_t index
    cdef Py_ssize_t sum_ = 0
    cdef Py_ssize_t max_ = 0
    cdef tuple lengths
    cdef object item
    PyObject_GetBuffer(view, &b, PyBUF_SIMPLE)
    try:
        if offset < 0 or end < offset + 8 or end > b.len:
            return None
        p = <const unsigned char *>b.buf + offset
        end -= offset
        nframes = _get_u64le(p)
        if nframes == 0 or nframes > <unsigned long long>max_nframes or <unsigned long long>end < 8 * (nframes + 1):
            return None
        lengths = PyTuple_New(<Py_ssize_t>nframes)  # a tuple left part-filled on None is freed safely
        for index in range(<Py_ssize_t>nframes):
            length = _get_u64le(p + 8 * (index + 1))
            if length >= (<unsigned long long>1) << 56:
                return None
            sum_ += <Py_ssize_t>length
            if <Py_ssize_t>length > max_:
                max_ = <Py_ssize_t>length
            item = PyLong_FromUnsignedLongLong(length)
            Py_INCREF(item)
            PyTuple_SET_ITEM(lengths, index, item)
    finally:
        PyBuffer_Release(&b)
    total[0] = sum_
    largest[0] = max_
    return lengths

@cython.final
cdef class FrameLimits:
    # ints of any size, immutable
    cdef readonly object max_frames
    cdef readonly object max_frame_nbytes
    cdef readonly object max_message_nbytes

    cpdef bint admits(self, object nframes, object total, object largest) except -1
    cpdef object count_error(self, object nframes)
    cpdef object lengths_error(self, object total, object largest)


cdef class FrameReader:
    # -- the allocator and the limits --
    cdef object _allocator                    # nbytes -> writable buffer
    cdef readonly FrameLimits limits
    cdef Py_ssize_t _prefix_nbytes            # 8: each message starts with tcp.py's P field; else 0
    # -- the buffer of split headers, allocated once and reused --
    cdef object _scratch                      # memoryview of 16 + 8 * 64 bytes: a count (P, nframes) and the
                                              # lengths of a small message, split across receives; or None
    cdef object _error                        # the exception that poisoned the reader, or None
    cdef object __weakref__
    # -- the current message --
    cdef int _stage                           # _COUNT, _LENGTHS, _FRAMES, _DONE, _POISONED
    cdef Py_ssize_t _filled                   # bytes received of the COUNT, the LENGTHS or the frame (FRAMES)
    cdef object _nframes                      # int (checked against max_frames), or None
    cdef object _prefix                       # the P field (an int from the wire: checked, never a size)
    cdef object _lengths_view                 # where split lengths are copied, or None
    cdef tuple _lengths                       # the frame sizes (ints), () until they arrive
    cdef list _frames                         # memoryviews of the frames allocated so far (None before the lengths)
    cdef Py_ssize_t _frame_index              # the frame being filled (nframes once DONE)
    cdef object _expected                     # the message's size as far as known (an int: from the wire)
    cdef Py_ssize_t _received                 # bytes of the message received
    cdef Py_ssize_t _handed                   # bytes handed out by the last get_buffer(s)

    # The BufferedProtocol shape (ReadCore calls these).
    @cython.locals(stage=int)
    cpdef object next_nbytes(self)
    @cython.locals(stage=int)
    cpdef object get_buffer(self)
    @cython.locals(handed=Py_ssize_t, index=Py_ssize_t, nframes=Py_ssize_t, lengths=tuple, views=list)
    cpdef list get_buffers(self, object max_buffers)
    @cython.locals(handed=Py_ssize_t, stage=int)
    cpdef object buffer_updated(self, object nbytes)
    @cython.locals(end=Py_ssize_t, pos=Py_ssize_t, consumed=Py_ssize_t, stage=int, index=Py_ssize_t,
                   frames=list, filled=Py_ssize_t, take=Py_ssize_t, count_nbytes=Py_ssize_t)
    cpdef Py_ssize_t feed(self, object data) except -1
    @cython.locals(frames=list)
    cpdef object next_message(self)
    # Internals (no Python call).
    cdef object _reset(self)
    @cython.locals(frames=list, pos=Py_ssize_t, index=Py_ssize_t, c_total=Py_ssize_t, c_largest=Py_ssize_t,
                   offset=Py_ssize_t)
    cdef Py_ssize_t _feed_whole_message(self, object view, Py_ssize_t end) except -1
    cdef object _check_usable(self)
    cdef object _poison(self, object error)
    cdef object _get_scratch(self)
    cdef object _get_count_view(self)
    cdef object _get_lengths_view(self)
    cdef object _got_count_at(self, object view, Py_ssize_t pos)
    cdef object _got_count(self, object nframes)
    cdef object _got_lengths(self, tuple lengths)
    @cython.locals(lengths=tuple, index=Py_ssize_t, filled=Py_ssize_t, nframes=Py_ssize_t)
    cdef object _frames_received(self, Py_ssize_t nbytes)
    @cython.locals(index=Py_ssize_t)
    cdef object _current_frame(self)
    @cython.locals(frames=list, lengths=tuple, index=Py_ssize_t)
    cdef object _allocate_through(self, Py_ssize_t last)
    cdef object _allocate(self, Py_ssize_t index, object nbytes)
