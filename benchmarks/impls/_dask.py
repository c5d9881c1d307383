"""dask.distributed comm implementations: the same echo through
``distributed.comm.connect``/``listen`` with distributed's own ``tcp://`` and
with this package's ``readinto://`` backend.

The message is a dict, as dask sends.  Frames of up to 64 KiB travel as
``bytes`` inside it (a small dict, or "64 KiB of bytes", msgpack-encoded by
distributed); larger frames as numpy arrays wrapped in ``to_serialize`` (the
path dask uses for array data: out of band, zero copy on send).

distributed listens on its own socket, so the server closes the listener the
harness bound and listens again on the same port; the client's ``connect``
retries until it is up.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence
from typing import Any, ClassVar

from ._async import HOST, AsyncConn, echo_loop, run_loop
from ._common import Buffer, CasePlan, ConnClosed, ConnStats

#: Frames up to this size go inline as bytes (msgpack); larger ones as arrays.
INLINE_MAX_NBYTES = 64 * 1024


def _encode(frames: Sequence[Buffer]) -> dict[str, Any]:
    import numpy as np
    from distributed.protocol import to_serialize

    out: list[Any] = []
    for f in frames:
        if len(f) <= INLINE_MAX_NBYTES:
            out.append(bytes(f))
        else:
            out.append(to_serialize(np.frombuffer(f, dtype=np.uint8)))
    return {"op": "echo", "frames": out}


def _decode(msg: dict[str, Any]) -> list[Buffer]:
    return [f if isinstance(f, bytes) else memoryview(f).cast("B") for f in msg["frames"]]


class _DaskConn(AsyncConn):
    scheme: ClassVar[str] = "tcp"

    def __init__(self, comm: Any) -> None:
        self.comm = comm

    @classmethod
    async def from_socket(cls, sock: socket.socket) -> AsyncConn:  # pragma: no cover - distributed owns sockets
        raise NotImplementedError("distributed comms make their own sockets")

    async def send(self, frames: Sequence[Buffer]) -> None:
        await self.comm.write(_encode(frames))

    async def recv(self) -> Sequence[Buffer]:
        from distributed.comm import CommClosedError

        try:
            msg = await self.comm.read()
        except CommClosedError:
            raise ConnClosed from None
        return _decode(msg)

    def close(self) -> None:
        self.comm.abort()

    @classmethod
    def run_server(cls, listener: socket.socket, loop_name: str, nclients: int, timeout_s: float) -> int:
        port = listener.getsockname()[1]
        listener.close()
        return run_loop(loop_name, lambda: cls._serve(port, nclients), timeout_s)

    @classmethod
    async def _serve(cls, port: int, nclients: int) -> int:
        from distributed.comm import listen

        done: asyncio.Queue[int] = asyncio.Queue()

        async def handler(comm: Any) -> None:
            await done.put(await echo_loop(cls(comm)))

        server = listen(f"{cls.scheme}://{HOST}:{port}", handler)
        await server.start()
        try:
            return sum([await done.get() for _ in range(nclients)])
        finally:
            server.stop()

    @classmethod
    def run_client(cls, port: int, plan: CasePlan, loop_name: str, timeout_s: float) -> list[ConnStats]:
        from ._async import drive

        async def main() -> list[ConnStats]:
            from distributed.comm import connect

            conns = [cls(await connect(f"{cls.scheme}://{HOST}:{port}", timeout=30)) for _ in range(plan.clients)]
            try:
                return list(await asyncio.gather(*(drive(conn, plan) for conn in conns)))
            finally:
                for conn in conns:
                    await conn.comm.close()

        return run_loop(loop_name, main, timeout_s)


class DaskTCP(_DaskConn):
    """distributed's own ``tcp://`` comm (stock Tornado IOStream underneath)."""

    scheme = "tcp"


class DaskReadInto(_DaskConn):
    """distributed with this package's ``readinto://`` comm backend."""

    scheme = "readinto"
