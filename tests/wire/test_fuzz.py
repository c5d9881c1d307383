"""The fuzz property of the frame codec: replay the kept regression inputs,
and a short bounded fuzz run (the long one is ``tox -e fuzz``).

The short run is coverage-guided (atheris) where setup.cfg's ``test`` extra
requires atheris, exactly where it publishes a wheel: there a missing atheris
fails the run.  Elsewhere (CPython 3.15) it is the seeded mutation engine of
``fuzz/fuzz_frame_reader.py``, which needs nothing but the package."""

import configparser
import importlib.metadata
import os
import pathlib
import subprocess
import sys

import pytest
from packaging.requirements import Requirement

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "fuzz"))

from fuzz_frame_reader import check_one_input, mutation_run, seed_inputs  # noqa: E402

REGRESSIONS = sorted((ROOT / "fuzz" / "regressions").glob("*"))

#: The atheris release with a wheel for Linux x86_64, per CPython version (the
#: newest, as pip picks it); no other platform has one.
ATHERIS_WHEELS = {"3.11": "3.0.0", "3.12": "3.1.0", "3.13": "3.1.0", "3.14": "3.1.0"}


def _atheris_requirements() -> list[Requirement]:
    """The atheris lines of setup.cfg's ``test`` extra."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    lines = [line.strip() for line in cfg["options.extras_require"]["test"].splitlines() if line.strip()]
    return [req for req in map(Requirement, lines) if req.name == "atheris"]


def _atheris_required(environment: dict[str, str] | None = None) -> Requirement | None:
    """The atheris requirement that the ``test`` extra makes here (or in
    ``environment``'s marker values), None where it leaves atheris out."""
    required = [req for req in _atheris_requirements() if req.marker is None or req.marker.evaluate(environment)]
    assert len(required) <= 1, required
    return required[0] if required else None


def _import_atheris() -> bool:
    """Import atheris where the ``test`` extra requires it (True; its absence
    is a failure: the extra was not installed); False where the extra leaves
    it out (no wheel)."""
    req = _atheris_required()
    if req is None:
        return False
    try:
        import atheris  # noqa: F401
    except ImportError as exc:
        pytest.fail(f"atheris is required here by setup.cfg's test extra ({req}) but does not import ({exc}): "
                    "pip install -e '.[test]'")
    version = importlib.metadata.version("atheris")
    assert req.specifier.contains(version), f"atheris {version} installed, the test extra requires {req}"
    return True


@pytest.mark.parametrize("python", sorted(ATHERIS_WHEELS))
def test_fuzz_atheris_is_required_exactly_where_it_has_a_wheel(python):
    """The ``test`` extra requires atheris on Linux x86_64 for CPython 3.11
    to 3.14, pinned so that pip picks a release with a wheel there (never an
    sdist, which needs a clang with libFuzzer); on every other platform and
    Python it leaves atheris out, so the extra installs everywhere."""
    linux = {"sys_platform": "linux", "platform_machine": "x86_64", "python_version": python}
    req = _atheris_required(linux)
    assert req is not None and req.specifier.contains(ATHERIS_WHEELS[python]), (python, req)
    for elsewhere in ({"platform_machine": "aarch64"}, {"sys_platform": "darwin", "platform_machine": "arm64"},
                      {"sys_platform": "darwin", "platform_machine": "x86_64"}, {"sys_platform": "win32"}):
        assert _atheris_required({**linux, **elsewhere}) is None, (python, elsewhere)
    assert _atheris_required({**linux, "python_version": "3.15"}) is None  # not yet checked


@pytest.mark.parametrize("path", REGRESSIONS, ids=[p.name for p in REGRESSIONS])
def test_fuzz_regression_inputs(path):
    check_one_input(path.read_bytes())


def test_fuzz_property_catches_a_broken_reader(monkeypatch):
    """The property can fail: a reader that raises something other than
    FramingError is reported."""
    import fuzz_frame_reader

    # A subclass, not a patched method: the compiled FrameReader is an
    # extension type, whose methods cannot be replaced.
    class BrokenReader(fuzz_frame_reader.FrameReader):
        def feed(self, data):
            raise IndexError("boom")

    monkeypatch.setattr(fuzz_frame_reader, "FrameReader", BrokenReader)
    with pytest.raises(IndexError):
        check_one_input(b"\x00" + b"\x01" * 16)


def _rss_limit_mb(growth_mb: int = 2048) -> int:
    """libFuzzer's ``-rss_limit_mb`` for a child of this process: ``growth_mb``
    above this process's peak RSS.  libFuzzer checks the peak RSS that
    ``getrusage`` reports, and Linux carries a parent's peak over to its child
    across fork and exec, so a fixed limit would fail the run whenever earlier
    tests in this process peaked above it (test order, not the reader)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024 + growth_mb


def test_fuzz_mutation_run_finds_a_bug_past_the_seeds(monkeypatch):
    """The fallback engine can fail: a reader that breaks only on a message
    with a 63-byte frame (no seed has one; an integer written over a length
    field makes one) is caught, the input named."""
    import fuzz_frame_reader

    from tornado_readinto.wire.framing import NEED_DATA

    class BrokenReader(fuzz_frame_reader.FrameReader):
        def next_message(self):
            message = super().next_message()
            if message is not NEED_DATA and any(len(frame) == 63 for frame in message):
                raise IndexError("a 63-byte frame")
            return message

    assert mutation_run(0) > 0  # the seeds alone pass with the broken reader
    monkeypatch.setattr(fuzz_frame_reader, "FrameReader", BrokenReader)
    assert mutation_run(0) > 0
    with pytest.raises(IndexError) as caught:
        mutation_run(30000)
    assert caught.value.__notes__[0].startswith("fuzz input (mutation run "), caught.value.__notes__


def test_fuzz_short_run(tmp_path):
    """30,000 inputs: coverage-guided by atheris where the test extra installs
    it, else mutated from well-formed messages and the regressions (seed 0)."""
    if not _import_atheris():
        regressions = [path.read_bytes() for path in REGRESSIONS]
        assert mutation_run(30000, regressions=regressions) == 30000 + len(seed_inputs(regressions))
        return
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "fuzz" / "fuzz_frame_reader.py"),
            "-runs=30000",
            "-max_len=512",
            f"-rss_limit_mb={_rss_limit_mb()}",
            f"-artifact_prefix={tmp_path}/",
            str(corpus),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "Done 30000 runs" in result.stderr
