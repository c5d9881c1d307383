# Declarations for compiling _policy.py with Cython in pure-Python mode: the
# same .py, typed by this file.  The mechanism (StreamCore) and the face's
# state (FaceCore) hold the policy in a typed field, and the policy its
# LowWaterMark, so every hook is a C call.

cpdef bint lowat_applies(object sock) except -1   # (LowWaterMark's, below)


cdef class LowWaterMark:
    cdef readonly object sock                 # the socket the marks are set on, or None
    cdef readonly bint ok                     # marks may be set (False after a setsockopt failed)
    cdef readonly Py_ssize_t mark             # the mark set last (1: the kernel's default)

    cpdef bint wait(self, Py_ssize_t missing) except -1
    cpdef object reset(self)
    cdef object _set(self, Py_ssize_t nbytes)
    cpdef Py_ssize_t unreported_nbytes(self) except -1
    cpdef object off(self)


cdef class StreamPolicy:
    # -- the proof that the socket is empty --
    cdef readonly double empty_proof_s        # how long a proof holds (0: never)
    cdef readonly bint readable               # False only after a receive proved the socket empty
    cdef readonly bint short                  # ...by a short recv (not EAGAIN, EOF or an error)
    cdef readonly bint unconfirmed            # not used until a receive or a send confirms the socket
    cdef readonly double proved_at            # perf_counter() of the proof, or of the last write
    # -- the other heuristics --
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
