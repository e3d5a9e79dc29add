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
    rows = [bench_copy.Row(**row) for row in json.loads(Path(path).read_text())["rows"]]
    bench_copy.print_grid(rows)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--grid-from":
        raise SystemExit(print_saved_grid(sys.argv[2]))
    parser = argparse.ArgumentParser(prog="kvtk-bench-copy")
    bench_copy.add_arguments(parser)
    raise SystemExit(bench_copy.run(parser.parse_args()))
