"""`benchmarks.instructions`: machine instructions per echoed message,
counted by cachegrind (a count, never a timing)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import tornado_readinto
from benchmarks import harness as h
from benchmarks import instructions
from benchmarks.harness.meta import command_line


def test_the_instruction_count_is_read_from_cachegrinds_summary() -> None:
    stderr = "==31124== Cachegrind, a cache profiler\n==31124== \n==31124== I   refs:      892,740,946\n"
    assert instructions.parse_instructions(stderr) == 892_740_946
    with pytest.raises(ValueError, match="no instruction count"):
        instructions.parse_instructions("valgrind: the 'python' executable was not found\n")


def test_per_message_is_the_difference_of_two_runs() -> None:
    # start-up and warm-up (the same in both runs) cancel
    assert instructions.per_message((1000, 5_000_000), (3000, 9_000_000)) == 2000
    with pytest.raises(ValueError, match="more messages"):
        instructions.per_message((1000, 5_000_000), (1000, 6_000_000))


def test_a_pure_server_name_is_its_implementation_under_the_pure_build() -> None:
    assert instructions.implementation("readinto-pure") == ("readinto", True)
    assert instructions.implementation("asyncio-protocol") == ("asyncio-protocol", False)
    assert instructions.implementation("no-such-server-pure") == ("no-such-server-pure", False)


def test_without_valgrind_the_run_stops_saying_so(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert instructions.main(["--server", "asyncio-protocol", "--loop", "asyncio"]) == 2
    assert "valgrind is not installed" in capsys.readouterr().err


def test_the_json_records_the_counts_and_the_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys) -> None:
    """(The count itself stubbed: what is written, not what valgrind counts.)"""
    monkeypatch.setattr(instructions, "valgrind", lambda: "/usr/bin/valgrind")
    monkeypatch.setattr(instructions, "count", lambda server, loop, **kw: instructions.Counted(
        server, loop, 1234.5, [(2000, 10), (6000, 20)]))  # fmt: skip
    out = tmp_path / "instructions.json"
    argv = ["--server", "asyncio-protocol", "--loop", "asyncio", "--json", str(out)]
    assert instructions.main(argv) == 0
    capsys.readouterr()
    data = json.loads(out.read_text())
    assert h.missing_meta(data) == [] and data["meta"]["argv"] == argv
    env = {k: v for k, v in os.environ.items() if k.startswith("TORNADO_READINTO_")}
    expected = command_line("benchmarks.instructions", argv, env, data["meta"]["machine"])  # any pinning included
    assert expected.endswith("python -m benchmarks.instructions " + " ".join(argv))
    assert data["meta"]["command"] == expected
    assert data["results"] == [{"server": "asyncio-protocol", "loop": "asyncio", "per_msg": 1234.5,
                                "runs": [[2000, 10], [6000, 20]]}]  # fmt: skip
    assert instructions.unknown_servers("readinto-pure,asyncio-protocol,readinto-transport") == ["readinto-transport"]


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
@pytest.mark.skipif(not tornado_readinto.COMPILED, reason="compares the compiled build with the pure one")
def test_the_compiled_core_executes_fewer_instructions_per_message_than_the_pure_one() -> None:
    compiled = instructions.count("readinto", "asyncio", messages=100, clients=2)
    pure = instructions.count("readinto-pure", "asyncio", messages=100, clients=2)
    assert compiled.runs[1][0] == 3 * compiled.runs[0][0] == 300
    assert 0 < compiled.per_msg < 0.95 * pure.per_msg, (compiled, pure)
