"""benchmarks.dask_profile: the sample categories (on py-spy stacks written
by hand), the report, and one tiny real run over both protocols."""

import json

import pytest

pytest.importorskip("distributed")

from benchmarks import harness as h  # noqa: E402
from benchmarks.dask_profile import HOP_SEGMENTS, SUITE, categorize, split_samples  # noqa: E402

RECV = "0x7f (libc.so.6);_run_once (asyncio/base_events.py:1922);_recv_into (tornado_readinto/face/iostream.py:585);sock_recv_into (socketmodule.c:3631);recv (libc.so.6)"  # noqa: E501
IDLE_LOCK = "0x7f (libc.so.6);Condition.wait (threading.py:331);PyThread_acquire_lock_timed (libpython3.11.so.1.0);0x7f (libc.so.6)"  # noqa: E501
EPOLL = "0x7f (libc.so.6);_run_once (asyncio/base_events.py:1898);select_epoll_poll (selectmodule.c.h:841);epoll_wait (libc.so.6)"  # noqa: E501
PACK = "0x7f (libc.so.6);write (tornado_readinto/dask/backend.py:250);_to_frames (distributed/comm/utils.py:35);dumps (distributed/protocol/core.py:109)"  # noqa: E501
SSL = "0x7f (libc.so.6);_recv_into (tornado_readinto/face/iostream.py:585);_ssl__SSLSocket_read (_ssl.c:2588);SSL_read (libssl.so.3)"  # noqa: E501
FEED = "0x7f (libc.so.6);_run_once (asyncio/base_events.py:1922);feed (tornado_readinto/wire/framing.py:537)"
LOOP = "0x7f (libc.so.6);_run_once (asyncio/base_events.py:1922)"
TASK = "0x7f (libc.so.6);execute (distributed/worker.py:2200);checksum (benchmarks/dask.py:285);_sum (numpy/core/_methods.py:49)"  # noqa: E501
DASK = "0x7f (libc.so.6);_run_once (asyncio/base_events.py:1922);handle_stimulus (distributed/worker_state_machine.py:3590)"  # noqa: E501


@pytest.mark.parametrize(
    ("stack", "expected"),
    [
        (RECV, "syscalls"),
        (IDLE_LOCK, None),
        (EPOLL, None),
        (PACK, "serialization"),
        (SSL, "tls"),
        (FEED, "comm (Python)"),
        (LOOP, "event loop"),
        (TASK, "task"),
        (DASK, "dask"),
    ],
)
def test_dask_profile_categorizes_native_stacks(stack, expected):
    assert categorize(stack.split(";")) == expected


def test_dask_profile_split_samples_drops_idle_and_other_processes():
    raw = "\n".join(
        [
            f"{RECV} 7",
            f"{IDLE_LOCK} 100",
            f"{PACK} 3",
            f'process 12:"python";{FEED} 5',
            f'process 13:"python";{FEED} 11',
            "garbage line",
            "",
        ]
    )
    assert split_samples(raw) == {"syscalls": 7, "serialization": 3, "comm (Python)": 16}
    assert split_samples(raw, pid=12) == {"syscalls": 7, "serialization": 3, "comm (Python)": 5}


def test_dask_profile_tiny_run_over_both_protocols(tmp_path, capsys):
    path = tmp_path / "profile.json"
    argv = ["--rpc", "30", "--strace-rpc", "10", "--size", "1MiB", "--count", "2", "--hops", "80", "--tasks", "50"]
    argv += ["--rate", "50"]
    assert SUITE.main([*argv, "--json", str(path)]) == 0
    out = capsys.readouterr().out
    data = json.loads(path.read_text())
    assert h.missing_meta(data) == [] and data["meta"]["args"]["rpc"] == 30
    results = data["results"]
    assert set(results) == {"tcp", "readinto"}
    for protocol, r in results.items():
        assert r["rpc"]["wall_us"] > 0 and r["rpc"]["cpu_us"] > 0
        transfer = r["transfer"]
        assert set(transfer["sides"]) == {"a (sends)", "b (receives)"}
        assert transfer["round_gbps"] > 0 and transfer["wall_ms"] > 0
        assert transfer["first_touch"]["MALLOC_TRIM_THRESHOLD_"] == "65536"  # set by the Nanny
        chain = r["chain"]
        assert chain["hops"] >= 20
        assert set(chain["segments_ms"]) == set(chain["segments_mean_ms"]) == {name for name, _ in HOP_SEGMENTS}
        # the segments tile the hop: their means add up to its mean (arithmetic, not timing:
        # medians need not add up, least of all on a busy machine)
        assert sum(chain["segments_mean_ms"].values()) == pytest.approx(chain["hop_mean_ms"])
        assert r["tasks"]["tasks_per_s"] > 0
        assert set(r["tasks"]["samples"]) == {"scheduler + client", "worker a", "worker b"}
        assert f"  {protocol} " in out
