"""The README and the docs: every published figure matches its result file,
no internal notes, and the compatibility block says what setup.cfg says.

``python -m benchmarks.publish`` renders the tables, the plot and the README's
headline table from ``benchmarks/results/``; ``--check`` (`publish.check`)
re-renders them in memory.  These tests run that check on the repository's
result files (it must pass) and on a changed copy (it must fail).
"""

from __future__ import annotations

import configparser
import json
import re
import shutil
from pathlib import Path

import pytest

from benchmarks import publish

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
    problems = publish.check(publish.Results(publish.RESULTS))
    assert not problems, "run: python -m benchmarks.publish\n" + "\n".join(problems)


@pytest.fixture
def results_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "results"
    shutil.copytree(publish.RESULTS, copy, ignore=shutil.ignore_patterns("*.png"))
    return copy


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
def test_check_fails_when_a_result_file_changes_under_a_published_figure(results_copy: Path) -> None:
    assert publish.check(publish.Results(results_copy)) == []  # the copy as it is: all match
    _edit_dask_transfer(results_copy, 0.5)
    problems = publish.check(publish.Results(results_copy))
    joined = "\n".join(problems)
    assert "README.rst: the headline table" in joined
    assert "docs/_generated/dask.rst" in joined
    assert "docs/_generated/headline-plot.txt" in joined  # the plot's values
    # the prose that quotes the figure, in the README and the docs
    assert any(p.startswith("README.rst: no longer says") and "dask.transfer" in p for p in problems), joined
    assert any(p.startswith("docs/performance.rst") and "dask.transfer" in p for p in problems), joined
    # and nothing that does not depend on dask.json
    assert not any("http.rst" in p or "load.rst" in p for p in problems), joined


@needs_results
def test_check_fails_for_each_kind_of_result_file(results_copy: Path) -> None:
    """A changed figure is found whichever suite's file it is in."""
    http = results_copy / "http.json"
    rows = json.loads(http.read_text())
    for row in rows:
        if row["impl"] == "readinto" and row["case"] == "post":
            row["requests"] *= 2
    http.write_text(json.dumps(rows))
    for name in (publish.BOUNDS, "load-facecore-pinned.json"):
        load = results_copy / name
        data = json.loads(load.read_text())
        for entry in data["results"]:
            if entry["server"] == "readinto":
                for repeat in entry["repeats"]:
                    repeat["loop_cpu_us_per_msg"] *= 0.5
        load.write_text(json.dumps(data))
    problems = "\n".join(publish.check(publish.Results(results_copy)))
    assert "docs/_generated/http.rst" in problems
    assert "docs/_generated/load.rst" in problems
    assert "http.post.asyncio" in problems and "facecore.readinto" in problems


def test_every_quote_names_known_figures() -> None:
    for quote in publish.QUOTES:
        assert quote.names(), quote
        assert set(quote.names()) <= set(publish.FIGURES), quote
        assert (ROOT / quote.path).exists(), quote


@needs_results
def test_every_figure_renders() -> None:
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
    # the dask section leads with the switch (tests/test_dask_switch.py runs its block)
    dask_section = text[text.index("\ndask: ") :]
    assert dask_section.index("dask-tcp-switch") < dask_section.index("readinto://")
    assert "DASK_DISTRIBUTED__WORKER__PRELOAD=tornado_readinto.dask_preload" in text
    assert "tornado_readinto.install()" in text
    images = re.findall(r"^\.\. image:: (\S+)", text, re.M)
    assert images == ["docs/_generated/headline.png"]
    assert (ROOT / images[0]).stat().st_size > 10_000


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
    assert versions == ["3.10", "3.11", "3.12", "3.13"]
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
    # tox runs every listed version, and 3.14
    tox = configparser.ConfigParser()
    tox.read(ROOT / "tox.ini")
    envs = [e.strip() for e in tox["tox"]["envlist"].split(",")]
    assert [e for e in envs if e.startswith("py")] == [f"py3{v.split('.')[1]}" for v in versions] + ["py314"]
    assert tox["tox"]["skip_missing_interpreters"].strip() == "true"
    assert "3.14" in rows["Python"]
    # platforms
    assert "Linux" in rows["Platforms"] and "macOS" in rows["Platforms"] and "Windows" in rows["Platforms"]
    assert "Operating System :: POSIX :: Linux" in "\n".join(classifiers) or "Linux" in cfg["metadata"]["classifiers"]


def test_tornado_bound_is_what_the_import_check_enforces() -> None:
    from tornado_readinto import _tornado_compat

    assert _tornado_compat.MIN_TORNADO == (6, 5)
