"""``comm-readinto``: this package's own comm layer (``tornado_readinto.channel.comm``,
no dask): the message is a dict of frames, msgpack-encoded; frames of 64 KiB
or more travel out of band by reference and arrive in their own buffers.
Over TLS (``benchmarks.load --tls``) the server listens on ``tls://``.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ._async import HOST, SelfListeningConn
from ._common import Buffer, ConnClosed


class CommReadInto(SelfListeningConn):
    supports_tls = True

    @classmethod
    async def listen_on(
        cls, port: int, handler: Callable[[Any], Awaitable[None]], host: str = HOST
    ) -> Callable[[], None]:
        from tornado_readinto.channel.comm import listen

        return (await listen(f"tcp://{host}:{port}", handler)).stop

    @classmethod
    async def listen_tls_on(
        cls, port: int, handler: Callable[[Any], Awaitable[None]], ssl_context: ssl.SSLContext, host: str = HOST
    ) -> Callable[[], None]:
        from tornado_readinto.channel.comm import listen

        return (await listen(f"tls://{host}:{port}", handler, ssl_context=ssl_context)).stop

    @classmethod
    async def connect_to(cls, port: int, host: str = HOST) -> Any:
        from tornado_readinto.channel.comm import connect

        return await connect(f"tcp://{host}:{port}", timeout=30)

    async def send(self, frames: Sequence[Buffer]) -> None:
        await self.comm.write({"op": "echo", "frames": list(frames)})
        await self.comm.flush()  # the ring reuses a payload only once it is sent

    async def recv(self) -> Sequence[Buffer]:
        from tornado_readinto.channel.comm import CommClosedError

        try:
            msg = await self.comm.read()
        except CommClosedError:
            raise ConnClosed from None
        return msg["frames"]  # type: ignore[no-any-return]
