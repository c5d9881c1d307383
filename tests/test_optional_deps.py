"""msgpack is optional (the ``comm`` extra): only `tornado_readinto.channel.comm`
needs it.  Each check runs in a fresh interpreter, with msgpack blocked
through ``sys.modules`` where the check needs it gone."""

import importlib.util
import pathlib
import subprocess
import sys
import textwrap

import pytest

BLOCK_MSGPACK = "import sys\nsys.modules['msgpack'] = None  # any import of it raises ImportError\n"


def _python(code: str, *, block_msgpack: bool = False) -> subprocess.CompletedProcess:
    """Run ``code`` (dedented) in a fresh interpreter; capture its output."""
    code = textwrap.dedent(code)
    if block_msgpack:
        code = BLOCK_MSGPACK + code
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def _dask_exchange() -> str:
    """The ``readinto://`` exchange that ``tox -e package`` runs in a fresh
    venv (`DASK_EXCHANGE` of .ci/check_package.py), as code to run."""
    path = pathlib.Path(__file__).resolve().parent.parent / ".ci" / "check_package.py"
    spec = importlib.util.spec_from_file_location("_check_package", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return textwrap.indent(module.DASK_EXCHANGE, " " * 8)


def test_comm_without_msgpack_names_the_extra():
    result = _python(
        """
        for importer in ("import tornado_readinto.channel.comm", "from tornado_readinto import Comm"):
            try:
                exec(importer)
            except ImportError as exc:
                print(exc)
            else:
                raise SystemExit(f"{importer} worked without msgpack")
        """,
        block_msgpack=True,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 2
    for line in lines:
        assert line.startswith("tornado_readinto.channel.comm needs msgpack")
        assert "pip install msgpack (the package's 'comm' extra)" in line


def test_everything_but_the_comm_layer_imports_without_msgpack():
    result = _python(
        """
        import tornado_readinto
        from tornado_readinto import (
            FramedStream, ReadIntoIOStream, ReadIntoTCPServer, ReadIntoTCPClient, ReadIntoHTTPServer, install,
        )
        import tornado_readinto.channel._channel, tornado_readinto.face._net, tornado_readinto.wire.addressing
        import tornado_readinto.face.tcpserver, tornado_readinto.diagnostics.testing
        print(tornado_readinto.__version__)
        """,
        block_msgpack=True,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()


def test_dask_backend_never_imports_msgpack_itself():
    """distributed needs msgpack, so it cannot be blocked here: instead, after
    a real ``readinto://`` exchange, no module of ours has bound msgpack and
    the comm layer (the one user of msgpack) was never imported."""
    pytest.importorskip("distributed")
    result = _python(
        """
        import sys

        import tornado_readinto.dask.backend  # noqa: F401 - what the entry point loads
        """
        + _dask_exchange()
        + """
        ours = {name: m for name, m in sys.modules.items() if name.startswith("tornado_readinto") and m is not None}
        assert "tornado_readinto.dask.backend" in ours
        msgpack = sys.modules["msgpack"]
        binders = sorted(name for name, m in ours.items() if any(v is msgpack for v in vars(m).values()))
        print("binders:", binders)
        print("comm loaded:", "tornado_readinto.channel.comm" in ours or "tornado_readinto.wire.message" in ours)
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["binders: []", "comm loaded: False"]
