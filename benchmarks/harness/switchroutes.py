"""Which of this process's ``tcp://``/``tls://`` comms are switched, by the
process at the other end, for a run that holds a stock and a switched
cluster side by side.

`benchmarks.dask` alternates two ``LocalCluster`` sides whose schedulers and
clients all live in the benchmark's own process.  The switch
(`tornado_readinto.dask.switch.switch_on`) is process-wide: it decides the
class of each comm when the comm is made.  dask keeps making comms long
after a cluster has started (a client's connection pool refills, a scheduler
connects to a worker when it first needs to), so a side whose switch was on
only while it started ends up with some stock comms of its own: a switched
side's RPCs then ran in part over a stock client comm, a mixed pair.

`Routes` replaces distributed's ``tcp`` and ``tls`` backends in this process
for the run instead.  A comm goes to this package's backend if the process
it connects to belongs to a switched side, else to distributed's, whenever
it is made; listeners (and comms to processes not yet named) follow whether
a switched side is starting.  Each side names its processes once they are up
(`Routes.side`), and the backends are distributed's again once no switched
side is left.  The spawned processes are not concerned: they get the
switch (or not) from the dask config they inherit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

__all__ = ["Routes", "routes", "side_addresses"]


def _loc(address: str) -> str:
    """``tcp://127.0.0.1:8786`` -> ``127.0.0.1:8786`` (what a connector gets)."""
    return address.split("://", 1)[-1]


class _Connector:
    def __init__(self, route: Any) -> None:
        self._route = route

    async def connect(self, address: str, deserialize: bool = True, **connection_args: Any) -> Any:
        connector = self._route(address).get_connector()
        return await connector.connect(address, deserialize=deserialize, **connection_args)


class _Backend:
    """One scheme's backend: distributed's or this package's, per peer."""

    def __init__(self, routes: Routes, stock: Any, inplace: Any) -> None:
        self._routes, self.stock, self.inplace = routes, stock, inplace

    def _route(self, loc: str) -> Any:
        return self.inplace if self._routes.switched(loc) else self.stock

    def get_connector(self) -> _Connector:
        return _Connector(self._route)

    def get_listener(self, loc: str, handle_comm: Any, deserialize: bool, **connection_args: Any) -> Any:
        backend = self.inplace if self._routes.starting else self.stock
        return backend.get_listener(loc, handle_comm, deserialize, **connection_args)

    # Address handling is the same in both.
    def get_address_host(self, loc: str) -> str:
        return self.stock.get_address_host(loc)  # type: ignore[no-any-return]

    def get_address_host_port(self, loc: str) -> tuple[str, int]:
        return self.stock.get_address_host_port(loc)  # type: ignore[no-any-return]

    def resolve_address(self, loc: str) -> str:
        return self.stock.resolve_address(loc)  # type: ignore[no-any-return]

    def get_local_address_for(self, loc: str) -> str:
        return self.stock.get_local_address_for(loc)  # type: ignore[no-any-return]


class Routes:
    """This process's ``tcp`` and ``tls`` backends while a switched side
    exists: see the module's docstring.  ``starting`` counts the switched
    sides starting now; ``peers`` maps each named process (``host:port``) to
    whether its side is switched."""

    def __init__(self) -> None:
        self.starting = 0
        self.peers: dict[str, bool] = {}
        self._saved: dict[str, Any] = {}

    def switched(self, loc: str) -> bool:
        """Whether a comm to ``loc`` is made switched now."""
        return self.peers.get(loc, self.starting > 0)

    @contextlib.contextmanager
    def start(self, on: bool) -> Iterator[None]:
        """While a side starts: with ``on``, its listeners and its comms
        (to processes not yet named) are switched, and the processes it
        spawns get the switch's preloads through dask config."""
        if not on:
            yield
            return
        from tornado_readinto.dask import switch as dask_switch

        dask_switch.switch_on()  # the preloads in dask config (and its backends, replaced next)
        self._install()
        self.starting += 1
        try:
            yield
        finally:
            self.starting -= 1
            dask_switch.switch_off()  # the config as it was (and distributed's backends, replaced next)
            self._install()
            self._uninstall_if_unused()

    @contextlib.contextmanager
    def side(self, on: bool) -> Iterator[Callable[[Iterable[str]], None]]:
        """For one side's life: yields ``name(addresses)``, which routes comms
        to those processes (addresses with or without a scheme) to the
        switched backend (``on``) or to distributed's, until the side ends."""
        named: list[str] = []

        def name(addresses: Iterable[str]) -> None:
            for address in addresses:
                named.append(_loc(address))
                self.peers[named[-1]] = on
            if on:
                self._install()

        try:
            yield name
        finally:
            for loc in named:
                self.peers.pop(loc, None)
            self._uninstall_if_unused()

    def _install(self) -> None:
        """Put the routing backends in (again: `dask_switch.switch_on` and
        ``switch_off``, and the switch's preload, which the in-process
        Scheduler, Nannies and Client of a switched side run while it
        starts, each install backends process-wide)."""
        from distributed.comm import tcp
        from distributed.comm.registry import backends

        from tornado_readinto.dask.tcp import InPlaceTCPBackend, InPlaceTLSBackend

        for scheme, stock, inplace in (
            ("tcp", tcp.TCPBackend, InPlaceTCPBackend),
            ("tls", tcp.TLSBackend, InPlaceTLSBackend),
        ):
            current = backends.get(scheme)
            if isinstance(current, _Backend):
                continue
            if scheme not in self._saved:
                self._saved[scheme] = current if type(current) is stock else stock()
            backends[scheme] = _Backend(self, stock(), inplace())  # type: ignore[assignment]  # duck-typed

    def _uninstall_if_unused(self) -> None:
        """Put distributed's backends back once no switched side is starting
        or named."""
        from distributed.comm.registry import backends

        if self.starting or any(self.peers.values()):
            return
        for scheme, backend in self._saved.items():
            backends[scheme] = backend
        self._saved.clear()


#: The one `Routes` of this process.
routes = Routes()


def side_addresses(client: Any) -> list[str]:
    """The scheduler's, every worker's and every Nanny's address."""
    workers = client.scheduler_info()["workers"]
    nannies = [w["nanny"] for w in workers.values() if w.get("nanny")]
    return [client.scheduler.address, *workers, *nannies]
