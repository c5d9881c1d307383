# Declarations for compiling writebuffer.py with Cython in pure-Python mode
# (the compiled core): the same .py, typed by this file.  StreamCore
# (_streamcore.pxd) cimports the class, so that its calls of append,
# peek_buffers and advance are C calls.
#
# Sizes are C Py_ssize_t fields; the methods take Python ints and check them
# as the pure build does (a huge size is no error where the pure build takes
# it) before anything becomes a C size.

cimport cython


cdef class ChunkedWriteBuffer:
    # -- the segments: bytearray chunks we own, and 'B' views of large pieces --
    cdef readonly object _buffers             # collections.deque of segments, oldest first; () while empty
    cdef readonly Py_ssize_t _first_pos       # next unsent byte in _buffers[0] (0 if empty)
    cdef readonly Py_ssize_t _nbytes          # unsent bytes in total
    # -- the limits: read at every append, and may be changed at any time --
    cdef public Py_ssize_t _large_buf_threshold   # larger pieces are held by reference
    cdef public Py_ssize_t _chunk_nbytes      # a chunk takes no small piece once this long

    # The queue (StreamCore calls append, peek_buffers and advance; the face
    # calls clear).  Preconditions are in each docstring: a peeked view is
    # released before the buffer is modified.
    @cython.locals(nbytes=Py_ssize_t)
    cpdef object append(self, object data)
    @cython.locals(pos=Py_ssize_t)
    cpdef object peek(self, object size)
    @cython.locals(pos=Py_ssize_t, remaining=Py_ssize_t, nviews=Py_ssize_t, seg_nbytes=Py_ssize_t,
                   end=Py_ssize_t, views=list)
    cpdef list peek_buffers(self, object max_buffers, object max_nbytes)
    @cython.locals(todo=Py_ssize_t, pos=Py_ssize_t, left=Py_ssize_t)
    cpdef object advance(self, object nbytes)
    cpdef object clear(self)
    cdef object _queue(self)
