"""The switch interval as an opt-in (`tornado_readinto.dask.switchinterval` and
the dask backend's ``distributed.comm.readinto.switch-interval``): it changes
the interpreter only where configured, once, with one log record.  (A worker
started by ``dask worker`` is in tests/dask/test_dask_deploy.py.)"""

from __future__ import annotations

import logging
import sys

import pytest

from tornado_readinto.dask import switchinterval

from ..conftest import run


@pytest.fixture(autouse=True)
def _restore_interval(monkeypatch):
    before = sys.getswitchinterval()
    monkeypatch.setattr(switchinterval, "_applied_s", None)
    yield
    sys.setswitchinterval(before)


def test_switchinterval_none_changes_nothing():
    before = sys.getswitchinterval()
    assert switchinterval.apply_switch_interval(None, "test") is False
    assert sys.getswitchinterval() == before
    assert switchinterval.applied_switch_interval() is None


def test_switchinterval_applies_once_and_logs_once(caplog):
    caplog.set_level(logging.INFO, logger="tornado_readinto.dask.switchinterval")
    assert switchinterval.apply_switch_interval(1e-3, "key") is True
    assert sys.getswitchinterval() == pytest.approx(1e-3)
    assert switchinterval.apply_switch_interval(1e-3, "key") is False
    records = [r.getMessage() for r in caplog.records]
    assert records == ["switch interval set to 1 ms (was 5 ms) by key"]
    assert switchinterval.applied_switch_interval() == 1e-3


@pytest.mark.parametrize("seconds", [0.0, 10e-6, 2.0])
def test_switchinterval_rejects_out_of_range(seconds):
    with pytest.raises(ValueError, match="must be a duration from 50 us to 1 s"):
        switchinterval.parse_switch_interval(seconds, "key")
    assert switchinterval.parse_switch_interval(None, "key") is None
    assert switchinterval.parse_switch_interval(5e-4, "key") == 5e-4


# -- through the dask backend -------------------------------------------------------


async def _listen_and_connect(scheme="readinto"):
    from distributed.comm import connect, listen

    async def handler(comm):
        await comm.close()

    async with listen(f"{scheme}://127.0.0.1:0", handler) as listener:
        comm = await connect(listener.contact_address)
        comm.abort()


def test_dask_backend_leaves_the_interval_alone_when_not_configured(caplog):
    dask = pytest.importorskip("dask")
    caplog.set_level(logging.INFO, logger="tornado_readinto.dask.switchinterval")
    before = sys.getswitchinterval()
    with dask.config.set({"distributed.comm.readinto.switch-interval": None}):
        run(_listen_and_connect())
    assert sys.getswitchinterval() == before
    assert switchinterval.applied_switch_interval() is None
    assert not caplog.records


def test_dask_backend_applies_the_configured_interval_once(caplog):
    dask = pytest.importorskip("dask")
    caplog.set_level(logging.INFO, logger="tornado_readinto.dask.switchinterval")
    with dask.config.set({"distributed.comm.readinto.switch-interval": "500us"}):
        run(_listen_and_connect())
        run(_listen_and_connect())
    assert sys.getswitchinterval() == pytest.approx(500e-6)
    assert len(caplog.records) == 1 and "distributed.comm.readinto.switch-interval" in caplog.records[0].getMessage()


@pytest.mark.parametrize("value", ["-1ms", "10us", "abc"])
def test_dask_backend_rejects_a_bad_switch_interval(value):
    dask = pytest.importorskip("dask")
    from tornado_readinto.dask.backend import apply_configured_switch_interval

    before = sys.getswitchinterval()
    with dask.config.set({"distributed.comm.readinto.switch-interval": value}):
        with pytest.raises(ValueError, match="distributed.comm.readinto.switch-interval must be a duration"):
            apply_configured_switch_interval()
    assert sys.getswitchinterval() == before
