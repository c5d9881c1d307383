# Declarations for compiling _policy.py with Cython in pure-Python mode: the
# same .py, typed by this file.  The mechanism (StreamCore) and the face's
# state (FaceCore) hold the policy in a typed field, so every hook is a C call.

from tornado_readinto.core._emptyproof cimport EmptyProof
from tornado_readinto.core._lowat cimport LowWaterMark


cdef class StreamPolicy:
    cdef readonly EmptyProof proof            # the proof that the socket is empty
    cdef readonly LowWaterMark lowat          # the receive low-water mark of large waits
    cdef readonly object busy_poll            # BusyPoll or None
    cdef readonly bint eager                  # waiting reads get an eager Future
    cdef readonly bint eager_contended        # ...also once the GIL was seen contended
    cdef readonly Py_ssize_t cork_max_nbytes  # most bytes the cork holds (0: no cork)

    cpdef bint skip_receive(self, bint read_registered) except -1
    cpdef object receiving(self)
    cpdef object drained(self, bint short)
    cpdef object ended(self)
    cpdef bint ended_short(self) except -1
    cpdef object unconfirm(self)
    cpdef bint keep_receiving(self) except -1
    cpdef object read_done(self)
    cpdef object parked(self, Py_ssize_t wait_nbytes)
    cpdef object data_ready(self)
    cpdef object may_have_data(self)
    cpdef object wrote(self)
    cpdef object confirmed(self)
    cpdef bint eager_future(self) except -1
    cpdef object off(self)
