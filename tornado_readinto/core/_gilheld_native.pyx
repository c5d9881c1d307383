"""The calls of `tornado_readinto.core._gilheld` as native C calls: ``recv(2)``
and ``writev(2)`` straight from C, keeping the GIL (no ``nogil`` block: a
non-blocking call returns at once, and keeping the GIL is the point).

The compiled build only.  This module is C calls and nothing else, so it is
a ``.pyx`` with no ``.py`` of the same name: compiled in Cython's pure-Python
mode, a ``.py`` would have nothing it could run as Python.  Its pure twin is
the ctypes code in ``_gilheld`` (`recv_into_ctypes`, `writev_ctypes`), which
the pure build runs (``TORNADO_READINTO_NO_EXTENSIONS``: the package's
meta-path finder refuses this module) and which
``tests/core/test_gilheld_native.py`` feeds the same random inputs as this one.

The contract is ``_gilheld``'s, to the exception type: same arguments,
results and errors.  Each buffer is exported (``PyObject_GetBuffer``) for the
duration of the call only, and released on every path.
"""

from cpython.buffer cimport PyBUF_FULL_RO, PyBuffer_IsContiguous, PyBuffer_Release, PyObject_GetBuffer
from cpython.exc cimport PyErr_CheckSignals, PyErr_SetFromErrno
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.pystate cimport PyInterpreterState, PyInterpreterState_ThreadHead, PyThreadState, PyThreadState_Get, PyThreadState_Next
from libc.errno cimport EINTR, errno
from posix.uio cimport iovec
from posix.uio cimport writev as c_writev


cdef extern from "Python.h":
    PyInterpreterState *PyThreadState_GetInterpreter(PyThreadState *tstate)


cdef extern from "<sys/socket.h>" nogil:
    ssize_t c_recv "recv" (int sockfd, void *buf, size_t nbytes, int flags)


cdef int _raise_unless_interrupted() except -1:
    """After a call that failed (``errno`` set): raise ``OSError(errno,
    strerror)`` unless it was EINTR, else run the signal handlers, whose
    exception ends the caller's retries; return 0 to retry."""
    if errno != EINTR:
        PyErr_SetFromErrno(OSError)
    return PyErr_CheckSignals()


# The buffers are asked for as ``memoryview(obj)`` asks (PyBUF_FULL_RO: any
# layout, read-only or not), and their layout is checked here, so that the
# errors are the ctypes twin's: it exports through ``memoryview``.


def recv_into(int fd, view):
    """`_gilheld.recv_into_ctypes` in C: ``recv(fd, view, nbytes, 0)`` with
    the GIL kept, to the same arguments, result and exceptions."""
    cdef Py_buffer target
    cdef ssize_t received
    PyObject_GetBuffer(view, &target, PyBUF_FULL_RO)
    try:
        if target.readonly:
            raise TypeError("underlying buffer is not writable")
        if not PyBuffer_IsContiguous(&target, b'C'):
            raise TypeError("underlying buffer is not C contiguous")
        if target.len == 0:
            raise ValueError("recv_into: the buffer is empty")
        while True:
            received = c_recv(fd, target.buf, <size_t>target.len, 0)
            if received >= 0:
                return received
            _raise_unless_interrupted()
    finally:
        PyBuffer_Release(&target)


def writev(int fd, buffers):
    """`_gilheld.writev_ctypes` in C: ``writev(fd, buffers)`` with the GIL
    kept, to the same arguments, result and exceptions."""
    cdef Py_ssize_t count = len(buffers)
    cdef Py_ssize_t i
    cdef Py_ssize_t nexported = 0  # exports[:nexported] are held
    cdef ssize_t sent
    cdef Py_buffer *export
    # One entry per buffer, empty ones included (zero-length), so that the
    # count the kernel sees, and its EINVAL over IOV_MAX, are the caller's.
    cdef iovec *iov = <iovec *>PyMem_Malloc(max(count, 1) * sizeof(iovec))
    cdef Py_buffer *exports = <Py_buffer *>PyMem_Malloc(max(count, 1) * sizeof(Py_buffer))
    try:
        if iov == NULL or exports == NULL:
            raise MemoryError()
        for i in range(count):
            export = &exports[nexported]
            PyObject_GetBuffer(buffers[i], export, PyBUF_FULL_RO)
            if export.len == 0:
                PyBuffer_Release(export)
                iov[i].iov_base = NULL
                iov[i].iov_len = 0
                continue
            nexported += 1
            if not PyBuffer_IsContiguous(export, b'C'):
                raise BufferError(f"writev: buffer {i} is not C-contiguous")
            iov[i].iov_base = export.buf
            iov[i].iov_len = <size_t>export.len
        while True:
            sent = c_writev(fd, iov, <int>count)
            if sent >= 0:
                return sent
            _raise_unless_interrupted()
    finally:
        for i in range(nexported):
            PyBuffer_Release(&exports[i])
        PyMem_Free(exports)
        PyMem_Free(iov)


def other_threads():
    """True while the interpreter has a thread besides the caller's: any
    other thread state, which every thread that runs Python code (or can
    ask for the GIL) has.  A walk of the interpreter's list of thread
    states, done holding the GIL: a few C instructions, where
    ``threading.active_count()`` (the pure build's test) takes a lock and
    runs Python code.
    """
    cdef PyThreadState *current = PyThreadState_Get()
    cdef PyThreadState *state = PyInterpreterState_ThreadHead(PyThreadState_GetInterpreter(current))
    while state != NULL:
        if state != current:
            return True
        state = PyThreadState_Next(state)
    return False
