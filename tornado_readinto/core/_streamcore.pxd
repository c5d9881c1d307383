# Declarations for compiling _streamcore.py with Cython in pure-Python mode
# (the compiled core): the same .py, typed by this file.
#
# The states of a stream's core (docs/internals.rst has them with the call
# graph of a read).  Three independent parts:
#
# The pending read (ReadCore._mode):
#
#                 read_*() completed by the bytes read ahead
#              +-----------------------------------------------+
#              |                                               |
#              v        read_*() not completed                 |
#         +---------+ ----------------------------> +----------+--------+
#   ----->|  IDLE   |                               |  PENDING          |
#         |         | <---------------------------- |  INTO BYTES UNTIL |
#         +---------+   buffer_updated / search /   |  REGEX CLOSE      |
#              |        eof_received return the     |  MESSAGE          |
#              |        result                      +-------------------+
#              |                                          |
#              |   connection_lost (the read fails with   |
#              |   the error it returns)                  |
#              v                                          v
#         +-----------------------------------------------------+
#         |  CLOSED (closed, eof): nothing is received any more |
#         +-----------------------------------------------------+
#
# The receive (the policy's proof that the socket is empty: readable, proved_at):
#
#         +-----------+   short recv, or EAGAIN    +--------------+
#   ----->| READABLE  | -------------------------> | PROVED EMPTY |
#         |           | <------------------------- | for          |
#         +-----------+   READ event, or           | DRAINED_VALID_S
#                         DRAINED_VALID_S passed   +--------------+
#                         since the recv or the        (a write restarts
#                         last write                    the window)
#
# The write queue (write_buffer, cork_nbytes):
#
#                         writelines: all sent at once (SENT)
#                       +-------------------------------+
#                       v                               |
#                  +--------+  writelines while bytes   |
#   -------------->|  IDLE  |-------------------------->+
#                  |        |  are read ahead (CORKED)  +--------+
#                  +--------+ -------------------------> | CORKED |
#                    ^    |                              +--------+
#                    |    | kernel took part (QUEUED)      |  uncork (park, next loop turn,
#        send_queued |    v                                |  next write, close)
#        took it all +--------+ <--------------------------+
#                    | QUEUED |  WRITE event: send_queued
#                    +--------+

cimport cython

from tornado_readinto.core._policy cimport StreamPolicy
from tornado_readinto.core._sockcalls cimport SocketCalls
from tornado_readinto.core._readcore cimport ReadCore
from tornado_readinto.core.writebuffer cimport ChunkedWriteBuffer


# Sizes of what is written, in C (C calls from writelines and _cork).
cpdef Py_ssize_t _buffer_nbytes(object data) except -1
cpdef Py_ssize_t _total_nbytes(object buffers) except -1


@cython.final
cdef class ReceiveCounts:
    cdef public Py_ssize_t nbytes             # bytes received
    cdef public Py_ssize_t calls              # recv calls made (EAGAIN ones too)
    cdef public Py_ssize_t nbytes_in_place    # of nbytes, those received straight into a read's own buffer


cdef class StreamCore:
    # -- the parts (readonly: settled in __init__; typed, so their calls are C calls) --
    cdef readonly ReadCore reads              # the read-ahead bytes and the pending read
    cdef readonly StreamPolicy policy         # the heuristics
    cdef readonly SocketCalls calls           # the socket's recv_into and sendmsg (keeping the GIL where that pays)
    # -- the socket --
    cdef readonly bint gather                 # send with sendmsg (else write_to_fd per segment)
    cdef readonly bint short_read_drains      # a short recv proves the socket empty (not TLS)
    cdef readonly Py_ssize_t tls_record_nbytes  # TLS: a receive shorter than this and asked drained it; else 0
    cdef public bint closed                   # the stream closed: no receive, no send
    # -- the receive --
    cdef readonly ReceiveCounts counts        # what the receives did (for statistics and metrics)
    cdef public Py_ssize_t wait_nbytes        # bytes the pending read surely needs after the last receive
    # -- the write queue and the cork --
    cdef public ChunkedWriteBuffer write_buffer   # typed: its append/peek_buffers/advance are C calls
    cdef public Py_ssize_t write_index        # bytes ever queued (Tornado's _total_write_index)
    cdef public Py_ssize_t done_index         # bytes ever sent (Tornado's _total_write_done_index)
    cdef public Py_ssize_t cork_nbytes        # bytes at the end of the queue held by the cork
    # -- the face's transport (readonly but read_from_fd, which Tornado's tests replace) --
    cdef public object read_from_fd           # (view) -> int | None, or None: calls.recv_into
    cdef readonly object write_to_fd          # (view) -> int, for sockets without sendmsg

    cpdef object detach_socket(self)
    cpdef object socket_closed(self)
    # Incoming flow.
    @cython.locals(reads=ReadCore, reading=bint, requested=Py_ssize_t, policy=StreamPolicy)
    cpdef object receive(self)
    @cython.locals(left=bint)
    cpdef bint park(self) except -1
    # Outgoing flow.
    @cython.locals(sent=Py_ssize_t, total=Py_ssize_t, queued=Py_ssize_t)
    cpdef int writelines(self, object buffers, bint connecting, object max_write_nbytes) except -1
    cpdef object send_queued(self)
    cpdef bint uncork(self) except -1
    cdef object _write_segments(self)
    cdef object _cork(self, object buffers)
