# Declarations for compiling _sockcalls.py with Cython in pure-Python mode:
# the same .py, typed by this file.  The core holds its SocketCalls in a
# typed field, so every receive and gathered send is a C call into it.

cdef class SocketCalls:
    cdef readonly object sock                 # the socket, or None
    cdef readonly int fd                      # its fd for the native and held calls (keep_gil), or -1
    cdef readonly bint keep_gil               # the calls may keep the GIL (a real socket's own methods)
    cdef public Py_ssize_t untimed            # native calls left before a timed one (PROBE_EVERY)

    cpdef object recv_into(self, object view)
    cpdef Py_ssize_t sendmsg(self, object buffers, Py_ssize_t nbytes) except -1
    cdef bint _untimed(self, Py_ssize_t nbytes)
    cpdef object off(self)
    cpdef object socket_closed(self)
