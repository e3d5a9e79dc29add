"""`kvtk docs figures`: the README's figures from one command. It runs a `kvtk replay` run and a `kvtk replay
--cpu-gib a,b,c` grid on the dry engine (the commands it prints), then writes each README figure (`toolkit.docs.
figures.README_FIGURES`) as a PNG taken from those runs' report.html: the reports' own figures, not a redrawing.

The defaults are the README's set-up: Qwen3-Next-80B-A3B at TP 4 (modelled H200s), the committed fewshot-small
trace, the toolkit against no offload and SimpleCPU, tier sizes 0.1-0.8 GiB (about two minutes on 2 vCPUs).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from toolkit.errors import BadInput, RunFailed

DEFAULT_OUT = Path("docs/figures")
DEFAULT_TIERS_GIB = "0.1,0.2,0.4,0.8"
BASELINES = "no_offload,simplecpu"


def add_parser(actions) -> None:
    parser = actions.add_parser(
        "figures",
        help="run the README's run and tier-size grid (dry engine) and write their report figures as PNGs",
        description=__doc__,
        epilog="examples:\n  kvtk docs figures                                (docs/figures, about two minutes)\n"
        "  kvtk docs figures --out /tmp/figs --trace mooncake:PATH --max-requests 300 --cpu-gib 16,64,256",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"the PNGs' folder (default {DEFAULT_OUT})")
    parser.add_argument(
        "--work", type=Path, default=None, help="where the run and grid folders go (default runs/figures-<time>)"
    )
    parser.add_argument("--model", default="qwen3-next-80b-a3b", help="a model preset or tiny model")
    parser.add_argument("--tp", default="4", help="tensor-parallel size (default 4)")
    parser.add_argument("--trace", default="fewshot-small", help="a committed trace, a .jsonl path or a spec")
    parser.add_argument("--max-requests", default=None, help="the trace's first N requests (default all)")
    parser.add_argument("--device-blocks", default=None, help="device KV-cache blocks (default the GPU profile's)")
    parser.add_argument(
        "--cpu-gib",
        default=DEFAULT_TIERS_GIB,
        help=f"the grid's tier sizes, a comma list (default {DEFAULT_TIERS_GIB})",
    )
    parser.set_defaults(func=run)


def replay_argvs(args: argparse.Namespace, work: Path) -> dict[str, list[str]]:
    """The `kvtk replay` command lines of the run and the grid (without `kvtk replay`)."""
    common = ["--engine", "dry", "--model", args.model, "--tp", str(args.tp), "--trace", args.trace]
    for flag, value in (("--max-requests", args.max_requests), ("--device-blocks", args.device_blocks)):
        if value is not None:
            common += [flag, str(value)]
    common += ["--baseline", BASELINES]
    if "," not in args.cpu_gib:
        raise BadInput(f"--cpu-gib {args.cpu_gib}: the capacity curve needs two tier sizes or more (a comma list)")
    return {
        "run": [*common, "--out", str(work / "run")],
        "grid": [*common, "--phases", "cold,hot", "--cpu-gib", args.cpu_gib, "--out", str(work / "grid")],
    }


def _replay(argv: list[str]) -> int:
    """`kvtk replay ARGV` in this process, through the replay command's own parser."""
    from toolkit.cli import replay

    parser = argparse.ArgumentParser(prog="kvtk")
    replay.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["replay", *argv])
    return int(args.func(args) or 0)


def run(args: argparse.Namespace) -> int:
    from toolkit.docs.figures import README_FIGURES, report_figure, write_pngs

    work = args.work or Path("runs") / time.strftime("figures-%Y%m%d-%H%M%S")
    argvs = replay_argvs(args, work)
    for name in ("run", "grid"):  # the grid's list is checked by the replay command before anything runs
        if (work / name).exists():
            raise BadInput(f"--work {work}: {work / name} exists; give a new --work folder")
    for name, argv in argvs.items():
        print(f"docs figures: kvtk replay {' '.join(argv)}", file=sys.stderr)
        code = _replay(argv)
        if code:
            raise RunFailed(f"the {name} (kvtk replay {' '.join(argv)}) exited {code}")
    figures = [
        (report_figure(work / spec.report / "report.html", spec.figure), args.out / spec.png) for spec in README_FIGURES
    ]
    paths = write_pngs(figures)
    for spec, path in zip(README_FIGURES, paths):
        print(f"{path}: {spec.what} (fig-{spec.figure} of {work / spec.report / 'report.html'})")
    return 0
