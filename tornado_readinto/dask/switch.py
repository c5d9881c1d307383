"""The switch: distributed's own ``tcp://`` and ``tls://`` served by this
package, in every process of a cluster, by configuration alone.

Because the bytes are the same as stock distributed's
(`tornado_readinto.dask.tcp`), the switch is per process: switched and
stock processes talk to each other, and a cluster can be switched one
process at a time.

In every process, from dask configuration (no code in the program): dask's
preloads import `tornado_readinto.dask_preload` when a Scheduler, Worker,
Nanny or Client is made, before it listens or connects, and that import
switches the process on.  `ENVIRONMENT` is the block as ``DASK_...``
variables, `CONFIG` as YAML would hold it; remove it and the processes
started afterwards are stock again.

Preloads are dask's documented way to run code in each process before it
listens or connects, and they reach everything ``dask scheduler``,
``dask worker``, a Nanny's worker, ``LocalCluster`` and ``Client`` start;
the alternatives are worse: an entry point cannot replace a scheme that
distributed registers itself, and a hook run at every interpreter start
(a ``.pth`` file) or a borrowed plugin group would reach processes that never
asked.  The limit: a command line's ``--preload`` replaces the config's
preloads.  ``dask worker`` (with its Nanny) always hands the Nanny its own
``--preload-nanny`` list, so its nanny process stays stock unless that list
holds `PRELOAD` (its worker is switched either way); a tool that starts the
scheduler with a ``--preload`` of its own (dask-gateway) needs `PRELOAD` on
that command line too.  The deployment guide has the recipe for each tool.

In a program: `switch_on` (and `switch_off`).  From a client: `verify`,
whose ``stock`` list names every process that is not switched.

.. versionadded:: 0.1
"""

from __future__ import annotations

import sys
from typing import Any, Final

import dask

__all__ = [
    "CONFIG",
    "ENVIRONMENT",
    "PRELOAD",
    "PRELOAD_KEYS",
    "configured_preloads",
    "install_backends",
    "is_switched",
    "status",
    "switch_off",
    "switch_on",
    "verify",
]

#: The preload module that switches a process on when it is imported.
PRELOAD: Final = "tornado_readinto.dask_preload"

#: The dask config keys whose preloads reach every process.
PRELOAD_KEYS: Final = (
    "distributed.scheduler.preload",
    "distributed.worker.preload",
    "distributed.nanny.preload",
    "distributed.client.preload",
)

#: The switch as dask configuration (what a YAML file under ``~/.config/dask`` holds).
CONFIG: Final = {
    "distributed": {
        "scheduler": {"preload": [PRELOAD]},
        "worker": {"preload": [PRELOAD]},
        "nanny": {"preload": [PRELOAD]},
        "client": {"preload": [PRELOAD]},
    }
}

#: The switch as environment variables, the same in every process.
ENVIRONMENT: Final = {"DASK_" + "__".join(part.upper() for part in key.split(".")): PRELOAD for key in PRELOAD_KEYS}

#: distributed's own backends, kept by `install_backends` for `switch_off`.
_stock: dict[str, Any] = {}


def install_backends() -> bool:
    """Serve ``tcp`` and ``tls`` with this package in this process (new comms
    and listeners only); True if that changed now.  Idempotent.

    :raises RuntimeError: on a big-endian host (stock distributed writes its
        header in native byte order there; this package writes little-endian).
    """
    if sys.byteorder != "little":
        raise RuntimeError("tornado_readinto serves dask's tcp:// only on little-endian hosts")
    from distributed.comm.registry import backends

    from .tcp import InPlaceTCPBackend, InPlaceTLSBackend

    changed = False
    for scheme, backend_class in (("tcp", InPlaceTCPBackend), ("tls", InPlaceTLSBackend)):
        current = backends.get(scheme)
        if type(current) is not backend_class:
            if current is not None and not type(current).__module__.startswith("tornado_readinto."):
                _stock[scheme] = current
            backends[scheme] = backend_class()
            changed = True
    return changed


def is_switched() -> bool:
    """Whether new ``tcp://`` and ``tls://`` comms of this process are this package's."""
    from distributed.comm.registry import backends

    return all(type(backends.get(scheme)).__module__ == "tornado_readinto.dask.tcp" for scheme in ("tcp", "tls"))


def switch_on(*, config: bool = True) -> None:
    """The one call for programs: switch this process on, and with ``config``
    (the default) add `PRELOAD` to the preloads of dask's global config, so
    that the processes this program starts (a ``LocalCluster``'s Nanny
    workers, which get the parent's config) are switched on too.

    Call it before making the cluster or client.  Comms already open stay
    as they are; the bytes are the same either way.
    """
    install_backends()
    if config:
        for key in PRELOAD_KEYS:
            preloads = configured_preloads(key)
            if PRELOAD not in preloads:
                dask.config.set({key: [*preloads, PRELOAD]})


def switch_off(*, config: bool = True) -> None:
    """Undo `switch_on`: distributed's own backends for new comms of this
    process, and with ``config`` `PRELOAD` removed from dask's global config."""
    from distributed.comm import tcp
    from distributed.comm.registry import backends

    backends["tcp"] = _stock.pop("tcp", None) or tcp.TCPBackend()
    backends["tls"] = _stock.pop("tls", None) or tcp.TLSBackend()
    if config:
        for key in PRELOAD_KEYS:
            preloads = configured_preloads(key)
            if PRELOAD in preloads:
                dask.config.set({key: [p for p in preloads if p != PRELOAD]})


def configured_preloads(key: str) -> list[str]:
    """The preloads dask's configuration gives ``key`` (one of
    `PRELOAD_KEYS`), as a list: dask takes one name or a list of them."""
    value = dask.config.get(key, [])
    if not value:
        return []
    return [value] if isinstance(value, str) else list(value)


# -- verify: asked of every process from a client ---------------------------------

# The probe runs in processes that may not have this package: it is built
# from source under a module name that cannot be imported, so that
# cloudpickle sends it by value rather than by reference to this module.
_PROBE_SOURCE: Final = '''
def status(server=None):
    """This process's comms: which classes serve tcp:// and tls://, whether
    they are tornado_readinto's, and which build of it runs."""
    import distributed.comm
    from distributed.comm.registry import backends

    def name(obj):
        return None if obj is None else type(obj).__module__ + "." + type(obj).__qualname__

    try:
        import tornado_readinto
    except ImportError:
        tornado_readinto = None
    tcp, tls = backends.get("tcp"), backends.get("tls")
    result = {
        "switched": all(
            type(b).__module__ == "tornado_readinto.dask.tcp" for b in (tcp, tls)
        ),
        "tcp": name(tcp),
        "tls": name(tls),
        "build": None if tornado_readinto is None else ("compiled" if tornado_readinto.COMPILED else "pure"),
        "version": getattr(tornado_readinto, "__version__", None),
    }
    try:
        from tornado_readinto.dask.metrics import snapshot
    except ImportError:
        result["counters"] = None
    else:
        result["counters"] = snapshot()
    if server is not None:
        result["address"] = getattr(server, "address", None)
    listeners = getattr(server, "listeners", None)
    if listeners:
        result["listener"] = name(listeners[0])
        result["listener_switched"] = type(listeners[0]).__module__ == "tornado_readinto.dask.tcp"
    return result


def worker_status(dask_worker):
    return status(dask_worker)


def scheduler_status(dask_scheduler):
    return status(dask_scheduler)
'''
_probe: dict[str, Any] = {"__name__": "tornado_readinto_probe"}
exec(compile(_PROBE_SOURCE, "<tornado_readinto.dask.switch probe>", "exec"), _probe)

#: This process's comms: ``{"switched": bool, "tcp": class, "tls": class,
#: "build": "compiled" | "pure" | None, "version": str | None, "counters":
#: dict | None}``, plus ``address``, ``listener`` and ``listener_switched``
#: when given a server.  ``counters`` is what the process's switched comms
#: have done (`tornado_readinto.dask.metrics.snapshot`), None without the
#: package.
status = _probe["status"]


def verify(client: Any, *, strict: bool = False) -> dict[str, Any]:
    """Ask the scheduler and every worker of ``client``'s cluster, and this
    process, whether its comms are this package's and which build runs::

        {"client": status(), "scheduler": {...}, "workers": {address: {...}},
         "nannies": {worker address: {...}},
         "stock": ["scheduler tls://10.0.0.5:8786", "nanny tcp://10.0.0.7:40321", ...]}

    Each entry is `status` of that process (with its listener's class and
    its address for the scheduler, workers and nannies, and its comms'
    counters, `tornado_readinto.dask.metrics.snapshot`; ``nannies`` is empty
    without Nannies).  ``stock`` names every process that is not switched
    (``"client"``, ``"scheduler <address>"``, ``"worker <address>"``,
    ``"nanny <address>"``): its ``switched`` is False, or its listener is
    stock distributed's; it is empty when the whole cluster is switched.
    Works with processes that lack the package (then ``build`` is None and
    ``switched`` False).  Run it after every deployment: a deployment tool
    that starts one kind of process with its own command line can leave
    that kind stock.

    :arg strict: raise instead of returning a report whose ``stock`` is not
        empty.
    :raises NotSwitchedError: with ``strict``, naming the stock processes.
    """
    from ..errors import NotSwitchedError

    report: dict[str, Any] = {
        "client": status(),
        "scheduler": client.run_on_scheduler(_probe["scheduler_status"]),
        "workers": client.run(_probe["worker_status"]),
        "nannies": client.run(_probe["worker_status"], nanny=True),
    }
    report["stock"] = _stock_processes(report)
    if strict and report["stock"]:
        nprocesses = 2 + len(report["workers"]) + len(report["nannies"])
        raise NotSwitchedError(report["stock"], nprocesses)
    return report


def _stock_processes(report: dict[str, Any]) -> list[str]:
    """The processes of a `verify` report that are not switched, named
    ``"client"``, ``"scheduler <address>"``, ``"worker <address>"`` or
    ``"nanny <address>"``, in that order (addresses sorted)."""

    def stock(entry: dict[str, Any]) -> bool:
        return not entry.get("switched") or entry.get("listener_switched") is False

    names = ["client"] if stock(report["client"]) else []
    scheduler = report["scheduler"]
    if stock(scheduler):
        names.append(f"scheduler {scheduler.get('address') or '(address unknown)'}")
    names += [f"worker {address}" for address, entry in sorted(report["workers"].items()) if stock(entry)]
    names += sorted(
        f"nanny {entry.get('address') or 'of worker ' + address}"
        for address, entry in report.get("nannies", {}).items()
        if stock(entry)
    )
    return names
