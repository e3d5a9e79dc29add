"""`python -m toolkit.bench.copy_cli ...`: the copy benchmark without the `kvtk` entry point (used by gpu_check.sh)."""

from __future__ import annotations

import argparse

from toolkit.bench import copy as bench_copy

if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="kvtk-bench-copy")
    bench_copy.add_arguments(parser)
    raise SystemExit(bench_copy.run(parser.parse_args()))
