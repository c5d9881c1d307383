# Types of benchmarks/spike/_spikecore.py (Cython pure-Python mode: the same
# .py runs uncompiled as the pure twin).  Compiled-core spike; not part of
# the package (built on demand by benchmarks.spike, or python -m benchmarks.spike).
#
# States of the read side (one pending read at most):
#
#     IDLE --read_into (read-ahead short)--> PENDING --bytes/EOF/error--> IDLE
#       ^  \--read_into (read-ahead enough)--> resolved at once (stays IDLE)
#       |
#     the readable callback stays registered (level-triggered) except while
#     the read-ahead is full and no read is pending; CLOSED is final.

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.object cimport PyObject_Call
from libc.errno cimport errno, EINTR, EAGAIN
from libc.string cimport memcpy, memmove, memset
from posix.uio cimport iovec

cdef extern from "<sys/socket.h>" nogil:
    ssize_t recv(int fd, void *buf, size_t n, int flags)
    ssize_t send(int fd, const void *buf, size_t n, int flags)
    cdef struct msghdr:
        void *msg_name
        iovec *msg_iov
        size_t msg_iovlen
        void *msg_control
        size_t msg_controllen
        int msg_flags
    ssize_t sendmsg(int fd, const msghdr *msg, int flags)
    enum: MSG_NOSIGNAL

# C copies of the module's constants (see the .py).
cdef Py_ssize_t _DIRECT_NBYTES

# Buffers per sendmsg; a longer list is joined into one copy (spike limit).
cdef enum:
    SPIKE_MAX_IOV = 64


cdef class SpikeStream:
    # -- socket and loop
    cdef object _sock                 # the socket object (closed by close())
    cdef int _fd
    cdef object _loop                 # the asyncio loop (asyncio's or uvloop)
    cdef object _future_type          # asyncio.Future when the loop's create_future is asyncio's own, else None
    cdef object _future_kwargs        # {"loop": loop} for _future_type

    # -- read-ahead: valid bytes are _ra[_start:_end]
    cdef bytearray _ra                # allocated once, never resized
    cdef object _ra_view              # pure twin only: memoryview(_ra)
    cdef char *_ra_ptr                # compiled only: its storage
    cdef Py_ssize_t _ra_nbytes
    cdef Py_ssize_t _start
    cdef Py_ssize_t _end

    # -- the pending read (_future is not None)
    cdef object _future               # resolved with the byte count
    cdef bint _has_target             # _target (compiled) / _tview (pure) holds the caller's buffer
    cdef Py_buffer _target            # compiled only: the caller's buffer, exported while pending
    cdef object _tview                # pure twin only: a 'B' memoryview of it
    cdef Py_ssize_t _want             # its size (nbytes)
    cdef Py_ssize_t _filled           # bytes of it filled so far
    cdef bint _partial

    # -- writes
    cdef object _sent                 # a done Future shared by the writes the kernel took whole
    cdef bint _share_done_reads       # (an experiment) reads done at once share a resolved Future
    cdef object _done_read            # ... the last one
    cdef Py_ssize_t _done_read_nbytes # ... and its result
    cdef bytearray _wq                # bytes the kernel did not take, in order
    cdef Py_ssize_t _wq_start         # first unsent byte of _wq
    cdef object _wfuture              # resolved once _wq is sent
    cdef Py_buffer _pbufs[SPIKE_MAX_IOV]  # compiled only: one writelines' exports
    cdef iovec _iov[SPIKE_MAX_IOV]

    # -- state
    cdef bint _closed
    cdef bint _reading                # the readable callback is registered
    cdef bint _writing                # the writable callback is registered
    cdef public object error          # why the stream closed (None: EOF or close())
    cdef readonly Py_ssize_t nbytes_received

    # Incoming flow
    cdef object _new_future(self)
    cdef Py_ssize_t _recv(self, bint direct) except -3
    cdef int _copy_out(self, Py_ssize_t n) except -1
    cdef int _release_target(self) except -1
    cdef int _finish(self) except -1
    cdef int _watch(self) except -1
    cdef int _unwatch(self) except -1
    cdef int _compact(self) except -1

    # Outgoing flow
    cdef int _sendmsg(self, list buffers) except -2
    cdef int _start_queue(self, bytearray wq) except -1
    cdef int _queue(self, object buffers, Py_ssize_t skip) except -1
