"""The floor of a cold dask transfer on this machine: the same arrays
fetched the same way with no dask, no event loop and no comm.

    python -m benchmarks.harness.barefetch --count 16 --size 64MiB --pretouch

A dask worker fetches a peer's arrays one request at a time (one
``get_data`` round trip each: a 64 MiB array is over distributed's batch
limit), so ``benchmarks.dask``'s ``transfer-cold`` is ``count`` sequential
"request, then one array" exchanges over a connection the fresh cluster has
just opened, each array received into fresh memory that stays alive until
the end.  Here: a sender process makes ``count`` arrays (``numpy.full``, not
timed), then answers each one-byte request with one array (``sendall``); the
receiver (this process, blocking, one thread) sends the request and receives
the array with ``recv_into`` into a fresh ``numpy.empty`` array that it
keeps.  ``pretouch`` first makes as much fresh memory resident and frees it,
as ``benchmarks.dask --pretouch`` has the receiving worker do.  Timed by wall
clock from the first request to the last byte; every array is checked
byte for byte after the clock stops.

`run` runs it in a fresh process (this module's ``__main__``), so that the
benchmark process, which hosts a dask scheduler thread, never forks.  It
returns one repetition's figures as ``benchmarks.dask`` records them:
``value`` (GB/s, decimal), ``elapsed_s``, ``nbytes``, ``count``,
``per_array_ms``, ``pretouch`` and ``host_reported_mib`` (the memory the
kernel handed back to the host meanwhile, see
`benchmarks.harness.cpu.host_reported_kib`).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

from benchmarks.harness.cpu import host_reported_kib, pretouch
from benchmarks.harness.units import parse_size

__all__ = ["check_arrays", "run"]


def _fill(i: int) -> int:
    """The byte array ``i`` is filled with."""
    return (i * 37 + 11) % 251


def check_arrays(arrays: list[Any]) -> None:
    """Every byte of array ``i`` is what the sender filled it with.

    :raises RuntimeError: naming the first array that differs.
    """
    for i, array in enumerate(arrays):
        if not (array == _fill(i)).all():
            raise RuntimeError(f"barefetch: array {i} does not hold {_fill(i)} in every byte")


def _sender(port: int, count: int, nbytes: int) -> None:
    import numpy as np

    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    arrays = [np.full(nbytes, _fill(i), np.uint8) for i in range(count)]
    sock.sendall(b"r")  # ready: the arrays are made
    for array in arrays:
        if sock.recv(1) != b"g":
            raise RuntimeError("barefetch: the receiver went away")
        sock.sendall(array)
    sock.recv(1)


def _receive(count: int, nbytes: int, touch: bool) -> dict[str, Any]:
    import numpy as np

    listener = socket.create_server(("127.0.0.1", 0))
    pid = os.fork()
    if pid == 0:  # (a fresh, single-threaded process: safe to fork)
        try:
            _sender(listener.getsockname()[1], count, nbytes)
        finally:
            os._exit(0)
    conn, _ = listener.accept()
    listener.close()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if conn.recv(1) != b"r":
        raise RuntimeError("barefetch: the sender failed before it was ready")
    if touch:
        pretouch(count * nbytes)
    kept = []
    per_array = []
    reported = host_reported_kib()
    started = time.perf_counter()
    for _ in range(count):
        asked = time.perf_counter()
        conn.sendall(b"g")
        array = np.empty(nbytes, np.uint8)
        view = memoryview(array)
        got = 0
        while got < nbytes:
            n = conn.recv_into(view[got:])
            if not n:
                raise RuntimeError(f"barefetch: the sender closed after {got} of {nbytes} bytes")
            got += n
        view.release()
        kept.append(array)
        per_array.append(time.perf_counter() - asked)
    elapsed = time.perf_counter() - started
    after = host_reported_kib()
    conn.sendall(b"x")
    _, status = os.waitpid(pid, 0)
    conn.close()
    check_arrays(kept)
    if status:
        raise RuntimeError(f"barefetch: the sender exited with status {status}")
    total = count * nbytes
    return {
        "value": total / elapsed / 1e9,
        "elapsed_s": elapsed,
        "nbytes": total,
        "count": count,
        "per_array_ms": [s * 1e3 for s in per_array],
        "pretouch": touch,
        "host_reported_mib": None if reported is None or after is None else (after - reported) / 1024,
    }


def run(count: int, nbytes: int, pretouch: bool, timeout_s: float = 300.0) -> dict[str, Any]:
    """One repetition in a fresh process (see the module's docstring).

    :raises RuntimeError: the run failed (a wrong byte, a sender gone).
    :raises subprocess.TimeoutExpired: it took over ``timeout_s``.
    """
    argv = [sys.executable, "-m", "benchmarks.harness.barefetch", "--count", str(count), "--size", str(nbytes)]
    if pretouch:
        argv.append("--pretouch")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    if proc.returncode:
        raise RuntimeError(f"barefetch failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.harness.barefetch", description=__doc__.split("\n\n")[0])
    p.add_argument("--count", type=int, default=16, help="arrays (default: 16)")
    p.add_argument("--size", type=parse_size, default=64 << 20, help="bytes per array (default: 64MiB)")
    p.add_argument("--pretouch", action="store_true", help="make the receiver's memory resident first")
    args = p.parse_args(argv)
    print(json.dumps(_receive(args.count, args.size, args.pretouch)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
