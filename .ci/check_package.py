"""Build the sdist and the wheel, check them, and prove the wheel works alone.

Run by ``tox -e package`` (or ``python .ci/check_package.py`` with ``build``
and ``twine`` installed).  In a temporary directory, outside the checkout:

1. ``python -m build``: the sdist, then the wheel built from the sdist (so a
   file missing from the sdist breaks the wheel build);
2. ``twine check --strict`` on both;
3. the sdist holds the package, its ``.pxd`` and ``.pyx`` files, ``setup.py``,
   ``py.typed``, README, CHANGELOG, the tests and the benchmarks, and no
   generated C, extension module or benchmark result; the wheel is a platform wheel that holds the package,
   ``py.typed`` and the compiled core only, its version is
   ``tornado_readinto.__version__`` and its only unconditional requirement
   is ``tornado>=6.5,<7`` (msgpack comes with the ``comm`` extra);
4. a fresh venv gets the wheel alone: ``import tornado_readinto`` works and
   runs the compiled core (``COMPILED``, with the native GIL-keeping socket
   calls: ``_gilheld.NATIVE``), and ``tornado_readinto.channel.comm`` raises the
   ImportError that names the extra;
5. the same venv gets ``distributed``: it finds the ``readinto`` and
   ``readinto-tls`` backends through the entry point, and a ``readinto://``
   message goes through;
6. another fresh venv installs the sdist with no working C compiler
   (``CC=false``): the install succeeds, says once that the package will run
   pure Python, and the package runs pure (``COMPILED`` and
   ``_gilheld.NATIVE`` are False) and exchanges a framed message.

Needs a package index for Tornado and distributed (pip's usual settings).
Exits non-zero with the failing step on stderr.
"""

from __future__ import annotations

import argparse
import ast
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import venv
import zipfile
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Checked in the fresh venv, run from a directory outside the checkout.
WHEEL_ALONE = """
import sys, tornado_readinto
assert tornado_readinto.__file__.startswith(sys.prefix), tornado_readinto.__file__
assert tornado_readinto.__version__ == {version!r}, tornado_readinto.__version__
assert tornado_readinto.COMPILED, "the wheel's compiled core did not import"
from tornado_readinto.core import _gilheld
assert _gilheld.NATIVE, "the wheel's GIL-keeping socket calls are not the native ones"
from tornado_readinto import FramedStream, ReadIntoIOStream  # no msgpack needed
try:
    import msgpack
except ImportError:
    pass
else:
    raise SystemExit("msgpack came with the wheel alone")
try:
    import tornado_readinto.channel.comm
except ImportError as exc:
    assert "pip install 'tornado_readinto[comm]'" in str(exc), exc
else:
    raise SystemExit("tornado_readinto.channel.comm imported without msgpack")
print("wheel alone: ok")
"""

#: One message through a ``readinto://`` listener and connector, with
#: distributed's own ``connect``/``listen`` (tests/test_optional_deps.py runs
#: it too).
DASK_EXCHANGE = """
import asyncio
from distributed.comm import connect, listen

async def main():
    async def echo(comm):
        await comm.write(await comm.read())
        await comm.close()
    async with listen("readinto://127.0.0.1:0", echo) as listener:
        comm = await connect(listener.contact_address, timeout=10)
        await comm.write({"ping": b"x" * 100_000})
        assert await comm.read() == {"ping": b"x" * 100_000}
        await comm.close()

asyncio.run(main())
"""

WITH_DISTRIBUTED = (
    """
import sys
from distributed.comm.registry import get_backend
import tornado_readinto
assert tornado_readinto.__file__.startswith(sys.prefix), tornado_readinto.__file__
backends = {name: type(get_backend(name)).__name__ for name in ("readinto", "readinto-tls")}
assert backends == {"readinto": "ReadIntoTCPBackend", "readinto-tls": "ReadIntoTLSBackend"}, backends
"""
    + DASK_EXCHANGE
    + """
print("entry point and readinto:// exchange: ok", backends)
"""
)


#: Checked in the venv that installed the sdist with ``CC=false``.
SDIST_PURE = """
import asyncio, socket, sys
import tornado_readinto
from tornado_readinto import FramedStream, ReadIntoIOStream
assert tornado_readinto.__file__.startswith(sys.prefix), tornado_readinto.__file__
assert tornado_readinto.COMPILED is False, "an extension module was installed with CC=false"
from tornado_readinto.core import _gilheld
assert _gilheld.NATIVE is False, "native GIL-keeping socket calls with CC=false"

async def main():
    a, b = socket.socketpair()
    left, right = FramedStream(ReadIntoIOStream(a)), FramedStream(ReadIntoIOStream(b))
    await left.write_frames([b"ping", b"x" * 100_000])
    frames = await right.read_frames()
    assert [bytes(f) for f in frames] == [b"ping", b"x" * 100_000]

asyncio.run(main())
print("sdist with no compiler: pure, ok")
"""

#: The line setup.py prints when the compiled core is not built.
FALLBACK_LINE = "the package will run pure Python"


def step(title: str) -> None:
    print(f"--- {title}", flush=True)


def run(cmd: list[str], cwd: pathlib.Path, capture: bool = False, **env_extra: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH")}
    env.pop("TORNADO_READINTO_NO_EXTENSIONS", None)
    env.update(env_extra)
    result = subprocess.run(cmd, cwd=cwd, env=env, check=not capture, capture_output=capture, text=True)
    if capture and result.returncode:
        raise SystemExit(f"{cmd} failed:\n{result.stdout}{result.stderr}")
    return (result.stdout or "") + (result.stderr or "") if capture else ""


def source_value(name: str) -> Any:
    """A constant assigned in tornado_readinto/__init__.py, read without
    importing it."""
    tree = ast.parse((ROOT / "tornado_readinto" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if any(getattr(t, "id", None) == name for t in targets):
            return ast.literal_eval(value)
    raise SystemExit(f"no {name} in tornado_readinto/__init__.py")


def source_version() -> str:
    """``__version__`` from tornado_readinto/__init__.py."""
    return str(source_value("__version__"))


def check_contents(sdist: pathlib.Path, wheel: pathlib.Path, version: str) -> None:
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    wanted = [
        "README.rst",
        "CHANGELOG.rst",
        "setup.cfg",
        "pyproject.toml",
        "MANIFEST.in",
        "tox.ini",
        "tornado_readinto/__init__.py",
        "tornado_readinto/py.typed",
        "tests/conftest.py",
        "tests/channel/test_comm.py",
        "tests_bench/test_bench_harness.py",
        "benchmarks/__init__.py",
    ]
    wanted += ["setup.py", "tornado_readinto/core/_readcore.pxd", "tornado_readinto/core/_streamcore.pxd"]
    wanted += ["tornado_readinto/face/_facecore.pxd", "tornado_readinto/core/_policy.pxd"]
    wanted += ["tornado_readinto/_bytecopy.pxd", "tornado_readinto/_cyshim.py"]
    wanted += ["tornado_readinto/core/_gilheld_native.pyx"]
    missing = [name for name in wanted if name not in names]
    junk = sorted(
        name for name in names if "__pycache__" in name or name.endswith((".pyc", ".so", ".pyd"))
        or (name.startswith("tornado_readinto/") and name.endswith(".c"))
        or name.startswith("benchmarks/results/")  # measured here, kept in the repository
    )
    if missing or junk:
        raise SystemExit(f"sdist: missing {missing}, junk {junk}")
    with zipfile.ZipFile(wheel) as whl:
        files = whl.namelist()
        metadata = whl.read(f"tornado_readinto-{version}.dist-info/METADATA").decode()
        entry_points = whl.read(f"tornado_readinto-{version}.dist-info/entry_points.txt").decode()
    outside = sorted({f.split("/")[0] for f in files} - {"tornado_readinto", f"tornado_readinto-{version}.dist-info"})
    if outside or "tornado_readinto/py.typed" not in files:
        raise SystemExit(f"wheel: unexpected top-level entries {outside}, or no py.typed")
    # "tornado_readinto/core/_readcore.cpython-311-x86_64-linux-gnu.so" -> "core._readcore"
    compiled = sorted(
        f.partition("/")[2].partition(".")[0].replace("/", ".") for f in files if f.endswith((".so", ".pyd"))
    )
    # every module the package checks for its compiled build (COMPILED)
    modules = [*source_value("_COMPILED_MODULES"), *source_value("_NATIVE_MODULES")]
    expected = sorted(modules)
    if compiled != expected or wheel.name.endswith("-none-any.whl"):
        raise SystemExit(f"wheel {wheel.name}: compiled modules {compiled}, expected {expected}")
    headers = [line.split(": ", 1) for line in metadata.splitlines() if ": " in line]
    if ["Version", version] not in headers:
        raise SystemExit(f"wheel: METADATA version is not {version}")
    required = [value for key, value in headers if key == "Requires-Dist" and "extra ==" not in value]
    # "tornado>=6.5,<7" (setuptools writes its specifiers in its own order)
    if len(required) != 1 or not required[0].startswith("tornado") or \
            set(required[0][len("tornado"):].split(",")) != {">=6.5", "<7"}:
        raise SystemExit(f"wheel: unconditional requirements {required}, expected only tornado>=6.5,<7")
    if ["Provides-Extra", "comm"] not in headers:
        raise SystemExit("wheel: no 'comm' extra")
    if "readinto = tornado_readinto.dask.backend:ReadIntoTCPBackend" not in entry_points:
        raise SystemExit(f"wheel: no readinto entry point in\n{entry_points}")
    print(f"contents: sdist {len(names)} files, wheel {len(files)} files, version {version}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory and say where it is")
    args = parser.parse_args()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="tornado-readinto-package-"))
    try:
        dist = tmp / "dist"
        step("build sdist and wheel")
        run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)], cwd=tmp)
        (sdist,) = dist.glob("*.tar.gz")
        (wheel,) = dist.glob("*.whl")
        step("twine check")
        run([sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel)], cwd=tmp)
        step("contents")
        version = source_version()
        check_contents(sdist, wheel, version)
        step("fresh venv: the wheel alone")
        env_dir = tmp / "venv"
        venv.create(env_dir, with_pip=True)
        python = str(env_dir / ("Scripts" if os.name == "nt" else "bin") / "python")
        run([python, "-m", "pip", "install", "-q", str(wheel)], cwd=tmp)
        run([python, "-c", WHEEL_ALONE.format(version=version)], cwd=tmp)
        step("fresh venv: + distributed")
        run([python, "-m", "pip", "install", "-q", "distributed"], cwd=tmp)
        run([python, "-c", WITH_DISTRIBUTED], cwd=tmp)
        step("fresh venv: the sdist with no C compiler (CC=false)")
        env_dir = tmp / "venv-pure"
        venv.create(env_dir, with_pip=True)
        python = str(env_dir / ("Scripts" if os.name == "nt" else "bin") / "python")
        install = [python, "-m", "pip", "install", "-v", "--no-cache-dir", str(sdist)]
        log = run(install, cwd=tmp, capture=True, CC="false")
        said = [line for line in log.splitlines() if FALLBACK_LINE in line]
        if len(said) != 1:
            raise SystemExit(f"sdist with CC=false: the fallback was said {len(said)} times, not once:\n{said}")
        print(said[0].strip())
        run([python, "-c", SDIST_PURE], cwd=tmp)
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("package: ok")


if __name__ == "__main__":
    main()
