# Declarations for compiling _facecore.py with Cython in pure-Python mode:
# the same .py, typed by this file.  The face's per-message state in C fields
# of one object that holds the stream's mechanism (docs/internals.rst draws
# where each Tornado attribute lives).

cimport cython

from tornado_readinto.core._policy cimport StreamPolicy
from tornado_readinto.core._readcore cimport ReadCore
from tornado_readinto.core._streamcore cimport StreamCore


cdef class LoopShared:
    cdef readonly object resolved             # the resolved Future of writes sent at once
    cdef readonly object context              # the empty Context of on_read_done
    cdef object __weakref__


@cython.final
cdef class FaceCalls:
    # what a FaceCore may call on its face: functions of the face's class
    cdef readonly object fail                 # (face, error, where) -> bool
    cdef readonly object failed_read          # (face, error, where) -> Future
    cdef readonly object add_io_state         # (face, events)
    cdef readonly object listen_for_close     # (face): Tornado's _maybe_add_error_listener
    cdef readonly object dispatch             # (face, fd, events): the general readiness callback
    cdef readonly object readable             # (face): a READ event, where not plain_events
    cdef readonly object writable             # (face): a WRITE event, where not plain_events
    cdef readonly object update_state         # (face)
    cdef readonly object uncork               # (face)
    cdef readonly bint plain_events           # the face's _readable/_writable are the plain ones


cdef class FaceCore:
    # -- settled in __init__ --
    cdef readonly object face                 # the ReadIntoIOStream
    cdef readonly object loop                 # its asyncio loop
    cdef readonly StreamCore io               # the mechanism: receive loop and write queue
    cdef readonly FaceCalls calls             # what it may call on the face (one per face class)
    cdef readonly bint drops_on_error         # the loop may stop watching the fd after an error event
    # -- Tornado's attributes (the face's properties) --
    cdef public object read_future            # _read_future: a Future or None
    cdef public object state                  # _state: None or the registered events (an int)
    cdef public bint connecting               # _connecting
    cdef public object write_futures          # _write_futures: deque of (write index, Future), None while empty
    cdef public object max_write_nbytes       # max_write_buffer_size: int or None
    # -- the readiness callback --
    cdef public bint in_events                # a readiness callback of the stream runs
    cdef public object woken                  # (future, callbacks) to run as it returns, or None
    # -- Futures --
    cdef readonly LoopShared shared           # the loop's: the resolved Future of writes sent at once...
    cdef public object filled_future          # the resolved Future of the last read_into filled at once
    cdef public Py_ssize_t filled_nbytes      # ...and its count (-1: none)
    cdef public object done_cb                # on_read_done, bound once

    # Reads.
    @cython.locals(reads=ReadCore)
    cpdef object read_into_future(self, object buf, bint partial=*)
    cpdef object filled(self, Py_ssize_t nbytes)
    cpdef object read_bytes_future(self, object num_bytes, bint partial=*)
    cpdef object read_message_future(self, object reader)
    cpdef object start_failed(self, object error)
    cpdef object busy(self)
    @cython.locals(io=StreamCore)
    cpdef object started(self, object result)
    cpdef object complete(self, object result)
    cpdef object listen_if_idle(self)
    cpdef object on_read_done(self, object future)
    cpdef object on_read_cancelled(self, object future)
    cpdef bint read_would_wait(self) except -1
    @cython.locals(io=StreamCore, policy=StreamPolicy, left=bint, completed=bint)
    cpdef object readable_event(self)
    @cython.locals(io=StreamCore, calls=FaceCalls)
    cpdef object read_ready(self)
    cpdef object end_events(self)
    # Writes.
    @cython.locals(io=StreamCore)
    cpdef object write_future(self, object buffers)
    cpdef object writable_event(self)
    cpdef bint uncork(self) except -1
