"""`kvtk compare RUN...`: run and sweep folders in one table, each row against SimpleCPU and no offload of its own
run where present, the config of its run flattened into every row of compare.csv / compare.parquet. Reads only
the folders' JSON files."""

from __future__ import annotations

import argparse

EXAMPLES = """examples:
  kvtk compare runs/20261203-101500-dry-agentic-small runs/20261203-102000-dry-agentic-small
  kvtk compare runs/sweeps/20261203-110000-replay-mooncake --over seed
  kvtk compare runs/a runs/b --out a-vs-b        # writes a-vs-b.csv and a-vs-b.parquet"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="put run and sweep folders side by side in one table (and CSV/parquet)",
        description=__doc__,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("runs", nargs="+", metavar="RUN", help="a run folder or a sweep folder")
    parser.add_argument(
        "--over",
        default=None,
        metavar="FIELD",
        help="fold rows that differ only in this config field (seed: mean and a 95%% interval)",
    )
    parser.add_argument(
        "--out",
        default=None,
        metavar="STEM",
        help="write STEM.csv and STEM.parquet: every column, the config flattened (default: print only)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from toolkit.experiments.compare import load_rows, with_deltas
    from toolkit.experiments.compare_table import format_table, write_tables

    rows = with_deltas(load_rows(args.runs))
    print(format_table(rows, over=args.over))
    if args.out:
        for path in write_tables(rows, Path(args.out), over=args.over):
            print(f"written: {path}")
    return 0
