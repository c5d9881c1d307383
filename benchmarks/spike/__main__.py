"""``python -m benchmarks.spike``: build the compiled spike now (into
`benchmarks.spike.build_root`, unless built already) and print its path."""

from __future__ import annotations

import sys

from . import SpikeBuildError, build


def main() -> int:
    try:
        print(build())
    except SpikeBuildError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
