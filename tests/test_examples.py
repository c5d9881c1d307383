"""Every Python example in README.rst and docs/**/*.rst runs, as a program.

The examples are read from the files themselves: each ``.. code-block:: python``
block is one complete program, written to a file and run in a fresh
interpreter (so that ``install()``, dask config and event loop policies cannot
leak between examples or into other tests).  It must exit with status 0;
examples check their own results with ``assert``.  Console, shell, YAML and
text blocks are shown, not run.

What an example may rely on, in its working directory (a fresh temporary
directory per example):

* ``server.pem``, ``server.key`` and ``client.pem``: a certificate for
  ``localhost``/``127.0.0.1``/``::1``, its key, and the CA that signed it, as
  ``python -m trustme`` writes them;
* with the reST comment ``.. example-setup: dask-scheduler-file`` right
  before the block: a ``dask scheduler --protocol readinto`` with one
  ``dask worker``, both on 127.0.0.1, and their ``scheduler.json``;
* with ``.. example-setup: traitlets-config``: the block is a traitlets
  configuration file (dask-gateway's), and runs with the ``c`` that such a
  file is given (an empty ``traitlets.config.Config``).

Python examples in a plain ``::`` literal block would escape this test, so
another test refuses them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Languages of ``code-block`` directives that are run.
RUN_LANGUAGES = frozenset({"python", "python3", "py"})
#: Languages that are only shown.
SHOWN_LANGUAGES = frozenset({"console", "shell", "bash", "sh", "text", "none", "yaml", "ini"})

#: Seconds one example may take (a dask LocalCluster starts in about 2 s).
EXAMPLE_TIMEOUT_S = 120

_DIRECTIVE = re.compile(r"^(?P<indent>[ \t]*)\.\. code-block::[ \t]*(?P<lang>\S*)[ \t]*$")
_SETUP = re.compile(r"^[ \t]*\.\. example-setup:[ \t]*(?P<name>\S+)[ \t]*$")
_OPTION = re.compile(r"^[ \t]*:[\w-]+:")
# A line that can only start Python: a literal ``::`` block opening with one
# of these is an example that should have been a ``code-block:: python``.
_PYTHON_START = re.compile(r"^(import \w|from [\w.]+ import |async def |def \w|class \w|await |with \w)")


@dataclass(frozen=True)
class Example:
    """One code block: where it is, its language, its code and its setup."""

    path: str
    lineno: int  # 1-based line of the directive
    language: str
    code: str
    setup: str | None = None

    @property
    def id(self) -> str:
        return f"{self.path}:{self.lineno}"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _block_after(lines: list[str], start: int, directive_indent: int) -> tuple[str, int]:
    """Return the dedented body of the block whose directive (or ``::``
    paragraph) is ``lines[start - 1]``, and the index after its last line."""
    i = start
    # directive options (":linenos:", ":caption: …") then blank lines
    while i < len(lines) and lines[i].strip() and _OPTION.match(lines[i]) and _indent(lines[i]) > directive_indent:
        i += 1
    body: list[str] = []
    while i < len(lines):
        line = lines[i]
        if line.strip() and _indent(line) <= directive_indent:
            break
        body.append(line)
        i += 1
    return textwrap.dedent("\n".join(body)).strip("\n") + "\n", i


def extract_examples(text: str, path: str = "<string>") -> list[Example]:
    """Every ``code-block`` of a reST text, in order, with its language."""
    lines = text.splitlines()
    examples: list[Example] = []
    setup: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        m_setup = _SETUP.match(line)
        if m_setup:
            setup = m_setup.group("name")
            i += 1
            continue
        m = _DIRECTIVE.match(line)
        if m:
            code, end = _block_after(lines, i + 1, len(m.group("indent").expandtabs()))
            examples.append(Example(path, i + 1, m.group("lang").lower(), code, setup))
            setup = None
            i = end
            continue
        if line.strip():
            setup = None
        i += 1
    return examples


def literal_blocks(text: str) -> list[tuple[int, str]]:
    """Every plain literal block (a paragraph ending in ``::``): (line, body)."""
    lines = text.splitlines()
    blocks = []
    for i, line in enumerate(lines):
        stripped = line.rstrip()
        if stripped.endswith("::") and not stripped.lstrip().startswith(".."):
            body, _ = _block_after(lines, i + 1, _indent(line))
            blocks.append((i + 1, body))
    return blocks


def example_files() -> list[Path]:
    return [ROOT / "README.rst"] + sorted((ROOT / "docs").rglob("*.rst"))


def all_examples() -> list[Example]:
    examples = []
    for file in example_files():
        rel = file.relative_to(ROOT).as_posix()
        examples.extend(extract_examples(file.read_text(encoding="utf-8"), rel))
    return examples


def run_example(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``code`` as ``example.py`` in ``cwd`` with this interpreter."""
    script = cwd / "example.py"
    script.write_text(code, encoding="utf-8")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("PYTHONSTARTUP", None)
    return subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error::RuntimeWarning", str(script)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=EXAMPLE_TIMEOUT_S,
    )


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """server.pem, server.key and client.pem (the CA), as ``python -m trustme``
    writes them."""
    trustme = pytest.importorskip("trustme")
    directory = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1", "::1")
    cert.cert_chain_pems[0].write_to_path(str(directory / "server.pem"))
    for pem in cert.cert_chain_pems[1:]:
        pem.write_to_path(str(directory / "server.pem"), append=True)
    cert.private_key_pem.write_to_path(str(directory / "server.key"))
    ca.cert_pem.write_to_path(str(directory / "client.pem"))
    return directory


@pytest.fixture
def example_dir(tmp_path: Path, tls_files: Path) -> Path:
    for name in ("server.pem", "server.key", "client.pem"):
        (tmp_path / name).write_bytes((tls_files / name).read_bytes())
    return tmp_path


def _wait_for_worker(scheduler_file: Path, procs: list[subprocess.Popen[bytes]]) -> None:
    """Wait until the scheduler wrote its file and one worker registered."""
    from distributed import Client

    deadline = time.monotonic() + 60
    while not scheduler_file.exists() or not scheduler_file.read_text().strip():
        if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
            raise RuntimeError("dask scheduler did not start")
        time.sleep(0.1)
    address = json.loads(scheduler_file.read_text())["address"]
    with Client(address, timeout=30) as client:
        client.wait_for_workers(1, timeout=60)


def _dask_scheduler_file(cwd: Path) -> Generator[None, None, None]:
    """A ``dask scheduler --protocol readinto`` and one ``dask worker`` on
    127.0.0.1, writing ``scheduler.json`` in ``cwd``."""
    pytest.importorskip("distributed")
    common = ["--scheduler-file", "scheduler.json"]
    scheduler = [sys.executable, "-m", "distributed.cli.dask_scheduler", "--protocol", "readinto",
                 "--host", "127.0.0.1", "--port", "0", "--dashboard-address", "127.0.0.1:0", *common]
    worker = [sys.executable, "-m", "distributed.cli.dask_worker", "--host", "127.0.0.1",
              "--nworkers", "1", "--nthreads", "1", "--no-dashboard", *common]
    procs = [subprocess.Popen(scheduler, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        procs.append(subprocess.Popen(worker, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        _wait_for_worker(cwd / "scheduler.json", procs)
        yield
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


SETUPS = {"dask-scheduler-file": _dask_scheduler_file}

#: Setups that are code run before the block's, in the same program.
PREAMBLES = {"traitlets-config": "from traitlets.config import Config\n\nc = Config()\n"}

EXAMPLES = [e for e in all_examples() if e.language in RUN_LANGUAGES]


# ---------------------------------------------------------------- the examples


@pytest.mark.timeout(EXAMPLE_TIMEOUT_S * 2)
@pytest.mark.parametrize("example", EXAMPLES, ids=[e.id for e in EXAMPLES])
def test_examples_run(example: Example, example_dir: Path) -> None:
    if "distributed" in example.code:
        pytest.importorskip("distributed")
    if "numpy" in example.code:
        pytest.importorskip("numpy")
    setup = SETUPS[example.setup](example_dir) if example.setup in SETUPS else None
    try:
        if setup is not None:
            next(setup)
        result = run_example(PREAMBLES.get(example.setup or "", "") + example.code, example_dir)
    finally:
        if setup is not None:
            setup.close()
    assert result.returncode == 0, (
        f"example at {example.id} failed (exit {result.returncode}):\n"
        f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    )


def test_examples_found() -> None:
    """The README has its two examples (the dask switch, Tornado's
    install()), and every docs page that shows Python code has it in a
    runnable block."""
    readme = [e for e in EXAMPLES if e.path == "README.rst"]
    assert len(readme) >= 2
    assert len(EXAMPLES) >= 20
    assert all(e.code.strip() for e in EXAMPLES)


def test_examples_code_block_languages_known() -> None:
    """A block in an unknown language (a typo such as ``pyhton``) would be
    neither run nor refused."""
    languages = {e.language for e in all_examples()}
    assert languages <= RUN_LANGUAGES | SHOWN_LANGUAGES, languages - RUN_LANGUAGES - SHOWN_LANGUAGES


def test_examples_setups_known() -> None:
    assert {e.setup for e in EXAMPLES if e.setup} <= set(SETUPS) | set(PREAMBLES)


@pytest.mark.parametrize("path", example_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_examples_no_python_in_literal_blocks(path: Path) -> None:
    """Python in a ``::`` block would not run: it must be a code-block."""
    for lineno, body in literal_blocks(path.read_text(encoding="utf-8")):
        first = body.lstrip().splitlines()[0] if body.strip() else ""
        assert not _PYTHON_START.match(first), f"{path.name}:{lineno}: Python in a '::' block: {first!r}"


# ---------------------------------------------------------------- the extractor


SAMPLE = """\
Title
=====

Shown, not run::

    import nothing_of_this_runs

.. code-block:: console

    $ python -m pytest

.. code-block:: python
   :caption: with an option

   x = 1
   if x:
       print("indented")

   print("after a blank line")

Text after the block.

.. example-setup: dask-scheduler-file

.. code-block:: python

    raise SystemExit(3)

* a list item

  .. code-block:: python

     assert 1 + 1 == 2
"""


def test_extract_examples_finds_blocks_languages_and_bodies() -> None:
    examples = extract_examples(SAMPLE, "sample.rst")
    assert [(e.lineno, e.language, e.setup) for e in examples] == [
        (8, "console", None),
        (12, "python", None),
        (25, "python", "dask-scheduler-file"),
        (31, "python", None),
    ]
    assert examples[0].code == "$ python -m pytest\n"
    assert examples[1].code == 'x = 1\nif x:\n    print("indented")\n\nprint("after a blank line")\n'
    assert examples[3].code == "assert 1 + 1 == 2\n"


def test_literal_blocks_found() -> None:
    assert literal_blocks(SAMPLE) == [(4, "import nothing_of_this_runs\n")]
    assert _PYTHON_START.match("import nothing_of_this_runs")


def test_run_example_fails_for_a_broken_example(tmp_path: Path) -> None:
    """What makes a broken example fail its test: a non-zero exit status."""
    ok, failing = [e for e in extract_examples(SAMPLE) if e.language == "python"][0:2]
    assert run_example(ok.code, tmp_path).returncode == 0
    result = run_example(failing.code, tmp_path)
    assert result.returncode == 3
    broken = run_example("from tornado_readinto import NoSuchName\n", tmp_path)
    assert broken.returncode == 1 and "ImportError" in broken.stderr


def test_run_example_fails_on_a_failed_assertion(tmp_path: Path) -> None:
    result = run_example("assert 1 + 1 == 3, 'wrong sum'\n", tmp_path)
    assert result.returncode == 1 and "wrong sum" in result.stderr
