"""The fuzz property of the frame codec: replay the kept regression inputs,
and a short bounded coverage-guided run (the long one is ``tox -e fuzz``)."""

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "fuzz"))

from fuzz_frame_reader import check_one_input  # noqa: E402

REGRESSIONS = sorted((ROOT / "fuzz" / "regressions").glob("*"))


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


def test_fuzz_short_coverage_guided_run(tmp_path):
    pytest.importorskip("atheris", reason="atheris has no wheel for this platform")
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
