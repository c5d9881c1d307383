"""The two builds of the core: compiled (the default where the install
could compile it) and pure Python (``TORNADO_READINTO_NO_EXTENSIONS=1``).

The whole suite runs with whichever build imports by default (compiled in
CI); `test_pure_build_passes_the_stream_core_and_tornado_suites` runs the
stream, framing, core, cost, Tornado-upstream and HTTP suites a second time,
in a subprocess, with the pure build."""

from __future__ import annotations

import importlib
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

import tornado_readinto

from ._builds import source_path

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: The suites that run under both builds (the second, pure pass runs them
#: in a subprocess): everything that drives the core.
BOTH_BUILDS = (
    "tests/core/test_readcore.py",
    "tests/core/test_streamcore_pxd.py",
    "tests/face/test_iostream.py",
    "tests/face/test_writes.py",
    "tests/core/test_writebuffer.py",
    "tests/face/test_costs.py",
    "tests/core/test_rcvlowat.py",
    "tests/core/test_emptyproof.py",
    "tests/core/test_sockcalls.py",
    "tests/core/test_gilheld.py",
    "tests/core/test_busypoll.py",
    "tests/face/test_error_policy.py",
    "tests/wire/test_framing.py",
    "tests/wire/test_framing_prefix.py",
    "tests/wire/test_fuzz.py",
    "tests/channel/test_framed.py",
    "tests/face/test_tornado_upstream.py",
    "tests/face/test_tornado_coupling.py",
    "tests/face/test_http.py",
    "tests/face/test_http_body.py",
    "tests/face/test_http_serving.py",
    "tests/face/test_tcp.py",
    "tests/face/test_eager.py",
    "tests/face/test_read_path.py",
    "tests/face/test_direct_read.py",
    "tests/core/test_policy.py",
    "tests/face/test_handoffs.py",
    "tests/wire/test_allocators.py",
    "tests_bench/test_bench_opcodes.py",
)

_PURE_ENV = {**os.environ, "TORNADO_READINTO_NO_EXTENSIONS": "1"}

_REPORT_BUILD = textwrap.dedent(
    """
    import tornado_readinto
    from tornado_readinto.core import _gilheld
    from tornado_readinto.core import _readcore
    from tornado_readinto.core import _streamcore
    print(tornado_readinto.COMPILED, _readcore.__file__, _streamcore.__file__, _gilheld.NATIVE)
    """
)


def _report_build(env: dict[str, str]) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", _REPORT_BUILD], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def _compiled_modules():
    return [importlib.import_module(f"tornado_readinto.{name}") for name in tornado_readinto._COMPILED_MODULES]


def _native_modules():
    """The compiled-only modules (a ``.pyx``, no ``.py``): only the compiled
    build has them."""
    return [importlib.import_module(f"tornado_readinto.{name}") for name in tornado_readinto._NATIVE_MODULES]


def test_compiled_is_a_bool_that_names_the_build():
    assert type(tornado_readinto.COMPILED) is bool
    assert set(tornado_readinto._COMPILED_MODULES) >= {"core._readcore", "core._streamcore"}
    assert set(tornado_readinto._NATIVE_MODULES) == {"core._gilheld_native"}
    suffixes = {pathlib.Path(module.__file__).suffix for module in _compiled_modules()}  # type: ignore[arg-type]
    assert suffixes == ({".so"} if tornado_readinto.COMPILED else {".py"}), suffixes
    if tornado_readinto.COMPILED:
        assert {pathlib.Path(module.__file__).suffix for module in _native_modules()} == {".so"}  # type: ignore[arg-type]
    if tornado_readinto.NO_EXTENSIONS:
        assert not tornado_readinto.COMPILED
        with pytest.raises(ModuleNotFoundError):
            _native_modules()


@pytest.mark.skipif(os.environ.get("CI") != "true", reason="CI (CI=true) builds the compiled core")
def test_compiled_core_runs_in_ci():
    """CI installs with a C compiler: the default build is the compiled one."""
    assert not tornado_readinto.NO_EXTENSIONS, "CI runs the whole suite compiled: unset TORNADO_READINTO_NO_EXTENSIONS"
    assert tornado_readinto.COMPILED, "the compiled core was not built (see pip install -v -e . for why)"


def test_env_var_selects_the_pure_build():
    compiled, readcore, streamcore, native = _report_build(_PURE_ENV)
    assert compiled == "False" and native == "False"
    assert readcore.endswith("_readcore.py") and streamcore.endswith("_streamcore.py")


def test_default_build_is_compiled_when_built():
    """Without the variable the extension modules, when built, win.  (Every
    module of ``_COMPILED_MODULES`` loads from the same build: the stale
    check below and ``setup.py``'s all-or-nothing build see to it.)"""
    env = {k: v for k, v in os.environ.items() if k != "TORNADO_READINTO_NO_EXTENSIONS"}
    built = any(pathlib.Path(tornado_readinto.__file__).parent.glob("core/_streamcore.*.so"))  # type: ignore[arg-type]
    compiled, _, streamcore, native = _report_build(env)
    assert compiled == str(built), streamcore
    assert native == str(built)  # _gilheld's native calls come with the compiled build


def test_compiled_core_is_not_stale():
    """The extension modules were built from the ``.py``, ``.pxd`` and
    ``.pyx`` as they are now (an in-place build does not follow edits)."""
    if not tornado_readinto.COMPILED:
        pytest.skip("the pure build runs")
    for module in _compiled_modules() + _native_modules():
        built = pathlib.Path(module.__file__).stat().st_mtime  # type: ignore[arg-type]
        sources = [source_path(module).with_suffix(suffix) for suffix in (".py", ".pxd", ".pyx")]
        assert any(source.exists() for source in sources), module
        for source in sources:
            if not source.exists():
                continue  # compiled as it is, with no .pxd
            assert source.stat().st_mtime <= built, (
                f"{source.name} changed after {module.__name__} was compiled: rebuild it with "
                "`python setup.py build_ext --inplace` (or `pip install -e .`)"
            )


@pytest.mark.timeout(900)
def test_pure_build_passes_the_stream_core_and_tornado_suites():
    """The second pass: the suites that drive the core, with the pure build
    (the first pass, this run, used the compiled one)."""
    if not tornado_readinto.COMPILED:
        pytest.skip("this run is the pure build already")
    command = [sys.executable, "-m", "pytest", "-q", "-x", *BOTH_BUILDS]
    result = subprocess.run(command, env=_PURE_ENV, cwd=ROOT, capture_output=True, text=True, timeout=900)
    tail = "\n".join((result.stdout + result.stderr).splitlines()[-40:])
    assert result.returncode == 0, f"the pure build failed:\n{tail}"
    assert " passed" in tail, tail


#: What setup.py says, once, when the compiled core is not built.
_FALLBACK = "the package will run pure Python"


@pytest.mark.timeout(300)
def test_a_failed_compile_says_so_once_and_builds_nothing(tmp_path):
    """``CC=false`` (no working compiler): ``setup.py build_ext`` succeeds,
    prints one line, and leaves no extension module; the generated C
    declares that the module needs the GIL (``Py_mod_gil``).  The whole
    install from an sdist with ``CC=false`` is ``.ci/check_package.py``'s
    (``tox -e package``)."""
    pytest.importorskip("Cython")
    for name in ("setup.py", "setup.cfg", "README.rst", "pyproject.toml"):
        (tmp_path / name).write_bytes((ROOT / name).read_bytes())
    ignore = shutil.ignore_patterns("*.so", "*.c", "*.html", "__pycache__")
    shutil.copytree(ROOT / "tornado_readinto", tmp_path / "tornado_readinto", ignore=ignore)
    env = {**_PURE_ENV, "CC": "false"}
    del env["TORNADO_READINTO_NO_EXTENSIONS"]
    result = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    said = [line for line in output.splitlines() if _FALLBACK in line]
    assert len(said) == 1 and said[0].startswith("tornado_readinto: the compiled core was not built ("), output
    assert not list((tmp_path / "tornado_readinto").rglob("*.so")), output
    for module in ("core._readcore", "core._streamcore", *tornado_readinto._NATIVE_MODULES):
        c = (tmp_path / "tornado_readinto" / f"{module.replace('.', '/')}.c").read_text()
        assert "{Py_mod_gil, __Pyx_FREETHREADING_COMPATIBLE}" in c
        # with no CYTHON_FREETHREADING_COMPATIBLE macro (setup.py sets none),
        # the directive's default: the GIL is used
        block = c.split("#ifdef CYTHON_FREETHREADING_COMPATIBLE\n", 1)[1].split("\n")[:8]
        assert block[5:8] == ["#else", "#define __Pyx_FREETHREADING_COMPATIBLE Py_MOD_GIL_USED", "#endif"], block
