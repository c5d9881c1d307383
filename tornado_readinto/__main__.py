"""``python -m tornado_readinto``: what is installed here, whether dask's
configuration switches this environment's processes, and a self-check over
loopback; or, with ``--address``, what each process of a running cluster
serves and what its comms have done.

    python -m tornado_readinto                        # report and self-check, exit status 0 if all pass
    python -m tornado_readinto --json                 # the same as one JSON object
    python -m tornado_readinto --address tcp://scheduler:8786   # ask a running cluster (as verify does)

The self-check takes well under a second: a ``read_into`` and a framed
message over a socket pair, then a switched ``tcp://`` comm and a stock one
talking to each other in both directions, with this environment's dask
configuration (its frame limits among it).  A failing step is named, and the
exit status is 1.

.. versionadded:: 0.1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import socket
import sys
from collections.abc import Awaitable, Callable, Sequence
from importlib import metadata
from typing import Any

import tornado_readinto

#: The distributions whose versions the report gives.
VERSIONS = ("tornado", "distributed", "dask", "uvloop", "prometheus_client")

#: The self-check's payload: a frame that is received in place (over
#: ``DIRECT_READ_MIN_NBYTES``) and one small frame.
_PAYLOAD = bytes(range(256)) * 1024  # 256 KiB


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def dask_switch() -> dict[str, Any] | None:
    """Whether this environment's dask configuration switches each kind of
    process: the preloads configured for it and whether the switch's is
    among them; None without distributed."""
    try:
        from .dask import switch
    except ImportError:
        return None
    kinds = {}
    for key in switch.PRELOAD_KEYS:
        preloads = switch.configured_preloads(key)
        kinds[key.split(".")[1]] = {"preloads": preloads, "switched": switch.PRELOAD in preloads}
    return {"kinds": kinds, "all": all(kind["switched"] for kind in kinds.values())}


# -- the self-check ----------------------------------------------------------


async def _check_read_into() -> str:
    from .face.iostream import ReadIntoIOStream

    a, b = socket.socketpair()
    b.setblocking(False)
    stream = ReadIntoIOStream(a)
    try:
        sent = asyncio.ensure_future(asyncio.get_running_loop().sock_sendall(b, _PAYLOAD))
        buf = bytearray(len(_PAYLOAD))
        nbytes = await stream.read_into(buf)
        await sent
        if nbytes != len(_PAYLOAD) or buf != _PAYLOAD:
            raise AssertionError(f"read_into returned {nbytes} bytes, not the {len(_PAYLOAD)} sent")
        return f"{nbytes} bytes in {stream.receive_calls} receive calls, {stream.nbytes_received_in_place} in place"
    finally:
        stream.close()
        b.close()


def _configured_limits() -> dict[str, Any]:
    try:
        from .dask.backend import frame_limits
    except ImportError:
        return {}
    return frame_limits()


async def _check_framed() -> str:
    from .channel.framed import FramedStream
    from .face.iostream import ReadIntoIOStream

    a, b = socket.socketpair()
    left, right = ReadIntoIOStream(a), ReadIntoIOStream(b)
    try:
        reader = FramedStream(right, **_configured_limits())
        sent = FramedStream(left).write_frames([b"header", _PAYLOAD])
        frames = await reader.read_frames()
        await sent
        if [bytes(frame) for frame in frames] != [b"header", _PAYLOAD]:
            raise AssertionError("the frames read are not the frames sent")
        return f"{len(frames)} frames, each in its own buffer"
    finally:
        left.close()
        right.close()


async def _echo_between(listen_backend: Any, connect_backend: Any) -> str:
    """A message from a comm of ``connect_backend`` to a listener of
    ``listen_backend`` and back (distributed's handshake both ways)."""
    from distributed.comm.core import connect, listen
    from distributed.comm.registry import backends

    async def echo(comm: Any) -> None:
        try:
            await comm.write(await comm.read())
        finally:
            await comm.close()

    stock_tcp = backends["tcp"]
    try:
        backends["tcp"] = listen_backend
        listener = await listen("tcp://127.0.0.1:0", echo)
        try:
            backends["tcp"] = connect_backend
            comm = await connect(listener.contact_address)
            try:
                message = {"op": "self-check", "payload": _PAYLOAD}
                await comm.write(message)
                answer = await comm.read()
            finally:
                await comm.close()
        finally:
            listener.stop()
    finally:
        backends["tcp"] = stock_tcp
    if answer != message:
        raise AssertionError("the message came back changed")
    return f"{len(_PAYLOAD)} bytes there and back"


async def _check_switched_to_stock() -> str:
    from distributed.comm.tcp import TCPBackend

    from .dask.tcp import InPlaceTCPBackend

    return await _echo_between(TCPBackend(), InPlaceTCPBackend())


async def _check_stock_to_switched() -> str:
    from distributed.comm.tcp import TCPBackend

    from .dask.tcp import InPlaceTCPBackend

    return await _echo_between(InPlaceTCPBackend(), TCPBackend())


#: The steps, in order: name -> coroutine function (its detail string).
STEPS: dict[str, Callable[[], Awaitable[str]]] = {
    "read_into": _check_read_into,
    "framed message": _check_framed,
    "switched tcp:// to stock": _check_switched_to_stock,
    "stock tcp:// to switched": _check_stock_to_switched,
}

#: Seconds each step may take before it fails (a loopback step takes milliseconds).
STEP_TIMEOUT_S = 10.0


async def self_check() -> list[dict[str, Any]]:
    """Run `STEPS`; one entry per step: ``step``, ``ok``, ``detail`` (what it
    did, or what went wrong).  The dask steps are skipped (``ok`` None)
    without distributed."""
    results: list[dict[str, Any]] = []
    have_distributed = _version("distributed") is not None
    for name, step in STEPS.items():
        if "tcp://" in name and not have_distributed:
            results.append({"step": name, "ok": None, "detail": "skipped: distributed is not installed"})
            continue
        try:
            detail = await asyncio.wait_for(step(), STEP_TIMEOUT_S)
        except Exception as exc:  # the step failed: say how
            results.append({"step": name, "ok": False, "detail": f"{type(exc).__name__}: {exc}"})
        else:
            results.append({"step": name, "ok": True, "detail": detail})
    return results


def report() -> dict[str, Any]:
    """This environment: the package, its build, the versions, dask's switch
    and the self-check (``ok``: every step that ran passed)."""
    reason = tornado_readinto.why_pure()
    steps = asyncio.run(self_check())
    return {
        "version": tornado_readinto.__version__,
        "build": "compiled" if reason is None else "pure",
        "why_pure": reason,
        "python": platform.python_version(),
        "versions": {name: _version(name) for name in VERSIONS},
        "dask_switch": dask_switch(),
        "self_check": steps,
        "ok": all(step["ok"] is not False for step in steps),
    }


def cluster_report(address: str) -> dict[str, Any]:
    """`tornado_readinto.dask.switch.verify` of the cluster whose scheduler
    is at ``address`` (each process: switched, build, counters), asked over
    this package's comms (this process is switched on first)."""
    from distributed import Client

    from .dask.switch import install_backends, verify

    install_backends()
    with Client(address, timeout="10s") as client:
        return verify(client)


def _print_report(data: dict[str, Any]) -> None:
    print(f"tornado_readinto {data['version']}: the {data['build']} build"
          + (f" ({data['why_pure']})" if data["why_pure"] else ""))  # fmt: skip
    versions = ", ".join(f"{name} {version or '-'}" for name, version in data["versions"].items())
    print(f"Python {data['python']}; {versions}")
    switch = data["dask_switch"]
    if switch is None:
        print("dask: distributed is not installed")
    else:
        kinds = switch["kinds"]
        on = [kind for kind, entry in kinds.items() if entry["switched"]]
        off = [kind for kind, entry in kinds.items() if not entry["switched"]]
        print("dask config switches tcp:// and tls:// for: " + (", ".join(on) or "no process kind")
              + (f"; not for: {', '.join(off)}" if off else ""))  # fmt: skip
    print("self-check:")
    for step in data["self_check"]:
        mark = {True: "ok", False: "FAILED", None: "skipped"}[step["ok"]]
        print(f"  {step['step']:<26} {mark:<8} {step['detail']}")


def _print_cluster(data: dict[str, Any]) -> None:
    entries = [("client", data["client"]), ("scheduler", data["scheduler"])]
    entries += [(f"worker {address}", entry) for address, entry in sorted(data["workers"].items())]
    entries += [(f"nanny of {address}", entry) for address, entry in sorted(data["nannies"].items())]
    for name, entry in entries:
        state = "switched" if entry.get("switched") and entry.get("listener_switched") is not False else "stock"
        line = f"{name}: {state}, build {entry.get('build') or '-'}"
        counters = entry.get("counters")
        if counters:
            calls = counters["receive_calls"]
            received = counters["nbytes_received"]
            per_call = received / calls if calls else 0.0
            in_place = counters["nbytes_received_in_place"] / received if received else 0.0
            line += (f"; {counters['comms_open']} comms open, {counters['messages_received']} messages in,"
                     f" {counters['messages_sent']} out, {per_call:,.0f} bytes per receive call,"
                     f" {in_place:.0%} received in place, refused {sum(counters['refused'].values())}")  # fmt: skip
        print(line)
    if data["stock"]:
        print("stock processes: " + ", ".join(data["stock"]))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tornado_readinto", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--address", help="ask the running cluster whose scheduler is at this address")
    args = parser.parse_args(argv)
    if args.address:
        data = cluster_report(args.address)
        ok = not data["stock"]
    else:
        data = report()
        ok = data["ok"]
    if args.json:
        json.dump(data, sys.stdout, indent=2, default=str)
        print()
    elif args.address:
        _print_cluster(data)
    else:
        _print_report(data)
        failed = [step["step"] for step in data["self_check"] if step["ok"] is False]
        if failed:
            print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
