"""`kvtk size`: what CPU tier size reaches 50/90/99% of an infinite tier's CPU-tier tokens, for a trace, a model at
its TP and a device cache (dry engine). One dry run holds the whole trace (the infinite tier); the others halve its
size, then bisect each target's bracket to a stated tolerance (at most --max-runs runs). Prints the table and writes
size.json and report.html in its folder; warns where the tier per rank is below the device cache."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from toolkit.errors import BadInput

EXAMPLES = """examples:
  kvtk size --model qwen3-next-80b-a3b --tp 4 --trace mooncake:PATH --max-requests 300
  kvtk size --model qwen3-next-80b-a3b --tp 4 --trace fewshot-small --phases cold,hot --targets 50,90
  kvtk size --trace agentic-small --device-blocks 64 --tolerance-pct 5 --max-runs 30
  kvtk size --tier disk --cpu-gib 128 --disk-profile nvme-gen5-x4 --model qwen3-next-80b-a3b --tp 4 --trace ..."""
DEFAULT_PHASES = "cold"


def register(subparsers: Any) -> None:
    from toolkit.cli.config_options import add_config_options
    from toolkit.experiments.sizing import DEFAULT_MAX_RUNS, DEFAULT_TOLERANCE

    parser = subparsers.add_parser(
        "size",
        help="the CPU tier size that reaches 50/90/99%% of an infinite tier's CPU-tier tokens (dry engine)",
        description=__doc__,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_options(parser)  # kvtk replay's options and words; --cpu-gib is what this command finds
    for action in parser._actions:  # argparse keeps no public handle on an added option
        if action.dest == "phases":
            action.default = DEFAULT_PHASES
            action.help = f"comma-separated phases of each run, in order; the last one that is not pressure is measured (default {DEFAULT_PHASES})"
        elif action.dest == "out":
            action.help = "the folder of the answer and its runs (default runs/<time>-size-<trace>)"
    group = parser.add_argument_group("the search")
    group.add_argument(
        "--tier",
        choices=("cpu", "disk", "store"),
        default="cpu",
        help="the tier to size: cpu (DRAM); disk: a disk tier below the DRAM tier --cpu-gib gives (its speed: "
        "--disk-profile); store: a shared store below that DRAM tier and a --disk-gib disk (its speed: "
        "--store-profile) (default cpu)",
    )
    group.add_argument(
        "--targets",
        default="50,90,99",
        metavar="PCT[,...]",
        help="% of the infinite tier's tokens (default 50,90,99)".replace("%", "%%"),
    )
    group.add_argument(
        "--tolerance-pct",
        type=float,
        default=100 * DEFAULT_TOLERANCE,
        help=f"bisect until the sizes that reach and miss a target are within this %% (default {100 * DEFAULT_TOLERANCE:g})",
    )
    group.add_argument(
        "--max-runs",
        type=int,
        default=DEFAULT_MAX_RUNS,
        help=f"dry runs at most, the infinite tier's included (default {DEFAULT_MAX_RUNS})",
    )
    parser.set_defaults(func=run)


def checked_params(args: argparse.Namespace) -> tuple[dict[str, Any], list[float]]:
    """The runs' parameters and the target fractions; anything the search cannot take is one line."""
    from toolkit.cli.config_options import numeric_fields
    from toolkit.cli.replay import replay_params

    params = replay_params(args)
    for name in numeric_fields():
        if isinstance(params.get(name), str) and "," in params[name]:
            raise BadInput(
                f"--{name.replace('_', '-')} {params[name]}: kvtk size takes one value (a list sweeps in kvtk replay)"
            )
    if args.tier == "cpu" and params.get("cpu_gib") is not None:
        raise BadInput(f"--cpu-gib {params['cpu_gib']}: kvtk size finds the tier size; give none (or --tier disk)")
    if args.tier != "cpu" and params.get("cpu_gib") is None:
        raise BadInput(f"--tier {args.tier}: give the DRAM tier above the {args.tier} with --cpu-gib")
    if params.get("engine", "dry") != "dry":
        raise BadInput(f"--engine {params['engine']}: kvtk size runs the dry engine (many runs of the whole trace)")
    has_disk = params.get("disk_gib") not in (None, 0, "0", 0.0)
    if args.tier == "store" and not has_disk:
        raise BadInput("--tier store: give the disk tier above the store with --disk-gib (the store goes below it)")
    if args.tier != "store" and has_disk:
        raise BadInput(f"--disk-gib {params['disk_gib']}: kvtk size finds sizes; --tier disk sizes the disk")
    if params.get("store_gib") is not None:
        raise BadInput(f"--store-gib {params['store_gib']}: kvtk size finds sizes; --tier store sizes the store")
    if not 0 < args.tolerance_pct <= 100:
        raise BadInput(f"--tolerance-pct {args.tolerance_pct:g}: must be in (0, 100]")
    if not 2 <= args.max_runs <= 200:
        raise BadInput(f"--max-runs {args.max_runs}: must be in [2, 200]")
    return {**params, "baseline": [], "baselines": ()}, targets(args.targets)


def targets(word: str) -> list[float]:
    try:
        pcts = [float(part) for part in word.split(",")]
    except ValueError:
        raise BadInput(f"--targets {word}: a comma list of percentages (50,90,99)") from None
    if any(not 0 < p <= 100 for p in pcts) or len(set(pcts)) != len(pcts):
        raise BadInput(f"--targets {word}: each in (0, 100], none repeated")
    return [p / 100 for p in sorted(pcts)]


def measured_phase(phases: tuple[str, ...]) -> str:
    measured = [p for p in phases if p != "pressure"]
    if not measured:
        raise BadInput(f"--phases {','.join(phases)}: a phase other than pressure is needed to measure")
    return measured[-1]


def run(args: argparse.Namespace) -> int:
    from toolkit.experiments.config import ExperimentConfig
    from toolkit.experiments.plan import plan
    from toolkit.limits import path_component

    params, fractions = checked_params(args)
    folder = (
        Path(args.out)
        if args.out
        else Path("runs")
        / f"{time.strftime('%Y%m%d-%H%M%S')}-size-{path_component(str(params.get('trace') or 'fewshot-small'))}"[:120]
    )
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise BadInput(f"--out {folder}: exists and is not an empty folder")
    infinite_params = {**params, "cpu_gib": None, "disk_gib": None}  # the ceiling: DRAM that holds the trace
    first = ExperimentConfig.from_params({**infinite_params, "out": str(folder / "runs" / "00-infinite")})
    first.validate(model=True)
    phase = measured_phase(first.workload.phases)
    infinite_plan = plan(first)  # the trace and the device checked before any folder
    return _search(params, fractions, args, folder, phase, infinite_plan)


def size_point(summary: dict[str, Any], phase: str, tier_gib: float, run_dir: Path) -> Any:
    """A finished run as a `SizePoint`: the main variant's CPU-tier tokens in the measured phase (said on stderr)."""
    from toolkit.experiments.sizing import SizePoint

    main = summary["phases"][0]["variant"]
    row = next(p for p in summary["phases"] if p["variant"] == main and p["phase"] == phase)
    tokens = int(row.get("external_hit_tokens") or 0)
    print(f"size: run {run_dir.name}: {tier_gib:,.4g} GiB -> {tokens:,} CPU-tier tokens ({phase})", file=sys.stderr)
    oracle, device = row.get("oracle_reusable_tokens"), row.get("local_hit_tokens")
    return SizePoint(
        tier_gib,
        tokens,
        int(summary["cpu_blocks"]),
        int(summary["device_blocks"]),
        str(run_dir),
        oracle_tokens=None if oracle is None else int(oracle),
        device_hit_tokens=None if device is None else int(device),
    )


def _search(
    params: dict[str, Any],
    fractions: list[float],
    args: argparse.Namespace,
    folder: Path,
    phase: str,
    infinite_plan: Any,
) -> int:
    from dataclasses import replace

    from toolkit.core.geometry import MIN_CPU_BLOCKS_PER_RANK
    from toolkit.experiments.config import ExperimentConfig
    from toolkit.experiments.config_checks import MIN_STORE_GIB
    from toolkit.experiments.report_size import format_size_table, write_size_report
    from toolkit.experiments.runner import execute, run_experiment
    from toolkit.experiments.sizing import search

    runs = [0]
    field = {"cpu": "cpu_gib", "disk": "disk_gib", "store": "store_gib"}[args.tier]

    def measure(tier_gib: float) -> Any:
        runs[0] += 1
        run_dir = folder / "runs" / f"{runs[0]:02d}-{args.tier}-{tier_gib:.4g}gib"
        size = None if field == "store_gib" and not tier_gib else tier_gib  # no store: the tiers above alone
        result = run_experiment(ExperimentConfig.from_params({**params, field: size, "out": str(run_dir)}))
        return size_point(result.summary, phase, tier_gib, run_dir)

    first = execute(infinite_plan)
    infinite = size_point(first.summary, phase, first.summary["cpu_bytes"] / 2**30, Path(first.run_dir))
    unit_bytes = first.summary["cpu_bytes"] / first.summary["cpu_blocks"]  # one block on every rank
    min_gib = (MIN_CPU_BLOCKS_PER_RANK + 0.5) * unit_bytes / 2**30
    ceiling = base = None
    above = ""
    if args.tier != "cpu":  # the tiers above alone, then with a disk (store) as large as the trace's DRAM tier
        above = f"{float(params['cpu_gib']):,.4g} GiB of DRAM"
        if args.tier == "store":
            above += f" and a {float(params['disk_gib']):,.4g} GiB disk"
            min_gib = max(min_gib, MIN_STORE_GIB)
        ceiling, base = infinite, replace(measure(0.0), tier_gib=float(params["cpu_gib"]))  # sized by its DRAM
        infinite = measure(max(ceiling.tier_gib, min_gib))
    found = search(
        measure,
        infinite,
        min_gib=min_gib,
        fractions=fractions,
        tolerance=args.tolerance_pct / 100,
        max_runs=args.max_runs,
        ceiling=ceiling,
        base=base,
    )
    found = replace(found, tier=args.tier, above=above)
    config = {k: v for k, v in params.items() if v not in (None, [], ()) and k != "out"}
    summary = first.summary
    below = f", a {args.tier} below {above}" if above else ""
    title = f"kvtk size: {summary['model']} TP{params.get('tp') or 1}{below}, {phase} phase of {summary['trace']}"
    report = write_size_report(folder, found, phase, config, title)
    print(title)
    print(format_size_table(found, phase))
    print(f"size folder: {folder}")
    print(f"report: {report}")
    return 0
