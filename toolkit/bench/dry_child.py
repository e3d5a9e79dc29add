"""One size of `kvtk bench dry` in this process (`--child N`): the dry engine at the model's layout over the
trace's first N requests, cold, timed by phase (set-up, bounds, engine), with what the CPU tier held.

`bench dry` runs each size in a fresh child so the child's peak RSS and wall time are that run's alone.
"""

from __future__ import annotations

import argparse
import os
import time

from toolkit.engines.facts import EngineFacts


def _variant(name: str):
    """toolkit: fine-grained, slru; simplecpu: vLLM's SimpleCPU (block-aligned, lru); no_fine_grained: the toolkit
    with block-aligned hits only; no_offload: no CPU tier."""
    from toolkit.engines.base import variants_for

    variants = variants_for(
        policy="eager", fine_grained=True, eviction="slru", baselines=() if name == "toolkit" else (name,)
    )
    return next(v for v in variants if v.name == name)


def run_child(args: argparse.Namespace) -> dict:
    """One size in this process: the numbers as a dict (printed as JSON on the last line by `run`)."""
    # The benchmark's child process, before vLLM's import (which reads both): set for its life on purpose.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    from toolkit.experiments.config import ExperimentConfig
    from toolkit.experiments.phases import phase_prompts, request_bounds
    from toolkit.perfmodel.step_time import build_step_model
    from toolkit.workloads.resolve import resolve_trace

    t0 = time.perf_counter()
    trace = resolve_trace(args.trace, max_requests=args.child)
    prompts = phase_prompts(trace)
    longest = max(trace.prompt_len(r) + r.max_tokens for r in trace.requests)
    spec = _variant(args.variant)
    config = ExperimentConfig(
        engine="dry",
        model=args.model,
        trace=args.trace,
        phases=("cold",),
        max_num_seqs=args.max_num_seqs,
        prefix_match_unit=args.prefix_match_unit or None,
    )
    engine = make_dry_engine(
        args, spec, max_model_len=longest + 1, step_model=build_step_model(args.model, gpu=args.gpu, tp=args.tp)
    )
    engine.window = args.window
    desc = engine.describe()
    t_setup = time.perf_counter() - t0
    t1 = time.perf_counter()
    bounds = request_bounds(config, {"cold": prompts}, desc)["cold"]
    t_bounds = time.perf_counter() - t1
    t2 = time.perf_counter()
    records = engine.run_phase("cold", prompts)
    t_engine = time.perf_counter() - t2
    return _child_result(args, engine, desc, records, bounds, (t_setup, t_bounds, t_engine))


def _child_result(args, engine, desc: EngineFacts, records, bounds: dict, seconds: tuple[float, float, float]) -> dict:
    """The child's numbers: sizes, the phase's hits and TTFTs against the bounds, where the wall time went."""
    from toolkit.experiments.results import summarize_phase

    t_setup, t_bounds, t_engine = seconds
    row = summarize_phase(records)
    return {
        "requests": len(records),
        "prompt_tokens": row["prompt_tokens"],
        "geometry": args.model,
        "variant": args.variant,
        "cpu_gib": args.cpu_gib,
        "device_bytes_per_rank": getattr(args, "device_bytes", None),
        "gpu": args.gpu,
        "tp": args.tp,
        "device_blocks": desc.device_blocks,
        "cpu_blocks": desc.cpu_blocks,
        "scheduler_block_tokens": desc.scheduler_block_tokens,
        "hash_block_tokens": desc.hash_block_tokens,
        "steps": engine.clock.num_steps,
        "step_by_step": args.step_by_step,
        "skipped_steps": engine.num_skipped_steps,
        "setup_s": t_setup,
        "bounds_s": t_bounds,
        "engine_s": t_engine,
        "local_hit_tokens": row["local_hit_tokens"],
        "external_hit_tokens": row["external_hit_tokens"],
        "oracle_reusable_tokens": bounds.oracle,
        "belady_hit_tokens": bounds.belady,
        "ttft_p50_s": row["ttft_p50_s"],
        "ttft_p99_s": row["ttft_p99_s"],
        "modelled_s": engine.clock.now_s,
        "tier": _tier_composition(engine),
    }


def _tier_composition(engine) -> dict:
    """What the toolkit's CPU tier stored, by source, how its fine-grained-only blocks fared, what it holds at the
    end, and the hit tokens fine-grained hits added (empty for other connectors)."""
    side = getattr(engine.harness.connector, "scheduler_side", None)
    if side is None or side.manager is None:
        return {}
    counts, cpu = side.counts(), side.manager.cpu
    return {
        **counts["tier"],
        "cached_blocks_end": sum(1 for b in range(1, cpu.num_blocks) if cpu.keys_of(b)),
        "low_blocks_end": cpu.num_low_blocks(),
        "fine_grained_hit_tokens": counts["counters"].get("fine_grained_hit_tokens", 0),
    }


def make_dry_engine(args: argparse.Namespace, spec, *, max_model_len: int, step_model=None):
    """The dry engine at `--model`'s layout: device blocks from `--device-blocks`, else a `--gpu`-sized KV budget
    per rank at `--tp` (`--device-gib` overrides it)."""
    from toolkit.engines.dry import DryEngine
    from toolkit.experiments.defaults import default_device_bytes

    sizing: dict = {"tp": args.tp}
    if args.device_blocks:
        sizing["num_gpu_blocks"] = args.device_blocks
    else:
        args.device_bytes = (
            int(args.device_gib * 2**30) if args.device_gib else default_device_bytes(args.model, args.gpu, args.tp)
        )
        sizing.update(num_gpu_blocks=1, device_bytes=args.device_bytes)
    return DryEngine(
        spec,
        model=args.model,
        cpu_bytes=int(args.cpu_gib * 2**30),
        prefix_match_unit=args.prefix_match_unit or None,
        max_num_seqs=args.max_num_seqs,
        max_model_len=max_model_len,
        step_by_step=getattr(args, "step_by_step", False),
        step_model=step_model,
        **sizing,
    )
