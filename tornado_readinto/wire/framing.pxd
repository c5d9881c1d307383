# Declarations for compiling framing.py with Cython in pure-Python mode (the
# compiled core): the same .py, typed by this file.  ReadCore (_readcore.pxd)
# cimports FrameReader, so that a read_message driven by a FrameReader calls
# it in C.
#
# The reader's stages (framing.py's "Strategy" has them in full):
#
#   8 bytes (16 with P)        8 * nframes bytes        each frame, in order
#   ---> COUNT ----------> LENGTHS --------------> FRAMES ----------------> DONE
#          ^   nframes == 0: DONE                                           |
#          +--------------------- next_message() --------------------------+
#
#   any error (a limit, an allocator's failure) ---> POISONED: every call raises
#
# What comes from the wire stays a Python int (object) until it has passed the
# limits: a u64 count or length may not fit a C Py_ssize_t, and the limits
# themselves are ints of any size.  Positions within buffers that exist (a
# view, a frame, the header buffers) are C sizes.

cimport cython

from tornado_readinto._native cimport copy_into, message_header_of, small_lengths


cdef object _lengths_struct(object nframes)
cdef object _empty_frame()
cpdef tuple message_header(object frames)


@cython.final
cdef class FrameLimits:
    # ints of any size, immutable
    cdef readonly object max_frames
    cdef readonly object max_frame_nbytes
    cdef readonly object max_message_nbytes

    cpdef bint admits(self, object nframes, object total, object largest) except -1
    cpdef object count_error(self, object nframes)
    cpdef object lengths_error(self, object total, object largest)


cdef class FrameReader:
    # -- the allocator and the limits --
    cdef object _allocator                    # nbytes -> writable buffer
    cdef readonly FrameLimits limits
    cdef Py_ssize_t _prefix_nbytes            # 8: each message starts with tcp.py's P field; else 0
    # -- the buffer of split headers, allocated once and reused --
    cdef object _scratch                      # memoryview of 16 + 8 * 64 bytes: a count (P, nframes) and the
                                              # lengths of a small message, split across receives; or None
    cdef object _error                        # the exception that poisoned the reader, or None
    cdef object __weakref__
    # -- the current message --
    cdef int _stage                           # _COUNT, _LENGTHS, _FRAMES, _DONE, _POISONED
    cdef Py_ssize_t _filled                   # bytes received of the COUNT, the LENGTHS or the frame (FRAMES)
    cdef object _nframes                      # int (checked against max_frames), or None
    cdef object _prefix                       # the P field (an int from the wire: checked, never a size)
    cdef object _lengths_view                 # where split lengths are copied, or None
    cdef tuple _lengths                       # the frame sizes (ints), () until they arrive
    cdef list _frames                         # memoryviews of the frames allocated so far (None before the lengths)
    cdef Py_ssize_t _frame_index              # the frame being filled (nframes once DONE)
    cdef object _expected                     # the message's size as far as known (an int: from the wire)
    cdef Py_ssize_t _received                 # bytes of the message received
    cdef Py_ssize_t _handed                   # bytes handed out by the last get_buffer(s)

    # The BufferedProtocol shape (ReadCore calls these).
    @cython.locals(stage=int)
    cpdef object next_nbytes(self)
    @cython.locals(stage=int)
    cpdef object get_buffer(self)
    @cython.locals(handed=Py_ssize_t, index=Py_ssize_t, nframes=Py_ssize_t, lengths=tuple, views=list)
    cpdef list get_buffers(self, object max_buffers)
    @cython.locals(handed=Py_ssize_t, stage=int)
    cpdef object buffer_updated(self, object nbytes)
    @cython.locals(end=Py_ssize_t, pos=Py_ssize_t, consumed=Py_ssize_t, stage=int, index=Py_ssize_t,
                   frames=list, filled=Py_ssize_t, take=Py_ssize_t, count_nbytes=Py_ssize_t)
    cpdef Py_ssize_t feed(self, object data) except -1
    @cython.locals(frames=list)
    cpdef object next_message(self)
    # Internals (no Python call).
    cdef object _reset(self)
    @cython.locals(frames=list, pos=Py_ssize_t, index=Py_ssize_t, c_total=Py_ssize_t, c_largest=Py_ssize_t,
                   offset=Py_ssize_t)
    cdef Py_ssize_t _feed_whole_message(self, object view, Py_ssize_t end) except -1
    cdef object _check_usable(self)
    cdef object _poison(self, object error)
    cdef object _get_scratch(self)
    cdef object _get_count_view(self)
    cdef object _get_lengths_view(self)
    cdef object _got_count_at(self, object view, Py_ssize_t pos)
    cdef object _got_count(self, object nframes)
    cdef object _got_lengths(self, tuple lengths)
    @cython.locals(lengths=tuple, index=Py_ssize_t, filled=Py_ssize_t, nframes=Py_ssize_t)
    cdef object _frames_received(self, Py_ssize_t nbytes)
    @cython.locals(index=Py_ssize_t)
    cdef object _current_frame(self)
    @cython.locals(frames=list, lengths=tuple, index=Py_ssize_t)
    cdef object _allocate_through(self, Py_ssize_t last)
    cdef object _allocate(self, Py_ssize_t index, object nbytes)
