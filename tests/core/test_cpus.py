"""How many CPUs the process may use (`tornado_readinto.core._cpus`), on files
the tests write: cgroup v2 and v1 quotas, nested cgroups, namespaces, and
missing or malformed files, which must say nothing and never raise."""

import os

import pytest

from tornado_readinto.core import _cpus

from ..conftest import inject_cpu_limits as patch_limits


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def fresh_cache():
    _cpus.usable_cpus.cache_clear()
    _cpus.parallel_cpus.cache_clear()
    yield
    _cpus.usable_cpus.cache_clear()
    _cpus.parallel_cpus.cache_clear()


# -- cgroup v2 ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cpu_max", "cpus"),
    [
        ("100000 100000\n", 1.0),
        ("150000 100000\n", 1.5),
        ("50000 100000", 0.5),
        ("max 100000\n", None),  # no limit
        ("garbage\n", None),
        ("1 2 3\n", None),
        ("100000 0\n", None),  # a zero period says nothing
        ("-5 100000\n", None),
        ("", None),
    ],
)
def test_cgroup_v2_quota_of_the_process_cgroup(tmp_path, cpu_max, cpus):
    write(tmp_path / "proc_cgroup", "0::/app.slice/job\n")
    write(tmp_path / "cg/app.slice/job/cpu.max", cpu_max)
    assert _cpus.cgroup_v2_cpus(str(tmp_path / "cg"), str(tmp_path / "proc_cgroup")) == cpus


def test_cgroup_v2_a_parent_quota_limits_its_children(tmp_path):
    write(tmp_path / "proc_cgroup", "0::/a/b/c\n")
    write(tmp_path / "cg/a/b/c/cpu.max", "max 100000\n")
    write(tmp_path / "cg/a/b/cpu.max", "300000 100000\n")
    write(tmp_path / "cg/a/cpu.max", "100000 100000\n")  # the smallest wins
    write(tmp_path / "cg/cpu.max", "max 100000\n")
    assert _cpus.cgroup_v2_cpus(str(tmp_path / "cg"), str(tmp_path / "proc_cgroup")) == 1.0


def test_cgroup_v2_inside_a_namespace_reads_the_root(tmp_path):
    """A container's cgroup namespace: /proc/self/cgroup says ``0::/`` (or
    names a host path that does not exist here), the quota is at the root."""
    write(tmp_path / "cg/cpu.max", "100000 100000\n")
    for line in ("0::/\n", "0::/docker/abc123\n"):
        write(tmp_path / "proc_cgroup", line)
        assert _cpus.cgroup_v2_cpus(str(tmp_path / "cg"), str(tmp_path / "proc_cgroup")) == 1.0


def test_cgroup_v2_never_climbs_above_its_root(tmp_path):
    write(tmp_path / "proc_cgroup", "0::/../../etc\n")
    write(tmp_path / "cpu.max", "100000 100000\n")  # outside the root: never read
    write(tmp_path / "cg/etc/cpu.max", "200000 100000\n")
    assert _cpus.cgroup_v2_cpus(str(tmp_path / "cg"), str(tmp_path / "proc_cgroup")) == 2.0


@pytest.mark.parametrize("proc_cgroup", [None, "", "garbage without colons\n", "\x00\xff"])
def test_cgroup_v2_without_cgroups_says_nothing(tmp_path, proc_cgroup):
    if proc_cgroup is not None:
        (tmp_path / "proc_cgroup").write_bytes(proc_cgroup.encode("latin-1"))
    assert _cpus.cgroup_v2_cpus(str(tmp_path / "no-cg"), str(tmp_path / "proc_cgroup")) is None


# -- cgroup v1 ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("quota", "period", "cpus"),
    [
        ("100000\n", "100000\n", 1.0),
        ("250000", "100000", 2.5),
        ("-1\n", "100000\n", None),  # v1's "no limit"
        ("garbage", "100000", None),
        ("100000", "", None),
        (None, "100000", None),
    ],
)
def test_cgroup_v1_quota(tmp_path, quota, period, cpus):
    write(tmp_path / "proc_cgroup", "12:memory:/x\n4:cpu,cpuacct:/kubepods/pod1\n")
    folder = tmp_path / "cg/cpu,cpuacct/kubepods/pod1"
    folder.mkdir(parents=True)
    if quota is not None:
        write(folder / "cpu.cfs_quota_us", quota)
    write(folder / "cpu.cfs_period_us", period)
    assert _cpus.cgroup_v1_cpus(str(tmp_path / "cg"), str(tmp_path / "proc_cgroup")) == cpus


def test_cgroup_v1_inside_a_namespace_reads_the_mount_root(tmp_path):
    write(tmp_path / "proc_cgroup", "4:cpu,cpuacct:/docker/abc\n")
    write(tmp_path / "cg/cpu/cpu.cfs_quota_us", "50000\n")
    write(tmp_path / "cg/cpu/cpu.cfs_period_us", "100000\n")
    assert _cpus.cgroup_v1_cpus(str(tmp_path / "cg"), str(tmp_path / "proc_cgroup")) == 0.5
    assert _cpus.cgroup_v2_cpus(str(tmp_path / "cg"), str(tmp_path / "proc_cgroup")) is None


# -- the verdict ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "cpus"),
    [
        ({}, 2.0),
        ({"affinity": 1}, 1.0),
        ({"v2": 1.0}, 1.0),
        ({"v1": 1.5}, 1.5),
        ({"count": 1}, 1.0),
        ({"affinity": None, "count": 8, "v2": 4.0}, 4.0),
        ({"affinity": None, "count": None}, 1.0),  # nothing known: assume the least
    ],
)
def test_usable_cpus_is_the_least_of_the_limits(monkeypatch, fresh_cache, limits, cpus):
    patch_limits(monkeypatch, **limits)
    assert _cpus.usable_cpus() == cpus


def test_usable_cpus_reads_once_per_process(monkeypatch, fresh_cache):
    calls = []

    def affinity():
        calls.append(1)
        return 1

    patch_limits(monkeypatch)
    monkeypatch.setattr(_cpus, "affinity_cpus", affinity)
    assert [_cpus.usable_cpus() for _ in range(5)] == [1.0] * 5
    assert len(calls) == 1


def test_a_reader_that_raises_says_nothing(monkeypatch, fresh_cache):
    def broken():
        raise RuntimeError("unreadable")

    patch_limits(monkeypatch, count=4, affinity=3)
    monkeypatch.setattr(_cpus, "cgroup_v2_cpus", broken)
    assert _cpus.usable_cpus() == 3.0


def test_the_real_machine_is_read_without_error(fresh_cache):
    cpus = _cpus.usable_cpus()
    assert 0 < cpus <= (os.cpu_count() or 1)
    if hasattr(os, "sched_getaffinity"):
        assert cpus <= len(os.sched_getaffinity(0))


@pytest.mark.parametrize(
    ("limits", "threads"),
    [
        ({"affinity": 1, "count": 8}, 1),
        ({"affinity": 4, "count": 2}, 2),
        ({"affinity": 8, "count": 8, "v2": 1.0, "v1": 0.5}, 8),  # a quota limits time, not parallelism
        ({"affinity": None, "count": 3}, 3),
        ({"affinity": None, "count": None}, 1),  # nothing known: assume the least
    ],
)
def test_parallel_cpus_is_the_least_of_affinity_and_count(monkeypatch, fresh_cache, limits, threads):
    patch_limits(monkeypatch, **limits)
    assert _cpus.parallel_cpus() == threads
    assert _cpus.usable_cpus() <= threads


def test_parallel_cpus_reads_once_per_process_and_survives_a_broken_reader(monkeypatch, fresh_cache):
    calls = []

    def broken():
        calls.append(1)
        raise RuntimeError("unreadable")

    patch_limits(monkeypatch, count=4)
    monkeypatch.setattr(_cpus, "affinity_cpus", broken)
    assert [_cpus.parallel_cpus() for _ in range(3)] == [4] * 3
    assert len(calls) == 1
