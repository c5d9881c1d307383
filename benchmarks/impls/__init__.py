"""The echo implementations of ``python -m benchmarks.echo``: a registry.

Each `ImplSpec` names a class (``module:Class``) with two process entry
points, ``run_server(listener, loop_name, nclients, timeout_s) -> int`` and
``run_client(port, plan, loop_name, timeout_s, host=HOST) -> list[ConnStats]``;
the server and the client of a case use the same class.  The server serves
on the listener it is given (bound to the case's address: 127.0.0.1, or a
veth address with ``--netpath``), the client connects to ``host``.  Event-loop
implementations get both for free by subclassing ``_async.AsyncConn`` and
writing ``from_socket``/``send``/``recv``/``close``; ``_threads.Threads``
shows the blocking shape.

A class with ``supports_tls`` also takes ``ssl_context=`` in ``run_server``
and serves over TLS (``server --tls-cert``, the servers of ``benchmarks.load
--tls``); `availability` with ``tls=True`` says which cannot.

Extension point: to add ``comm-readinto``, ``dask-tcp`` or ``dask-readinto``,
write an ``AsyncConn`` whose ``send``/``recv`` go through the comm (for
distributed, ``distributed.comm.connect("tcp://..."/"readinto://...")`` on the
client and ``distributed.comm.listen`` on the server, overriding
``serve_connection``/``run_server``), point its spec's ``target`` at it and
drop the ``unavailable`` reason.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_IMPLS", "EVENT_LOOPS", "IMPLS", "ImplSpec", "availability", "load"]

#: The loops an event-loop implementation can run on (``--loop`` of the
#: server and client processes overrides ``ImplSpec.loop`` with one of them).
EVENT_LOOPS = ("asyncio", "uvloop")


@dataclass(frozen=True)
class ImplSpec:
    name: str
    target: str  # "module:Class", module relative to this package
    summary: str
    loop: str = "asyncio"  # "asyncio", "uvloop" or "threads"
    requires: tuple[str, ...] = ()  # modules that must import
    unavailable: str = ""  # a fixed reason: not written yet


_T = "._tornado:"
_A = "._asyncio:"
_P = "._protocol:"
_FRAMED = ("tornado_readinto.channel.framed",)

IMPLS: dict[str, ImplSpec] = {
    spec.name: spec
    for spec in [
        ImplSpec("stock-read_bytes", _T + "StockReadBytes", "stock IOStream, read_bytes; write per buffer"),
        ImplSpec("stock-read_into", _T + "StockReadInto", "stock IOStream, frames read_into a fresh bytearray"),
        ImplSpec("stock-read_into-reuse", _T + "StockReadIntoReuse", "stock IOStream, read_into reused buffers"),
        ImplSpec("readinto", _T + "ReadInto", "ReadIntoIOStream, read_into(16) + read_into(frame); writelines"),
        ImplSpec("readinto-3reads", _T + "ReadInto3Reads", "ReadIntoIOStream, read_into per count, lengths, frame"),
        ImplSpec("readinto-uninit", _T + "ReadIntoUninit", "readinto into uninitialized_allocator (huge-page) buffers"),
        ImplSpec("readinto-spin", _T + "ReadIntoSpin", "readinto with busy polling on (BUSY_POLL_BUDGET_S)"),
        ImplSpec("framed-bytearray", _T + "FramedBytearray", "FramedStream, bytearray_allocator", requires=_FRAMED),
        ImplSpec("framed-uninit", _T + "FramedUninit", "FramedStream, uninitialized_allocator", requires=_FRAMED),
        ImplSpec("framed-pool", _T + "FramedPool", "FramedStream, BufferPool", requires=_FRAMED),
        ImplSpec("framed-pool-spin", _T + "FramedPoolSpin", "framed-pool with busy polling on", requires=_FRAMED),
        ImplSpec("asyncio-streams", _A + "AsyncioStreams", "asyncio streams, readexactly(16) + readexactly(n); drain"),
        ImplSpec(
            "asyncio-streams-3reads",
            _A + "AsyncioStreams3Reads",
            "asyncio streams, readexactly per count, lengths, frame; write per buffer",
        ),
        ImplSpec("asyncio-protocol", _P + "AsyncioProtocol", "BufferedProtocol, read-ahead buffer, echo from callback"),
        ImplSpec(
            "asyncio-protocol-exact", _P + "AsyncioProtocolExact", "BufferedProtocol, one recv per header part/frame"
        ),
        ImplSpec("uvloop-streams", _A + "AsyncioStreams", "asyncio streams on uvloop", "uvloop", ("uvloop",)),
        ImplSpec(
            "uvloop-streams-3reads", _A + "AsyncioStreams3Reads", "streams-3reads on uvloop", "uvloop", ("uvloop",)
        ),
        ImplSpec(
            "uvloop-protocol", _P + "AsyncioProtocol", "read-ahead BufferedProtocol on uvloop", "uvloop", ("uvloop",)
        ),
        ImplSpec(
            "uvloop-protocol-exact", _P + "AsyncioProtocolExact", "protocol-exact on uvloop", "uvloop", ("uvloop",)
        ),
        ImplSpec("uvloop-readinto", _T + "ReadInto", "ReadIntoIOStream on uvloop", "uvloop", ("uvloop",)),
        ImplSpec(
            "uvloop-framed-pool",
            _T + "FramedPool",
            "FramedStream + BufferPool on uvloop",
            "uvloop",
            ("uvloop",) + _FRAMED,
        ),
        ImplSpec("bound-floor", "._bounds:BoundFloor", "lower bound: add_reader stream, no Tornado (not a product)"),
        ImplSpec("bound-raw", "._bounds:RawEcho", "lower bound: add_reader callback, recv_into + send, no parse"),
        ImplSpec(
            "bound-tornado",
            "._bounds:BoundTornado",
            "lower bound: bound-floor with ReadIntoIOStream's dispatch and bookkeeping",
        ),
        ImplSpec("threads", "._threads:Threads", "blocking sockets, a thread per connection", "threads"),
        ImplSpec(
            "threads-uninit",
            "._threads:ThreadsUninit",
            "threads, frames in uninitialized_allocator (huge-page) buffers",
            "threads",
        ),
        ImplSpec(
            "comm-readinto", "._comm:CommReadInto", "tornado_readinto.channel.comm (no dask)", requires=("msgpack",)
        ),
        ImplSpec("dask-tcp", "._dask:DaskTCP", "distributed.comm tcp://", requires=("distributed",)),
        ImplSpec(
            "dask-readinto",
            "._dask:DaskReadInto",
            "distributed.comm readinto://",
            requires=("distributed", "tornado_readinto.dask.backend"),
        ),
    ]
}

#: ``--impl`` default: the stock baseline, stock's own read_into, ours, and the
#: practical limit.
DEFAULT_IMPLS = ("stock-read_bytes", "stock-read_into", "readinto", "readinto-spin", "threads")


def availability(spec: ImplSpec, loop: str | None = None, *, tls: bool = False) -> str | None:
    """None if ``spec`` can run here (on ``loop`` instead of ``spec.loop`` if
    given; as a TLS server if ``tls``), else why not."""
    if spec.unavailable:
        return spec.unavailable
    requires = spec.requires
    if loop is not None and loop != spec.loop:
        if spec.loop not in EVENT_LOOPS:
            return f"{spec.name} runs on {spec.loop}, not on an event loop"
        if loop not in EVENT_LOOPS:
            return f"unknown event loop {loop!r}; known: {', '.join(EVENT_LOOPS)}"
        if loop == "uvloop":
            requires += ("uvloop",)
    for module in requires:
        try:
            importlib.import_module(module)
        except Exception as exc:  # ImportError, or a half-written module
            return f"needs {module}: {type(exc).__name__}: {exc}"
    try:
        cls = load(spec)
    except Exception as exc:
        return f"cannot load {spec.target}: {type(exc).__name__}: {exc}"
    if tls and not getattr(cls, "supports_tls", False):
        return f"{spec.name} has no TLS server"
    return None


def load(spec: ImplSpec) -> Any:
    """The class ``spec.target`` names."""
    module, _, name = spec.target.partition(":")
    return getattr(importlib.import_module(module, __name__), name)
