"""`kvtk soak`: the chaos soak on the live engine (see `toolkit.soak.run`); prints one table.

Exit code 0 when every check held (outputs identical, no hang, no leak, faults accounted for, resets accepted),
1 when one failed, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys

from toolkit.errors import BadInput


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "soak",
        help="drive the live engine through faults, aborts, preemption and "
        "eviction; check outputs, hangs, leaks and fault accounting",
        epilog="examples:\n  kvtk soak --requests 200 --seed 1\n  kvtk soak --minutes 30 --json soak.json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--requests", type=int, default=2000, help="requests to send (default 2000)")
    parser.add_argument(
        "--minutes",
        type=float,
        default=None,
        help="stop sending waves after this many minutes (the reference then runs what was sent)",
    )
    parser.add_argument("--seed", type=int, default=0, help="traffic seed (default 0)")
    parser.add_argument("--model", default="tiny-qwen3-next", help="tiny model (default tiny-qwen3-next)")
    parser.add_argument("--device-blocks", type=int, default=28, help="device KV blocks: small forces preemption")
    parser.add_argument("--cpu-blocks", type=int, default=32, help="CPU-tier blocks: small forces eviction")
    parser.add_argument(
        "--faults",
        default=None,
        help="fault_injection spec (toolkit.copy.faults syntax); default: load, store, late load "
        "and late store each 5%% of batches, 10 ms late, seed 7",
    )
    parser.add_argument("--abort-fraction", type=float, default=0.05, help="requests aborted mid-copy (0.05)")
    parser.add_argument("--reset-fraction", type=float, default=0.2, help="waves followed by a reset (0.2)")
    parser.add_argument("--request-timeout-s", type=float, default=300.0, help="a request past this hangs")
    parser.add_argument("--json", metavar="PATH", help="also write the full report as JSON here")
    parser.set_defaults(func=run)


def build(args: argparse.Namespace):
    from toolkit import limits
    from toolkit.soak.run import DEFAULT_FAULTS, SoakEngine
    from toolkit.workloads.soak_traffic import SoakTraffic

    if args.minutes is not None and not args.minutes > 0:
        raise BadInput(f"--minutes: must be > 0, got {args.minutes}")
    # Upper bounds and finiteness; the lower bounds are the traffic's and engine's own checks below.
    for flag, value, most in (
        ("--minutes", args.minutes, 10.0**6),
        ("--request-timeout-s", args.request_timeout_s, 10.0**6),
        ("--requests", args.requests, limits.MAX_TRACE_REQUESTS),
        ("--device-blocks", args.device_blocks, limits.MAX_DEVICE_BLOCKS),
        ("--cpu-blocks", args.cpu_blocks, limits.MAX_CPU_BLOCKS),
    ):
        if value is not None and value > most or value == float("inf"):
            raise BadInput(
                f"{flag}: must be at most {most:g}, got {value}"
                if isinstance(most, float)
                else f"{flag}: must be at most {most}, got {value}"
            )
    # Prompts of one to two hybrid blocks (640 tokens on the tiny model), mostly re-used: a 2,000-request soak and its
    # reference run take about an hour together on a shared 2-core machine.
    traffic = SoakTraffic(
        num_requests=args.requests,
        seed=args.seed,
        prefix_tokens=(640, 1000),
        suffix_tokens=(1, 200),
        one_off_tokens=(1, 800),
        repeat_fraction=0.3,
        one_off_fraction=0.15,
        max_tokens=(1, 3),
        abort_fraction=args.abort_fraction,
        reset_fraction=args.reset_fraction,
    )
    engine = SoakEngine(
        model=args.model,
        num_gpu_blocks=args.device_blocks,
        cpu_blocks=args.cpu_blocks,
        faults=DEFAULT_FAULTS if args.faults is None else args.faults,
        request_timeout_s=args.request_timeout_s,
    )
    if engine.faults:
        from toolkit.copy.faults import FaultSpec

        try:
            FaultSpec.parse(engine.faults)
        except ValueError as exc:
            raise BadInput(f"--faults: {exc}") from None
    return traffic, engine


def run(args: argparse.Namespace) -> int:
    traffic, engine = build(args)
    from toolkit.soak.report import format_table
    from toolkit.soak.run import run_soak
    from toolkit.vllm.live import set_live_env

    set_live_env()
    report = run_soak(
        traffic,
        engine,
        max_minutes=args.minutes,
        progress=lambda text: print(f"kvtk soak: {text}", file=sys.stderr, flush=True),
    )
    print(format_table(report))
    if args.json:
        import os

        fd = os.open(args.json, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # owner-only, as everything we write
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps(report, indent=2, default=str) + "\n")
    return 0 if report["ok"] else 1
