"""How tall the read path is: the package's Python frames, and the modules
they are in, that one ``await stream.read_into(buf)`` runs through, counted
with ``sys.setprofile`` over a real socket pair on asyncio's loop (never
timed).  The pure build runs every frame as Python, so it shows the whole
walk (docs/internals.rst draws it): at most 12 frames in 5 modules for a
read that the bytes read ahead complete at once, at most 7 modules for one
that waits for a READ event.  The compiled build runs the same walk in C:
none of the package's frames is a Python frame.  Both builds run this file
(``tests/test_builds.py``)."""

from __future__ import annotations

import asyncio
import os
import socket
import sys

import tornado_readinto
from tornado_readinto import ReadIntoIOStream

from ..conftest import run

_PACKAGE = os.path.dirname(tornado_readinto.__file__) + os.sep


class _Walk:
    """The package's frames that start while it is on (``call`` events of
    code under the package's folder), as ``module:function``."""

    def __init__(self) -> None:
        self.frames: list[str] = []

    def __enter__(self) -> _Walk:
        sys.setprofile(self._event)
        return self

    def __exit__(self, *exc_info: object) -> None:
        sys.setprofile(None)

    def _event(self, frame, event, arg) -> None:
        filename = frame.f_code.co_filename
        if event == "call" and filename.startswith(_PACKAGE):
            self.frames.append(f"{os.path.relpath(filename, _PACKAGE)}:{frame.f_code.co_name}")

    @property
    def modules(self) -> set[str]:
        return {name.split(":")[0] for name in self.frames}


def _walks() -> tuple[_Walk, _Walk]:
    """The walk of a ``read_into`` of 16 bytes completed at once from the
    read-ahead (the last 16 of 48 read ahead, so that its storage goes back
    to the pool too), and of one that waits for the peer's next 16."""

    async def main() -> tuple[_Walk, _Walk]:
        a, b = socket.socketpair()
        stream = ReadIntoIOStream(a)
        try:
            b.sendall(b"x" * 48)
            buf = bytearray(16)
            assert await stream.read_into(buf) == 16  # reads all 48 ahead
            assert await stream.read_into(buf) == 16
            with _Walk() as at_once:
                future = stream.read_into(buf)
            assert await future == 16 and buf == b"x" * 16
            for walk in (_Walk(), _Walk()):  # the first warms the path up
                loop = asyncio.get_running_loop()
                with walk:
                    future = stream.read_into(buf)
                    loop.call_soon(b.sendall, b"y" * 16)
                    assert await future == 16
            assert buf == b"y" * 16
            return at_once, walk
        finally:
            stream.close()
            b.close()

    return run(main(), loop="asyncio")  # type: ignore[no-any-return]


def test_a_read_into_runs_through_few_frames_in_few_modules():
    at_once, waited = _walks()
    if tornado_readinto.COMPILED:
        assert at_once.frames == [] and waited.frames == []
        return
    assert at_once.frames[0] == "face/iostream.py:read_into"
    assert len(at_once.frames) <= 12, at_once.frames
    assert len(at_once.modules) <= 5, at_once.modules
    assert "core/_sockcalls.py:recv_into" in waited.frames  # (it did wait and receive)
    assert len(waited.modules) <= 7, waited.modules
