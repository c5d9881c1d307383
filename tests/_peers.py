"""Peer processes for the reliability suite, run as ``python tests/_peers.py
SCENARIO PORT [ARGS]``.  Each talks only to 127.0.0.1 and stops by itself
(every scenario is bounded in time).

Hostile scenarios (one connection each): ``garbage``, ``huge-length``,
``huge-count``, ``slowloris``, ``half-close``, ``half-rst``, ``byte-at-a-time``.
``stall-mid-frame``: send half a message, print READY, wait to be killed.
``flood N M SEED``: N connections, M random messages each, checked by hash.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import socket
import struct
import sys
import time

HOST = "127.0.0.1"


def pack(frames: list[bytes]) -> bytes:
    return struct.pack(f"<{len(frames) + 1}Q", len(frames), *map(len, frames)) + b"".join(frames)


def connect(port: int) -> socket.socket:
    sock = socket.create_connection((HOST, port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def drain(sock: socket.socket, seconds: float = 5.0) -> bytes:
    """Read until the server closes (or ``seconds`` pass)."""
    sock.settimeout(seconds)
    got = bytearray()
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            got += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return bytes(got)


def hostile(scenario: str, port: int) -> None:
    sock = connect(port)
    if scenario == "garbage":
        # a frame count far over max_frames, then noise
        sock.sendall(random.Random(1).randbytes(4096))
        drain(sock)
    elif scenario == "huge-length":
        sock.sendall(struct.pack("<QQ", 1, 2**63) + b"x" * 100)
        drain(sock)
    elif scenario == "huge-count":
        sock.sendall(struct.pack("<Q", 2**40) + b"x" * 100)
        drain(sock)
    elif scenario == "slowloris":
        sock.sendall(struct.pack("<QQ", 1, 1000))  # a header, then silence
        drain(sock, seconds=10)
    elif scenario == "half-close":
        sock.sendall(struct.pack("<QQ", 1, 100_000) + b"h" * 50_000)
        sock.close()
        return
    elif scenario == "half-rst":
        sock.sendall(struct.pack("<QQ", 1, 100_000) + b"h" * 50_000)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
        return
    elif scenario == "byte-at-a-time":
        wire = pack([b"trickle", bytes(range(200))])
        for i in range(len(wire)):
            sock.sendall(wire[i : i + 1])
            time.sleep(0.001)
        echo = b""
        sock.settimeout(10)
        while len(echo) < len(wire):
            chunk = sock.recv(65536)
            if not chunk:
                break
            echo += chunk
        print("ECHO-OK" if echo == wire else "ECHO-BAD", flush=True)
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    sock.close()


def stall_mid_frame(port: int) -> None:
    sock = connect(port)
    sock.sendall(struct.pack("<QQ", 1, 1_000_000) + b"s" * 10_000)
    print("READY", flush=True)
    time.sleep(60)  # killed long before


async def flood(port: int, nconns: int, nmessages: int, seed: int) -> None:
    """``nconns`` concurrent connections, each sends ``nmessages`` random
    messages and checks every echo; prints ``OK <messages> <bytes>``."""

    async def one(index: int) -> tuple[int, int]:
        rng = random.Random(seed * 100_003 + index)
        reader, writer = await asyncio.open_connection(HOST, port)
        nbytes = 0
        try:
            for _ in range(nmessages):
                nframes = rng.choice((0, 1, 1, 2, 3, 8))
                frames = [rng.randbytes(rng.choice((0, 1, 37, 1000, 4000, 20_000))) for _ in range(nframes)]
                wire = pack(frames)
                writer.write(wire)
                echo = await reader.readexactly(len(wire))
                if hashlib.sha256(echo).digest() != hashlib.sha256(wire).digest():
                    raise AssertionError(f"connection {index}: corrupted echo")
                nbytes += len(wire)
        finally:
            writer.close()
        return nmessages, nbytes

    results = await asyncio.gather(*(one(i) for i in range(nconns)))
    print("OK", sum(r[0] for r in results), sum(r[1] for r in results), flush=True)


def main() -> None:
    scenario, port = sys.argv[1], int(sys.argv[2])
    if scenario == "stall-mid-frame":
        stall_mid_frame(port)
    elif scenario == "flood":
        nconns, nmessages, seed = map(int, sys.argv[3:6])
        asyncio.run(asyncio.wait_for(flood(port, nconns, nmessages, seed), 300))
    else:
        hostile(scenario, port)
    os._exit(0)


if __name__ == "__main__":
    main()
