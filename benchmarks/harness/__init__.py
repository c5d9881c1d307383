"""The one harness of every benchmark suite (``python -m benchmarks``).

A suite module declares its cases, how to run one case and its columns (a
`TableSuite`); the harness owns everything they share:

* ``suite``: the command line, the rounds in alternating order
  (`in_turn`, `alternation`), the progress lines;
* ``results``: a result's repeats (`Repeated`: median, spread, merging
  rounds) and the ratios to a baseline;
* ``table``: the text table (`Column`, `Ratio`);
* ``output``: the JSON, the exit status;
* ``meta``: the run's metadata, which every result file records (`run_meta`),
  and what publishing requires of it (`missing_meta`);
* ``plot``: the PNG's figure and bars (matplotlib only when asked);
* ``cpu``: one way to read a process's CPU time, one for a thread's;
* ``verify``: failed cases and result checks;
* ``processes``: a case's server and client in fresh processes;
* ``netpath``: the network path between them, loopback or a veth pair
  between two network namespaces (``--netpath``);
* ``units``: sizes, rates and times as text, and the argparse types.
"""

from __future__ import annotations

from .cpu import process_cpu_s, process_usage, thread_cpu_s
from .meta import missing_meta, run_meta
from .output import finish, from_json, to_json, write_json
from .processes import STARTUP_TIMEOUT_S, ChildProcess, case_timeout_s, run_server_and_client
from .results import Repeated, find_baseline, median_ratio, paired_ratios
from .suite import Suite, TableSuite, alternation, in_turn
from .table import Column, Ratio, field, format_spread, format_table, key_field, metric, one
from .units import (
    MiB,
    choice,
    csv,
    format_fixed,
    format_mib,
    format_number,
    format_pct,
    format_rate,
    format_ratio,
    format_seconds,
    format_size,
    non_negative,
    parse_size,
    positive,
    positive_int,
)
from .verify import CaseFailed, VerificationError, check, verify_counts

__all__ = [
    "STARTUP_TIMEOUT_S",
    "CaseFailed",
    "ChildProcess",
    "Column",
    "MiB",
    "Ratio",
    "Repeated",
    "Suite",
    "TableSuite",
    "VerificationError",
    "alternation",
    "case_timeout_s",
    "check",
    "choice",
    "csv",
    "field",
    "find_baseline",
    "finish",
    "format_fixed",
    "format_mib",
    "format_number",
    "format_pct",
    "format_rate",
    "format_ratio",
    "format_seconds",
    "format_size",
    "format_spread",
    "format_table",
    "from_json",
    "in_turn",
    "key_field",
    "median_ratio",
    "metric",
    "missing_meta",
    "non_negative",
    "one",
    "paired_ratios",
    "parse_size",
    "positive",
    "positive_int",
    "process_cpu_s",
    "process_usage",
    "run_meta",
    "run_server_and_client",
    "thread_cpu_s",
    "to_json",
    "verify_counts",
    "write_json",
]
