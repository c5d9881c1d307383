"""The load benchmark (``python -m benchmarks.load``): its pure parts on
hand-made results (ratios, table, JSON, arguments), the load client's checks
on fake transports, and short real runs (separate server and client
processes) on asyncio, on uvloop, against the comm server, with a
GIL-holding thread beside the server's loop and over TLS."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
from pathlib import Path
from typing import Any

import pytest

from benchmarks import harness as h
from benchmarks import load
from benchmarks.harness import processes
from benchmarks.harness.meta import command_line
from benchmarks.impls import IMPLS, _tls, availability
from benchmarks.impls.__main__ import main as impls_main
from benchmarks.impls._common import U64, VerificationError, pack_header
from benchmarks.impls._loadclient import (
    LoadPlan,
    Template,
    _Bench,
    _CommHandshake,
    _LoadConn,
    comm_template,
    framed_template,
    make_payload,
    run_load,
)
from benchmarks.load import SUITE, LoadResult, ratio


def make_result(
    server: str, loop: str, us_per_msg: list[float], clients: int = 64, other_threads_us: float = 0.0, **kw: Any
) -> LoadResult:
    """``us_per_msg``: the loop thread's CPU per message; the process's adds ``other_threads_us``."""
    repeats = [
        {
            "msgs_per_s": 1e6 / us,
            "messages": 1000,
            "loop_cpu_us_per_msg": us,
            "server_cpu_us_per_msg": us + other_threads_us,
            "client_cpu_us_per_msg": 10.0,
            "server_cpu_pct": 97.0,
            "client_cpu_pct": 50.0,
            "p50_s": 1e-4,
            "p99_s": 3e-4,
        }
        for us in us_per_msg
    ]
    return LoadResult(server, loop, clients, repeats=repeats, verified_messages=3000, **kw)


@pytest.fixture
def results() -> list[LoadResult]:
    return [
        make_result("stock", "asyncio", [60, 64, 70]),
        make_result("readinto", "asyncio", [30, 32, 40]),
        make_result("asyncio-streams", "asyncio", [40, 41, 39]),
        make_result("stock", "uvloop", [50, 50, 50]),
        make_result("readinto", "uvloop", [20, 25, 21]),  # no asyncio-streams on uvloop
        make_result("readinto", "asyncio", [33], clients=256),  # no baseline with 256 connections
        LoadResult("framed", "asyncio", 64, error="load-client exited with status 2: VERIFICATION FAILED\ntrace"),
        LoadResult("comm", "uvloop", 64, skipped="needs msgpack"),
        LoadResult("comm", "uvloop", 256, skipped="needs msgpack"),
        # the same case with a GIL thread: its own condition, the process's CPU includes the thread's
        make_result("stock", "asyncio", [200, 210, 190], gil_thread=True, other_threads_us=3000),
        make_result("readinto", "asyncio", [100, 110, 90], gil_thread=True, other_threads_us=3000),
    ]


# -- ratios, table, JSON, plot ------------------------------------------------------


def test_ratio_same_loop_and_case_only(results: list[LoadResult]) -> None:
    stock, readinto, streams, uv_stock, uv_readinto, big, failed = results[:7]
    assert ratio(results, readinto, "stock") == pytest.approx(32 / 64)
    assert ratio(results, readinto, "asyncio-streams") == pytest.approx(32 / 40)
    assert ratio(results, streams, "asyncio-streams") == pytest.approx(1.0)
    assert ratio(results, uv_readinto, "stock") == pytest.approx(21 / 50)  # uvloop's stock, not asyncio's
    assert ratio(results, uv_readinto, "asyncio-streams") is None  # not on uvloop in this run
    assert ratio(results, big, "stock") is None  # no stock with 256 connections
    assert ratio(results, failed, "stock") is None
    assert ratio(results, readinto, "stock", metric="msgs_per_s") == pytest.approx((1e6 / 32) / (1e6 / 64))
    gil_stock, gil_readinto = results[-2:]
    assert ratio(results, gil_readinto, "stock") == pytest.approx(100 / 200)  # stock with the GIL thread too
    assert ratio(results, gil_stock, "asyncio-streams") is None  # none ran with the GIL thread


def test_ratio_compares_loop_thread_cpu_falling_back_to_process_cpu() -> None:
    with_loop = [
        make_result("stock", "asyncio", [60], other_threads_us=1000),
        make_result("readinto", "asyncio", [30], other_threads_us=10),
    ]
    assert load.cpu_metric(*with_loop) == "loop_cpu_us_per_msg"
    assert ratio(with_loop, with_loop[1], "stock") == pytest.approx(30 / 60)
    old = make_result("stock", "asyncio", [60], other_threads_us=40)  # e.g. JSON from before the loop column
    for repeat in old.repeats:
        del repeat["loop_cpu_us_per_msg"]
    assert load.cpu_metric(old, with_loop[1]) == "server_cpu_us_per_msg"
    assert ratio([old, with_loop[1]], with_loop[1], "stock") == pytest.approx(40 / 100)


def test_format_table(results: list[LoadResult]) -> None:
    table = SUITE.format_table(results)
    lines = table.splitlines()
    assert "median of 3 repeats" in table and "lower is cheaper" in table
    header = next(line for line in lines if line.startswith("server"))
    assert header.split()[:4] == ["server", "loop", "gil-thread", "tls"]
    assert header.endswith("x asyncio-streams  x stock  msgs/s x stock")
    readinto = next(line for line in lines if line.startswith("readinto ") and " no " in line and " 64 " in line)
    assert readinto.split()[1:7] == ["asyncio", "no", "no", "64", "1KiB", "max"]
    assert readinto.count("32 (30-40)") == 2  # loop and server us/msg: median (min-max)
    assert "31.2k (25k-33.3k)" in readinto  # msgs/s
    assert "300us" in readinto and "97%" in readinto and " max " in readinto
    assert readinto.split()[-3:] == ["0.80x", "0.50x", "2.00x"]
    uv_readinto = next(line for line in lines if line.startswith("readinto ") and "uvloop" in line)
    assert uv_readinto.split()[-3:] == ["-", "0.42x", "2.38x"]
    big = next(line for line in lines if " 256 " in line and line.startswith("readinto"))
    assert big.split()[-3:] == ["-", "-", "-"] and " 33 " in big and "(" not in big  # one repeat: no spread
    gil = next(line for line in lines if line.startswith("readinto ") and " yes " in line)
    assert gil.split()[1:7] == ["asyncio", "yes", "no", "64", "1KiB", "max"]
    assert "100 (90-110)" in gil and "3.1e+03 (3.09e+03-3.11e+03)" in gil  # loop thread; whole process
    assert gil.split()[-3:] == ["-", "0.50x", "2.00x"]
    failed = next(line for line in lines if line.startswith("framed "))
    assert "FAILED: load-client exited with status 2: VERIFICATION FAILED" in failed and "trace" not in table
    assert [line for line in lines if line.startswith("SKIPPED")] == ["SKIPPED comm on uvloop: needs msgpack"]
    # a blank line between loops and between cases
    body = lines[lines.index(header) + 2 :]
    assert body[3] == "" and body[4].startswith("stock ") and "uvloop" in body[4]


def test_format_table_empty() -> None:
    assert "server" in SUITE.format_table([]) and "SKIPPED" not in SUITE.format_table([])


def test_to_json_round_trips(results: list[LoadResult]) -> None:
    data = json.loads(json.dumps(SUITE.to_json(results, {"argv": ["--full"]})))
    assert data["meta"] == {"argv": ["--full"]}
    entries = data["results"]
    assert [e["status"] for e in entries] == ["ok"] * 6 + ["failed", "skipped", "skipped", "ok", "ok"]
    readinto = entries[1]
    assert readinto["server_cpu_us_per_msg"] == {"median": 32, "min": 30, "max": 40}
    assert readinto["loop_cpu_us_per_msg"] == {"median": 32, "min": 30, "max": 40}
    assert readinto["x_stock"] == pytest.approx(0.5) and readinto["x_asyncio-streams"] == pytest.approx(0.8)
    assert readinto["msgs_per_s_x_stock"] == pytest.approx(2.0) and readinto["gil_thread"] is False
    gil = entries[-1]
    assert gil["gil_thread"] is True and gil["x_stock"] == pytest.approx(0.5)
    assert gil["server_cpu_us_per_msg"]["median"] == 3100 and gil["loop_cpu_us_per_msg"]["median"] == 100
    assert readinto["impl"] == "readinto" and readinto["wire"] == "framed" and readinto["msize_text"] == "1KiB"
    assert entries[0]["impl"] == "stock-read_bytes"
    again = [SUITE.from_json(e) for e in entries]
    assert SUITE.to_json(again, {"argv": ["--full"]}) == data


def test_plot_writes_png(tmp_path: Path, results: list[LoadResult]) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "load.png"
    SUITE.plot(results, str(path))
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 5000
    SUITE.plot([results[-1]], str(tmp_path / "empty.png"))  # nothing measured
    assert (tmp_path / "empty.png").read_bytes().startswith(b"\x89PNG")


def test_tls_is_a_condition_of_its_own() -> None:
    """Over TLS, the ratios compare with stock and asyncio-streams over TLS on
    the same loop, never with their plain-TCP rows; the table, the JSON and
    the plot say which condition a row ran in."""
    results = [
        make_result("stock", "asyncio", [60, 64, 70]),
        make_result("asyncio-streams", "asyncio", [40, 41, 39]),
        make_result("readinto", "asyncio", [30, 32, 40]),
        make_result("stock", "asyncio", [120, 130, 140], tls=True),
        make_result("asyncio-streams", "asyncio", [80, 81, 79], tls=True),
        make_result("readinto", "asyncio", [48, 52, 60], tls=True),
        make_result("asyncio-protocol", "uvloop", [20], tls=True),  # no baseline over TLS on uvloop
    ]
    plain, tls, uv = results[2], results[5], results[6]
    assert ratio(results, plain, "stock") == pytest.approx(32 / 64)
    assert ratio(results, tls, "stock") == pytest.approx(52 / 130)
    assert ratio(results, tls, "asyncio-streams") == pytest.approx(52 / 80)
    assert ratio(results, tls, "stock", metric="msgs_per_s") == pytest.approx(130 / 52)
    assert ratio(results, uv, "stock") is None and ratio(results, uv, "asyncio-streams") is None
    lines = SUITE.format_table(results).splitlines()
    header = next(line for line in lines if line.startswith("server"))
    assert header.split()[:4] == ["server", "loop", "gil-thread", "tls"]
    rows = [line for line in lines if line.startswith("readinto ")]
    assert [row.split()[1:7] for row in rows] == [
        ["asyncio", "no", "no", "64", "1KiB", "max"],
        ["asyncio", "no", "yes", "64", "1KiB", "max"],
    ]
    assert rows[0].split()[-3:] == ["0.80x", "0.50x", "2.00x"]
    assert rows[1].split()[-3:] == ["0.65x", "0.40x", "2.50x"]
    body = lines[lines.index(header) + 2 :]
    assert body[3] == "" and body[4].startswith("stock ") and body[4].split()[3] == "yes"  # a group of its own
    entries = SUITE.to_json(results)["results"]
    assert [e["tls"] for e in entries] == [False] * 3 + [True] * 4
    assert entries[5]["x_stock"] == pytest.approx(0.4) and entries[5]["x_asyncio-streams"] == pytest.approx(0.65)
    assert [SUITE.from_json(e).tls for e in entries] == [e["tls"] for e in entries]
    old = dict(entries[2])
    del old["tls"]  # JSON from before --tls: plain TCP
    assert SUITE.from_json(old).tls is False
    assert SUITE.label(tls).endswith(", TLS") and SUITE.skip_label(tls) == "readinto on asyncio over TLS"


def test_fill_fails_a_tls_case_unless_both_processes_spoke_tls() -> None:
    client: dict[str, Any] = {
        "repeats": [{}], "loop": "asyncio", "verified_messages": 4, "messages_sent": 4, "full_compares": 2,
        "connect_s": 0.1, "cpu_s": 1.0, "rss_bytes": 1, "tls": None,
    }  # fmt: skip
    server: dict[str, Any] = {
        "messages": 4, "cpu_s": 1.0, "rss_bytes": 1, "loop_tid": 1, "loop_thread_cpu_s": 1.0,
        "gil_thread_tid": None, "gil_thread_cpu_s": None, "tls": False,
    }  # fmt: skip
    tls_client = {**client, "tls": {"version": "TLSv1.3", "cipher": "TLS_AES_256_GCM_SHA384", "bits": 256}}
    plain = LoadResult("stock", "asyncio", 1)
    load._fill(plain, client, server, 1)
    assert plain.extra["tls_version"] is None and plain.extra["tls_cipher"] is None
    for c, s in [(client, server), (tls_client, server), (client, {**server, "tls": True})]:
        with pytest.raises(h.CaseFailed, match="asked for TLS True"):
            load._fill(LoadResult("stock", "asyncio", 1, tls=True), c, s, 1)
    with pytest.raises(h.CaseFailed, match="asked for TLS False"):
        load._fill(LoadResult("stock", "asyncio", 1), tls_client, {**server, "tls": True}, 1)
    over_tls = LoadResult("stock", "asyncio", 1, tls=True)
    load._fill(over_tls, tls_client, {**server, "tls": True}, 1)
    assert over_tls.extra["tls_version"] == "TLSv1.3" and over_tls.extra["tls_cipher"] == "TLS_AES_256_GCM_SHA384"


# -- arguments -----------------------------------------------------------------------


def test_parse_args_defaults() -> None:
    args = SUITE.parse_args([])
    assert args.server == list(load.LOAD_SERVERS) and args.loop == load.default_loops()
    assert args.clients == [64] and args.msize == [1024] and args.rate == [0.0]
    assert (args.warmup, args.duration, args.repeat) == (0.5, 2.0, 3)
    assert args.json is None and args.plot is None and args.client_loop is None
    assert args.gil_thread == "off" and {c.gil_thread for c in SUITE.cases(args)} == {False}
    gil = SUITE.parse_args(["--gil-thread"])
    assert gil.gil_thread == "on" and gil.clients == [8, 64]  # the connection counts
    assert {c.gil_thread for c in SUITE.cases(gil)} == {True}
    assert SUITE.parse_args(["--gil-thread", "--clients", "4"]).clients == [4]
    full = SUITE.parse_args(["--full"])
    assert full.clients == [1, 16, 64, 256] and full.server == list(load.LOAD_SERVERS)
    assert SUITE.parse_args(["--full", "--clients", "8"]).clients == [8]  # explicit flags win


def test_parse_args_tls() -> None:
    assert SUITE.parse_args([]).tls == "off"
    on = SUITE.parse_args(["--tls", "--server", "stock", "--loop", "asyncio"])
    assert on.tls == "on" and on.clients == [64]  # the 64 connections
    assert [c.tls for c in SUITE.cases(on)] == [True]
    argv = ["--server", "stock,readinto", "--loop", "asyncio", "--tls", "both", "--gil-thread", "both",
            "--clients", "8"]  # fmt: skip
    # each server over TCP then over TLS, without and then with the GIL thread; the servers compared back to back
    assert [(c.server, c.gil_thread, c.tls) for c in SUITE.cases(SUITE.parse_args(argv))] == [
        ("stock", False, False), ("readinto", False, False), ("stock", False, True), ("readinto", False, True),
        ("stock", True, False), ("readinto", True, False), ("stock", True, True), ("readinto", True, True),
    ]  # fmt: skip


def test_parse_args_lists_and_plan() -> None:
    args = SUITE.parse_args(["--server", "stock, readinto", "--loop", "asyncio,uvloop", "--clients", "1,16",
                       "--msize", "64KiB", "--rate", "100", "--client-loop", "asyncio"])  # fmt: skip
    assert args.server == ["stock", "readinto"] and args.msize == [65536] and args.rate == [100.0]
    assert args.client_loop == "asyncio"
    cases = SUITE.cases(args)
    assert len(cases) == 8
    # servers innermost (compared back to back), then loops, then connection counts
    assert [(c.server, c.loop, c.clients) for c in cases[:3]] == [
        ("stock", "asyncio", 1),
        ("readinto", "asyncio", 1),
        ("stock", "uvloop", 1),
    ]
    assert {(c.msize, c.rate) for c in cases} == {(65536, 100.0)}
    both = SUITE.cases(
        SUITE.parse_args(["--server", "stock,readinto", "--loop", "asyncio", "--gil-thread", "both", "--clients", "8"])
    )
    # each server without and then with the GIL thread, the servers compared back to back
    assert [(c.server, c.gil_thread) for c in both] == [
        ("stock", False),
        ("readinto", False),
        ("stock", True),
        ("readinto", True),
    ]


@pytest.mark.parametrize(
    "argv",
    [["--server", "nope"], ["--loop", "trio"], ["--clients", "0"], ["--msize", "4"], ["--rate", "-1"],
     ["--duration", "0"], ["--warmup", "-1"], ["--client-loop", "threads"], ["--gil-thread", "maybe"],
     ["--tls", "maybe"], ["--offered", "0"], ["--offered", "100", "--rate", "10"]],
)  # fmt: skip
def test_parse_args_rejects(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        SUITE.parse_args(argv)


def test_parse_args_offered_splits_the_total_over_the_connections() -> None:
    """--offered: the same total for every server and connection count, each
    connection offering its share; the flag alone offers the default."""
    assert SUITE.parse_args(["--offered"]).offered == [load.DEFAULT_OFFERED]
    args = SUITE.parse_args(["--server", "readinto,asyncio-protocol", "--loop", "asyncio", "--clients", "4,64",
                             "--offered", "1000,2000"])  # fmt: skip
    cases = SUITE.cases(args)
    assert [(c.server, c.clients, c.rate) for c in cases[:4]] == [
        ("readinto", 4, 250.0),
        ("asyncio-protocol", 4, 250.0),
        ("readinto", 64, 15.625),
        ("asyncio-protocol", 64, 15.625),
    ]
    assert [load.offered_msgs_per_s(c) for c in cases] == [1000.0] * 4 + [2000.0] * 4
    assert {c.rate for c in SUITE.cases(SUITE.parse_args(["--clients", "4"]))} == {0.0}  # as fast as possible


def test_table_names_the_offered_load_and_flags_a_server_that_did_not_keep_up() -> None:
    paced = [
        make_result(server, "asyncio", us, rate=1000 / 64) for server, us in (("readinto", [80, 90]), ("stock", [150]))
    ]
    for r, msgs_per_s in zip(paced, (998.0, 700.0)):
        for repeat in r.repeats:
            repeat["msgs_per_s"] = msgs_per_s
    saturated = make_result("readinto", "asyncio", [30])
    lines = SUITE.format_table([*paced, saturated]).splitlines()
    header = next(line for line in lines if line.startswith("server"))
    assert header.split()[6] == "offered"
    rows = [line.split() for line in lines if line.startswith(("readinto ", "stock "))]
    assert [row[6] for row in rows] == ["1k/s", "1k/s", "max"]
    assert [load.kept_up(r) for r in (*paced, saturated)] == [True, False, None]
    assert "BELOW" not in SUITE.brief(paced[0]) and "BELOW the offered 1k/s" in SUITE.brief(paced[1])
    entry = SUITE.to_json(paced)["results"][0]
    assert entry["offered_msgs_per_s"] == pytest.approx(1000) and entry["kept_up"] is True
    assert SUITE.label(paced[0]).endswith("offered 1k/s")


class FakeLoop:
    """The clock and timers a paced `_LoadConn` uses, by hand."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.timers: list[tuple[float, Any]] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Any) -> None:
        self.timers.append((when, callback))


class FixedJitter:
    def __init__(self, value: float) -> None:
        self.value = value

    def random(self) -> float:
        return self.value


def test_load_conn_paced_keeps_its_timetable() -> None:
    """Paced, a connection sends in its own slot of each period whatever the
    server's speed: early echoes wait for the slot, a late one sends at once,
    one more than a period late skips the missed slots (no burst) and keeps
    the connection's phase."""

    async def main() -> None:
        bench = _Bench(LoadPlan(4, 64, "framed", 10.0, 0.0, 1.0, 1, 0))  # period 0.1 s, slots of 0.025 s
        conn = _LoadConn(bench, 1, framed_template(make_payload(64, seed=0)))
        transport = FakeTransport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        fake = FakeLoop(100.0)
        bench.loop = fake  # type: ignore[assignment]
        conn.jitter = FixedJitter(0.5)  # type: ignore[assignment]
        conn.pace(100.025)  # the second of four slots
        assert [when for when, _ in fake.timers] == [pytest.approx(100.0375)] and not transport.written
        fake.timers.pop()[1]()
        fake.now = 100.04
        _feed(conn, transport.written[-1])  # an early echo: wait for the next slot
        assert [when for when, _ in fake.timers] == [pytest.approx(100.1375)] and len(transport.written) == 1
        fake.timers.pop()[1]()
        fake.now = 100.25
        _feed(conn, transport.written[-1])  # after its slot's send time (100.2375): at once
        assert not fake.timers and len(transport.written) == 3
        fake.now = 100.56
        _feed(conn, transport.written[-1])  # over a period late: the slots of 100.325 and 100.425 skipped
        assert conn.slot == pytest.approx(100.525) and not fake.timers and len(transport.written) == 4
        assert bench.error is None and bench.nechoes == 3

    asyncio.run(main())


def test_every_load_server_maps_to_an_event_loop_impl() -> None:
    for name, (impl, wire) in load.LOAD_SERVERS.items():
        assert IMPLS[impl].loop == "asyncio", name
        assert wire in ("framed", "comm")
    assert availability(IMPLS["threads"], "uvloop") is not None
    assert availability(IMPLS["readinto"], "asyncio") is None
    assert "readinto" in SUITE.listing()


def test_every_load_server_serves_tls_and_the_others_say_why_not() -> None:
    for name, (impl, _) in load.LOAD_SERVERS.items():
        assert availability(IMPLS[impl], "asyncio", tls=True) is None, name
        assert availability(IMPLS[impl], "uvloop", tls=True) in (None, availability(IMPLS[impl], "uvloop")), name
    assert availability(IMPLS["threads"], tls=True) == "threads has no TLS server"
    assert availability(IMPLS["dask-tcp"], tls=True) == "dask-tcp has no TLS server"
    assert availability(IMPLS["dask-tcp"]) is None  # plain TCP: fine
    assert _tls.unavailable() is None
    lines = SUITE.listing().splitlines()
    nload, npure, nbound = len(load.LOAD_SERVERS), len(load.PURE_SERVERS), len(load.BOUND_SERVERS)
    assert len(lines) == nload + npure + nbound
    assert all("tls: available]" in line for line in lines[: nload + npure])
    assert [line.split()[0] for line in lines[nload : nload + npure]] == list(load.PURE_SERVERS)
    nload += npure
    # the lower bounds are plain TCP only, and say so
    assert [line.split()[0] for line in lines[nload : nload + nbound]] == list(load.BOUND_SERVERS)
    assert all("has no TLS server" in line for line in lines[nload : nload + nbound])


def test_load_server_without_tls_is_skipped_with_its_reason(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server that cannot serve TLS, or a machine without trustme, skips
    the TLS cases with the reason (in --list too); the run does not fail."""
    monkeypatch.setitem(load.LOAD_SERVERS, "dask", ("dask-tcp", "framed"))
    assert "tls: UNAVAILABLE: dask-tcp has no TLS server]" in SUITE.listing()
    assert SUITE.main(["--server", "dask", "--loop", "asyncio", "--tls", *SMOKE]) == 0
    captured = capsys.readouterr()
    assert "SKIPPED dask on asyncio over TLS: dask-tcp has no TLS server" in captured.out
    assert "SKIPPED (dask-tcp has no TLS server)" in captured.err
    monkeypatch.setattr(_tls, "TLS_REQUIRES", ("no_such_module_for_certificates",))
    assert "tls: UNAVAILABLE: --tls needs no_such_module_for_certificates" in SUITE.listing()
    assert SUITE.main(["--server", "stock", "--loop", "asyncio", "--tls", *SMOKE]) == 0
    assert "SKIPPED stock on asyncio over TLS: --tls needs no_such_module_for_certificates" in capsys.readouterr().out


def test_impls_server_refuses_tls_without_a_tls_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cert_file, _ = _tls.write_cert_files(str(tmp_path))
    argv = ["server", "--impl", "threads", "--clients", "1", "--tls-cert", cert_file]
    assert impls_main(argv) == 1
    assert "threads has no TLS server" in capsys.readouterr().err


def test_impls_server_refuses_loop_for_threads(capsys: pytest.CaptureFixture[str]) -> None:
    assert impls_main(["server", "--impl", "threads", "--loop", "uvloop", "--clients", "1"]) == 1
    assert "not on an event loop" in capsys.readouterr().err


# -- the load client's pieces ----------------------------------------------------------


def test_templates() -> None:
    payload = make_payload(1024, seed=1)
    framed = framed_template(payload)
    assert framed.wire == U64.pack(1) + U64.pack(1024) + payload and framed.stamp_offset == 16
    assert not framed.prelude
    pytest.importorskip("msgpack")
    for msize in (1024, 128 << 10):  # inline in the msgpack header; out of band
        comm = comm_template(make_payload(msize, seed=2))
        nframes = U64.unpack_from(comm.wire)[0]
        assert nframes == (1 if msize < 64 << 10 else 2)
        assert comm.wire[comm.stamp_offset : comm.stamp_offset + 16] == make_payload(msize, seed=2)[:16]
        assert comm.prelude.startswith(U64.pack(1))
    with pytest.raises(ValueError):
        make_payload(4, seed=0)


class FakeTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.aborted = False

    def write(self, data: Any) -> None:
        self.written.append(bytes(data))

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None:
        pass


def _feed(conn: _LoadConn, data: bytes, chunk: int = 100) -> None:
    """Deliver ``data`` as a transport does: at most ``chunk`` bytes at a
    time, and never more than ``get_buffer`` offers."""
    pos = 0
    while pos < len(data):
        buf = conn.get_buffer(-1)
        n = min(chunk, len(buf), len(data) - pos)
        buf[:n] = data[pos : pos + n]
        conn.buffer_updated(n)
        pos += n


def _conn(template: Template) -> tuple[_Bench, _LoadConn, FakeTransport]:
    bench = _Bench(LoadPlan(1, 64, "framed", 0.0, 0.0, 1.0, 1, 0))
    conn = _LoadConn(bench, 0, template)
    transport = FakeTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    conn.send()
    return bench, conn, transport


def test_load_conn_pingpongs_and_checks() -> None:
    async def main() -> None:
        bench, conn, transport = _conn(framed_template(make_payload(300, seed=0)))
        for seq in range(3):
            assert U64.unpack_from(transport.written[-1], 16)[0] == seq
            _feed(conn, transport.written[-1])  # a perfect echo, in pieces
        assert bench.error is None and bench.nechoes == 3 and len(bench.latencies) == 3
        assert conn.verified_messages == 3 and conn.full_compares == 1 and len(transport.written) == 4
        bench.stopping = True
        _feed(conn, transport.written[-1])
        assert conn.done and bench.nfinished == 1 and conn.full_compares == 2 and len(transport.written) == 4

    asyncio.run(main())


@pytest.mark.parametrize(
    "corrupt, message",
    [
        (lambda echo, first: first, "got stamp 0"),  # a stale echo
        (lambda echo, first: echo[:8] + U64.pack(299) + echo[16:], "another header"),
        (lambda echo, first: first[:-1] + bytes([first[-1] ^ 1]), "differs"),  # first echo, payload byte
    ],
)
def test_load_conn_rejects_bad_echoes(corrupt: Any, message: str) -> None:
    async def main() -> None:
        bench, conn, transport = _conn(framed_template(make_payload(300, seed=0)))
        first = transport.written[0]
        if message != "differs":
            _feed(conn, first)
        _feed(conn, corrupt(transport.written[-1], first))
        assert isinstance(bench.error, VerificationError) and message in str(bench.error)
        assert transport.aborted

    asyncio.run(main())


def _comm_handshake(obj: Any) -> bytes:
    import msgpack

    body = msgpack.packb(obj, use_bin_type=True)
    return pack_header([body]) + body


def _good_comm_handshake() -> bytes:
    from tornado_readinto.channel.comm import PROTOCOL_NAME, PROTOCOL_VERSION

    return _comm_handshake({"protocol": PROTOCOL_NAME, "version": PROTOCOL_VERSION, "allow_pickle": False})


def test_comm_handshake_takes_exactly_the_handshake() -> None:
    """Fed one byte at a time, it asks for the 16 header bytes, then exactly
    the body, and is done at the last byte, not before."""
    pytest.importorskip("msgpack")
    data = _good_comm_handshake()
    handshake = _CommHandshake()
    assert len(handshake.get_buffer()) == 16
    for i in range(len(data)):
        if i == 16:
            assert len(handshake.get_buffer()) == len(data) - 16
        handshake.get_buffer()[:1] = data[i : i + 1]
        assert handshake.buffer_updated(1) is (i == len(data) - 1)


@pytest.mark.parametrize(
    "data, message",
    [
        (U64.pack(2) + U64.pack(4), "2 frames"),
        (U64.pack(1) + U64.pack(0), "0 bytes"),
        (U64.pack(1) + U64.pack(1 << 40), f"{1 << 40} bytes"),
        (U64.pack(1) + U64.pack(1) + b"\xc1", "bad comm handshake: "),  # not msgpack
        (None, "bad comm handshake: {'protocol': 'other'"),
    ],
)
def test_comm_handshake_rejects(data: bytes | None, message: str) -> None:
    pytest.importorskip("msgpack")
    data = data if data is not None else _comm_handshake({"protocol": "other", "version": 1})
    handshake = _CommHandshake()
    with pytest.raises(VerificationError, match=message.replace("(", r"\(")):
        for i in range(len(data)):
            handshake.get_buffer()[:1] = data[i : i + 1]
            handshake.buffer_updated(1)


def test_load_conn_sends_its_prelude_and_is_ready_after_the_handshake() -> None:
    pytest.importorskip("msgpack")

    async def main() -> None:
        template = comm_template(make_payload(64, seed=3))
        bench = _Bench(LoadPlan(1, 64, "comm", 0.0, 0.0, 1.0, 1, 0))
        conn = _LoadConn(bench, 0, template)
        transport = FakeTransport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        assert transport.written == [template.prelude] and not conn.ready.done()
        _feed(conn, _good_comm_handshake(), chunk=5)
        assert conn.ready.done() and conn.ready.exception() is None
        conn.send()
        _feed(conn, transport.written[-1])  # the echo of message 0
        assert conn.verified_messages == 1 and conn.full_compares == 1 and bench.error is None

        bad = _LoadConn(bench, 1, template)
        bad_transport = FakeTransport()
        bad.connection_made(bad_transport)  # type: ignore[arg-type]
        _feed(bad, _comm_handshake({"protocol": "other"}))
        assert isinstance(bad.ready.exception(), VerificationError) and bad_transport.aborted

        lost = _LoadConn(bench, 2, template)
        lost.connection_made(FakeTransport())  # type: ignore[arg-type]
        lost.connection_lost(None)
        with pytest.raises(ConnectionError, match="connection 2 lost during the handshake"):
            lost.ready.result()

    asyncio.run(main())


def _handshake_in_memory(server_context: ssl.SSLContext, client_context: ssl.SSLContext) -> ssl.SSLObject:
    """A TLS handshake over memory BIOs (no socket); the client's end."""
    client_in, client_out, server_in, server_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_context.wrap_bio(client_in, client_out, server_hostname="127.0.0.1")
    server = server_context.wrap_bio(server_in, server_out, server_side=True)
    done: set[ssl.SSLObject] = set()
    for _ in range(10):
        for end in (client, server):
            if end not in done:
                try:
                    end.do_handshake()
                    done.add(end)
                except ssl.SSLWantReadError:
                    pass
        server_in.write(client_out.read())
        client_in.write(server_out.read())
        if len(done) == 2:
            return client
    raise AssertionError("the handshake did not finish")


def test_tls_certificates_verify_against_their_own_ca_only(tmp_path: Path) -> None:
    cert_file, ca_file = _tls.write_cert_files(str(tmp_path))
    client = _handshake_in_memory(_tls.server_context(cert_file), _tls.client_context(ca_file))
    assert client.version() in ("TLSv1.2", "TLSv1.3")
    peercert = client.getpeercert()
    assert peercert is not None and peercert["subjectAltName"] == (("IP Address", "127.0.0.1"),)
    (tmp_path / "other").mkdir()
    _, other_ca_file = _tls.write_cert_files(str(tmp_path / "other"))
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake_in_memory(_tls.server_context(cert_file), _tls.client_context(other_ca_file))


@pytest.mark.parametrize("corrupt", [False, True])
def test_load_client_over_tls_checks_every_echo(tmp_path: Path, corrupt: bool) -> None:
    """The load client over the loop's SSL transport against a TLS echo
    server in this process: a good run names the TLS version and cipher; a
    wrong stamp in the second echo fails the run."""
    cert_file, ca_file = _tls.write_cert_files(str(tmp_path))

    async def main() -> dict[str, Any]:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seq = 0
            try:
                while True:
                    head = await reader.readexactly(16)
                    payload = bytearray(await reader.readexactly(U64.unpack_from(head, 8)[0]))
                    if corrupt and seq == 1:
                        payload[0] ^= 1  # the stamp's low byte: message 1 comes back as 0
                    writer.write(head + payload)
                    seq += 1
            except (asyncio.IncompleteReadError, OSError):  # the client's EOF, or its abort
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=_tls.server_context(cert_file))
        port = server.sockets[0].getsockname()[1]
        try:
            plan = LoadPlan(2, 64, "framed", 0.0, 0.01, 0.01, 1, 0)
            return await run_load(port, plan, ssl_context=_tls.client_context(ca_file))
        finally:
            server.close()
            await server.wait_closed()

    if corrupt:
        with pytest.raises(VerificationError, match="expected the echo of message 1, got stamp 0"):
            asyncio.run(main())
        return
    result = asyncio.run(main())
    assert result["tls"]["version"] in ("TLSv1.2", "TLSv1.3") and result["tls"]["cipher"]
    assert result["verified_messages"] == result["messages_sent"] >= 4 and result["full_compares"] == 4


# -- real runs ---------------------------------------------------------------------------

SMOKE = ["--clients", "4", "--duration", "0.2", "--repeat", "1", "--warmup", "0.1"]


def _check_entries(entries: list[dict[str, Any]], clients: int) -> None:
    for e in entries:
        assert e["status"] == "ok", e["error"]
        if not e["gil_thread"]:
            assert e["gil_thread_tid"] is None and e["gil_thread_cpu_s"] is None
        if os.path.exists("/proc/self/task"):
            assert e["loop_cpu_us_per_msg"]["median"] > 0
        assert e["verified_messages"] > 0 and e["verified_messages"] == e["messages_sent"]
        assert e["messages_echoed_by_server"] == e["messages_sent"]
        assert e["full_compares"] == 2 * clients
        assert e["msgs_per_s"]["median"] > 0
        if os.path.exists("/proc/self/stat"):
            assert e["server_cpu_us_per_msg"]["median"] > 0 and e["server_cpu_pct"]["median"] > 0
        assert e["client_cpu_us_per_msg"]["median"] > 0 and e["p99_s"]["median"] > 0


def test_load_smoke_asyncio(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two servers on asyncio, 4 connections each: verified, with server CPU per message."""
    out = tmp_path / "load.json"
    argv = ["--server", "readinto,asyncio-streams", "--loop", "asyncio", "--client-loop", "asyncio", *SMOKE]
    assert SUITE.main([*argv, "--json", str(out)]) == 0
    captured = capsys.readouterr()
    assert "x asyncio-streams" in captured.out and "FAILED" not in captured.out
    assert sum(line.startswith("[") for line in captured.err.splitlines()) == 2  # progress per case
    data = json.loads(out.read_text())
    assert data["meta"]["packages"]["tornado"] and "uvloop" in data["meta"]["packages"] and data["meta"]["repeat"] == 1
    env = {k: v for k, v in os.environ.items() if k.startswith("TORNADO_READINTO_")}
    expected = command_line("benchmarks.load", [*argv, "--json", str(out)], env, data["meta"]["machine"])
    assert expected.endswith(f"python -m benchmarks.load --server readinto,asyncio-streams --loop asyncio "
                             f"--client-loop asyncio {' '.join(SMOKE)} --json {out}")
    assert h.missing_meta(data) == [] and data["meta"]["command"] == expected  # any CPU pinning included
    assert data["meta"]["client_loop"] == "asyncio"
    entries = data["results"]
    assert [(e["server"], e["loop"], e["client_loop"]) for e in entries] == [
        ("readinto", "asyncio", "asyncio"),
        ("asyncio-streams", "asyncio", "asyncio"),
    ]
    _check_entries(entries, 4)
    assert entries[1]["x_asyncio-streams"] == pytest.approx(1.0)
    for e in entries:  # the host's share of this machine's CPUs in each window (a VM's noise)
        assert all(0 <= r["steal_pct"] <= 100 for r in e["repeats"])


def test_steal_s_reads_the_cpu_line_of_proc_stat(tmp_path: Path) -> None:
    """`steal_s`: the 8th number of /proc/stat's ``cpu`` line in seconds;
    None for a file without it."""
    from benchmarks.harness.cpu import steal_s

    stat = tmp_path / "stat"
    stat.write_text("cpu  10 0 20 300 4 0 5 250 0 0\ncpu0 5 0 10 150 2 0 2 125 0 0\n")
    assert steal_s(str(stat)) == pytest.approx(250 / os.sysconf("SC_CLK_TCK"))
    stat.write_text("intr 1 2 3\n")
    assert steal_s(str(stat)) is None
    assert steal_s(str(tmp_path / "missing")) is None
    real = steal_s()
    assert real is not None and real >= 0


def test_load_smoke_uvloop_and_comm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """ReadIntoIOStream on uvloop, and the comm server (handshake, msgpack messages)."""
    pytest.importorskip("uvloop")
    pytest.importorskip("msgpack")
    out = tmp_path / "load.json"
    assert SUITE.main(["--server", "readinto,comm", "--loop", "uvloop", *SMOKE, "--json", str(out)]) == 0
    entries = json.loads(out.read_text())["results"]
    assert [(e["server"], e["loop"], e["wire"]) for e in entries] == [
        ("readinto", "uvloop", "framed"),
        ("comm", "uvloop", "comm"),
    ]
    _check_entries(entries, 4)
    capsys.readouterr()


def test_load_below_saturation_offers_every_server_the_same_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--offered: each server gets the offered load (msgs/s near it: the
    client offered what it said; not a speed assertion) and reports its loop
    thread's CPU per message, in one table with the mode named."""
    out = tmp_path / "load.json"
    argv = ["--server", "readinto,asyncio-protocol", "--loop", "asyncio", "--client-loop", "asyncio",
            "--clients", "4", "--offered", "400", "--duration", "1", "--repeat", "1", "--warmup", "0.2"]  # fmt: skip
    assert SUITE.main([*argv, "--json", str(out)]) == 0
    captured = capsys.readouterr()
    assert "FAILED" not in captured.out and "offered 400/s" in captured.err
    header = next(line for line in captured.out.splitlines() if line.startswith("server"))
    assert "offered" in header.split() and "loop us/msg" in header and "msgs/s" in header
    rows = [line.split() for line in captured.out.splitlines() if line.startswith(("readinto ", "asyncio-protocol "))]
    assert [row[6] for row in rows] == ["400/s", "400/s"]
    entries = json.loads(out.read_text())["results"]
    assert [e["server"] for e in entries] == ["readinto", "asyncio-protocol"]
    for e in entries:
        assert e["status"] == "ok", e["error"]
        assert e["rate"] == 100.0 and e["offered_msgs_per_s"] == 400.0
        assert 0.5 * 400 <= e["msgs_per_s"]["median"] <= 1.1 * 400
        assert e["verified_messages"] == e["messages_sent"] == e["messages_echoed_by_server"]
        if os.path.exists("/proc/self/task"):
            assert e["loop_cpu_us_per_msg"]["median"] > 0


def test_load_pure_build_servers_run_the_pure_build_beside_the_compiled_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """readinto-pure serves the same echo with TORNADO_READINTO_NO_EXTENSIONS=1
    in its server process (which reports it runs the pure build), so that
    one run compares the two builds side by side; not in the default set."""
    import tornado_readinto

    out = tmp_path / "load.json"
    assert SUITE.main(["--server", "readinto,readinto-pure", "--loop", "asyncio", *SMOKE, "--json", str(out)]) == 0
    entries = json.loads(out.read_text())["results"]
    assert [e["server"] for e in entries] == ["readinto", "readinto-pure"]
    _check_entries(entries, 4)
    assert entries[0]["compiled"] is tornado_readinto.COMPILED
    assert entries[1]["compiled"] is False
    assert "readinto-pure" not in load.LOAD_SERVERS
    capsys.readouterr()


def test_load_pin_puts_the_server_on_one_cpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--pin: the server process runs on the first usable CPU (it reports its
    affinity), the client on the second."""
    import os

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two usable CPUs")
    out = tmp_path / "load.json"
    assert SUITE.main(["--server", "readinto", "--loop", "asyncio", "--pin", *SMOKE, "--json", str(out)]) == 0
    (entry,) = json.loads(out.read_text())["results"]
    assert entry["server_cpus"] == [cpus[0]]
    assert load.pin_cpus() == ({cpus[0]}, {cpus[1]})
    capsys.readouterr()


def test_load_lower_bounds_run_on_both_loops_and_are_not_in_the_default_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The lower bounds (benchmarks/impls/_bounds.py) are echo servers like
    the others: every echo checked, on both loops; --server names them,
    the default set does not, and over TLS they are skipped with the reason."""
    pytest.importorskip("uvloop")
    assert not set(load.BOUND_SERVERS) & set(SUITE.parse_args([]).server)
    out = tmp_path / "load.json"
    argv = ["--server", "bound-floor,bound-tornado", "--loop", "asyncio,uvloop", "--tls", "both", *SMOKE]
    assert SUITE.main([*argv, "--json", str(out)]) == 0
    entries = json.loads(out.read_text())["results"]
    plain = [e for e in entries if not e["tls"]]
    assert [(e["server"], e["loop"]) for e in plain] == [
        ("bound-floor", "asyncio"),
        ("bound-tornado", "asyncio"),
        ("bound-floor", "uvloop"),
        ("bound-tornado", "uvloop"),
    ]
    _check_entries(plain, 4)
    tls = [e for e in entries if e["tls"]]
    assert len(tls) == 4 and all("has no TLS server" in e["skipped"] for e in tls)
    capsys.readouterr()


def test_load_gil_thread_runs_beside_every_loop(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--gil-thread: the server runs a second thread that uses CPU; the
    loop-thread figures leave it out, the process figures include it; the
    ratio to stock is taken with the GIL thread on both sides."""
    pytest.importorskip("uvloop")
    out = tmp_path / "load.json"
    argv = ["--server", "stock,asyncio-protocol", "--loop", "asyncio,uvloop", "--gil-thread", *SMOKE]
    argv[argv.index("--clients") + 1] = "2"
    assert SUITE.main([*argv, "--json", str(out)]) == 0
    captured = capsys.readouterr()
    assert "GIL thread" in captured.err and "FAILED" not in captured.out
    data = json.loads(out.read_text())
    assert data["meta"]["gil_thread"] == "on" and data["meta"]["switch_interval_s"] > 0
    entries = data["results"]
    assert [(e["server"], e["loop"], e["gil_thread"]) for e in entries] == [
        ("stock", "asyncio", True),
        ("asyncio-protocol", "asyncio", True),
        ("stock", "uvloop", True),
        ("asyncio-protocol", "uvloop", True),
    ]
    _check_entries(entries, 2)
    for e in entries:
        # a second thread, which ran: the whole process's CPU is the loop thread's plus the GIL thread's
        assert e["gil_thread_tid"] not in (None, e["loop_tid"]) and e["gil_thread_cpu_s"] > 0
        assert e["server_cpu_s"] >= e["loop_thread_cpu_s"] + e["gil_thread_cpu_s"] - 1e-3
        # the windows counted the loop thread only (a part of its whole CPU time)
        assert sum(r["loop_cpu_s"] for r in e["repeats"]) <= e["loop_thread_cpu_s"]
        assert e["x_stock"] is not None and e["msgs_per_s_x_stock"] is not None
    assert entries[0]["x_stock"] == pytest.approx(1.0)


def test_load_failed_case_sets_exit_status(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A case that fails (here: the server never starts) is reported and makes main() return 1."""
    monkeypatch.setattr(processes, "STARTUP_TIMEOUT_S", 5.0)
    monkeypatch.setattr(processes, "ChildProcess", _FailingProcess)
    assert SUITE.main(["--server", "stock", "--loop", "asyncio", *SMOKE]) == 1
    captured = capsys.readouterr()
    assert "FAILED: server exited with status 1" in captured.out and "1 case(s) FAILED" in captured.err


class _FailingProcess(processes.ChildProcess):
    """A server process that exits at once."""

    def __init__(self, argv: list[str], stderr: Any, env: Any = None, cpus: Any = None, prefix: Any = ()) -> None:
        argv = ["server", "--impl", "threads", "--loop", "uvloop", "--clients", "1"]
        super().__init__(argv, stderr, env, cpus, prefix)


def test_rounds_alternate_the_order_and_pool_the_repeats(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []

    def fake_run_case(case: Any, args: Any, round_index: int) -> list[LoadResult]:
        ran.append(case.server)
        if len(ran) == 4:  # the second round of "readinto" fails
            return [LoadResult(case.server, case.loop, case.clients, error="boom")]
        return [make_result(case.server, case.loop, [10.0, 11.0], clients=case.clients)]

    monkeypatch.setattr(load.SUITE, "run_case", fake_run_case)
    status = SUITE.main(["--server", "readinto,asyncio-streams", "--loop", "asyncio", "--rounds", "2"])
    assert ran == ["readinto", "asyncio-streams", "asyncio-streams", "readinto"]
    assert status == 1  # a failure in any round fails the case
    assert SUITE.parse_args(["--rounds", "3"]).rounds == 3 and SUITE.parse_args([]).rounds == 1


def test_process_stats_reports_the_childs_own_peak_rss() -> None:
    """A benchmark process started by a big parent reports its own peak RSS,
    not the parent's (``ru_maxrss`` survives fork and exec on Linux)."""
    import subprocess
    import sys

    ballast = bytearray(256 << 20)
    ballast[:: 1 << 12] = b"x" * len(range(0, len(ballast), 1 << 12))  # touch every page
    code = "from benchmarks.impls._common import process_stats; print(process_stats()['rss_bytes'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    del ballast
    assert 0 < int(out) < 128 << 20


def _check_tls_entries(entries: list[dict[str, Any]]) -> None:
    for e in entries:
        if e["tls"]:
            assert e["tls_version"] in ("TLSv1.2", "TLSv1.3") and e["tls_cipher"], e
        else:
            assert e["tls_version"] is None and e["tls_cipher"] is None


def test_load_tls_smoke_every_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--tls: every load server serves TLS on asyncio's loop (stock
    SSLIOStream, SSLReadIntoIOStream, FramedStream, the comm over tls://, the
    asyncio anchors on the loop's SSL transport) to a client over TLS; every
    echo is checked, and the ratios compare TLS rows with each other."""
    out = tmp_path / "load.json"
    argv = ["--tls", "--loop", "asyncio", "--client-loop", "asyncio", *SMOKE, "--json", str(out)]
    argv[argv.index("--clients") + 1] = "2"
    assert SUITE.main(argv) == 0
    captured = capsys.readouterr()
    assert "FAILED" not in captured.out and "SKIPPED" not in captured.out
    assert sum(line.endswith("s)") and ", TLS:" in line for line in captured.err.splitlines()) == len(load.LOAD_SERVERS)
    data = json.loads(out.read_text())
    assert data["meta"]["tls"] == "on" and data["meta"]["openssl"] == ssl.OPENSSL_VERSION
    entries = data["results"]
    assert [(e["server"], e["loop"], e["tls"]) for e in entries] == [(s, "asyncio", True) for s in load.LOAD_SERVERS]
    _check_entries(entries, 2)
    _check_tls_entries(entries)
    by_server = {e["server"]: e for e in entries}
    assert by_server["stock"]["x_stock"] == pytest.approx(1.0)
    assert by_server["asyncio-streams"]["x_asyncio-streams"] == pytest.approx(1.0)
    assert all(e["x_stock"] is not None and e["x_asyncio-streams"] is not None for e in entries)


def test_load_tls_both_on_uvloop(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--tls both on uvloop (the load client's default loop): each server over
    TCP, then over TLS through uvloop's SSL transport."""
    pytest.importorskip("uvloop")
    out = tmp_path / "load.json"
    servers = ["stock", "readinto", "asyncio-streams", "asyncio-protocol"]
    argv = ["--server", ",".join(servers), "--loop", "uvloop", "--tls", "both", *SMOKE, "--json", str(out)]
    argv[argv.index("--clients") + 1] = "2"
    assert SUITE.main(argv) == 0
    capsys.readouterr()
    data = json.loads(out.read_text())
    assert data["meta"]["client_loop"] == "uvloop"
    entries = data["results"]
    assert [(e["server"], e["tls"]) for e in entries] == [(s, False) for s in servers] + [(s, True) for s in servers]
    _check_entries(entries, 2)
    _check_tls_entries(entries)
    assert entries[4]["x_stock"] == pytest.approx(1.0)  # stock over TLS is the TLS rows' baseline


def test_load_tls_client_that_does_not_trust_the_server_fails_the_case(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The client checks the server's certificate: signed by another CA, the
    handshake fails, and so do the case and the run."""
    write_cert_files = _tls.write_cert_files

    def another_ca(directory: str, host: str) -> tuple[str, str]:
        cert_file, _ = write_cert_files(directory, host)
        other = os.path.join(directory, "other")
        os.mkdir(other)
        return cert_file, write_cert_files(other, host)[1]

    monkeypatch.setattr(_tls, "write_cert_files", another_ca)
    argv = ["--server", "readinto", "--loop", "asyncio", "--client-loop", "asyncio", "--tls", *SMOKE]
    assert SUITE.main(argv) == 1
    captured = capsys.readouterr()
    failed = next(line for line in captured.out.splitlines() if line.startswith("readinto "))
    assert "FAILED: load-client exited with status 1" in failed and "CERTIFICATE_VERIFY_FAILED" in failed
