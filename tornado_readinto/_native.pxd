# The compiled build's side of every difference between the two builds: C
# functions, inline (compiled into each module that cimports them), whose
# pure-Python twins of the same names and results are _native.py.  A module
# that uses them cimports them in its .pxd and imports the twins in its .py
# under ``if not cython.compiled:`` (the one build switch it has); its call
# sites carry none.  _native.py is never compiled.

from cpython.buffer cimport PyBUF_FULL_RO, PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.long cimport PyLong_FromUnsignedLongLong
from cpython.pyport cimport PY_SSIZE_T_MAX
from cpython.ref cimport Py_INCREF, Py_REFCNT
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.string cimport memmove


# dst[dst_start : dst_start + nbytes] = src[src_start : src_start + nbytes]:
# one memmove between the two buffers' exports (each contiguous bytes, the
# destination writable), bounds checked, with no memoryview slice made.
cdef inline int copy_into(object dst, Py_ssize_t dst_start, object src, Py_ssize_t src_start,
                          Py_ssize_t nbytes) except -1:
    cdef Py_buffer d
    cdef Py_buffer s
    PyObject_GetBuffer(dst, &d, PyBUF_WRITABLE)
    try:
        PyObject_GetBuffer(src, &s, PyBUF_SIMPLE)
        try:
            if (dst_start < 0 or src_start < 0 or nbytes < 0
                    or nbytes > d.len - dst_start or nbytes > s.len - src_start):
                raise ValueError("copy_into: a range that is not inside its buffer")
            memmove(<char *>d.buf + dst_start, <char *>s.buf + src_start, <size_t>nbytes)
        finally:
            PyBuffer_Release(&s)
    finally:
        PyBuffer_Release(&d)
    return 0


# framing.message_header: (the header, the message's bytes on the wire).  One
# pass over the frames, each size read from the object (bytes, bytearray) or
# its buffer export (anything else: a memoryview's, or what
# memoryview(frame).nbytes would see), written as a little-endian u64
# straight into the header's bytes.
cdef inline void _put_u64le(unsigned char *out, unsigned long long value) noexcept:
    cdef int k
    for k in range(8):
        out[k] = <unsigned char>(value >> (8 * k))


cdef inline tuple message_header_of(object frames):
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


# FrameReader._feed_whole_message's header parse: (lengths, total, largest),
# the frame sizes of the message that `view[offset:end]` starts with (offset:
# 8 past tcp.py's P field, else 0) as a tuple of ints, their sum and the
# largest; None unless the header is all there, of 1 to
# max_nframes frames (_SMALL_LENGTHS_NFRAMES), each under 2**56 bytes (a
# larger frame cannot be whole in memory: the general path reports it, or
# waits for it).  No limit is checked here.
cdef inline tuple small_lengths(object view, Py_ssize_t offset, Py_ssize_t end, Py_ssize_t max_nframes):
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
    return lengths, sum_, max_


# CPython's own fields of the objects that read-ahead storage is made of
# (Include/cpython/memoryobject.h and bytearrayobject.h, unchanged since
# 3.3): what tells, in C, whether any view of a buffer is alive.
cdef extern from "Python.h":
    ctypedef struct _PyManagedBufferObject:
        Py_ssize_t exports                    # memoryviews registered with it (a slice is one)
    ctypedef struct PyMemoryViewObject:
        _PyManagedBufferObject *mbuf
        Py_ssize_t exports                    # buffer exports of this view
    ctypedef struct PyByteArrayObject:
        Py_ssize_t ob_exports                 # buffer exports of the bytearray


# ReadCore._release_read_ahead's test: ``view`` itself, to be kept for
# another stream, when ``view``, the core's one view of ``ra`` (held by the
# caller's local variable alone), has no other reference, no slice or copy
# registered beside it and no export, and ``ra`` no export but the view's:
# then no code anywhere can reach the storage.  Else None.
cdef inline object reusable_view(object ra, object view):
    cdef PyMemoryViewObject *mv = <PyMemoryViewObject *>view
    if (Py_REFCNT(view) == 1 and mv.exports == 0 and mv.mbuf.exports == 1
            and (<PyByteArrayObject *>ra).ob_exports == 1):
        return view
    return None
