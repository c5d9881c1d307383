"""The dask preload of the switch (`tornado_readinto.dask.switch`).

Importing this module serves distributed's ``tcp://`` and ``tls://`` with
this package in the importing process.  dask imports a preload when it makes
the Scheduler, Worker, Nanny or Client, before that listens or connects;
``dask_setup`` (run once the server has started) makes sure again, for a
process that had imported this module before and switched off since.  Where
``prometheus_client`` is importable, it also registers the comms' figures
(`tornado_readinto.dask.prometheus`) in the registry dask's ``/metrics`` serves.

.. versionadded:: 0.1
"""

from __future__ import annotations

from typing import Any

from .dask.prometheus import register
from .dask.switch import install_backends

install_backends()
register()  # the comms' figures on /metrics, where prometheus_client is importable


def dask_setup(server: Any) -> None:
    install_backends()
