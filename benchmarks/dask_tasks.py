"""The functions the dask workloads run on the workers (``client.submit``,
``client.map``, ``client.run``).

A leaf module: the workers import it by name to run them, and the dask
workload modules (`benchmarks.dask`, `benchmarks.dask_busyworker`,
`benchmarks.dask_profile`) import it, so that the busy-worker workload needs
nothing of `benchmarks.dask`, which imports it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any


def inc(x: int) -> int:
    return x + 1


def make_array(i: int, nbytes: int) -> Any:
    """``nbytes`` of float64, every element ``i`` (numpy)."""
    import numpy as np

    return np.full(nbytes // 8, float(i))


def checksum(array: Any) -> tuple[tuple[int, ...], float]:
    return tuple(array.shape), float(array.sum())


def make_partition(i: int, nrows: int, nkeys: int) -> Any:
    """A pandas partition of ``nrows`` rows over ``nkeys`` keys, seeded by ``i``."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(i)
    return pd.DataFrame({"key": rng.integers(0, nkeys, nrows), "value": rng.integers(0, 1000, nrows)})


def nunique_keys(df: Any) -> int:
    return int(df["key"].nunique())


def usage() -> dict[str, float]:
    """This process's ``getrusage`` counters: CPU seconds, page faults and
    context switches (a receiver's cost per byte, counted)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"user_s": ru.ru_utime, "sys_s": ru.ru_stime, "minflt": ru.ru_minflt, "majflt": ru.ru_majflt,
            "nvcsw": ru.ru_nvcsw, "nivcsw": ru.ru_nivcsw}  # fmt: skip


def environ_of(names: Sequence[str]) -> dict[str, str | None]:
    """The values of ``names`` in this process's environment (None: unset)."""
    return {name: os.environ.get(name) for name in names}
