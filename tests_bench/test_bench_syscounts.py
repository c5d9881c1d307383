"""``load --count-syscalls``: the server's system calls per echoed message
(``benchmarks.harness.syscounts``)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import load
from benchmarks.harness import syscounts
from benchmarks.load import SUITE, LoadResult

PERF_OUTPUT = """\
12345,,raw_syscalls:sys_enter,3001234567,100.00,,
4000,,syscalls:sys_enter_recvfrom,3001234567,100.00,,
0,,syscalls:sys_enter_read,3001234567,100.00,,
4000,,syscalls:sys_enter_sendto,3001234567,100.00,,
100,,syscalls:sys_enter_epoll_wait,3001234567,100.00,,
<not counted>,,syscalls:sys_enter_futex,0,0.00,,
4000,,syscalls:sys_enter_mmap,3001234567,100.00,,
4000,,syscalls:sys_enter_munmap,3001234567,100.00,,
"""


def test_parse_counts_by_name_and_total() -> None:
    counts = syscounts.parse(PERF_OUTPUT)
    assert counts == {
        "total": 12345, "recvfrom": 4000, "read": 0, "sendto": 4000, "epoll_wait": 100, "mmap": 4000, "munmap": 4000,
    }  # fmt: skip
    assert syscounts.parse("") == {} and syscounts.parse("garbage\n1,2\n") == {}


def test_per_message_and_brief() -> None:
    per_msg = syscounts.per_message(syscounts.parse(PERF_OUTPUT), 4000)
    assert "read" not in per_msg  # calls that never happened are left out
    assert per_msg["recvfrom"] == 1.0 and per_msg["epoll_wait"] == pytest.approx(0.025)
    # 12345/4000 = 3.09 in all; recv + send + poll + mm = 4.025, so nothing is left unexplained
    assert syscounts.brief(per_msg) == "3.09 syscalls/msg (recv 1.00 send 1.00 poll 0.03 mm 2.00)"
    per_msg["total"] = 5.0
    assert syscounts.brief(per_msg).endswith("mm 2.00 other 0.97)")
    assert syscounts.per_message({"total": 3}, 0) == {} and syscounts.brief({}) == "no syscall counts"


def test_every_named_call_is_a_tracepoint() -> None:
    assert syscounts.events()[0] == "raw_syscalls:sys_enter"
    assert len(set(syscounts.events())) == len(syscounts.NAMES) + 1
    assert all(name in syscounts.NAMES for names in syscounts.GROUPS.values() for name in names)


def test_table_column_and_progress_line() -> None:
    counted = LoadResult("readinto", "asyncio", 64, repeats=[{"loop_cpu_us_per_msg": 40.0, "msgs_per_s": 2e4}])
    counted.extra["syscalls"] = syscounts.summary({"total": 2050, "recvfrom": 1000, "sendmsg": 1000}, 1000)
    plain = LoadResult("asyncio-streams", "asyncio", 64, repeats=[{"loop_cpu_us_per_msg": 30.0, "msgs_per_s": 3e4}])
    table = SUITE.format_table([counted, plain])
    header = next(line for line in table.splitlines() if line.startswith("server"))
    assert "srv CPU  sysc/msg  x asyncio-streams" in header and "sysc/msg: the server's system calls" in table
    row = next(line for line in table.splitlines() if line.startswith("readinto "))
    assert " 2.05 " in row
    other = next(line for line in table.splitlines() if line.startswith("asyncio-streams "))
    assert other.split()[-4] == "-"  # not counted
    assert SUITE.brief(counted).endswith(", 2.05 syscalls/msg (recv 1.00 send 1.00 other 0.05)")
    assert "syscalls/msg" not in SUITE.brief(plain)


def test_count_syscalls_is_refused_where_perf_cannot_count(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command ends with the reason (status 2) before anything runs;
    parsing it does not ask (``publish --remake --dry-run`` works anywhere)."""
    monkeypatch.setattr(syscounts, "unavailable", lambda: "perf is not installed")
    with pytest.raises(SystemExit) as exit_info:
        SUITE.main(["--count-syscalls"])
    assert exit_info.value.code == 2 and "--count-syscalls: perf is not installed" in capsys.readouterr().err
    args = SUITE.parse_args(["--count-syscalls"])
    assert args.count_syscalls is True and SUITE.unavailable(args) == "--count-syscalls: perf is not installed"
    assert SUITE.parse_args([]).count_syscalls is False and SUITE.unavailable(SUITE.parse_args([])) is None


@pytest.mark.skipif(syscounts.unavailable() is not None, reason=str(syscounts.unavailable()))
def test_load_counts_the_servers_syscalls(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A BufferedProtocol echo on asyncio's loop: one receive and one send per message."""
    out = tmp_path / "load.json"
    argv = ["--server", "asyncio-protocol", "--loop", "asyncio", "--client-loop", "asyncio", "--clients", "4"]
    smoke = ["--duration", "0.3", "--repeat", "1", "--warmup", "0.1", "--count-syscalls", "--json", str(out)]
    assert SUITE.main([*argv, *smoke]) == 0
    assert "syscalls/msg (recv" in capsys.readouterr().err
    (entry,) = json.loads(out.read_text())["results"]
    syscalls = entry["syscalls"]
    # counted over the measured windows: the messages the client timed there
    assert syscalls["messages"] == sum(r["messages"] for r in entry["repeats"]) > 0
    per_msg = syscalls["per_msg"]
    # asyncio's transport sends with send() (sendto); from Python 3.12 what
    # it had to queue (the socket was full) goes out with sendmsg
    sends = per_msg.get("sendto", 0.0) + per_msg.get("sendmsg", 0.0)
    assert 0.98 <= per_msg["recvfrom"] <= 1.1 and 0.98 <= sends <= 1.1
    assert per_msg["total"] >= per_msg["recvfrom"] + sends
    # the client's waits for perf's acks, which bound the windows' edges, are recorded
    assert 0 < syscalls["switch_s"] < 10 and syscalls["edge_share"] == syscalls["switch_s"] / 0.3
    assert load.SUITE.from_json(entry).extra["syscalls"]["per_msg"] == per_msg  # read back from the JSON


#: A child that, for each line ``N`` on its stdin, makes N one-byte reads of
#: /dev/zero and answers ``done``.
_READER = """
import os, sys
zero = os.open("/dev/zero", os.O_RDONLY)
for line in sys.stdin:
    for _ in range(int(line)):
        os.read(zero, 1)
    print("done", flush=True)
"""


@pytest.mark.skipif(syscounts.unavailable() is not None, reason=str(syscounts.unavailable()))
def test_a_windowed_counter_counts_only_while_switched_on() -> None:
    """1,000 reads before the window, 500 in it, 2,000 after: the counter
    sees the 500 (and the child's next read of its stdin, entered before the
    counters go off)."""
    child = subprocess.Popen([sys.executable, "-c", _READER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdin is not None and child.stdout is not None

    def reads(n: int) -> None:
        child.stdin.write(f"{n}\n")
        child.stdin.flush()
        assert child.stdout.readline() == "done\n"

    counter = syscounts.SyscallCounter(child.pid, windowed=True)
    limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        assert counter.attached and counter.control
        reads(1000)
        # as in a load client of 10,000 connections: its FIFOs' fds over select()'s 1024
        soft, hard = limits
        if soft < 1100 <= hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (1100, hard))
        fillers: list[int] = []
        try:
            for _ in range(1030):
                fillers.append(os.open(os.devnull, os.O_RDONLY))
            switch = syscounts.WindowSwitch(counter.control)
        finally:
            for fd in fillers:
                os.close(fd)
        try:
            switch.on()
            after_on = switch.waited_s
            reads(500)
            switch.off()
            assert 0 < after_on < switch.waited_s  # each ack wait is added up
        finally:
            switch.close()
        reads(2000)
        child.stdin.close()
        assert child.wait(timeout=30) == 0
        counts = counter.finish()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, limits)
        counter.kill()
        child.kill()
        child.wait()
        child.stdin.close()
        child.stdout.close()
    assert 500 <= counts["read"] <= 505
    assert counts["write"] <= 2  # its one "done"
    assert counter.control and not Path(counter.control.split(",")[0]).exists()  # the FIFOs are gone


def test_a_window_switch_without_perf_fails_at_once(tmp_path: Path) -> None:
    """No perf reading the control FIFO (it exited, or takes no
    ``--control``): the switch says so instead of waiting for a reader."""
    ctl, ack = tmp_path / "ctl", tmp_path / "ack"
    os.mkfifo(ctl)
    os.mkfifo(ack)
    with pytest.raises(RuntimeError, match="perf is not reading its control FIFO"):
        syscounts.WindowSwitch(f"{ctl},{ack}")
