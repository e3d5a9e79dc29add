"""`python -m toolkit.bench.copy_cli ...`: the copy benchmark without the `kvtk` entry point (used by gpu_check.sh).

`python -m toolkit.bench.copy_cli --grid-from FILE` prints the grid of a `--json` run saved in FILE.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from toolkit.bench import copy as bench_copy


def print_saved_grid(path: str) -> int:
    """The grid of a saved `--json` run; a file that is not one gets one line and exit 2."""
    try:
        rows = [bench_copy.Row(**row) for row in json.loads(Path(path).read_text())["rows"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"--grid-from: {path!r} is not a saved `--json` run ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 2
    bench_copy.print_grid(rows)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--grid-from":
        raise SystemExit(print_saved_grid(sys.argv[2]))
    parser = argparse.ArgumentParser(prog="kvtk-bench-copy")
    bench_copy.add_arguments(parser)
    raise SystemExit(bench_copy.run(parser.parse_args()))
