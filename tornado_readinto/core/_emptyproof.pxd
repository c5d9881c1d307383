# Declarations for compiling _emptyproof.py with Cython in pure-Python mode:
# the same .py, typed by this file.  The stream's policy holds its EmptyProof
# in a typed field, so every hook below is a C call.

cdef class EmptyProof:
    cdef readonly double valid_s              # how long a proof holds (0: never)
    cdef public bint readable                 # False only after a receive proved the socket empty
    cdef public bint short                    # ...by a short recv (not EAGAIN, EOF or an error)
    cdef public bint unconfirmed              # not used until a receive or a send confirms the socket
    cdef public double at                     # perf_counter() of the proof, or of the last write

    cpdef bint holds(self, bint read_registered)
    cpdef object receiving(self)
    cpdef object emptied(self, bint short)
    cpdef object ended(self)
    cpdef object data_ready(self)
    cpdef object wrote(self)
