"""pytest plugin: with TR_SWITCH=1, this (the test) process serves tcp:// and
tls:// with tornado_readinto from the start (tests that only connect/listen
make no Scheduler, Worker, Nanny or Client, so no preload runs); every other
process gets the switch from the DASK_..._PRELOAD block in its environment."""

import os

if os.environ.get("TR_SWITCH") == "1":
    from tornado_readinto.dask.switch import install_backends, is_switched

    install_backends()
    assert is_switched()


def pytest_report_header(config):
    from distributed.comm.registry import backends

    return f"tr_switch: TR_SWITCH={os.environ.get('TR_SWITCH')} tcp backend={type(backends['tcp']).__module__}"
