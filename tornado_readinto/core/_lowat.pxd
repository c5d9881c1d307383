# Declarations for compiling _lowat.py with Cython in pure-Python mode: the
# same .py, typed by this file.  The stream's policy holds its LowWaterMark in
# a typed field, so its hooks are C calls.

cpdef bint lowat_applies(object sock) except -1


cdef class LowWaterMark:
    cdef readonly object sock                 # the socket the marks are set on, or None
    cdef readonly bint ok                     # marks may be set (False after a setsockopt failed)
    cdef readonly Py_ssize_t mark             # the mark set last (1: the kernel's default)

    cpdef bint wait(self, Py_ssize_t missing) except -1
    cpdef object reset(self)
    cdef object _set(self, Py_ssize_t nbytes)
    cpdef Py_ssize_t unreported_nbytes(self) except -1
    cpdef object off(self)
