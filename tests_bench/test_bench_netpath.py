"""The network path between a case's server and client (``--netpath``,
``benchmarks.harness.netpath``): its syntax, what it needs, and, as root
with iproute2, real namespaces: made and removed (also after an exception,
KeyboardInterrupt and SIGTERM), a TCP connection across the veth at the MTU
asked for, tbf when a rate is asked for, the pid kept through ``ip netns
exec``, and tiny ``echo`` and ``load`` runs across the path.

Every connection here goes between the two namespaces a test made itself."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from benchmarks import echo, load
from benchmarks.harness import netpath
from benchmarks.harness.cpu import process_cpu_s
from benchmarks.impls import _common
from benchmarks.impls._common import CasePlan, Recorder

ROOT = Path(__file__).resolve().parent.parent

UNAVAILABLE = netpath.unavailable([netpath.PathSpec(1500, 10**9)])
needs_netns = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"real namespaces: {UNAVAILABLE}")


def ours() -> list[str]:
    """The namespaces this test process made and has not removed."""
    return [name for name in netpath.namespaces() if name.startswith(f"{netpath.NAME_PREFIX}-{os.getpid()}-")]


# -- syntax and what it needs ----------------------------------------------------------------


@pytest.mark.parametrize(
    "text, mtu, rate",
    [("loopback", None, None), ("mtu1500", 1500, None), ("MTU9000", 9000, None), ("mtu1500@1gbit", 1500, 10**9),
     ("mtu9000@2.5gbit", 9000, 2_500_000_000), (" mtu1500@100mbit ", 1500, 10**8), ("mtu1500@500kbit", 1500, 500_000)],
)  # fmt: skip
def test_parse_path(text: str, mtu: int | None, rate: int | None) -> None:
    spec = netpath.parse_path(text)
    assert (spec.mtu, spec.rate_bit_s) == (mtu, rate)
    assert netpath.parse_path(spec.name) == spec  # the name is the CLI spelling


@pytest.mark.parametrize("text", ["", "mtu", "mtu1400", "mtu1500@", "mtu1500@1gb", "mtu1500@1.5bit", "veth", "lo"])
def test_parse_path_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        netpath.parse_path(text)


def test_names_and_records() -> None:
    assert [netpath.parse_path(t).name for t in ("loopback", "mtu9000", "mtu1500@1000mbit")] == [
        "loopback",
        "mtu9000",
        "mtu1500@1gbit",
    ]
    assert netpath.PathSpec(9000, 10**10).describe() == "netns veth MTU 9000, tbf 10gbit"
    assert netpath.LOOPBACK.record() == {"kind": "loopback", "server_address": "127.0.0.1"}
    record = netpath.PathSpec(1500, 10**9).record()
    assert record["mtu"] == 1500 and record["server_address"] == netpath.SERVER_ADDRESS
    assert record["tbf"] == {"rate_bit_s": 10**9, "burst_nbytes": netpath.tbf_burst_nbytes(10**9),
                             "latency_s": netpath.TBF_LATENCY_S, "on": "both ends (each direction)"}  # fmt: skip
    assert netpath.PathSpec(1500).record()["tbf"] is None


def test_tbf_burst_is_a_millisecond_of_the_rate_and_holds_two_gso_packets() -> None:
    assert netpath.tbf_burst_nbytes(10**10) == 1_250_000  # 1 ms of 10 Gbit/s
    assert netpath.tbf_burst_nbytes(10**9) == netpath.TBF_MIN_BURST_NBYTES > 125_000
    assert netpath.tbf_burst_nbytes(10**6) == netpath.TBF_MIN_BURST_NBYTES >= 2 * 65536


def test_unavailable_says_what_is_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    assert netpath.unavailable([netpath.LOOPBACK]) is None
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    reason = netpath.unavailable()
    assert reason is not None and "root" in reason and "iproute2" in reason and "uid 1000" in reason
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(netpath, "_which", lambda tool: None)
    reason = netpath.unavailable([netpath.PathSpec(1500, 10**9)])
    assert reason is not None and "ip and tc not found (install iproute2)" in reason
    with pytest.raises(netpath.NetPathError, match="install iproute2"):
        with netpath.open_path(netpath.PathSpec(1500)):
            pass  # pragma: no cover - never entered


@pytest.mark.parametrize("suite", [echo.SUITE, load.SUITE])
def test_cli_without_what_a_path_needs_exits_with_the_reason(
    suite: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not root (or no ip): the command ends with status 2 and one message saying what it needs, no traceback;
    parsing it does not ask (``publish --remake --dry-run`` checks the command on any machine)."""
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    args = suite.parse_args(["--netpath", "loopback,mtu1500"])
    assert args.netpath == [netpath.LOOPBACK, netpath.PathSpec(1500)]
    assert "run as root" in suite.unavailable(args) and suite.unavailable(suite.parse_args([])) is None
    with pytest.raises(SystemExit) as exit_info:
        suite.main(["--netpath", "loopback,mtu1500"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--netpath loopback,mtu1500: a network namespace path" in err and "run as root" in err
    assert "Traceback" not in err
    assert suite.parse_args(["--netpath", "loopback"]).netpath == [netpath.LOOPBACK]  # loopback needs nothing
    assert suite.parse_args([]).netpath == [netpath.LOOPBACK]


def test_netpath_flag_in_help_and_bad_syntax(capsys: pytest.CaptureFixture[str]) -> None:
    for suite in (echo.SUITE, load.SUITE):
        assert "mtu1500@1gbit" in suite.parser().format_help()
        with pytest.raises(SystemExit):
            suite.parse_args(["--netpath", "mtu1234"])
        assert "MTU 1234 is not one of 1500, 9000" in capsys.readouterr().err


def test_table_shows_the_path_column_only_off_loopback() -> None:
    def result(path: str) -> echo.Result:
        repeats = [{"msgs_per_s": 100.0, "mib_per_s": 100.0, "server_cpu_pct": 50.0, "server_cpu_s_per_gib": 5.0}]
        return echo.Result("readinto", 1 << 20, 1, "pingpong", repeats=repeats, path=path)

    loopback_only = echo.SUITE.format_table([result("loopback")])
    header = next(line for line in loopback_only.splitlines() if line.startswith("impl"))
    assert "path" not in header.split() and "srv s/GiB" in header
    both = echo.SUITE.format_table([result("loopback"), result("mtu1500@1gbit")])
    header = next(line for line in both.splitlines() if line.startswith("impl"))
    assert header.split()[:6] == ["impl", "msize", "nframes", "mode", "path", "msgs/s"]
    assert "srv CPU" in header and "srv s/GiB" in header
    rows = [line for line in both.splitlines() if line.startswith("readinto")]
    assert "loopback" in rows[0] and "mtu1500@1gbit" in rows[1] and "50%" in rows[1] and " 5 " in rows[1]
    assert "" in both.splitlines()  # the paths are groups of their own


def test_echo_cases_run_every_path_with_the_implementations_innermost() -> None:
    args = echo.SUITE.parse_args(["--impl", "readinto,threads", "--msize", "1KiB", "--netpath", "loopback"])
    assert [(c.impl, c.path.name) for c in echo.SUITE.cases(args)] == [
        ("readinto", "loopback"),
        ("threads", "loopback"),
    ]
    args.netpath = [netpath.LOOPBACK, netpath.PathSpec(9000)]  # as parse_args gives them, as root
    assert [(c.impl, c.path.name) for c in echo.SUITE.cases(args)] == [
        ("readinto", "loopback"),
        ("threads", "loopback"),
        ("readinto", "mtu9000"),
        ("threads", "mtu9000"),
    ]


def test_fill_derives_cpu_per_gib_and_per_message() -> None:
    """The client reports CPU per wall second of each window; the suite
    divides by the payload rate: 50% of a core at 1024 MiB/s is 0.5 s/GiB."""
    result = echo.Result("readinto", 1 << 20, 1, "pingpong")
    repeat = {"msgs_per_s": 1024.0, "messages": 1024, "elapsed_s": 1.0, "p50_s": 1e-3, "p99_s": 2e-3,
              "server_cpu_pct": 50.0, "client_cpu_pct": None}  # fmt: skip
    client = {"repeats": [repeat], "window": 1, "rss_bytes": 1, "verified_messages": 1026, "messages_sent": 1026,
              "full_compares": 2, "cpu_s": 1.0}  # fmt: skip
    server = {"rss_bytes": 1, "messages": 1026, "cpu_s": 1.0}
    echo._fill(result, client, server, 1)
    assert result.median("server_cpu_s_per_gib") == pytest.approx(0.5)
    assert result.median("server_cpu_us_per_msg") == pytest.approx(0.5 / 1024 * 1e6)
    assert result.median("client_cpu_s_per_gib") is None


def test_recorder_samples_the_server_cpu_at_window_boundaries_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """One CPU sample (the server's and this process's) where a window opens
    and one where it closes, none per echo in between nor in the warm-up;
    a window's CPU times are the differences of its two boundary samples.
    A scripted clock and a counting sampler: nothing here is timed."""
    server, client = _common.cpu_sample(os.getpid())  # the real sampler reads both
    assert server is not None and server >= 0 and client >= 0 and _common.cpu_sample(0)[0] is None
    samples: list[int] = []

    def cpu_sample(server_pid: int) -> tuple[float | None, float]:
        samples.append(server_pid)
        return (10.0 * len(samples) if server_pid else None), 1.0 * len(samples)

    monkeypatch.setattr(_common, "cpu_sample", cpu_sample)
    recorder = Recorder(CasePlan(1024, 1, "pingpong", 1, 0.5, 1.0, 2, 1, server_pid=4321), 100.0)
    assert recorder.on_echo(100.25, 0.001) and samples == []  # warm-up (until 100.5)
    assert recorder.on_echo(100.5, 0.001) and samples == [4321]  # the first window opens
    assert recorder.on_echo(101.0, 0.002) and recorder.on_echo(101.25, 0.002) and samples == [4321]
    assert recorder.on_echo(101.5, 0.003) and samples == [4321] * 2  # closes (1 s), the next opens
    assert not recorder.on_echo(102.5, 0.004) and samples == [4321] * 3  # the second closes: done
    first, second = recorder.repeats
    assert (first.messages, first.elapsed_s, first.latencies_s) == (3, 1.0, [0.002, 0.002, 0.003])
    assert (second.messages, second.elapsed_s, second.latencies_s) == (1, 1.0, [0.004])
    assert (first.server_cpu_s, first.client_cpu_s) == (second.server_cpu_s, second.client_cpu_s) == (10.0, 1.0)
    no_server = Recorder(CasePlan(1024, 1, "pingpong", 1, 0.0, 0.0, 1, 1), 0.0)
    assert no_server.on_echo(0.0, 0.0) and not no_server.on_echo(1.0, 0.0) and samples[3:] == [0, 0]
    assert no_server.repeats[0].server_cpu_s is None and no_server.repeats[0].client_cpu_s == 1.0


def test_signals_during_the_cleanup_are_held_until_it_is_done() -> None:
    """While the namespaces are being removed a SIGTERM is only noted, then
    raised as ``SystemExit(143)`` once they are gone; the handlers are back."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers need the main thread")
    reached = False
    with pytest.raises(SystemExit) as exit_info:
        with netpath._signals_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # delivered by now: only noted
            reached = True
    assert reached and exit_info.value.code == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    with netpath._signals_raise():
        assert signal.getsignal(signal.SIGTERM) is netpath._raise_exit
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


# -- real namespaces (root, iproute2) ----------------------------------------------------------


def _link(namespace: str, ifname: str) -> str:
    return netpath.run_command(["ip", "-d", "-n", namespace, "link", "show", ifname])


@needs_netns
def test_open_path_makes_and_removes_two_namespaces() -> None:
    before = ours()
    with netpath.open_path(netpath.PathSpec(1500)) as path:
        assert path.server_ns and path.client_ns and path.server_ns != path.client_ns
        assert str(os.getpid()) in path.server_ns and str(os.getpid()) in path.client_ns
        assert set(ours()) == {*before, path.server_ns, path.client_ns}
        assert path.server_host == netpath.SERVER_ADDRESS
        assert path.server_prefix()[-3:] == ["netns", "exec", path.server_ns]
        for namespace, ifname in ((path.server_ns, netpath.SERVER_IFNAME), (path.client_ns, netpath.CLIENT_IFNAME)):
            link = _link(namespace, ifname)
            assert " mtu 1500 " in link and "state UP" in link and "veth" in link
            # the burst's premise: TCP hands the veth GSO packets of at most GSO_MAX_NBYTES
            assert int(re.search(r"gso_max_size (\d+)", link).group(1)) <= netpath.GSO_MAX_NBYTES  # type: ignore[union-attr]
            assert "LOOPBACK,UP" in _link(namespace, "lo")
            assert "tbf" not in netpath.run_command(["tc", "-n", namespace, "qdisc", "show", "dev", ifname])
    assert ours() == before


@needs_netns
@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_open_path_removes_the_namespaces_after_an_exception(error: type[BaseException]) -> None:
    names = []
    with pytest.raises(error):
        with netpath.open_path(netpath.PathSpec(9000)) as path:
            names = [path.server_ns, path.client_ns]
            assert set(names) <= set(ours())
            raise error("inside the with")
    assert names and not set(names) & set(ours())


@needs_netns
def test_open_path_removes_what_it_made_when_a_command_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netpath, "SERVER_ADDRESS", "not-an-address")
    with pytest.raises(netpath.NetPathError, match="not-an-address"):
        with netpath.open_path(netpath.PathSpec(1500)):
            pass  # pragma: no cover - never entered
    assert ours() == []


@needs_netns
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_open_path_removes_the_namespaces_on_sigterm(signum: int) -> None:
    """A process killed by SIGTERM (or SIGHUP) inside the ``with`` removes
    its namespaces on the way out and exits with 128 + the signal.  (The
    child starts with the signal at its default action: under ``nohup`` it
    would inherit SIGHUP ignored, and `open_path` leaves an ignored signal
    ignored.)"""
    code = textwrap.dedent(
        f"""
        import signal, sys, time
        from benchmarks.harness import netpath
        signal.signal({int(signum)}, signal.SIG_DFL)
        with netpath.open_path(netpath.PathSpec(1500, 10**9)) as path:
            print(path.server_ns, path.client_ns, flush=True)
            time.sleep(60)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        names = proc.stdout.readline().split()
        assert len(names) == 2 and set(names) <= set(netpath.namespaces())
        proc.send_signal(signum)
        assert proc.wait(timeout=30) == 128 + signum
    finally:
        proc.kill()
        proc.wait()
    assert not set(names) & set(netpath.namespaces())


@needs_netns
def test_ip_netns_exec_keeps_the_pid_and_proc_reads_it() -> None:
    with netpath.open_path(netpath.PathSpec(1500)) as path:
        code = "import os, sys, time; print(os.getpid(), flush=True); sys.stdin.read()"
        proc = subprocess.Popen(
            [*path.server_prefix(), sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None and proc.stdin is not None
            assert int(proc.stdout.readline()) == proc.pid
            assert process_cpu_s(proc.pid) is not None  # the harness's CPU accounting of the server
            assert os.readlink(f"/proc/{proc.pid}/ns/net") != os.readlink("/proc/self/ns/net")
            proc.stdin.close()
            assert proc.wait(timeout=30) == 0
        finally:
            proc.kill()
            proc.wait()


_SERVER = """
import socket, sys
listener = socket.socket()
listener.bind((sys.argv[1], 0))
listener.listen(1)
print(listener.getsockname()[1], flush=True)
sock, peer = listener.accept()
data = bytearray()
while len(data) < int(sys.argv[2]):
    chunk = sock.recv(1 << 20)
    if not chunk:
        break
    data += chunk
sock.sendall(data)
sock.close()
print(peer[0], flush=True)
"""

_CLIENT = """
import hashlib, json, os, socket, sys
sock = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
payload = os.urandom(int(sys.argv[3]))
sock.sendall(payload)
echo = bytearray()
while len(echo) < len(payload):
    chunk = sock.recv(1 << 20)
    if not chunk:
        break
    echo += chunk
print(json.dumps({"same": echo == payload, "mss": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG),
                  "local": sock.getsockname()[0]}), flush=True)
"""


def _echo_across(path: netpath.NetPath, nbytes: int) -> tuple[dict[str, Any], str]:
    """``nbytes`` from the client's namespace to a server in the server's and back."""
    server = subprocess.Popen(
        [*path.server_prefix(), sys.executable, "-c", _SERVER, path.server_host, str(nbytes)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = server.stdout.readline().strip()
        client = subprocess.run(
            [*path.client_prefix(), sys.executable, "-c", _CLIENT, path.server_host, port, str(nbytes)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert client.returncode == 0, client.stderr
        peer = server.stdout.readline().split()[0]
        assert server.wait(timeout=30) == 0
    finally:
        server.kill()
        server.wait()
    return json.loads(client.stdout), peer


@needs_netns
@pytest.mark.parametrize("mtu", netpath.MTUS)
def test_tcp_across_the_veth_at_the_mtu(mtu: int) -> None:
    """A TCP echo of 4 MiB from the client's namespace to the server's: the
    bytes come back, the addresses are the veth's, and the connection's MSS
    follows the MTU (MTU - 40 bytes of IP and TCP headers - options)."""
    with netpath.open_path(netpath.PathSpec(mtu)) as path:
        assert f" mtu {mtu} " in _link(path.server_ns or "", netpath.SERVER_IFNAME)
        assert f" mtu {mtu} " in _link(path.client_ns or "", netpath.CLIENT_IFNAME)
        result, peer = _echo_across(path, 4 << 20)
    assert result["same"] is True
    assert result["local"] == peer == netpath.CLIENT_ADDRESS
    assert mtu - 40 - 40 <= result["mss"] <= mtu - 40


@needs_netns
def test_tbf_on_both_ends_when_a_rate_is_asked_for() -> None:
    spec = netpath.PathSpec(1500, 10**9)
    with netpath.open_path(spec) as path:
        for namespace, ifname in ((path.server_ns, netpath.SERVER_IFNAME), (path.client_ns, netpath.CLIENT_IFNAME)):
            qdisc = netpath.run_command(["tc", "-n", namespace or "", "qdisc", "show", "dev", ifname])
            assert "tbf" in qdisc and "rate 1Gbit" in qdisc and "lat 50ms" in qdisc, qdisc
        result, _ = _echo_across(path, 1 << 20)
    assert result["same"] is True


@needs_netns
def test_tbf_limits_the_rate() -> None:
    """20 Mbit/s each way: a 1 MB echo is more than the bucket's burst, so
    the tbf on each end sent the whole megabyte and held packets back for
    want of tokens (its ``overlimits`` count), which is what a rate limit
    does; counted, not timed."""
    assert netpath.tbf_burst_nbytes(20 * 10**6) < 1_000_000
    with netpath.open_path(netpath.PathSpec(1500, 20 * 10**6)) as path:
        result, _ = _echo_across(path, 1_000_000)
        for namespace, ifname in ((path.server_ns, netpath.SERVER_IFNAME), (path.client_ns, netpath.CLIENT_IFNAME)):
            stats = netpath.run_command(["tc", "-s", "-n", namespace or "", "qdisc", "show", "dev", ifname])
            counts = re.search(r"Sent (\d+) bytes \d+ pkt \(dropped \d+, overlimits (\d+)", stats)
            assert counts is not None and int(counts.group(1)) >= 1_000_000 and int(counts.group(2)) > 0, stats
    assert result["same"] is True


@needs_netns
def test_echo_across_the_path_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m benchmarks echo --netpath``: a tiny run on loopback and on
    a rate-limited veth; every echo verified, the path and the server's CPU
    per GiB in the JSON, no namespace left."""
    out = tmp_path / "echo.json"
    argv = ["--impl", "readinto,threads", "--msize", "1KiB", "--duration", "0.1", "--warmup", "0.02", "--repeat", "1",
            "--netpath", "loopback,mtu1500@1gbit", "--json", str(out)]  # fmt: skip
    assert echo.SUITE.main(argv) == 0
    captured = capsys.readouterr()
    assert "over mtu1500@1gbit" in captured.err and "mtu1500@1gbit" in captured.out
    data = json.loads(out.read_text())
    assert data["meta"]["netpath"] == ["loopback", "mtu1500@1gbit"]
    entries = data["results"]
    assert [(e["impl"], e["path"]) for e in entries] == [
        ("readinto", "loopback"),
        ("threads", "loopback"),
        ("readinto", "mtu1500@1gbit"),
        ("threads", "mtu1500@1gbit"),
    ]
    for e in entries:
        assert e["status"] == "ok", e["error"]
        assert e["verified_messages"] == e["messages_sent"] == e["messages_echoed_by_server"] > 0
        assert e["full_compares"] == 2
        assert e["server_cpu_pct"]["median"] > 0 and e["server_cpu_s_per_gib"]["median"] > 0
    assert entries[2]["netpath"]["kind"] == "netns-veth" and entries[2]["netpath"]["tbf"]["rate_bit_s"] == 10**9
    assert entries[0]["netpath"]["kind"] == "loopback"
    again = [echo.SUITE.from_json(e) for e in entries]
    assert [r.path for r in again] == ["loopback", "loopback", "mtu1500@1gbit", "mtu1500@1gbit"]
    assert ours() == []


@needs_netns
def test_load_across_the_path_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m benchmarks load --netpath mtu9000``, over TLS too (the
    certificate names the server's veth address): the server's CPU per
    message read from /proc across the namespaces."""
    out = tmp_path / "load.json"
    argv = ["--server", "readinto", "--loop", "asyncio", "--client-loop", "asyncio", "--clients", "2",
            "--duration", "0.2", "--repeat", "1", "--warmup", "0.05", "--netpath", "mtu9000",
            "--json", str(out)]  # fmt: skip
    tls = ["--tls", "both"] if _has_trustme() else []
    assert load.SUITE.main([*argv, *tls]) == 0
    assert "over mtu9000" in capsys.readouterr().err
    entries = json.loads(out.read_text())["results"]
    assert [e["path"] for e in entries] == ["mtu9000"] * len(entries) and entries
    for e in entries:
        assert e["status"] == "ok", e["error"]
        assert e["netpath"]["mtu"] == 9000
        assert e["verified_messages"] == e["messages_sent"] == e["messages_echoed_by_server"] > 0
        assert e["loop_cpu_us_per_msg"]["median"] > 0 and e["server_cpu_us_per_msg"]["median"] > 0
    assert ours() == []


def _has_trustme() -> bool:
    try:
        import trustme  # noqa: F401
    except ImportError:
        return False
    return True
