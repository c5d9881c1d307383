"""The benchmark harness (``benchmarks.harness``): its pure parts (units,
repeats, ratios, the table, JSON, the rounds) on hand-made results and an
in-memory suite, its CPU accounting on this process's own threads, and the
``python -m benchmarks`` suite list."""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import threading
import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import tornado

from benchmarks import harness as h
from benchmarks.__main__ import SUITES
from benchmarks.__main__ import main as benchmarks_main
from benchmarks.harness.meta import command_line
from benchmarks.impls._gilthread import start_gil_thread

# -- units ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, nbytes",
    [("1KiB", 1024), ("64kib", 65536), ("1MiB", 1 << 20), ("100MiB", 100 << 20), ("1GiB", 1 << 30),
     ("1000", 1000), ("12B", 12), ("1.5KiB", 1536), (" 2 MiB ", 2 << 20)],
)  # fmt: skip
def test_parse_size(text: str, nbytes: int) -> None:
    assert h.parse_size(text) == nbytes


@pytest.mark.parametrize("text", ["", "KiB", "1KB", "1 TiB", "-1", "0.3B", "1.1.1MiB"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        h.parse_size(text)


@pytest.mark.parametrize("nbytes, text", [(1024, "1KiB"), (1536, "1.5KiB"), (100 << 20, "100MiB"), (1000, "1000B")])
def test_format_size_round_trips(nbytes: int, text: str) -> None:
    assert h.format_size(nbytes) == text
    assert h.parse_size(text) == nbytes


def test_format_units() -> None:
    assert h.format_rate(12345) == "12.3k"
    assert h.format_rate(2.5e6) == "2.5M"
    assert h.format_rate(0.5) == "0.5"
    assert h.format_seconds(2.5e-5) == "25us"
    assert h.format_seconds(0.0123) == "12.3ms"
    assert h.format_seconds(1.5) == "1.5s"
    assert h.format_number(31.25) == "31.2" and h.format_pct(97.4) == "97%" and h.format_mib(30 << 20) == "30"
    assert h.format_ratio(2.0) == "2.00x" and h.format_fixed(1)(2.26) == "2.3"
    for fmt in (h.format_rate, h.format_seconds, h.format_number, h.format_pct, h.format_ratio, h.format_fixed(1)):
        assert fmt(None) == "-"


def test_argparse_types() -> None:
    assert h.csv(h.positive_int)("1, 2,,3") == [1, 2, 3]
    with pytest.raises(argparse.ArgumentTypeError, match="must be >= 1"):
        h.csv(h.positive_int)("1,0")
    assert h.choice("impl", ("a", "b"))(" a ") == "a"
    with pytest.raises(ValueError, match="unknown impl 'c'; known: a, b"):
        h.choice("impl", ("a", "b"))("c")
    assert h.non_negative("0") == 0.0
    with pytest.raises(ValueError):
        h.non_negative("-1")


# -- results and ratios ---------------------------------------------------------------


@dataclass
class Row(h.Repeated):
    """A result of the in-memory suite below: ``thing`` in ``case``."""

    thing: str
    case: str
    repeats: list[dict[str, Any]] = field(default_factory=list)
    skipped: str | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def row(thing: str, case: str, speeds: list[float], **kw: Any) -> Row:
    repeats = [{"speed": s, "cost": 100 / s} for s in speeds]
    return Row(thing, case, repeats, **kw)


def base(results: Sequence[Row], r: Row) -> Row | None:
    return h.find_baseline(results, r, lambda o: o.thing == "old", lambda o: o.case)


@pytest.fixture
def results() -> list[Row]:
    return [
        row("old", "small", [10, 12, 11]),
        row("new", "small", [20, 26, 22]),
        row("new", "big", [5]),  # no baseline in this case
        Row("old", "big", error="server exited with status 2: VERIFICATION FAILED\ntraceback"),
        Row("gone", "small", skipped="needs a module"),
        Row("gone", "big", skipped="needs a module"),
    ]


def test_repeated_median_spread_summary_status(results: list[Row]) -> None:
    old, new, big, failed, skipped = results[:5]
    assert old.median("speed") == 11 and old.spread("speed") == (10, 12)
    assert old.summary("speed") == {"median": 11, "min": 10, "max": 12}
    assert row("x", "c", [1, 2, 3, 4]).median("speed") == 2.5
    assert [r.status for r in results[:5]] == ["ok", "ok", "ok", "failed", "skipped"]
    assert not failed.ok and not skipped.ok and not Row("x", "c").ok  # no repeats: not ok either
    assert failed.median("speed") is None and failed.summary("speed") == {"median": None, "min": None, "max": None}


def test_repeated_merge_pools_rounds_and_keeps_the_first_error() -> None:
    first = row("new", "small", [1, 2], extra={"checked": 2, "note": "a"})
    first.merge(row("new", "small", [3], extra={"checked": 1, "note": "b"}))
    assert first.values("speed") == [1, 2, 3] and first.ok
    assert first.extra == {"checked": 2, "note": "a"}  # nothing summed unless declared
    Row.summed = ("checked",)
    try:
        first.merge(row("new", "small", [4], extra={"checked": 5}))
    finally:
        Row.summed = ()
    assert first.extra == {"checked": 7, "note": "a"} and first.values("speed") == [1, 2, 3, 4]
    first.merge(Row("new", "small", error="boom"))
    first.merge(Row("new", "small", error="later"))
    assert first.error == "boom" and first.values("speed") == [1, 2, 3, 4]


def test_median_ratio_same_case_only(results: list[Row]) -> None:
    old, new, big, failed = results[:4]
    assert h.median_ratio(new, base(results, new), "speed") == pytest.approx(22 / 11)
    assert h.median_ratio(old, base(results, old), "speed") == pytest.approx(1.0)  # its own baseline
    # a cost: lower is better, so the ratio is inverted and >1 still means "new does better"
    assert h.median_ratio(new, base(results, new), "cost", lower_is_better=True) == pytest.approx(
        (100 / 11) / (100 / 22)
    )
    assert base(results, big) is None  # the old run at "big" failed
    assert h.median_ratio(big, base(results, big), "speed") is None
    assert h.median_ratio(failed, old, "speed") is None  # a failed result has no ratio
    assert h.median_ratio(new, old, "missing") is None


def test_paired_ratios_round_by_round() -> None:
    old = row("old", "c", [10, 4, 8])
    new = row("new", "c", [20, 6, 14])
    assert h.paired_ratios(new, old, "speed") == pytest.approx([2.0, 1.5, 1.75])
    assert h.paired_ratios(new, old, "cost", lower_is_better=True) == pytest.approx([2.0, 1.5, 1.75])
    assert h.paired_ratios(new, None, "speed") == []
    new.repeats[1]["speed"] = 0  # a round without a value is left out
    assert h.paired_ratios(new, old, "speed") == pytest.approx([2.0, 1.75])


def test_ratio_value_and_cell() -> None:
    ratio = h.Ratio[Row]("x two", "x_two", lambda results, r: [1.5, 2.0, 1.75])
    assert ratio.value([], Row("a", "c")) == 1.75
    assert ratio.column().cell([], Row("a", "c")) == "1.75x (1.50x-2.00x)"
    single = h.Ratio[Row]("x one", "x_one", lambda results, r: h.one(None))
    assert single.value([], Row("a", "c")) is None and single.column().cell([], Row("a", "c")) == "-"
    assert h.format_spread([3.0], h.format_rate) == "3" and h.format_spread([], h.format_rate) == "-"


# -- the table -------------------------------------------------------------------------

RATIOS = (h.Ratio[Row]("x old", "x_old", lambda results, r: h.one(h.median_ratio(r, base(results, r), "speed"))),)
COLUMNS: tuple[h.Column[Row], ...] = (
    h.field("thing", lambda r: r.thing),
    h.key_field("case", lambda r: r.case),
    h.metric("speed", "speed", h.format_rate),
    h.metric("cost", "cost", h.format_number, spread=False),
    *(ratio.column() for ratio in RATIOS),
)


def test_format_table(results: list[Row]) -> None:
    table = h.format_table(
        results, COLUMNS, legend="speed: median (min-max)", group=lambda r: r.case, skip_label=lambda r: r.thing
    )
    lines = table.splitlines()
    assert lines[0] == "speed: median (min-max)" and lines[1] == ""
    assert lines[2].split() == ["thing", "case", "speed", "cost", "x", "old"]
    assert set(lines[3]) == {"-"} and len(lines[3]) == len(lines[2])
    new = next(line for line in lines if line.startswith("new ") and "small" in line)
    assert new.split() == ["new", "small", "22", "(20-26)", "4.55", "2.00x"]
    assert next(line for line in lines if line.startswith("old ") and "small" in line).endswith("1.00x")
    big = next(line for line in lines if line.startswith("new ") and "big" in line)
    assert big.split() == ["new", "big", "5", "20", "-"]  # one repeat: no spread; no baseline: no ratio
    failed = next(line for line in lines if line.startswith("old ") and "big" in line)
    assert failed.split()[:2] == ["old", "big"]  # the head columns name the failed case
    assert "FAILED: server exited with status 2: VERIFICATION FAILED" in failed and "traceback" not in table
    assert [line for line in lines if line.startswith("SKIPPED")] == ["SKIPPED gone: needs a module"]  # once
    # a blank line between the cases, numbers right-aligned under their titles
    body = lines[4:]
    assert body[2] == "" and body[1].startswith("new") and body[3].startswith("new")
    assert len({len(line) for line in lines[2:4] + [new, big]}) == 1


def test_format_table_empty_and_without_legend() -> None:
    lines = h.format_table([], COLUMNS).splitlines()
    assert lines[0].split()[:2] == ["thing", "case"] and len(lines) == 2


# -- an in-memory suite: rounds, JSON, exit status ----------------------------------------


class Fake(h.TableSuite[str, Row]):
    """Runs no process: each case yields "old" and "new", from the speeds given."""

    name = "fake"
    summary = "a suite for the tests"
    result_type = Row
    summaries = ("speed", "cost")
    ratios = RATIOS
    columns = COLUMNS[:-1]
    plots = False

    def __init__(self, fail: set[tuple[str, int]] | None = None) -> None:
        self.ran: list[tuple[str, int, list[str]]] = []
        self.fail = fail or set()

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--case", type=h.csv(str), default=["small", "big"])

    def cases(self, args: argparse.Namespace) -> list[str]:
        return list(args.case)

    def run_case(self, case: str, args: argparse.Namespace, round_index: int) -> list[Row]:
        order = h.in_turn(["old", "new"], round_index)
        self.ran.append((case, round_index, order))
        if (case, round_index) in self.fail:
            return [Row(thing, case, error=f"round {round_index} failed") for thing in order]
        speed = {"old": 10.0, "new": 20.0 + round_index}
        return [row(thing, case, [speed[thing]] * args.repeat) for thing in order]

    def legend(self, nrepeats: int) -> str:
        return f"{nrepeats} repeats"

    def label(self, r: Row) -> str:
        return f"{r.thing} {r.case}"

    def brief(self, r: Row) -> str:
        return f"{r.median('speed')} speed"

    def group(self, r: Row) -> Hashable:
        return r.case

    def describe(self, r: Row) -> dict[str, Any]:
        return {"name": f"{r.thing}@{r.case}"}


def test_in_turn_and_alternation() -> None:
    assert h.in_turn("abc", 0) == ["a", "b", "c"] and h.in_turn("abc", 1) == ["c", "b", "a"]
    assert h.alternation(4) == [(0, 0), (0, 1), (1, 1), (1, 0), (2, 0), (2, 1), (3, 1), (3, 0)]
    assert [side for _, side in h.alternation(2, 3)] == [0, 1, 2, 2, 1, 0]


def test_suite_rounds_alternate_and_pool(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = Fake()
    out = tmp_path / "fake.json"
    assert suite.main(["--rounds", "3", "--repeat", "2", "--json", str(out)]) == 0
    # the cases reversed every round, and within each case the things compared too
    assert suite.ran == [("small", 0, ["old", "new"]), ("big", 0, ["old", "new"]),
                         ("big", 1, ["new", "old"]), ("small", 1, ["new", "old"]),
                         ("small", 2, ["old", "new"]), ("big", 2, ["old", "new"])]  # fmt: skip
    captured = capsys.readouterr()
    progress = captured.err.splitlines()
    assert len(progress) == 12 and progress[0].startswith("[1/6] old small: 10.0 speed (")
    assert progress[4].startswith("[3/6] new big: 21.0 speed")
    assert "6 repeats" in captured.out and "FAILED" not in captured.out
    data = json.loads(out.read_text())
    assert data["meta"]["rounds"] == 3 and data["meta"]["repeat"] == 2 and data["meta"]["packages"]["tornado"]
    assert h.missing_meta(data) == []  # what publishing requires: commit, build, machine, python, command
    # the command as typed, after the build's variables and any CPU pinning it ran under
    env = {k: v for k, v in os.environ.items() if k.startswith("TORNADO_READINTO_")}
    typed = ["--rounds", "3", "--repeat", "2", "--json", str(out)]
    expected = command_line("benchmarks.fake", typed, env, data["meta"]["machine"])
    assert expected.endswith("python -m benchmarks.fake --rounds 3 --repeat 2 --json " + str(out))
    assert data["meta"]["command"] == expected
    entries = data["results"]
    assert [(e["thing"], e["case"]) for e in entries] == [
        ("old", "small"),
        ("new", "small"),
        ("old", "big"),
        ("new", "big"),
    ]
    new = entries[1]
    assert new["name"] == "new@small" and new["status"] == "ok" and len(new["repeats"]) == 6
    assert new["speed"] == {"median": 21.0, "min": 20.0, "max": 22.0}
    assert new["x_old"] == pytest.approx(2.1)
    # from_json undoes to_json: the same table and the same JSON again
    again = [suite.from_json(e) for e in entries]
    assert again[1].extra == {} and suite.to_json(again, data["meta"]) == data


def test_suite_failed_round_fails_the_case(capsys: pytest.CaptureFixture[str]) -> None:
    suite = Fake(fail={("big", 1)})
    assert suite.main(["--rounds", "2", "--repeat", "1"]) == 1
    captured = capsys.readouterr()
    assert "2 case(s) FAILED" in captured.err and "[3/4] new big: FAILED round 1 failed" in captured.err
    big = [line for line in captured.out.splitlines() if " big " in line]
    assert len(big) == 2 and all("FAILED: round 1 failed" in line for line in big)


def test_suite_flags() -> None:
    suite = Fake()
    args = suite.parse_args([])
    assert (args.repeat, args.rounds, args.json) == (3, 1, None)
    assert not hasattr(args, "plot") and not hasattr(args, "list")  # it plots and lists nothing
    for bad in (["--repeat", "0"], ["--rounds", "0"], ["--nope"]):
        with pytest.raises(SystemExit):
            suite.parse_args(bad)


def test_finish_prints_writes_and_returns_the_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "out.json"
    ok = [row("old", "c", [1])]
    assert h.finish(ok, "THE TABLE", json_path=str(path), to_json=lambda: {"n": 1}) == 0
    assert capsys.readouterr().out == "THE TABLE\n" and json.loads(path.read_text()) == {"n": 1}
    assert h.finish(ok + [Row("x", "c", error="e")], "T", what="workload") == 1
    assert "1 workload(s) FAILED" in capsys.readouterr().err


def test_verify_counts_names_every_disagreement() -> None:
    client = {"verified_messages": 10, "messages_sent": 10, "full_compares": 4, "repeats": [{}, {}]}
    server = {"messages": 10}
    h.verify_counts(client, server, clients=2, nrepeats=2)  # all agree
    bad_client = {"verified_messages": 9, "messages_sent": 10, "full_compares": 3, "repeats": [{}]}
    with pytest.raises(h.CaseFailed) as info:
        h.verify_counts(bad_client, {"messages": 8}, clients=2, nrepeats=2)
    message = str(info.value)
    assert message.startswith("verification: ")
    for part in ("checked 9 of 10 echoes", "3 full compares, expected 4",
                 "server echoed 8 messages, client sent 10", "1 repeats, expected 2"):  # fmt: skip
        assert part in message
    with pytest.raises(h.VerificationError, match="wrong sum"):
        h.check(False, "wrong sum")


# -- CPU accounting --------------------------------------------------------------------


def test_process_cpu_s_of_this_process_and_another() -> None:
    before = h.process_cpu_s()
    sum(i * i for i in range(300_000))
    assert h.process_cpu_s() > before > 0
    if not os.path.exists(f"/proc/{os.getppid()}/stat"):
        pytest.skip("no /proc")
    parent = h.process_cpu_s(os.getppid())
    assert parent is not None and parent >= 0
    assert h.process_cpu_s(2**22 + 12345) is None  # no such process
    usage = h.process_usage()
    assert usage["user"] + usage["sys"] > 0 and usage["minflt"] > 0


def test_thread_cpu_s_counts_one_thread_only() -> None:
    """While a GIL-holding thread spins, the main thread (waiting) gains less
    CPU than it; its own clock (`thread_cpu_s()` inside it) agrees with the
    reading from outside."""
    pid = os.getpid()
    if not os.path.exists(f"/proc/{pid}/task/{threading.get_native_id()}/stat"):
        pytest.skip("no /proc/<pid>/task")
    main_tid = threading.get_native_id()
    assert h.thread_cpu_s(pid, 2**22 + 12345) is None  # no such thread
    main_before = h.thread_cpu_s(pid, main_tid)
    hog = start_gil_thread()
    try:
        hog_before = h.thread_cpu_s(pid, hog.tid)
        assert main_before is not None and hog_before is not None
        hog_now = hog_before
        give_up = time.monotonic() + 60
        while hog_now - hog_before < 0.05:  # until the hog has used 50 ms of CPU
            assert time.monotonic() < give_up, "the GIL thread got no CPU"
            time.sleep(0.005)
            hog_now = h.thread_cpu_s(pid, hog.tid) or hog_now
        main_now = h.thread_cpu_s(pid, main_tid)
    finally:
        hog_total = hog.stop()
    assert main_now is not None and main_now - main_before < hog_now - hog_before
    assert hog_total >= hog_now - 0.011  # the thread's own clock agrees (schedstat or 10 ms ticks)
    assert hog.iterations > 0 and not hog.is_alive()


# -- python -m benchmarks ----------------------------------------------------------------


# -- meta: what every result file records -----------------------------------------------


def test_run_meta_records_the_run_the_build_the_machine_and_python() -> None:
    import tornado_readinto

    meta = h.run_meta("benchmarks.echo", ["--msize", "1KiB", "--json", "out dir/e.json"])
    assert h.missing_meta({"meta": meta}) == []
    assert meta["argv"] == ["--msize", "1KiB", "--json", "out dir/e.json"]
    assert meta["command"].endswith("python -m benchmarks.echo --msize 1KiB --json 'out dir/e.json'")
    assert len(meta["commit"]["sha"]) == 40 and isinstance(meta["commit"]["dirty"], bool)  # a git checkout
    assert meta["build"]["compiled"] is tornado_readinto.COMPILED
    assert meta["build"]["name"] == ("compiled" if tornado_readinto.COMPILED else "pure")
    machine = meta["machine"]
    assert machine["cpu_model"] and machine["kernel"] and 0 < machine["usable_cores"] <= machine["cpu_count"]
    assert meta["python"]["implementation"] == platform.python_implementation()
    assert meta["packages"]["tornado"] == tornado.version
    json.dumps(meta)  # JSON as it is


def test_the_command_names_the_build_variables_and_the_cpus_it_ran_on() -> None:
    pinned = {"affinity": [1], "cpu_count": 2}
    env = {"TORNADO_READINTO_NO_EXTENSIONS": "1"}
    assert command_line("benchmarks.echo", ["--msize", "1KiB"], env, pinned) == (
        "TORNADO_READINTO_NO_EXTENSIONS=1 taskset -c 1 python -m benchmarks.echo --msize 1KiB")
    assert command_line("benchmarks.load", [], {}, {"affinity": [0, 1], "cpu_count": 2}) == "python -m benchmarks.load"


@pytest.mark.parametrize("cpuinfo, model", [
    ("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n", "AMD EPYC 7B13"),
    ("processor\t: 0\nBogoMIPS\t: 50.00\n\nModel\t: Raspberry Pi 4 Model B\n", "Raspberry Pi 4 Model B"),
])  # fmt: skip
def test_the_cpu_model_is_read_from_cpuinfo(tmp_path: Path, cpuinfo: str, model: str) -> None:
    from benchmarks.harness.meta import cpu_model

    (tmp_path / "cpuinfo").write_text(cpuinfo)
    assert cpu_model(str(tmp_path / "cpuinfo")) == model


def test_a_tree_is_dirty_by_its_sources_not_by_its_result_files(tmp_path: Path) -> None:
    from benchmarks.harness.meta import commit_meta

    assert commit_meta(tmp_path) == {"sha": None, "dirty": None, "changed": []}  # not a checkout
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    (results / "a.json").write_text("{}")
    (tmp_path / "mod.py").write_text("x = 1\n")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "first"]):
        subprocess.run([*git, *args], check=True)
    clean = commit_meta(tmp_path)
    assert len(clean["sha"]) == 40 and clean["dirty"] is False
    (results / "a.json").write_text('{"re-made": true}')  # a re-made result file
    (tmp_path / "new.py").write_text("")  # untracked
    assert commit_meta(tmp_path)["dirty"] is False
    (tmp_path / "mod.py").write_text("x = 2\n")
    assert commit_meta(tmp_path) == {"sha": clean["sha"], "dirty": True, "changed": ["mod.py"]}


def test_missing_meta_names_what_a_result_file_lacks() -> None:
    assert h.missing_meta([]) == ["commit", "build", "machine", "python", "command"]
    assert h.missing_meta({"meta": {"argv": ["--full"]}}) == ["commit", "build", "machine", "python", "command"]
    meta = h.run_meta("benchmarks.load", [])
    del meta["machine"]["kernel"]
    meta["commit"] = "0123abc"  # as benchmarks.idle once wrote it: no dirty flag
    meta["command"] = ""
    assert h.missing_meta({"meta": meta}) == ["commit", "machine.kernel", "command"]


def test_every_benchmark_that_writes_json_records_the_run() -> None:
    """One place: each module that writes a JSON file puts `run_meta` in it
    (the suites through `TableSuite.meta`)."""
    root = Path(__file__).resolve().parent.parent / "benchmarks"
    writers = [p for p in root.rglob("*.py") if re.search(r"json\.dump\(|write_json\(", p.read_text())]
    writers = [p for p in writers if p.name not in ("output.py", "publish.py")]  # the writer; reads only
    assert {p.name for p in writers} >= {"dask_profile.py", "instructions.py", "opcodes.py"}
    assert [p.name for p in writers if "run_meta(" not in p.read_text()] == []
    assert "run_meta(self.module, argv)" in (root / "harness" / "suite.py").read_text()



@pytest.mark.parametrize("argv", [[], ["--help"]])
def test_benchmarks_lists_the_suites(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert benchmarks_main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m benchmarks SUITE [options]")
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("  ")]
    assert listed == ["echo", "load", "http", "dask", "dask_profile", "check", "idle"] == list(SUITES)
    assert all(len(line.split()) > 3 for line in out.splitlines() if line.startswith("  "))  # each with a summary


def test_benchmarks_runs_a_suite_and_rejects_unknown_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert benchmarks_main(["echo", "--list"]) == 0
    assert "stock-read_bytes" in capsys.readouterr().out
    assert benchmarks_main(["nope"]) == 2
    assert "unknown suite 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        benchmarks_main(["load", "--server", "nope"])
