"""Helpers shared by the HTTP server tests (``test_http_body``,
``test_http_serving``): stopping a server, waiting for its connections to
end, and reading one response from a blocking socket file."""

from __future__ import annotations

import asyncio
import re
from typing import Any, BinaryIO


async def stop_server(server: Any) -> None:
    """Stop listening and close every connection of ``server``."""
    server.stop()
    await server.close_all_connections()


async def wait_no_connections(server: Any) -> None:
    """Wait until ``server`` has no connection left (the test's own timeout
    bounds a hang: how long closing takes is no behaviour)."""
    while server._connections:
        await asyncio.sleep(0.01)


def read_response(reader: BinaryIO) -> tuple[bytes, bytes]:
    """Status line and body of one response from a blocking socket file."""
    status = reader.readline()
    length = 0
    while True:
        line = reader.readline()
        if line in (b"\r\n", b""):
            break
        match = re.match(rb"(?i)content-length:\s*(\d+)", line)
        if match:
            length = int(match.group(1))
    return status, reader.read(length)
