# A byte copy for the compiled build, in C (an inline function: no module
# of its own).  _readcore.py and framing.py call it in their
# `if cython.compiled:` branches, where the pure build assigns a memoryview
# slice (dst[dst_start : dst_start + nbytes] = src[src_start : src_start +
# nbytes]): one memmove between the two buffers' exports (each contiguous
# bytes, the destination writable), bounds checked, with no memoryview slice
# objects made.

from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from libc.string cimport memmove


cdef inline int _copy_c(object dst, Py_ssize_t dst_start, object src, Py_ssize_t src_start,
                        Py_ssize_t nbytes) except -1:
    cdef Py_buffer d
    cdef Py_buffer s
    PyObject_GetBuffer(dst, &d, PyBUF_WRITABLE)
    try:
        PyObject_GetBuffer(src, &s, PyBUF_SIMPLE)
        try:
            if (dst_start < 0 or src_start < 0 or nbytes < 0
                    or nbytes > d.len - dst_start or nbytes > s.len - src_start):
                raise ValueError("_copy_c: a range that is not inside its buffer")
            memmove(<char *>d.buf + dst_start, <char *>s.buf + src_start, <size_t>nbytes)
        finally:
            PyBuffer_Release(&s)
    finally:
        PyBuffer_Release(&d)
    return 0
