"""``comm-readinto``: this package's own comm layer (``tornado_readinto.comm``,
no dask): the message is a dict of frames, msgpack-encoded; frames of 64 KiB
or more travel out of band by reference and arrive in their own buffers.

The comm listens on its own socket, so the server closes the listener the
harness bound and listens again on the same port; ``connect`` retries until
it is up.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence
from typing import Any

from ._async import HOST, AsyncConn, drive, echo_loop, run_loop
from ._common import Buffer, CasePlan, ConnClosed, ConnStats


class CommReadInto(AsyncConn):
    def __init__(self, comm: Any) -> None:
        self.comm = comm

    @classmethod
    async def from_socket(cls, sock: socket.socket) -> AsyncConn:  # pragma: no cover - the comm owns sockets
        raise NotImplementedError("tornado_readinto.comm makes its own sockets")

    async def send(self, frames: Sequence[Buffer]) -> None:
        await self.comm.write({"op": "echo", "frames": list(frames)})
        await self.comm.flush()  # the ring reuses a payload only once it is sent

    async def recv(self) -> Sequence[Buffer]:
        from tornado_readinto.comm import CommClosedError

        try:
            msg = await self.comm.read()
        except CommClosedError:
            raise ConnClosed from None
        return msg["frames"]  # type: ignore[no-any-return]

    def close(self) -> None:
        self.comm.abort()

    @classmethod
    def run_server(cls, listener: socket.socket, loop_name: str, nclients: int, timeout_s: float) -> int:
        port = listener.getsockname()[1]
        listener.close()
        return run_loop(loop_name, lambda: cls._serve(port, nclients), timeout_s)

    @classmethod
    async def _serve(cls, port: int, nclients: int) -> int:
        from tornado_readinto.comm import listen

        done: asyncio.Queue[int] = asyncio.Queue()

        async def handler(comm: Any) -> None:
            await done.put(await echo_loop(cls(comm)))

        server = await listen(f"tcp://{HOST}:{port}", handler)
        try:
            return sum([await done.get() for _ in range(nclients)])
        finally:
            server.stop()

    @classmethod
    def run_client(cls, port: int, plan: CasePlan, loop_name: str, timeout_s: float) -> list[ConnStats]:
        async def main() -> list[ConnStats]:
            from tornado_readinto.comm import connect

            conns = [cls(await connect(f"tcp://{HOST}:{port}", timeout=30)) for _ in range(plan.clients)]
            try:
                return list(await asyncio.gather(*(drive(conn, plan) for conn in conns)))
            finally:
                for conn in conns:
                    await conn.comm.close()

        return run_loop(loop_name, main, timeout_s)
