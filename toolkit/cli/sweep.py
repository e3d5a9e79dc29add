"""`kvtk sweep SPEC`: a grid of dry experiments (or a notebook per cell) on Ray, or in this process with --serial."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

EXAMPLES = """examples:
  kvtk sweep data/sweeps/eviction-by-workload.yaml --serial
  kvtk sweep my-grid.yaml --address auto --max-parallel 8
  kvtk sweep my-grid.yaml --out runs/sweeps/x --resume
  kvtk replay --cpu-gib 64,128,256,512 --seeds 1,2 ...   (a grid of one command's options, no spec file)"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "sweep",
        help="run a grid of dry experiments (or notebooks) on Ray",
        description=__doc__,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("spec", help="sweep spec, YAML or JSON: fixed parameters, axes to cross, extra cells")
    parser.add_argument("--out", default=None, help="sweep folder (default runs/sweeps/<time>-<name>)")
    parser.add_argument("--serial", action="store_true", help="run the cells in this process, without Ray")
    parser.add_argument(
        "--address",
        default=None,
        help="join an existing Ray cluster: auto, host:port or ray://host:port "
        "(default: start a local Ray for this sweep)",
    )
    parser.add_argument("--max-parallel", type=int, default=None, help="cells running at once (default: as Ray allows)")
    parser.add_argument("--num-cpus", type=float, default=None, help="CPUs per cell task (default: spec, else 1)")
    parser.add_argument("--memory-gib", type=float, default=None, help="memory per cell task (default: spec, else 2)")
    parser.add_argument("--resume", action="store_true", help="continue the sweep in --out: skip finished cells")
    parser.add_argument("--retries", type=int, default=1, help="extra attempts of a failed cell (default 1)")
    parser.add_argument(
        "--notebook",
        default=None,
        metavar="NAME",
        help="papermill batch: execute this notebook per cell with the cell's parameters",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    parser.add_argument("--no-report", action="store_true", help="skip the HTML report")
    parser.add_argument("--json", action="store_true", help="print summary.json")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from toolkit.sweep import SweepOptions, load_spec, run_sweep
    from toolkit.sweep.executor import RayUnavailable

    spec = load_spec(args.spec)
    options = SweepOptions(
        out=args.out,
        serial=args.serial,
        address=args.address,
        max_parallel=args.max_parallel,
        num_cpus=args.num_cpus,
        memory_gib=args.memory_gib,
        resume=args.resume,
        retries=args.retries,
        notebook=args.notebook,
        progress=not args.no_progress,
        report=not args.no_report,
    )
    redirect = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    try:
        with redirect:  # --json: stdout carries the JSON alone
            result = run_sweep(spec, options)
    except RayUnavailable as exc:
        print(f"kvtk sweep: error: {exc}", file=sys.stderr)
        return 2
    if not args.notebook:  # each cell's serving metrics, as kvtk replay's grid writes them (kvtk compare reads them)
        from toolkit.experiments.metrics import Slo, write_sweep_metrics

        write_sweep_metrics(result.path, Slo())
    summary = result.summary
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        print(
            f"{summary['done']}/{summary['cells']} cells done, {summary['failed']} failed "
            f"({summary['skipped_finished']} finished earlier, {summary['retried']} retried) in "
            f"{summary['elapsed_s']:.1f} s on {summary.get('executor')}"
        )
        for failed in summary["failed_cells"]:
            print(
                f"FAILED {failed['cell_id']} ({failed['label']}) after {failed['attempts']} attempts: {failed['error']}"
            )
        print(f"sweep folder: {result.path}")
        for name, path in result.paths.items():
            print(f"  {name}: {path}")
    return 1 if summary["failed"] else 0
