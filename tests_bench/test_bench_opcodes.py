"""benchmarks.opcodes: bytecodes per echoed message, counted over real
sockets on 127.0.0.1 (small runs; the counts themselves are the benchmark's)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import tornado_readinto
from benchmarks import harness as h
from benchmarks import opcodes
from benchmarks.harness.meta import command_line

#: _gilheld's functions that a slow socket call runs (see _sockcalls.SocketCalls.recv_into and sendmsg).
STALL_TEST = {"_gilheld.py:stalled", "_gilheld.py:stall_threshold", "_gilheld.py:note_stall"}


def test_counts_are_repeatable_and_see_one_more_read() -> None:
    """The same run counts the same (within the busy-poll policy's timing
    branches).  Under the pure build the reader that makes one more
    ``read_into`` per message executes more bytecode per message; under the
    compiled build the package's frames execute none (what runs is the
    benchmark's code, the loop's and the client's)."""
    first = opcodes.count("readinto", "asyncio", clients=2, messages=200)
    again = opcodes.count("readinto", "asyncio", clients=2, messages=200)
    assert first.total > 200 * 100
    if abs(again.total - first.total) >= 0.02 * first.total:
        # A loaded machine moves the timing branches (a recv tried or skipped
        # within the 1 ms proof of an empty socket): a third run agrees with
        # one of the two.
        third = opcodes.count("readinto", "asyncio", clients=2, messages=200).total
        assert min(abs(third - first.total), abs(third - again.total)) < 0.02 * third
    assert sum(first.by_function.values()) == first.total
    package = os.path.dirname(tornado_readinto.__file__) + os.sep
    ours = [path for path in first.by_file if path.startswith(package)]
    if tornado_readinto.COMPILED:
        # The one pure module on the compiled build's path is _gilheld (ctypes),
        # and only its stall test runs there: after a socket call slower than
        # MIN_STALL_S, which a loaded machine makes happen (a timing branch).
        ran = {name for name in first.by_function if name.startswith("_gilheld.py:")}
        assert ran <= STALL_TEST, ran
        assert set(ours) <= {package + os.path.join("core", "_gilheld.py")}, ours
        assert first.by_function["_tornado.py:recv"] > 0  # the benchmark's own code ran
    else:
        heavier = opcodes.count("readinto-3reads", "asyncio", clients=2, messages=200)
        assert heavier.total > first.total * 1.02
        # by function: the stream's own read_into is among what ran
        assert package + os.path.join("face", "iostream.py") in ours
        assert first.by_function["iostream.py:read_into"] > 0


def test_main_prints_a_row_per_case_and_refuses_unknown_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert opcodes.main(["--impl", "asyncio-protocol", "--loop", "asyncio", "--clients", "1", "--messages", "20"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].split() == ["server", "loop", "opcodes/msg"]
    assert rows[1].split()[:2] == ["asyncio-protocol", "asyncio"] and int(rows[1].split()[2]) > 0
    assert opcodes.main(["--impl", "no-such-impl", "--loop", "asyncio"]) == 2
    assert "SKIPPED (unknown implementation 'no-such-impl')" in capsys.readouterr().out


def test_main_writes_the_counts_with_the_runs_metadata(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "opcodes.json"
    argv = ["--impl", "asyncio-protocol,no-such-impl", "--loop", "asyncio", "--clients", "1", "--messages", "20",
            "--json", str(out)]  # fmt: skip
    assert opcodes.main(argv) == 2
    capsys.readouterr()
    data = json.loads(out.read_text())
    # the command as typed, with the build's variables and any CPU pinning it ran under (the pure-build run)
    env = {k: v for k, v in os.environ.items() if k.startswith("TORNADO_READINTO_")}
    expected = command_line("benchmarks.opcodes", argv, env, data["meta"]["machine"])
    assert expected.endswith("python -m benchmarks.opcodes " + " ".join(argv))
    assert h.missing_meta(data) == [] and data["meta"]["command"] == expected
    counted, skipped = data["results"]
    assert counted["impl"] == "asyncio-protocol" and counted["loop"] == "asyncio" and counted["opcodes_per_msg"] > 0
    assert counted["messages"] == 20 and counted["frames_per_msg"] is None and counted["skipped"] is None
    assert skipped == {"impl": "no-such-impl", "loop": "asyncio", "skipped": "unknown implementation 'no-such-impl'"}
