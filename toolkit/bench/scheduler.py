"""Scheduler-side benchmark: microseconds per engine step and per lookup of the offload manager.

`--core-only` drives the pure-Python manager with a synthetic hybrid workload; without it, the benchmark compares
it side by side with vLLM's own scheduler side (vLLM's scheduler and KV cache manager with each connector).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from toolkit.bench.workload import run_steps, time_lookups, time_pool_stores
from toolkit.workloads.hybrid_prompts import WorkloadSpec


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--core-only", action="store_true", help="benchmark the pure-Python core only")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    parser.add_argument("--groups", default="full_attention:16,mamba_align:64", help="cache groups (kind:block,...)")
    parser.add_argument("--num-requests", type=int, default=256, help="concurrent requests (default 256)")
    parser.add_argument(
        "--prompt-tokens",
        type=_int_list,
        default=(8192, 16384, 32768),
        help="prompt lengths, comma separated (default 8192,16384,32768)",
    )
    parser.add_argument(
        "--pool-blocks",
        type=_int_list,
        default=(1024, 65536, 1048576),
        help="CPU pool sizes in blocks (default 1024,65536,1048576)",
    )
    parser.add_argument(
        "--pool-probe-tokens",
        type=int,
        default=8192,
        help="resident prompt for the pool-size table (must fit the smallest pool; default 8192)",
    )
    parser.add_argument("--policy", default="lru", choices=("lru", "slru"))
    parser.add_argument("--big", action="store_true", help="longer run: step workload on every pool size, more repeats")
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="vs vLLM: output tokens per request of the main trace (default 128, a chat turn)",
    )
    parser.add_argument(
        "--sweep-max-tokens",
        type=_int_list,
        default=None,
        help="vs vLLM: more output lengths to report, comma separated (default 4,32; '' for none)",
    )
    parser.add_argument("--repeats", type=int, default=5, help="vs vLLM: interleaved runs per connector, best kept")
    parser.add_argument("--seed", type=int, default=0, help="vs vLLM: trace seed")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="vs vLLM: count each connector's hook instructions and simulated L2 read misses under valgrind's "
        "callgrind instead of timing them (the same on every run; a few minutes per connector and row)",
    )
    parser.add_argument(
        "--statistic",
        choices=("best", "median"),
        default="best",
        help="vs vLLM: keep each connector's best run (default) or its median run (steadier on a "
        "busy host: --statistic median --repeats 3)",
    )


def run(args: argparse.Namespace) -> int:
    if not args.core_only:
        try:
            scheduler_vllm = importlib.import_module("toolkit.bench.scheduler_vllm")
        except ModuleNotFoundError as exc:
            if exc.name != "toolkit.bench.scheduler_vllm":
                raise
            print(
                "kvtk bench scheduler: the vLLM comparison (toolkit.bench.scheduler_vllm) is not available yet; "
                "run with --core-only",
                file=sys.stderr,
            )
            return 1
        if args.instructions:
            from toolkit.bench.hook_instructions import run_counted

            return run_counted(args)
        return int(scheduler_vllm.run_comparison(args) or 0)
    return run_core(args)


def run_core(args: argparse.Namespace) -> int:
    spec = WorkloadSpec(groups=args.groups, num_requests=args.num_requests, prompt_tokens=tuple(args.prompt_tokens))
    report = measure_core(args, spec)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    _print_core(report, spec)
    return 0


def measure_core(args: argparse.Namespace, spec: WorkloadSpec) -> dict:
    """Manager time per engine step by pool size, per full-hit lookup by pool size and prompt length, and per
    stored block into a full pool, in that order (the report `--json` prints)."""
    repeats = 50 if args.big else 10
    step_pools = args.pool_blocks if args.big else (min(args.pool_blocks), max(args.pool_blocks))
    steps = [run_steps(spec, num_cpu_blocks=n, eviction_policy=args.policy) for n in step_pools]
    by_pool = [
        time_lookups(spec, num_cpu_blocks=n, prompt_tokens=args.pool_probe_tokens, repeats=repeats)
        for n in args.pool_blocks
    ]
    by_length = [
        time_lookups(spec, num_cpu_blocks=max(args.pool_blocks), prompt_tokens=t, repeats=repeats, fill=False)
        for t in spec.prompt_tokens
    ]
    by_pool_ratio = by_pool[-1]["us_per_lookup"] / by_pool[0]["us_per_lookup"]
    stores_by_pool = [
        time_pool_stores(spec, num_cpu_blocks=n, prompt_tokens=args.pool_probe_tokens) for n in args.pool_blocks
    ]
    store_ratio = stores_by_pool[-1]["us_per_stored_block"] / stores_by_pool[0]["us_per_stored_block"]
    per_block = [r["us_per_lookup"] / r["prompt_blocks"] for r in by_length]
    report = {
        "workload": {
            "groups": spec.groups,
            "num_requests": spec.num_requests,
            "prompt_tokens": list(spec.prompt_tokens),
            "num_shared_prefixes": spec.num_shared_prefixes,
            "policy": args.policy,
        },
        "steps_by_pool": steps,
        "lookup_by_pool": by_pool,
        "lookup_by_prompt_length": by_length,
        "largest_over_smallest_pool_lookup_ratio": by_pool_ratio,
        "store_by_pool": stores_by_pool,
        "largest_over_smallest_pool_store_ratio": store_ratio,
        "us_per_prompt_block": per_block,
    }
    return report


def _print_core(report: dict, spec: WorkloadSpec) -> None:
    steps, by_pool, by_length = report["steps_by_pool"], report["lookup_by_pool"], report["lookup_by_prompt_length"]
    stores_by_pool, per_block = report["store_by_pool"], report["us_per_prompt_block"]
    by_pool_ratio = report["largest_over_smallest_pool_lookup_ratio"]
    store_ratio = report["largest_over_smallest_pool_store_ratio"]
    print(f"workload: {spec.num_requests} requests, prompts {list(spec.prompt_tokens)} tokens, groups {spec.groups}")
    print("\nengine steps (manager time only)")
    print(f"{'pool blocks':>12} {'steps':>6} {'us/step':>10} {'us/lookup':>10} {'hit tokens':>12}")
    for r in steps:
        print(
            f"{r['num_cpu_blocks']:>12} {r['num_steps']:>6} {r['us_per_step']:>10.0f} {r['us_per_lookup']:>10.0f} "
            f"{r['num_hit_tokens']:>12}"
        )
    print("(a larger pool stores more blocks per step: step time follows blocks stored, not pool size)")
    print(f"\nfull-hit lookup of a resident {by_pool[0]['prompt_tokens']}-token prompt, pool otherwise full")
    print(f"{'pool blocks':>12} {'us/lookup':>10}")
    for r in by_pool:
        print(f"{r['num_cpu_blocks']:>12} {r['us_per_lookup']:>10.1f}")
    print(f"largest / smallest pool: {by_pool_ratio:.2f}x (target <= 1.2x)")
    print(
        f"\nstore into a full pool (allocate with eviction, register keys, release), "
        f"{stores_by_pool[0]['prompt_tokens']}-token prompts"
    )
    print(f"{'pool blocks':>12} {'us/block':>10}")
    for r in stores_by_pool:
        print(f"{r['num_cpu_blocks']:>12} {r['us_per_stored_block']:>10.2f}")
    print(f"largest / smallest pool: {store_ratio:.2f}x (target <= 1.2x)")
    print("\nfull-hit lookup by prompt length")
    print(f"{'prompt tokens':>13} {'blocks':>7} {'us/lookup':>10} {'us/block':>9}")
    for r, per in zip(by_length, per_block):
        print(f"{r['prompt_tokens']:>13} {r['prompt_blocks']:>7} {r['us_per_lookup']:>10.1f} {per:>9.3f}")
