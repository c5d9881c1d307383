"""benchmarks.idle at a tiny size: every kind runs, echoes and reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import harness as h
from benchmarks.idle import KINDS, SUITE, message


def test_idle_message_is_one_framed_kib():
    data = message(3)
    assert int.from_bytes(data[:8], "little") == 1
    assert int.from_bytes(data[8:16], "little") == len(data) - 16 == 1024


def test_idle_tiny_run_of_every_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "idle.json"
    assert SUITE.main(["--connections", "20", "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "KiB per idle conn" in table
    data = json.loads(out.read_text())
    assert h.missing_meta(data) == [] and data["meta"]["command"].endswith("python -m benchmarks.idle --connections 20 "
                                                                           f"--json {out}")
    results = data["results"]
    assert [r["kind"] for r in results] == list(KINDS)
    assert all(r["status"] == "ok" and r["repeats"][0]["rss_after"] > 0 for r in results)
