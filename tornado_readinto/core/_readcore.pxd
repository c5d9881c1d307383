# Declarations for compiling _readcore.py with Cython in pure-Python mode
# (the compiled core): the same .py, typed by this file.  See _streamcore.pxd for the
# states of a stream's core.

cimport cython

from tornado_readinto._native cimport copy_into, reusable_view
from tornado_readinto.wire.framing cimport FrameReader


# A C constant (see _readcore.py).
cdef Py_ssize_t POOL_MAX_NBYTES
cdef Py_ssize_t SPARE_MAX_NBYTES
cdef Py_ssize_t _NO_LIMIT


@cython.final
cdef class ReadAheadPool:
    cdef readonly Py_ssize_t buffer_nbytes    # the size of every buffer
    cdef readonly Py_ssize_t max_buffers      # the most free buffers kept
    cdef readonly Py_ssize_t misses           # takes that found no free buffer
    cdef readonly list _free                  # memoryviews over whole bytearrays; last given back last

    cpdef bint has_free(self)
    cpdef object take(self)
    cpdef bint give_back(self, bytearray ra, object view) except -1


@cython.final
cdef class ReadOptions:
    cdef readonly Py_ssize_t read_chunk_size    # read-ahead buffer's usual size; idle read-ahead bound
    cdef readonly object max_buffer_size        # most bytes read ahead (a read_into target does not count);
                                                # an object: dask.distributed passes a float
    cdef readonly Py_ssize_t direct_min_nbytes  # missing bytes from which a read receives in place
    cdef readonly ReadAheadPool pool            # that of read_chunk_size


cdef class ReadCore:
    # -- settings (Tornado's read_chunk_size and max_buffer_size, ...), immutable --
    cdef readonly ReadOptions options
    # -- the read-ahead buffer: valid bytes are _ra[_start : _start + buffered_nbytes] --
    cdef public Py_ssize_t buffered_nbytes
    cdef public bint eof                      # eof_received (or connection_lost) was called
    cdef readonly bytearray _ra               # or None: held only while bytes are read ahead
    cdef object _ra_view                      # the one memoryview of _ra (the pool keeps it with it), or None
    cdef Py_ssize_t _start
    # -- the pending read (one at most) --
    cdef int _mode                            # _IDLE, _INTO, _BYTES, _UNTIL, _REGEX, _CLOSE, _MESSAGE
    cdef readonly object _target              # read_into's 'B' memoryview, or None
    cdef readonly Py_ssize_t _filled          # bytes of _target filled
    cdef Py_ssize_t _nbytes                   # read_into / read_bytes: bytes wanted;
                                              # read_until(_regex): most bytes before the match's end
    cdef bint _partial                        # read_into / read_bytes
    cdef object _pattern                      # read_until's delimiter, read_until_regex's pattern, or None
    cdef readonly Py_ssize_t _scanned         # bytes searched in vain (read_until, read_until_regex)
    cdef FrameReader _reader                  # read_message's reader (a _ForeignReader for any other
                                              # MessageReader), or None: its calls are C calls
    cdef readonly object _lent                # the view get_buffer handed out last, or None
    cdef readonly bint lent_in_place          # ...and whether it is the pending read's own buffer

    # Starting reads: the result, or PENDING.  Sizes and offsets are C
    # integers (@cython.locals) on the per-message paths.
    @cython.locals(nbytes=Py_ssize_t, size=Py_ssize_t, start=Py_ssize_t, take=Py_ssize_t)
    cpdef object read_into(self, object view, bint partial=*)
    @cython.locals(nbytes=Py_ssize_t)
    cpdef bint fill(self, object buf) except -1
    cpdef object read_bytes(self, Py_ssize_t num_bytes, bint partial=*)
    cpdef object read_until(self, object delimiter, object max_bytes=*)
    cpdef object read_until_regex(self, object regex, object max_bytes=*)
    cpdef object read_until_close(self)
    cpdef object read_message(self, object reader)
    # The BufferedProtocol shape.
    @cython.locals(mode=int, size=Py_ssize_t, room=Py_ssize_t, end=Py_ssize_t, stop=Py_ssize_t,
                   half=Py_ssize_t, options=ReadOptions)
    cpdef object get_buffer(self, Py_ssize_t sizehint=*)
    @cython.locals(reader=FrameReader, mode=int, size=Py_ssize_t, filled=Py_ssize_t, missing=Py_ssize_t,
                   start=Py_ssize_t, take=Py_ssize_t, wanted=Py_ssize_t)
    cpdef object buffer_updated(self, Py_ssize_t nbytes, bint more=*)
    cpdef object search(self)
    cpdef object eof_received(self, bint clean=*)
    @cython.locals(reader=FrameReader)
    cpdef object connection_lost(self, object real_error=*)
    # Internals (no Python call).
    cdef object _drop_lent(self)
    cdef object _end_read(self)
    @cython.locals(filled=Py_ssize_t)
    cdef object _finish_into(self)
    cdef object _finish_take(self, Py_ssize_t nbytes)
    cdef object _start_search(self, int mode, object pattern, object max_bytes)
    cdef object _find_delimiter(self)
    cdef object _find_regex(self)
    cdef object _check_limit(self, object delimiter, Py_ssize_t size)
    cdef object _feed_reader(self, FrameReader reader)
    cdef object _reserve(self, Py_ssize_t free_nbytes)
    @cython.locals(pool=ReadAheadPool, size=Py_ssize_t, start=Py_ssize_t, ra=bytearray, own=bytearray)
    cpdef object spare_storage(self)
    # Asked by the stream mechanism (C calls).
    cdef bint has_read(self)
    cdef object release_if_empty(self)
    cdef Py_ssize_t needed_for_sure(self, Py_ssize_t left)
    @cython.locals(pool=ReadAheadPool, options=ReadOptions)
    cdef object _take_storage(self, Py_ssize_t capacity)
    @cython.locals(start=Py_ssize_t, size=Py_ssize_t)
    cdef object _take_into(self, object dst, Py_ssize_t dst_start, Py_ssize_t nbytes)
    @cython.locals(size=Py_ssize_t, ra=bytearray)
    cdef object _take_nbytes(self, Py_ssize_t nbytes)
    cdef object _take(self, Py_ssize_t nbytes)
    @cython.locals(ra=bytearray)
    cdef object _release_read_ahead(self)
