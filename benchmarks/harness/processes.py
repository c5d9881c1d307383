"""The processes of a case: a server and a client in fresh processes of
``python -m benchmarks.impls`` (every suite's child-process entry point),
each reporting JSON lines on stdout, read here with deadlines."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from .verify import CaseFailed

ROOT = Path(__file__).resolve().parent.parent.parent

#: Seconds for a process to start and print its first line / its last line.
STARTUP_TIMEOUT_S = 30.0
#: Added to every case's own time budget before its processes are killed.
GRACE_S = 60.0


def case_timeout_s(warmup_s: float, repeat: int, duration_s: float) -> float:
    """The time budget of a case of ``repeat`` windows of ``duration_s``
    after ``warmup_s``: three times that, plus `GRACE_S`."""
    return GRACE_S + 3 * (warmup_s + repeat * duration_s)


def child_env() -> dict[str, str]:
    """This environment with the repository root first on PYTHONPATH, so
    that ``-m benchmarks...`` works from any directory."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


class ChildProcess:
    """``python -m benchmarks.impls ARGV``, whose stdout JSON lines we read
    with deadlines; its stderr goes to the file ``stderr``.  ``prefix`` goes
    before the command, e.g. ``ip netns exec NAME`` (see `netpath`): it must
    exec the command, so that ``proc.pid`` is the benchmark process's pid."""

    def __init__(
        self,
        argv: list[str],
        stderr: IO[bytes],
        env: dict[str, str] | None = None,
        cpus: set[int] | None = None,
        prefix: Sequence[str] = (),
    ) -> None:
        self.argv = argv
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "benchmarks.impls", *argv], stdout=subprocess.PIPE, stderr=stderr,
            env={**child_env(), **(env or {})},
            preexec_fn=None if cpus is None else (lambda: os.sched_setaffinity(0, cpus)),
        )  # fmt: skip
        self.stderr = stderr
        self._pending = b""

    def read_json_line(self, timeout_s: float) -> dict[str, Any]:
        """The next line on its stdout, as JSON.

        :raises CaseFailed: nothing within ``timeout_s``, or it exited.
        """
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise CaseFailed(f"{self.argv[0]} printed nothing within {timeout_s:.0f}s{self.stderr_tail()}")
            chunk = os.read(fd, 65536)
            if not chunk:
                self.proc.wait(timeout=5)
                raise CaseFailed(f"{self.argv[0]} exited with status {self.proc.returncode}{self.stderr_tail()}")
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return json.loads(line)  # type: ignore[no-any-return]

    def finish(self, timeout_s: float) -> dict[str, Any]:
        """Its last JSON line, after it exited with status 0.

        :raises CaseFailed: otherwise.
        """
        result = self.read_json_line(timeout_s)
        try:
            status = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise CaseFailed(f"{self.argv[0]} did not exit") from None
        if status:
            raise CaseFailed(f"{self.argv[0]} exited with status {status}{self.stderr_tail()}")
        return result

    def stderr_tail(self, nlines: int = 12) -> str:
        self.stderr.flush()
        self.stderr.seek(0)
        lines = self.stderr.read().decode(errors="replace").strip().splitlines()[-nlines:]
        # the last line (e.g. "VERIFICATION FAILED: ...") first: the table shows one line
        return f": {lines[-1]}\n" + "\n".join(lines) if lines else ""

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def run_server_and_client(
    server_argv: list[str],
    client_argv: Callable[[dict[str, Any], int], list[str]],
    timeout_s: float,
    server_env: dict[str, str] | None = None,
    pin: tuple[set[int], set[int]] | None = None,
    prefixes: tuple[Sequence[str], Sequence[str]] = ((), ()),
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Start a server process (``server_env`` added to its environment), read
    its first line (its port...), start the client process with
    ``client_argv(first_line, server_pid)``; return the last lines of the
    client and of the server, each after it exited with status 0.  Both
    processes are gone when this returns.  ``pin``: the CPUs of the server
    and of the client (their affinity), or None.  ``prefixes``: what goes
    before the server's and the client's command (`ChildProcess`), e.g. to
    run them in the two namespaces of a `netpath.NetPath`.

    :raises CaseFailed: a process failed, or was too slow (``timeout_s``
        for the client's run, `STARTUP_TIMEOUT_S` for the rest).
    """
    processes: list[ChildProcess] = []
    with tempfile.TemporaryFile() as server_err, tempfile.TemporaryFile() as client_err:
        try:
            server_cpus, client_cpus = pin if pin is not None else (None, None)
            server_prefix, client_prefix = prefixes
            server = ChildProcess(server_argv, server_err, server_env, server_cpus, server_prefix)
            processes.append(server)
            started = server.read_json_line(STARTUP_TIMEOUT_S)
            client_cmd = client_argv(started, server.proc.pid)
            client = ChildProcess(client_cmd, client_err, cpus=client_cpus, prefix=client_prefix)
            processes.append(client)
            client_out = client.finish(timeout_s + STARTUP_TIMEOUT_S)
            server_out = server.finish(STARTUP_TIMEOUT_S)
        finally:
            for process in processes:
                process.kill()
    return client_out, server_out
