"""The workloads dask users run (`benchmarks.dask_users`, through
``python -m benchmarks.dask``): each passes its own result checks on a small
size, stock and switched; every process of the switched side is switched and
none of the stock side's (asked of each process); the switched side gets
exactly the README's block; and a side whose processes are not what its row
says fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("distributed")

from benchmarks import dask_users as users  # noqa: E402
from benchmarks.dask import SUITE  # noqa: E402
from tests.dask.test_dask_switch import readme_switch_environment  # noqa: E402

#: Small sizes: a few seconds per fresh driver.
SMALL = [
    "--transfer-size", "1MiB", "--user-arrays", "3", "--user-shuffle-days", "2", "--user-shuffle-partitions", "4",
    "--user-rechunk-size", "8MiB", "--scale-workers", "6", "--scale-processes", "2", "--scale-tasks", "120",
    "--user-settle", "0",
]  # fmt: skip


def _run(tmp_path: Path, workloads: tuple[str, ...], pair: str, *more: str, ok: bool = True) -> list[dict]:
    """The suite's rows (``ok``: its exit status must be 0)."""
    path = tmp_path / "dask.json"
    argv = ["--workload", ",".join(workloads), "--pair", pair, "--repeat", "1", "--warmup", "0", *SMALL, *more,
            "--json", str(path)]  # fmt: skip
    status = SUITE.main(argv)
    assert status == 0 or not ok, status
    return json.loads(path.read_text())["results"]


@pytest.mark.timeout(900)
def test_every_user_workload_checks_its_result_stock_and_switched(tmp_path: Path) -> None:
    rows = _run(tmp_path, users.WORKLOADS, "switch", "--user-profile", "0")
    assert [(r["workload"], r["protocol"]) for r in rows] == [
        (w, p) for w in users.WORKLOADS for p in ("tcp", "tcp+switch")
    ]
    for r in rows:
        assert r["status"] == "ok", r
        (repeat,) = r["repeats"]
        assert repeat["value"] > 0 and all(v is not None and v >= 0 for v in repeat["cpu_s"].values()), repeat
        switch = repeat["switch"]
        if r["protocol"] == "tcp+switch":
            assert switch["stock"] == [], switch
        else:  # the client, the scheduler, every worker and nanny: all named stock
            assert len(switch["stock"]) == switch["processes"] and "client" in switch["stock"], switch
    by_row = {(r["workload"], r["protocol"]): r["repeats"][0] for r in rows}
    assert by_row["gather", "tcp"]["nbytes"] == 3 * 2**20
    assert by_row["p2p-shuffle", "tcp"]["rows"] == by_row["p2p-shuffle", "tcp+switch"]["rows"] == 2 * 86400
    assert by_row["p2p-rechunk", "tcp"]["shape"] == by_row["p2p-rechunk", "tcp+switch"]["shape"]
    scale = by_row["scheduler-scale", "tcp+switch"]
    assert scale["workers"] == 6 and scale["count"] == 120 and scale["switch"]["processes"] == 2 + 6
    assert scale["scheduler_us_per_task"] > 0


def _stock_tls_lost(rows: list[dict]) -> bool:
    """A stock tls:// side that failed or lost its sampled repetition: on
    CPython 3.14/3.15 with OpenSSL 3.4+, stock distributed's TLS comms can
    lose a connection to an OpenSSL error left queued by another one
    (python/cpython#148594; this package's streams empty the queue), and
    its driver then fails or waits out ``--timeout``."""
    stock = [r for r in rows if r["protocol"] == "tls"]
    return any(r["status"] != "ok" or "profile_error" in r for r in stock)


@pytest.mark.timeout(900)
def test_user_workloads_over_tls_with_the_comm_share_sampled(tmp_path: Path) -> None:
    """Over tls:// (``Security.temporary()``; the CLI scheduler: a CA's
    files), and one py-spy-sampled repetition per side: the comm's share of
    the sampled processes' busy samples is recorded.  Run again, once, when
    the stock side lost a connection to CPython's TLS bug (`_stock_tls_lost`)."""
    args = ("--user-profile", "1", "--timeout", "120")
    rows = _run(tmp_path, ("gather", "scheduler-scale"), "switch-tls", *args, ok=False)
    if _stock_tls_lost(rows):
        rows = _run(tmp_path, ("gather", "scheduler-scale"), "switch-tls", *args)
    assert [(r["workload"], r["protocol"]) for r in rows] == [
        (w, p) for w in ("gather", "scheduler-scale") for p in ("tls", "tls+switch")
    ]
    for r in rows:
        assert r["status"] == "ok", r
        (profile,) = r["profiles"]  # the result's extra, flattened into its row
        assert sum(sum(c.values()) for c in profile["samples"].values()) > 0, profile
        assert 0 < r["comm_share"] <= 1, r


def test_the_switched_side_gets_exactly_the_readme_block_and_the_stock_side_no_preload() -> None:
    assert users.readme_switch_environment() == readme_switch_environment()
    base = {"PATH": "/bin", "DASK_DISTRIBUTED__WORKER__PRELOAD": "mine", "DASK_DISTRIBUTED__NANNY__PRELOAD_ARGV": "[]"}
    assert users.side_environment(False, base) == {"PATH": "/bin"}
    assert users.side_environment(True, base) == {"PATH": "/bin", **readme_switch_environment()}


def test_a_driver_whose_processes_are_not_what_its_side_says_fails(tmp_path: Path) -> None:
    """The switched row's driver started without the block: its own check
    (every process switched) fails the repetition, naming the stock ones."""
    import argparse

    unused = ("user_shuffle_days", "user_shuffle_partitions", "user_rechunk_size", "scale_workers",
              "scale_processes", "scale_tasks")  # fmt: skip
    args = argparse.Namespace(**dict.fromkeys(unused), user_arrays=1, transfer_size=2**16)
    spec = users.spec_of("gather", "tcp", True, args)
    with pytest.raises(RuntimeError, match="switched should be True in every process"):
        users.run_driver(spec, 120, env=users.side_environment(False))
