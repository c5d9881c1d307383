"""The README and the docs: every published figure matches its result file,
no internal notes, and the compatibility block says what setup.cfg says.

``python -m benchmarks.publish`` renders the tables (the headline's among
them) and the plot from ``benchmarks/results/``; ``--check`` (`publish.check`)
re-renders them in memory, refusing a cited result file that does not record
its run.  These tests run that check on the repository's result files (it
must pass once they are re-made) and on a copy given the metadata of a re-made
run (rendered from, it passes; changed, or without the metadata, it fails).
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest

from benchmarks import load, publish
from benchmarks.harness import netpath
from benchmarks.harness.meta import command_line, missing_meta, run_meta

ROOT = Path(__file__).resolve().parent.parent

#: The pages users read: README, CHANGELOG, the docs (generated includes
#: aside) and the benchmarks' README, which the docs include.
PAGES = [ROOT / "README.rst", ROOT / "CHANGELOG.rst", ROOT / "benchmarks" / "README.rst"] + sorted(
    p for p in (ROOT / "docs").rglob("*.rst") if "_generated" not in p.parts and "_build" not in p.parts
)


#: An sdist carries no result files (MANIFEST.in prunes ``benchmarks/results/``):
#: the checks that read them run from a checkout, where the files must be.
IN_SDIST_WITHOUT_RESULTS = (ROOT / "PKG-INFO").exists() and not publish.RESULTS.exists()
needs_results = pytest.mark.skipif(
    IN_SDIST_WITHOUT_RESULTS, reason="an sdist carries no benchmarks/results/ (MANIFEST.in prunes it)"
)


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# ---------------------------------------------------------------- published figures


@needs_results
def test_published_figures_match_their_result_files() -> None:
    """The repository's own result files: every cited one records its run
    (publish refuses it otherwise) and every published figure matches.
    Fails until the cited files are re-made: ``python -m benchmarks.publish
    --remake`` on a quiet machine (``--cited`` lists them), then
    ``python -m benchmarks.publish``."""
    problems = publish.check(publish.Results(publish.RESULTS))
    assert not problems, publish.REFUSED_HINT + "\n" + "\n".join(problems)


def _as_remade(results: Path) -> None:
    """Give every result file of ``results`` (a copy) the metadata a re-made
    one records, as `remake_plan` would make it (the command: the plan's,
    else the recorded argv), in the format today's benchmarks write (an
    HTTP file's flat list of rounds becomes results with repeats)."""
    plans = {plan.file: plan for plan in publish.remake_plan(results)}
    for path in sorted(results.glob("*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, dict) and not missing_meta(data):
            continue  # re-made already: it keeps the command it records (taskset included)
        if isinstance(data, list):  # benchmarks.http before the harness
            entries: dict[tuple[str, str], dict[str, Any]] = {}
            for row in data:
                entry = entries.setdefault((row["impl"], row["case"]), {"impl": row["impl"], "case": row["case"],
                                                                       "repeats": []})  # fmt: skip
                entry["repeats"].append({k: v for k, v in row.items() if k not in ("impl", "case")})
            data = {"results": list(entries.values())}
        plan = plans.get(path.name)
        command = (plan.command if plan and plan.command else None) or publish.recorded_command(data, path.name)
        if command is None:
            command = f"python -m benchmarks.{publish.module_of(path.name) or 'echo'} --json {path.name}"
        words = shlex.split(command)
        i = words.index("-m")
        data.setdefault("meta", {}).update(run_meta(words[i + 1], words[i + 2:]))
        path.write_text(json.dumps(data))


@pytest.fixture
def published(tmp_path: Path) -> tuple[Path, Path]:
    """``(root, results)``: a copy of the pages and of the result files, the
    files given the metadata of a re-made run (`_as_remade`) and the tables
    and plot values rendered from them (the plot's PNG copied)."""
    root = tmp_path / "root"
    for page in ("README.rst", "CHANGELOG.rst", "benchmarks/README.rst"):
        (root / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / page, root / page)
    shutil.copytree(ROOT / "docs", root / "docs", ignore=shutil.ignore_patterns("_build"))
    results = tmp_path / "results"
    shutil.copytree(publish.RESULTS, results, ignore=shutil.ignore_patterns("*.png"))
    shutil.copy(publish.RESULTS / "dask.png", results / "dask.png")  # cited by name: the run's plot
    _as_remade(results)
    publish.render_all(publish.Results(results), root, plot=False)
    return root, results


def _edit_dask_transfer(results: Path, factor: float) -> None:
    """Make readinto://'s 64 MiB transfers ``factor`` times as fast in a
    copy of dask.json, as a new run would."""
    path = results / "dask.json"
    data = json.loads(path.read_text())
    for entry in data["results"]:
        if entry["workload"] == "transfer" and entry["protocol"] == "readinto":
            for repeat in entry["repeats"]:
                repeat["value"] *= factor
            entry["x_baseline"] *= factor
    path.write_text(json.dumps(data))


@needs_results
def test_check_fails_when_a_result_file_changes_under_a_published_figure(published: tuple[Path, Path]) -> None:
    root, results = published
    assert publish.check(publish.Results(results), root) == []  # as rendered: all match
    _edit_dask_transfer(results, 0.5)
    problems = publish.check(publish.Results(results), root)
    joined = "\n".join(problems)
    assert "docs/_generated/headline.rst" in joined
    assert "docs/_generated/dask.rst" in joined
    assert "docs/_generated/headline-plot.txt" in joined  # the plot's values
    # the prose that quotes the figure, in the guides and the performance page
    assert any(p.startswith("docs/guides/dask.rst: no longer says") and "dask.transfer" in p for p in problems), joined
    assert any(p.startswith("docs/performance.rst") and "dask.transfer" in p for p in problems), joined
    # and nothing that does not depend on dask.json
    assert not any("http.rst" in p or "load.rst" in p for p in problems), joined


def _scale(path: Path, metric: str, factor: float, **where: Any) -> None:
    """Multiply ``metric`` in every repeat of the results of ``path`` whose
    fields equal ``where``, in place."""
    data = json.loads(path.read_text())
    for entry in data["results"]:
        if all(entry[k] == v for k, v in where.items()):
            for repeat in entry["repeats"]:
                repeat[metric] *= factor
    path.write_text(json.dumps(data))


@needs_results
def test_a_readme_that_holds_the_headline_block_is_kept_in_step(published: tuple[Path, Path]) -> None:
    """The README holds no headline table; one that does (between the
    block's comments) gets it written, and checked, like the generated one."""
    root, results = published
    readme = root / "README.rst"
    readme.write_text(readme.read_text() + "\n.. published-table: headline\n\n.. end-published-table\n")
    assert publish.check(publish.Results(results), root) == ["README.rst: the headline table does not match its "
                                                             "result files"]
    publish.render_all(publish.Results(results), root, plot=False)
    assert "8 x 64 MiB worker-to-worker transfers" in readme.read_text()
    assert publish.check(publish.Results(results), root) == []
    _edit_dask_transfer(results, 0.5)
    assert "README.rst: the headline table does not match its result files" in publish.check(
        publish.Results(results), root)


@needs_results
def test_check_fails_for_each_kind_of_result_file(published: tuple[Path, Path]) -> None:
    """A changed figure is found whichever suite's file it is in."""
    root, results = published
    _scale(results / "http.json", "requests", 2, impl="readinto", case="post")
    _scale(results / publish.LOAD, "loop_cpu_us_per_msg", 0.5, server="readinto")
    _scale(results / publish.IDLE, "per_connection", 2)
    problems = "\n".join(publish.check(publish.Results(results), root))
    assert "docs/_generated/http.rst" in problems
    assert "docs/_generated/load.rst" in problems and "docs/_generated/10k.rst" in problems
    assert "http.post" in problems and "idle.readinto" in problems  # (load's figures: in tables only)


def test_publish_refuses_a_cited_file_that_does_not_record_its_run(
    published: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Render and check refuse, naming each file and what it lacks; render
    writes nothing."""
    root, results = published
    dask = results / "dask.json"
    data = json.loads(dask.read_text())
    del data["meta"]["commit"], data["meta"]["machine"]["cpu_model"]
    dask.write_text(json.dumps(data))
    load = results / publish.LOAD
    data = json.loads(load.read_text())
    data["meta"] = {"argv": data["meta"]["argv"]}  # as files were written before the metadata
    load.write_text(json.dumps(data))
    (results / "echo-twocpu.json").unlink()  # a file publish renders from
    problems = publish.check(publish.Results(results), root)
    assert problems == publish.refusals(results, root)
    assert sorted(problems) == sorted([
        f"{results}/dask.json: records no commit, machine.cpu_model (the run's metadata)",
        f"{results}/{publish.LOAD}: records no commit, build, machine, python, command (the run's metadata)",
        f"{results}/echo-twocpu.json: missing",
    ])
    readme = (root / "README.rst").read_text()
    with pytest.raises(publish.Refused) as refused:
        publish.render_all(publish.Results(results), root, plot=False)
    assert refused.value.lines == problems and (root / "README.rst").read_text() == readme
    # the command line says the same, and how to re-make them (pages: the repository's)
    assert publish.main(["--check", "--results", str(results)]) == 1
    out = capsys.readouterr().out
    assert f"{results}/{publish.LOAD}: records no commit" in out and "--remake" in out
    assert publish.main(["--results", str(results), "--no-plot"]) == 1
    assert "records no commit" in capsys.readouterr().out


def test_cited_and_uncited_files(published: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    root, results = published
    (results / "stray.json").write_text("{}")
    cited = publish.cited(results, root)
    assert cited["dask.json"][0] == "publish" and "docs/guides/dask.rst" in cited["dask.json"]  # rendered, named
    assert cited["dask.png"] == ["benchmarks/README.rst"] or "the run of dask.json" in cited["dask.png"]
    assert cited["idle-10k.json"][:2] == ["publish", "CHANGELOG.rst"]  # rendered from, and named
    (results / "idle-10k.txt").write_text("a table\n")
    assert publish.cited(results, root)["idle-10k.txt"] == ["the run of idle-10k.json"]  # its run's table
    (results / "idle-10k.txt").unlink()
    assert list(cited)[:5] == ["dask.json", "dask-busy.json", "http.json", "echo-twocpu.json",
                               "load-hotpath.json"]  # the headline's first
    uncited = publish.uncited(results, root)
    assert "stray.json" in uncited and not set(uncited) & set(cited)
    listing = {p.name for p in results.iterdir() if p.is_file()}  # (check/: the quick check's run)
    assert set(uncited) == listing - set(cited)  # (cited: also files that are missing)
    assert publish.main(["--uncited", "--results", str(results)]) == 0
    assert "stray.json\n" in capsys.readouterr().out
    assert publish.main(["--cited", "--results", str(results)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "dask.json  ok  [publish, " in lines[0] and not any("stray" in line for line in lines)


def test_remake_dry_run_prints_every_command_and_runs_nothing(
    published: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, results = published
    before = {p.name: p.stat().st_mtime_ns for p in results.iterdir()}
    publish.main(["--remake", "--dry-run", "--results", str(results)])
    out = capsys.readouterr().out
    assert {p.name: p.stat().st_mtime_ns for p in results.iterdir()} == before  # nothing ran
    commands = [line.split("  # ")[0] for line in out.splitlines() if line and not line.startswith("#")]
    heads = ["python -m benchmarks.dask --workload rpc,tasks,chain,transfer --pair tcp,tls",
             "python -m benchmarks.dask --workload rpc,busy-worker", "python -m benchmarks.http --rounds 5 --json",
             "python -m benchmarks.echo --msize 1KiB", "python -m benchmarks.load --server stock,readinto,framed-pool,"]
    assert [c[: len(h)] for c, h in zip(commands, heads)] == heads  # the headline's first
    assert f"--json {results}/dask.json --plot {results}/dask.png" in commands[0]
    assert "readinto-transport" not in commands[4]
    assert any(c.startswith("taskset -c 1 python -m benchmarks.echo") for c in commands)
    # every command writes its JSON into the results directory, each file once
    written = [shlex.split(c) for c in commands]
    jsons = [w[w.index("--json") + 1] for w in written]
    assert all(j.startswith(f"{results}/") for j in jsons) and len(set(jsons)) == len(jsons)
    # every cited file is re-made by the command it records
    assert "not re-made by a command" not in out and "problems" not in out


def test_remake_of_a_command_this_machine_cannot_run(
    published: tuple[Path, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without iproute2 (its absence injected): ``--netpath`` commands still
    parse, so the dry run prints them with what is missing here and finds
    no problem; a real re-make runs none of them and fails, naming the file
    and the reason."""
    _, results = published
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(netpath, "_which", lambda tool: None)
    missing = "needs root and iproute2 (ip, and tc for a rate): ip and tc not found (install iproute2)"
    assert publish.main(["--remake", "--dry-run", "--results", str(results)]) == 0
    lines = capsys.readouterr().out.splitlines()
    (at,) = [i for i, line in enumerate(lines) if f"--json {results}/echo-netpath.json" in line]
    assert lines[at].startswith("python -m benchmarks.echo --netpath ") and missing in lines[at + 1]
    assert lines[at + 1].startswith("#   not here: --netpath loopback,mtu1500,")
    assert sum(line.startswith("#   not here: --netpath ") for line in lines) == 3  # echo, load and dask's
    assert "problems" not in "\n".join(lines)
    plans = [plan for plan in publish.remake_plan(results) if plan.file == "echo-netpath.json"]
    before = (results / "echo-netpath.json").read_bytes()
    assert publish.remake(plans, results, publish.Results(results)) == 1
    out = capsys.readouterr().out
    assert "# failed:\n#   echo-netpath.json: --netpath loopback,mtu1500," in out and missing in out
    assert (results / "echo-netpath.json").read_bytes() == before and not (results / "echo-netpath.txt").exists()


def test_remake_checks_each_command_with_its_benchmark(published: tuple[Path, Path]) -> None:
    """A command its benchmark refuses, or that would not make a row publish
    reads from its file, is a problem of the dry run."""
    _, results = published
    res = publish.rendered_files(results)
    refused = publish.Remake("load-bounds.json", "python -m benchmarks.load --server readinto-transport")
    assert publish.check_remake(refused, results, res) == [
        "load-bounds.json: python -m benchmarks.load refuses the command: python -m benchmarks load: error: "
        "argument --server: unknown server 'readinto-transport'; known: " + ", ".join(load._all_servers())]
    short = publish.Remake("echo-twocpu.json", "python -m benchmarks.echo --impl readinto,threads --msize 1KiB")
    problems = publish.check_remake(short, results, res)
    assert problems and all("'impl': 'stock-read_bytes'" in p or "'impl': 'readinto-spin'" in p for p in problems)
    recorded = publish.recorded_command(json.loads((results / publish.LOAD).read_text()), publish.LOAD)
    assert publish.check_remake(publish.Remake(publish.LOAD, recorded), results, res) == []


def test_remake_runs_each_command_into_the_results_directory(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The run itself, on a count that takes a second (no timing): the
    JSON with its metadata (the environment the command sets included), the
    table beside it; a file whose condition does not hold here is not run."""
    count = "python -m benchmarks.opcodes --impl asyncio-protocol --loop asyncio --clients 1 --messages 20"
    plans = [publish.Remake("opcodes-bounds.json", f"TORNADO_READINTO_NO_EXTENSIONS=1 {count}"),
             publish.Remake("opcodes-other.json", count, needs=lambda: "needs what is not here")]
    assert publish.remake(plans, tmp_path, publish.Results(tmp_path)) == 1  # one not run
    out = capsys.readouterr().out
    assert f"TORNADO_READINTO_NO_EXTENSIONS=1 {count} --json {tmp_path}/opcodes-bounds.json\n" in out
    assert "#   opcodes-other.json: needs what is not here" in out and "python -m benchmarks.publish" in out
    data = json.loads((tmp_path / "opcodes-bounds.json").read_text())
    assert missing_meta(data) == [] and data["meta"]["build"]["name"] == "pure"
    # the command as run, and any CPU pinning this process (so the command) runs under
    env = {**{k: v for k, v in os.environ.items() if k.startswith("TORNADO_READINTO_")},
           "TORNADO_READINTO_NO_EXTENSIONS": "1"}
    argv = [*shlex.split(count)[3:], "--json", f"{tmp_path}/opcodes-bounds.json"]
    expected = command_line("benchmarks.opcodes", argv, env, data["meta"]["machine"])
    assert expected.startswith("TORNADO_READINTO_NO_EXTENSIONS=1 ")
    assert expected.endswith(f"{count} --json {tmp_path}/opcodes-bounds.json")
    assert data["meta"]["command"] == expected
    assert data["results"][0]["impl"] == "asyncio-protocol" and data["results"][0]["opcodes_per_msg"] > 0
    assert (tmp_path / "opcodes-bounds.txt").read_text().split()[:3] == ["server", "loop", "opcodes/msg"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["opcodes-bounds.json", "opcodes-bounds.txt"]


def test_every_remake_command_runs_today() -> None:
    """Each cited file's re-make command is one its benchmark accepts (its
    parser, and the server names it runs), run on nothing."""
    res = publish.rendered_files(publish.RESULTS)
    refused = [line for plan in publish.remake_plan() for line in publish.check_remake(plan, publish.RESULTS, res)
               if " refuses the command: " in line]
    assert not refused, "\n".join(refused)


def test_results_hold_only_cited_files() -> None:
    """``benchmarks/results/`` holds the files publish cites and nothing
    else: ``python -m benchmarks.publish --uncited`` lists the files to
    delete."""
    uncited = publish.uncited()
    assert not uncited, "not cited, delete them (python -m benchmarks.publish --uncited):\n" + "\n".join(uncited)


def test_every_quote_names_known_figures() -> None:
    for quote in publish.QUOTES:
        assert quote.names(), quote
        assert set(quote.names()) <= set(publish.FIGURES), quote
        assert (ROOT / quote.path).exists(), quote


@needs_results
def test_every_figure_renders() -> None:
    """From the repository's result files."""
    res = publish.Results(publish.RESULTS)
    for name in publish.FIGURES:
        f = publish.figure(res, name)
        assert f.value > 0 and (ROOT / "benchmarks" / "results" / f.source).exists(), name


# A measured ratio is written with two decimals (2.38x) or, from 10 up, none
# (115x); targets and rough figures are written with one (1.1x).
_RATIO = re.compile(r"(?<![\w.])\d+\.\d\dx(?!\w)|(?<![\w.])\d{2,}x(?!\w)")
# The benchmarks' README shows the format of a table row with made-up numbers.
_FORMAT_ONLY = re.compile(r"::\n\n(?:(?:    .*)?\n)+?\(The numbers above only show the format[^)]*\)")


def _prose(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    text = _FORMAT_ONLY.sub("", text)
    if path.name == "README.rst" and path.parent == ROOT:
        block = publish.published_block(text, "headline") or ""
        text = text.replace(block, "")
    return publish.normalize(text)


@needs_results
@pytest.mark.parametrize("path", PAGES, ids=_rel)
def test_every_measured_ratio_is_published_from_its_file(path: Path) -> None:
    """A ratio in prose is one of `publish.QUOTES` (or sits in a generated
    table), so that it cannot drift from its result file."""
    text = _prose(path)
    res = publish.Results(publish.RESULTS)
    spans = []
    for quote in publish.QUOTES:
        if quote.path == _rel(path):
            rendered = publish.normalize(quote.render(res))
            spans += [(m.start(), m.end()) for m in re.finditer(re.escape(rendered), text)]
    loose = [m.group() for m in _RATIO.finditer(text) if not any(a <= m.start() < b for a, b in spans)]
    assert not loose, f"{_rel(path)}: ratios not published from a result file: {loose}"


# ---------------------------------------------------------------- internal notes

_NOTES = {
    "a number of this project's tracker": re.compile(r"(?<![\w/.-])(?:issue|issues|bug|PR|pull request)\s*#?\d+", re.I),
    "a bare #number": re.compile(r"(?<![\w/.-])#\d+\b"),
    "a commit hash": re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b"),
    "first person": re.compile(r"\b(?:I|I'm|I've|my|mine|me|we|we've|our|ours|us)\b(?! ?/)"),
    "notes users cannot read": re.compile(r"issue's notes|the notes|this session|this work", re.I),
}
_RELEASE = re.compile(r"\b(?:this|the previous|the last|the next) release\b", re.I)


def _strip_literals(text: str) -> str:
    """Drop code and literal blocks and inline literals (``us`` is a unit
    there), keeping prose."""
    text = re.sub(r"``[^`]*``", "", text)
    out, skip_indent = [], None
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip())
        if skip_indent is not None:
            if line.strip() and indent <= skip_indent:
                skip_indent = None
            else:
                continue
        if line.rstrip().endswith("::") or re.match(r"\s*\.\. (code-block|image|include)::", line):
            skip_indent = indent
            if not line.lstrip().startswith(".."):
                out.append(line)
            continue
        out.append(line)
    return "\n".join(out)


@pytest.mark.parametrize("path", [p for p in PAGES if p.name != "CHANGELOG.rst"], ids=_rel)
def test_no_internal_notes(path: Path) -> None:
    """No tracker numbers, commit hashes, first person or "this release"
    outside the CHANGELOG.  Upstream references (dask/distributed#6325,
    tornadoweb/tornado#2171) are fine."""
    prose = _strip_literals(path.read_text(encoding="utf-8"))
    prose_no_us = re.sub(r"\d\s*us\b", "", prose)  # 50 us: microseconds
    found = {what: pattern.findall(prose_no_us) for what, pattern in _NOTES.items()}
    found["'this release' outside the CHANGELOG"] = _RELEASE.findall(prose)
    found = {k: v for k, v in found.items() if v}
    assert not found, f"{_rel(path)}: {found}"


def test_changelog_has_no_tracker_numbers_or_hashes() -> None:
    prose = _strip_literals((ROOT / "CHANGELOG.rst").read_text(encoding="utf-8"))
    for what in ("a number of this project's tracker", "a bare #number", "a commit hash", "first person"):
        assert not _NOTES[what].findall(re.sub(r"\d\s*us\b", "", prose)), what


def test_internal_note_patterns() -> None:
    prose = "See issue #21 and issue 13, commit e17f68b; the leanest stream I could write, this release."
    assert _NOTES["a number of this project's tracker"].findall(prose) == ["issue #21", "issue 13"]
    assert _NOTES["a commit hash"].findall(prose) == ["e17f68b"]
    assert _NOTES["first person"].findall(prose) == ["I"]
    assert _RELEASE.findall(prose) == ["this release"]
    upstream = "dask/distributed#6325 and tornadoweb/tornado#2171 cost 50 us, 1.5 ms and 64 MiB"
    assert not any(p.findall(re.sub(r"\d\s*us\b", "", upstream)) for p in _NOTES.values())


# ---------------------------------------------------------------- the README


def _readme() -> str:
    return (ROOT / "README.rst").read_text(encoding="utf-8")


def test_readme_is_a_first_screen() -> None:
    text = _readme()
    assert len(text.splitlines()) <= 250
    # the dask section leads with the switch (tests/dask/test_dask_switch.py runs its block)
    dask_section = text[text.index("\ndask: ") :]
    assert dask_section.index("dask-tcp-switch") < dask_section.index("readinto://")
    assert "DASK_DISTRIBUTED__WORKER__PRELOAD=tornado_readinto.dask_preload" in text
    assert "tornado_readinto.install()" in text
    # one number per switch, in prose; the tables, the plot and the rest on the performance page
    assert "published-table" not in text and not re.findall(r"^\.\. image:: ", text, re.M)
    assert "<docs/performance.rst>`_" in text


def test_readme_setup_commands_are_the_ci_commands() -> None:
    """The test command is exactly what .ci/run runs; both commands are the
    ones a fresh machine needs."""
    text = _readme()
    test_cmd = ("python3 -m venv .venv && .venv/bin/python -m pip install -q -e '.[test]' "
                "&& .venv/bin/python -m pytest")
    bench_cmd = ("python3 -m venv .venv && .venv/bin/python -m pip install -q -e '.[bench]' "
                 "&& .venv/bin/python -m benchmarks.echo")
    assert f"    {test_cmd}\n" in text and f"    {bench_cmd}\n" in text
    assert test_cmd in (ROOT / ".ci" / "run").read_text()


def _setup_cfg() -> configparser.ConfigParser:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return cfg


def _compatibility() -> dict[str, str]:
    """The README's compatibility table: first column -> the rest, joined."""
    text = _readme()
    start = text.index(".. compatibility")
    lines = text[start:].splitlines()
    rules = [i for i, line in enumerate(lines) if line.startswith("====")]
    rows: dict[str, str] = {}
    key = ""
    for line in lines[rules[0] + 1: rules[1]]:
        if line[:1].strip():
            key = line.split("  ")[0].strip()
            rows[key] = line[len(key):].strip()
        else:
            rows[key] += " " + line.strip()
    return rows


def test_compatibility_block_agrees_with_setup_cfg() -> None:
    cfg = _setup_cfg()
    rows = _compatibility()
    classifiers = cfg["metadata"]["classifiers"].split()
    versions = sorted({c for c in cfg["metadata"]["classifiers"].splitlines()
                       if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c.strip())})
    versions = [v.rsplit(" ", 1)[1] for v in versions]
    assert versions == ["3.11", "3.12", "3.13", "3.14", "3.15"]
    # Python: the tested versions, and the lowest is python_requires
    assert re.findall(r"3\.\d+", rows["Python"].split(";")[0]) == versions
    assert cfg["options"]["python_requires"].strip() == f">={versions[0]}"
    # Tornado: the install requirement, verbatim
    (tornado_req,) = [r for r in cfg["options"]["install_requires"].split() if r.startswith("tornado")]
    assert tornado_req == "tornado>=6.5,<7"
    assert f"``{tornado_req}``" in rows["Tornado"]
    # dask: the extra's distributed bound, verbatim
    (dist_req,) = [r for r in cfg["options.extras_require"]["dask"].split() if r.startswith("distributed")]
    assert f"``{dist_req}``" in rows["dask"]
    # tox runs every listed version, and no other
    tox = configparser.ConfigParser()
    tox.read(ROOT / "tox.ini")
    envs = [e.strip() for e in tox["tox"]["envlist"].split(",")]
    assert [e for e in envs if e.startswith("py")] == [f"py3{v.split('.')[1]}" for v in versions]
    assert tox["tox"]["skip_missing_interpreters"].strip() == "true"
    # mypy checks the lowest, ruff's rules target it
    assert cfg["mypy"]["python_version"].strip() == versions[0]
    assert f'target-version = "py3{versions[0].split(".")[1]}"' in (ROOT / "ruff.toml").read_text()
    # platforms
    assert "Linux" in rows["Platforms"] and "macOS" in rows["Platforms"] and "Windows" in rows["Platforms"]
    assert "Operating System :: POSIX :: Linux" in "\n".join(classifiers) or "Linux" in cfg["metadata"]["classifiers"]


def test_tornado_bound_is_what_the_import_check_enforces() -> None:
    from tornado_readinto.face import _tornado_compat

    assert _tornado_compat.MIN_TORNADO == (6, 5)
