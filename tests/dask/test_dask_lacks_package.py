"""A dask process that lacks tornado_readinto, facing a ``readinto://``
cluster: it fails at once with distributed's own error, which names the
scheme, and never hangs.

The process without the package is simulated: a runner hides the
``distributed.comm.backends`` entry points of this package from
``importlib.metadata`` before distributed is imported, and makes
``import tornado_readinto`` fail, then runs the module it is given.  The
documentation (docs/guides/dask.rst, "When a process lacks the package")
quotes the error these tests check.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("distributed")

#: What every such process says (distributed.comm.registry.get_backend).
UNKNOWN_SCHEME = "unknown address scheme 'readinto'"

#: No hang: each process must be done within this many seconds.
BOUND_S = 60

RUNNER = textwrap.dedent(
    """\
    # As if tornado_readinto were not installed: no entry points, no module.
    import importlib.metadata as md
    import runpy
    import sys

    _entry_points = md.entry_points


    def entry_points(**selection):
        found = _entry_points(**selection)
        return type(found)(e for e in found if not e.value.startswith("tornado_readinto"))


    md.entry_points = entry_points
    sys.modules["tornado_readinto"] = None
    module, sys.argv = sys.argv[1], sys.argv[1:]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    """
)

CLIENT = textwrap.dedent(
    """\
    import sys
    import time

    from distributed import Client

    start = time.monotonic()
    try:
        Client(sys.argv[1], timeout=10)
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}")
        print(f"after {time.monotonic() - start:.1f} s")
        raise SystemExit(1)
    print("connected")
    """
)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # this checkout's tornado_readinto must not be found first
    env.pop("DASK_DISTRIBUTED__COMM__DEFAULT_SCHEME", None)
    return env


@pytest.fixture(scope="module")
def readinto_scheduler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A ``dask scheduler --protocol readinto`` on 127.0.0.1 (with the
    package); its address."""
    cwd = tmp_path_factory.mktemp("scheduler")
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--protocol", "readinto", "--host", "127.0.0.1",
         "--port", "0", "--dashboard-address", "127.0.0.1:0", "--scheduler-file", "scheduler.json"],
        cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        file = cwd / "scheduler.json"
        deadline = time.monotonic() + BOUND_S
        while not (file.exists() and file.read_text().strip()):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("dask scheduler did not start")
            time.sleep(0.1)
        yield json.loads(file.read_text())["address"]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def runner(tmp_path: Path) -> Path:
    (tmp_path / "without_tornado_readinto.py").write_text(RUNNER, encoding="utf-8")
    (tmp_path / "connect_client.py").write_text(CLIENT, encoding="utf-8")
    return tmp_path


def _run_without_package(runner: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(runner / "without_tornado_readinto.py"), *args],
        cwd=runner, env=_env(), capture_output=True, text=True, timeout=BOUND_S,
    )
    return result, time.monotonic() - start


def test_runner_hides_the_package(runner: Path) -> None:
    """The simulation holds: no backend, no module (and distributed works)."""
    (runner / "probe.py").write_text(
        "from distributed.comm.registry import get_backend\n"
        "assert get_backend('tcp')\n"
        "try:\n    import tornado_readinto\nexcept ImportError:\n    pass\n"
        "else:\n    raise SystemExit('tornado_readinto is importable')\n"
        "get_backend('readinto')\n",
        encoding="utf-8",
    )
    result, _ = _run_without_package(runner, "probe")
    assert result.returncode == 1, result.stderr
    assert f"ValueError: {UNKNOWN_SCHEME}" in result.stderr


@pytest.mark.timeout(BOUND_S * 2)
def test_worker_without_package_fails_at_once(readinto_scheduler: str, runner: Path) -> None:
    """``dask worker readinto://...`` where the package is missing exits with
    distributed's error naming the scheme; it does not wait or retry."""
    result, seconds = _run_without_package(
        runner, "distributed.cli.dask_worker", readinto_scheduler, "--nworkers", "1", "--no-dashboard",
    )
    assert result.returncode != 0
    assert f"ValueError: {UNKNOWN_SCHEME}" in result.stderr, result.stderr[-2000:]
    assert seconds < BOUND_S


@pytest.mark.timeout(BOUND_S * 2)
def test_client_without_package_fails_at_once(readinto_scheduler: str, runner: Path) -> None:
    result, _ = _run_without_package(runner, "connect_client", readinto_scheduler)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"ValueError: {UNKNOWN_SCHEME}" in result.stdout
    assert "known schemes: [" in result.stdout


@pytest.mark.timeout(BOUND_S * 2)
def test_stock_tcp_client_to_a_readinto_scheduler_connects(readinto_scheduler: str, runner: Path) -> None:
    """``tcp://`` to a port that speaks ``readinto://``, from a process
    without the package: the bytes are the same (tcp.py's), so stock
    distributed's own comm does the handshake and connects."""
    tcp_address = "tcp://" + readinto_scheduler.split("://", 1)[1]
    result, seconds = _run_without_package(runner, "connect_client", tcp_address)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "connected" in result.stdout
    assert seconds < BOUND_S
