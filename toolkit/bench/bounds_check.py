"""The bounds of `kvtk bench dry` (oracle, Belady, LRU-sim at the hash unit) timed alone, and their keys checked.

`python -m toolkit.bench.bounds_check [--trace T] [--cpu-gib 512] [--phases cold] [--repeat 2]` builds what a dry
run gives `experiments.phases.request_bounds` (the trace's prompts, the dry engine's tier geometry) and times it
`--repeat` times. A Mooncake prompt is keyed from its block ids, its tokens never made; the check keys the same
prompts from their tokens too (`oracle.prefix_keys`, what the block keys stand in for) and requires every bound of
every request (oracle, Belady, LRU) equal. Prints one JSON document; exits 1 when a bound differs.

`--run N` instead runs the dry experiment on the trace's first N requests, as `kvtk replay --engine dry` runs it
(its defaults for what is not given here), and checks every phase's achieved hits against its bounds:
CPU-tier <= device + CPU-tier <= Belady <= oracle; exits 1 when one does not hold. Issue 36's Mooncake slice:
`python -m toolkit.bench.bounds_check --run 150 --tp 4 --cpu-gib 256 --device-gib 75 --prefix-match-unit 16
--phases cold,hot`.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from functools import partial
from pathlib import Path

from toolkit.engines.facts import EngineFacts


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from toolkit.bench.dry import add_arguments

    parser = argparse.ArgumentParser(prog="python -m toolkit.bench.bounds_check", description=__doc__.split("\n")[0])
    add_arguments(parser)  # the dry run's model, tiers and hash unit, so the geometry is the one it bounds
    parser.add_argument("--phases", default="cold", help="phases, comma separated (default cold, as bench dry)")
    parser.add_argument("--repeat", type=int, default=2, help="timed runs of the bounds (default 2)")
    parser.add_argument("--no-token-check", action="store_true", help="time only; skip the token-keyed check")
    parser.add_argument("--run", type=int, metavar="N", help="instead: run the first N requests, check the bounds")
    return parser.parse_args(argv)


def _inputs(args: argparse.Namespace):
    """The config, phase sequence and engine description a dry run gives `request_bounds`."""
    from toolkit.bench.dry_child import make_dry_engine
    from toolkit.engines.base import variants_for
    from toolkit.experiments.config import ExperimentConfig
    from toolkit.experiments.phases import phase_prompts, phase_sequence
    from toolkit.workloads.resolve import resolve_trace

    trace = resolve_trace(args.trace)
    longest = max(trace.prompt_len(r) + r.max_tokens for r in trace.requests)
    baselines = () if args.variant == "toolkit" else (args.variant,)  # as bench dry builds its variant
    variants = variants_for(policy="eager", fine_grained=True, eviction="slru", baselines=baselines)
    spec = next(v for v in variants if v.name == args.variant)
    engine = make_dry_engine(args, spec, max_model_len=longest + 1)
    desc = engine.describe()
    config = ExperimentConfig(
        engine="dry",
        model=args.model,
        trace=args.trace,
        phases=tuple(p for p in args.phases.split(",") if p),
        max_num_seqs=args.max_num_seqs,
        prefix_match_unit=args.prefix_match_unit or None,
    )
    return config, phase_sequence(config, phase_prompts(trace), desc, trace), desc


def _token_keyed(sequence: dict) -> dict:
    """The same prompts as plain lazy prompts: `request_bounds` keys them from their tokens."""
    from toolkit.engines.base import LazyPrompt, PhaseRequest

    lists: dict[int, list] = {}
    for requests in sequence.values():
        lists.setdefault(
            id(requests),
            [
                PhaseRequest(r.request_id, LazyPrompt(partial(list, r.prompt_token_ids), len(r.prompt_token_ids)), 1)
                for r in requests
            ],
        )
    return {phase: lists[id(requests)] for phase, requests in sequence.items()}


def _per_request(config, sequence: dict, desc: EngineFacts) -> dict:
    """Every request's bounds: the oracle from `request_bounds`, Belady and LRU from `oracle.phase_hits`."""
    from toolkit.experiments import oracle as orc
    from toolkit.experiments.phases import keyed, request_bounds

    unit = desc.hash_block_tokens
    out = {p: {"oracle": list(b.oracle_per_request)} for p, b in request_bounds(config, sequence, desc).items()}
    ids = orc.KeyIds()
    keys = {phase: keyed(sequence[phase], unit, ids) for phase in config.workload.phases}
    capacity, lru_capacity = orc.bound_capacity_tokens(desc), orc.tier_capacity_tokens(desc)
    for phase, hits in orc.phase_hits(config.workload.phases, keys, ids.count, unit, capacity, lru_capacity).items():
        out[phase].update(hits)
    return out


def run_check(args: argparse.Namespace) -> int:
    """`--run`: the dry experiment on the first `args.run` requests; per phase its hits and bounds, and whether
    CPU-tier <= device + CPU-tier <= Belady <= oracle holds (exit 1 where not)."""
    import tempfile

    from toolkit.experiments import ExperimentConfig, run_experiment

    with tempfile.TemporaryDirectory(prefix="kvtk-bounds-") as tmp:
        config = ExperimentConfig(
            engine="dry",
            model=args.model,
            tp=args.tp,
            gpu=args.gpu,
            trace=args.trace,
            max_requests=args.run,
            phases=tuple(p for p in args.phases.split(",") if p),
            cpu_gib=args.cpu_gib,
            device_gib=args.device_gib,
            device_blocks=args.device_blocks,
            prefix_match_unit=args.prefix_match_unit,
            out=str(Path(tmp) / "run"),
        )
        summary = run_experiment(config).summary
    rows, ok = [], True
    for p in summary["phases"]:
        cpu, both = p["external_hit_tokens"], p["local_hit_tokens"] + p["external_hit_tokens"]
        holds = cpu <= both <= p["belady_hit_tokens"] <= p["oracle_reusable_tokens"]
        ok &= holds
        keep = ("variant", "phase", "local_hit_tokens", "external_hit_tokens", "belady_hit_tokens")
        rows.append({**{k: p[k] for k in keep}, "oracle_reusable_tokens": p["oracle_reusable_tokens"], "holds": holds})
    print(json.dumps({"trace": args.trace, "requests": args.run, "phases": rows, "bounds_hold": ok}, indent=2))
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    from toolkit.experiments.phases import request_bounds

    args = parse_args(argv)
    if args.run is not None:
        return run_check(args)
    config, sequence, desc = _inputs(args)
    report: dict = {"trace": args.trace, "phases": list(config.workload.phases), "bounds_s": []}
    for _ in range(args.repeat):
        start = time.perf_counter()
        bounds = request_bounds(config, sequence, desc)
        report["bounds_s"].append(round(time.perf_counter() - start, 3))
    report["totals"] = {p: b.totals() for p, b in bounds.items()}
    report["peak_rss_mib_after_bounds"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    same = True
    if not args.no_token_check:
        start = time.perf_counter()
        by_blocks = _per_request(config, sequence, desc)
        by_tokens = _per_request(config, _token_keyed(sequence), desc)
        report["token_check_s"] = round(time.perf_counter() - start, 3)
        report["requests_checked"] = sum(len(b["oracle"]) for b in by_blocks.values())
        report["differing"] = {
            f"{p}.{k}": sum(x != y for x, y in zip(v, by_tokens[p][k]))
            for p, b in by_blocks.items()
            for k, v in b.items()
        }
        same = by_blocks == by_tokens
    report["same"] = same
    print(json.dumps(report, indent=2))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
