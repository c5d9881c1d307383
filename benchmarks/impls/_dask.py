"""dask.distributed comm implementations: the same echo through
``distributed.comm.connect``/``listen`` with distributed's own ``tcp://`` and
with this package's ``readinto://`` backend.

The message is a dict, as dask sends.  Frames of up to 64 KiB travel as
``bytes`` inside it (a small dict, or "64 KiB of bytes", msgpack-encoded by
distributed); larger frames as numpy arrays wrapped in ``to_serialize`` (the
path dask uses for array data: out of band, zero copy on send).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar

from ._async import HOST, SelfListeningConn
from ._common import Buffer, ConnClosed

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


class _DaskConn(SelfListeningConn):
    scheme: ClassVar[str] = "tcp"

    @classmethod
    async def listen_on(
        cls, port: int, handler: Callable[[Any], Awaitable[None]], host: str = HOST
    ) -> Callable[[], None]:
        from distributed.comm import listen

        server = listen(f"{cls.scheme}://{host}:{port}", handler)
        await server.start()
        return server.stop  # type: ignore[no-any-return]

    @classmethod
    async def connect_to(cls, port: int, host: str = HOST) -> Any:
        from distributed.comm import connect

        return await connect(f"{cls.scheme}://{host}:{port}", timeout=30)

    async def send(self, frames: Sequence[Buffer]) -> None:
        await self.comm.write(_encode(frames))

    async def recv(self) -> Sequence[Buffer]:
        from distributed.comm import CommClosedError

        try:
            msg = await self.comm.read()
        except CommClosedError:
            raise ConnClosed from None
        return _decode(msg)


class DaskTCP(_DaskConn):
    """distributed's own ``tcp://`` comm (stock Tornado IOStream underneath)."""

    scheme = "tcp"


class DaskReadInto(_DaskConn):
    """distributed with this package's ``readinto://`` comm backend."""

    scheme = "readinto"
