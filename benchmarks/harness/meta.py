"""What every result file records about its run (`run_meta`), and what a
result file must record to be published (`missing_meta`).

Every benchmark that writes JSON (the suites through `TableSuite.meta`,
``benchmarks.dask_profile``, ``benchmarks.instructions``,
``benchmarks.opcodes``) puts ``run_meta(module, argv)`` under the file's
``"meta"`` key:

* ``command``: the command line that re-makes the file, as one would type
  it: ``python -m MODULE ARGV``, preceded by the ``TORNADO_READINTO_*``
  variables set in the environment and by ``taskset -c CPUS`` when the
  process may run on fewer CPUs than the machine has; ``argv``: the
  arguments alone (a list), ``date``: when it ran (UTC);
* ``commit``: ``{"sha", "dirty", "changed"}`` of the checkout the package and
  the benchmarks were imported from: the ``git rev-parse HEAD``, whether a
  tracked file differed from it, and the first of those files
  (``benchmarks/results/`` left out: a run re-making result files writes
  there); ``sha`` is None outside a git checkout;
* ``build``: ``{"name", "compiled", "version", "path", "env"}``: which
  build of ``tornado_readinto`` this process runs
  (``tornado_readinto.COMPILED``) and where it was imported from (a server
  named ``NAME-pure`` runs the pure one in its own process, as its result
  says);
* ``machine``: ``{"cpu_model", "cpu_count", "affinity", "cpu_quota",
  "usable_cores", "kernel", "system", "arch"}``: the CPU model from
  ``/proc/cpuinfo``, the CPUs the process may use (affinity, cgroup quota;
  ``tornado_readinto.core._cpus``), the kernel release;
* ``python``: ``{"implementation", "version"}``;
* ``packages``: the installed versions of the packages that change the
  figures (None: not installed).
"""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

#: The checkout the benchmarks run from (`commit` asks git there).
ROOT = Path(__file__).resolve().parent.parent.parent

#: What a result file must record to be published (``benchmarks.publish``
#: refuses a file that lacks one), each a key of ``"meta"``.
REQUIRED = ("commit", "build", "machine", "python", "command")

#: Packages whose versions go into ``"packages"``.
PACKAGES = ("tornado", "distributed", "dask", "uvloop", "msgpack", "numpy", "Cython")

#: Result files, left out of ``commit["dirty"]``: re-making one after
#: another must not make the later runs look dirty.
RESULTS_DIR = "benchmarks/results"

#: At most this many changed files are named in ``commit["changed"]``.
MAX_CHANGED = 20


def run_meta(module: str, argv: Sequence[str]) -> dict[str, Any]:
    """The ``"meta"`` of a result file written by ``python -m module argv``."""
    machine = machine_meta()
    build = build_meta()
    return {
        "command": command_line(module, argv, build["env"], machine),
        "argv": list(argv),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": commit_meta(),
        "build": build,
        "machine": machine,
        "python": {"implementation": platform.python_implementation(), "version": platform.python_version()},
        "packages": {name: _version(name) for name in PACKAGES},
    }


def command_line(module: str, argv: Sequence[str], env: Mapping[str, str], machine: Mapping[str, Any]) -> str:
    """``[VAR=VALUE ...] [taskset -c CPUS] python -m module argv``."""
    words = [f"{name}={value}" for name, value in sorted(env.items())]
    affinity = machine.get("affinity")
    if affinity and machine.get("cpu_count") and len(affinity) < machine["cpu_count"]:
        words += ["taskset", "-c", ",".join(map(str, affinity))]
    return shlex.join([*words, "python", "-m", module, *argv])


def commit_meta(root: Path = ROOT) -> dict[str, Any]:
    """``{"sha", "dirty", "changed"}`` of the git checkout at ``root``
    (``sha`` and ``dirty`` None where git or the checkout is missing)."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout if done.returncode == 0 else None

    sha = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".", f":(exclude){RESULTS_DIR}")
    if sha is None or status is None:
        return {"sha": None, "dirty": None, "changed": []}
    changed = [line[3:] for line in status.splitlines() if line.strip()]
    return {"sha": sha.strip(), "dirty": bool(changed), "changed": changed[:MAX_CHANGED]}


def build_meta() -> dict[str, Any]:
    """Which build of ``tornado_readinto`` runs here (name None: it does not import)."""
    env = {k: v for k, v in os.environ.items() if k.startswith("TORNADO_READINTO_")}
    try:
        import tornado_readinto

        compiled: bool | None = bool(tornado_readinto.COMPILED)
        version: str | None = tornado_readinto.__version__
        path: str | None = os.path.dirname(os.path.abspath(tornado_readinto.__file__ or ""))
    except ImportError:
        compiled = version = path = None
    name = None if compiled is None else "compiled" if compiled else "pure"
    return {"name": name, "compiled": compiled, "version": version, "path": path, "env": env}


def machine_meta() -> dict[str, Any]:
    """The CPU model, the CPUs this process may use, the kernel."""
    from tornado_readinto.core import _cpus

    quotas = [q for q in (_cpus.cgroup_v2_cpus(), _cpus.cgroup_v1_cpus()) if q is not None]
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "affinity": affinity,
        "cpu_quota": min(quotas, default=None),
        "usable_cores": _cpus.usable_cpus(),
        "kernel": platform.release(),
        "system": platform.system(),
        "arch": platform.machine(),
    }


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """The first ``model name`` (x86), ``Model`` or ``Hardware`` (ARM) of
    ``cpuinfo``, else ``platform.processor()``, else None."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        text = ""
    for key in ("model name", "Model", "Hardware", "cpu model"):
        for line in text.splitlines():
            name, sep, value = line.partition(":")
            if sep and name.strip() == key and value.strip():
                return value.strip()
    return platform.processor() or None


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def missing_meta(data: Any) -> list[str]:
    """What of `REQUIRED` the result file ``data`` (its parsed JSON) does
    not record: ``[]`` when it is complete, else the names (``"machine"``,
    or ``"machine.cpu_model"`` for a part)."""
    meta = data.get("meta") if isinstance(data, dict) else None
    if not isinstance(meta, dict):
        return list(REQUIRED)
    parts = {
        "commit": ("sha", "dirty"),
        "build": ("compiled",),
        "machine": ("cpu_model", "usable_cores", "kernel"),
        "python": ("implementation", "version"),
    }
    missing = []
    for key in REQUIRED:
        value = meta.get(key)
        if key == "command":
            if not isinstance(value, str) or not value.strip():
                missing.append(key)
        elif not isinstance(value, dict):
            missing.append(key)
        else:
            missing += [f"{key}.{part}" for part in parts[key] if value.get(part) is None]
    return missing
