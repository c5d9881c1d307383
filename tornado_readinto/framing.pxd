# Declarations for compiling framing.py with Cython in pure-Python mode (the
# compiled core): the same .py, typed by this file.  ReadCore (_readcore.pxd)
# cimports FrameReader, so that a read_message driven by a FrameReader calls
# it in C.
#
# The reader's stages (framing.py's "Strategy" has them in full):
#
#            8 bytes           8 * nframes bytes        each frame, in order
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

from tornado_readinto._bytecopy cimport _copy_c


cdef object _lengths_struct(object nframes)
cdef object _empty_frame()


cdef class FrameReader:
    # -- the allocator and the limits (ints of any size) --
    cdef object _allocator                    # nbytes -> writable buffer
    cdef object _max_frames
    cdef object _max_frame_nbytes
    cdef object _max_message_nbytes
    # -- buffers of the header, allocated once and reused --
    cdef object _count_view                   # memoryview of 8 bytes: a count split across receives
    cdef object _small_lengths_view           # memoryview of 8 * 64 bytes: the lengths of a small message
    cdef object _error                        # the exception that poisoned the reader, or None
    cdef object __weakref__
    # -- the current message --
    cdef int _stage                           # _COUNT, _LENGTHS, _FRAMES, _DONE, _POISONED
    cdef Py_ssize_t _header_filled            # bytes of the COUNT or LENGTHS stage received
    cdef object _nframes                      # int (checked against max_frames), or None
    cdef object _lengths_view                 # where split lengths are copied, or None
    cdef tuple _lengths                       # the frame sizes (ints), () until they arrive
    cdef list _frames                         # memoryviews of the frames allocated so far
    cdef Py_ssize_t _frame_index              # the frame being filled (nframes once DONE)
    cdef Py_ssize_t _frame_filled             # bytes of that frame received
    cdef object _expected                     # the message's size as far as known (an int: from the wire)
    cdef Py_ssize_t _received                 # bytes of the message received
    cdef Py_ssize_t _handed                   # bytes handed out by the last get_buffer(s)

    # The BufferedProtocol shape (ReadCore calls these).
    @cython.locals(stage=int)
    cpdef object get_buffer(self)
    @cython.locals(handed=Py_ssize_t, index=Py_ssize_t, nframes=Py_ssize_t, lengths=tuple, views=list)
    cpdef list get_buffers(self, object max_buffers)
    @cython.locals(handed=Py_ssize_t, stage=int)
    cpdef object buffer_updated(self, object nbytes)
    @cython.locals(end=Py_ssize_t, pos=Py_ssize_t, consumed=Py_ssize_t, stage=int, index=Py_ssize_t,
                   frames=list, filled=Py_ssize_t, take=Py_ssize_t)
    cpdef Py_ssize_t feed(self, object data) except -1
    @cython.locals(frames=list)
    cpdef object next_message(self)
    # Internals (no Python call).
    cdef object _reset(self)
    @cython.locals(frames=list, pos=Py_ssize_t, index=Py_ssize_t)
    cdef Py_ssize_t _feed_whole_message(self, object view, Py_ssize_t end) except -1
    cdef object _check_usable(self)
    cdef object _poison(self, object error)
    cdef object _get_lengths_view(self)
    cdef object _got_count(self, object nframes)
    cdef object _got_lengths(self, tuple lengths)
    @cython.locals(lengths=tuple, index=Py_ssize_t, filled=Py_ssize_t, nframes=Py_ssize_t)
    cdef object _frames_received(self, Py_ssize_t nbytes)
    @cython.locals(index=Py_ssize_t)
    cdef object _current_frame(self)
    @cython.locals(frames=list, lengths=tuple, index=Py_ssize_t)
    cdef object _allocate_through(self, Py_ssize_t last)
    cdef object _allocate(self, Py_ssize_t index, object nbytes)
