"""`kvtk bench hints`: retention by KV hints against LRU, SLRU and Belady on session traffic.

Two session workloads, each with one-off prompts mixed in (a scan while sessions wait: unhinted traffic): `agentic`
(sessions over a shared system prompt, round robin) and `conversation` (uneven turn counts and gaps). Each runs on the dry engine (vLLM's real scheduler, one closed-loop client, a
device cache of the longest prompt's blocks plus two, so sessions come back to the CPU tier) at a tight and an ample
CPU tier (a third and 1.25x the blocks the trace stores when nothing is evicted), for the tier's eviction `lru`,
`slru`, and `slru+hints` with oracle hints, fixed-TTL hints and adaptive-TTL hints.

Printed per cell: CPU-tier hit tokens, device hit tokens, mean TTFT on the dry engine's virtual clock (modelled: a
preset's H200 step-time profile; a tiny model's own default clock), lookup hits on hint-retained blocks, and, for a
layout of attention groups only, Belady's CPU-tier tokens (`belady_tokens`). No wall time is measured: the numbers
repeat exactly. Results: docs/results/2026-12-03-hints.md.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass, replace
from typing import Any

from toolkit.errors import BadInput
from toolkit.workloads.traces import Trace

POLICIES = (
    ("lru", "lru", "none"),
    ("slru", "slru", "none"),
    ("oracle", "slru+hints", "oracle"),
    ("ttl", "slru+hints", "ttl"),
    ("adaptive", "slru+hints", "adaptive"),
)


@dataclass(slots=True)
class Cell:
    workload: str
    tier: str
    policy: str
    cpu_tier_tokens: int
    device_tokens: int
    ttft_mean_s: float
    hits_on_retained_blocks: int
    unhinted_cpu_tier_tokens: int  # of the mixed-in prompts (no session, no hints)
    hints_accepted: int
    cpu_blocks: int
    belady_cpu_tier_tokens: int | None  # None: no exact bound for this layout (`belady_tokens`)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    parser.add_argument(
        "--model", default="tiny-qwen2", help="tiny-qwen2 (dense, default), tiny-qwen3-next, or a preset of data/models"
    )
    parser.add_argument(
        "--scan-documents",
        type=int,
        default=0,
        help="the mixed-in unhinted prompts: one-off (0, default) or on this many shared documents",
    )
    parser.add_argument("--scale", type=int, default=1, help="multiply every prompt length by this (default 1)")
    parser.add_argument("--tp", type=int, default=1, help="tensor parallel size of a preset's layout (default 1)")
    parser.add_argument(
        "--budget", type=float, default=None, help="the share of the tier hints may hold (default: the connector's)"
    )
    parser.add_argument("--sessions", type=int, default=12, help="sessions per workload (default 12)")
    parser.add_argument("--turns", type=int, default=6, help="turns per session, at most for conversation (6)")
    parser.add_argument(
        "--ttl-s", type=float, default=None, help="TTL hints' TTL in trace seconds (default: 2x the sessions)"
    )
    parser.add_argument(
        "--gap-factor", type=float, default=None, help="adaptive hints: retain for this many expected gaps (1.5)"
    )
    parser.add_argument("--seed", type=int, default=0, help="the conversation workload's seed (default 0)")


def workloads(sessions: int, turns: int, scale: int = 1, documents: int = 0, seed: int = 0) -> dict[str, Trace]:
    from toolkit.workloads.generators import agentic
    from toolkit.workloads.hints_conversation import conversation, with_scan

    scan = max(2, sessions // 3)  # a one-off prompt after every `scan` requests
    k = scale
    return {
        "agentic": with_scan(
            agentic(
                num_sessions=sessions,
                num_turns=turns,
                system_tokens=512 * k,
                user_tokens=160 * k,
                assistant_tokens=96 * k,
            ),
            every=scan,
            prompt_tokens=768 * k,
            documents=documents,
        ),
        "conversation": with_scan(
            conversation(
                num_sessions=sessions,
                max_turns=turns,
                first_tokens=640 * k,
                user_tokens=96 * k,
                assistant_tokens=160 * k,
                seed=seed,
            ),
            every=scan,
            prompt_tokens=768 * k,
            documents=documents,
        ),
    }


def run_cell(
    trace: Trace, eviction: str, mode: str, *, model: str, tp: int, cpu_blocks: int, ttl_s: float
) -> dict[str, Any]:
    """One dry run of `trace` (one closed-loop client, each turn after its previous one) with a tier of `cpu_blocks`
    blocks per rank and a device cache of the longest prompt's scheduler blocks plus two."""
    from toolkit.engines.base import VariantSpec
    from toolkit.engines.dry import DryEngine
    from toolkit.experiments.phases import phase_prompts
    from toolkit.workloads.clients import previous_turns
    from toolkit.workloads.hints import sessions_of, synthesise_hints

    hints = synthesise_hints(trace.requests, sessions_of(trace), mode, ttl_s=ttl_s)
    requests = [replace(p, kv_hints=hints.get(p.request_id)) for p in phase_prompts(trace)]
    longest = max(trace.prompt_len(r) + r.max_tokens for r in trace.requests)
    probe = DryEngine(
        VariantSpec(name="probe"), model=model, tp=tp, cpu_bytes=1 << 30, num_gpu_blocks=64, prefix_match_unit=None
    )
    facts = probe.describe()
    probe.close()
    per_sched = max(1, facts.blocks_per_scheduler_block)
    engine = DryEngine(
        VariantSpec(name=f"{eviction}/{mode}", eviction=eviction),
        model=model,
        tp=tp,
        cpu_bytes=cpu_blocks * (facts.cpu_block_bytes or 1) * tp,
        num_gpu_blocks=(longest // facts.scheduler_block_tokens + 2) * per_sched,
        prefix_match_unit=None,
        max_model_len=longest + 64,
    )
    if not model.startswith("tiny-"):  # a preset: its compute on an H200 (tiny models: their own default clock)
        from toolkit.perfmodel.step_time import build_step_model

        engine.step_model = build_step_model(model, gpu="h200", tp=tp)
    try:
        records = engine.run_phase("replay", requests, after=previous_turns(trace))
        side = engine.harness.connector.scheduler_side  # the toolkit connector's scheduler side
        hint_counts = side.hint_counts()
        used_blocks = sum(side.manager.cpu.num_used_blocks_per_group().values())
        facts = engine.describe()
    finally:
        engine.close()
    ttfts = [r.ttft_s for r in records if r.ttft_s is not None]
    return {
        "cpu_tier_tokens": sum(r.external_hit_tokens for r in records),
        "unhinted_cpu_tier_tokens": sum(r.external_hit_tokens for r in records if r.request_id.startswith("scan-")),
        "device_tokens": sum(r.local_hit_tokens for r in records),
        "device_hits": [r.local_hit_tokens for r in records],
        "ttft_mean_s": sum(ttfts) / max(1, len(ttfts)),
        "hits_on_retained_blocks": hint_counts.get("hits_on_retained_blocks", 0),
        "hints_accepted": hint_counts.get("accepted", 0),
        "used_blocks": used_blocks,
        "facts": facts,
    }


def belady_tokens(trace: Trace, facts: Any, cpu_blocks: int, device_hits: list[int]) -> int | None:
    """Belady's CPU-tier tokens: store-on-access Belady over every prompt's keys for a cache of the tier's tokens
    (an inclusive tier: it holds what the device also holds), each request's hit less what the device served it.
    None for a layout with Mamba or windowed groups: their blocks hold no fixed number of prefix tokens, so no
    capacity in tokens is exact (the repo's bound counts them free, `oracle.bound_capacity_tokens`)."""
    from toolkit.experiments.oracle import PREFIX_WIDE_KINDS, simulate_cache
    from toolkit.experiments.prefix_keys import prefix_keys

    if not facts.group_kinds or not set(facts.group_kinds) <= PREFIX_WIDE_KINDS:
        return None
    unit = facts.hash_block_tokens
    capacity_keys = cpu_blocks // max(1, facts.blocks_per_scheduler_block) * facts.scheduler_block_tokens // unit
    keyed = [(prefix_keys(trace.prompt_token_ids(r), unit), trace.prompt_len(r)) for r in trace.requests]
    hits = simulate_cache(keyed, unit, capacity_keys).hit_tokens
    return sum(max(0, hit - local) for hit, local in zip(hits, device_hits))


TIERS = (("tight", 1 / 3), ("ample", 1.25))  # shares of the blocks the trace stores when nothing is evicted


def measure(
    model: str,
    tp: int,
    sessions: int,
    turns: int,
    ttl_s: float | None,
    scale: int = 1,
    documents: int = 0,
    seed: int = 0,
) -> list[Cell]:
    cells = []
    for name, trace in workloads(sessions, turns, scale, documents, seed).items():
        ttl = ttl_s if ttl_s is not None else 2.0 * sessions
        stored = run_cell(trace, "slru", "none", model=model, tp=tp, cpu_blocks=1 << 20, ttl_s=ttl)["used_blocks"]
        for tier, share in TIERS:
            cpu_blocks = max(4, int(stored * share))
            runs = {
                label: run_cell(trace, ev, mode, model=model, tp=tp, cpu_blocks=cpu_blocks, ttl_s=ttl)
                for label, ev, mode in POLICIES
            }
            oracle = runs["oracle"]
            bound = belady_tokens(trace, oracle["facts"], cpu_blocks, oracle["device_hits"])
            for label, got in runs.items():
                for key in ("facts", "device_hits", "used_blocks"):
                    got.pop(key)
                cells.append(
                    Cell(
                        workload=name,
                        tier=tier,
                        policy=label,
                        cpu_blocks=cpu_blocks,
                        belady_cpu_tier_tokens=bound,
                        **got,
                    )
                )
    return cells


def run(args: argparse.Namespace) -> int:
    from toolkit import limits

    limits.check_int(args.sessions, "--sessions", 2, 1000)
    limits.check_int(args.turns, "--turns", 2, 100)
    if args.budget is not None:
        from toolkit.core.pool import hinted

        if not 0.0 < args.budget <= 1.0:
            raise BadInput(f"--budget: must be in (0, 1], got {args.budget}")
        hinted.DEFAULT_BUDGET_FRACTION = args.budget  # this process's connectors only (the bench's own)
    limits.check_int(args.scale, "--scale", 1, 64)
    limits.check_int(args.scan_documents, "--scan-documents", 0, 1000)
    limits.check_int(args.seed, "--seed", 0, 2**31 - 1)
    if args.gap_factor is not None:
        from toolkit.workloads import hints

        if not 0.0 < args.gap_factor <= 100.0:
            raise BadInput(f"--gap-factor: must be in (0, 100], got {args.gap_factor}")
        hints.ADAPTIVE_GAP_FACTOR = args.gap_factor  # this process's synthesis only (the bench's own)
    import logging
    import tempfile
    from pathlib import Path

    from toolkit.engines.vllm_log import vllm_log_to

    # vLLM's INFO lines would bury the table (and break --json): to a throwaway log, its errors still to stderr.
    with tempfile.TemporaryDirectory() as tmp, vllm_log_to(Path(tmp) / "vllm.log", console_level=logging.ERROR):
        cells = measure(
            args.model, args.tp, args.sessions, args.turns, args.ttl_s, args.scale, args.scan_documents, args.seed
        )
    if args.json:
        print(json.dumps([asdict(c) for c in cells], indent=2))
        return 0
    from toolkit.core.pool import hinted

    print(
        f"model {args.model} (TP {args.tp}), {args.sessions} sessions x <= {args.turns} turns, prompt lengths x "
        f"{args.scale}, hint budget {hinted.DEFAULT_BUDGET_FRACTION:g} of the tier, conversation seed {args.seed}; "
        "dry engine (virtual clock)"
    )
    head = f"{'workload':<14}{'tier':<7}{'blocks':>7} {'policy':<9}{'CPU-tier tok':>13}{'% Belady':>9}"
    print(head + f"{'device tok':>11}{'TTFT ms':>9}{'retained hits':>14}{'unhinted tok':>13}")
    for c in cells:
        bound = c.belady_cpu_tier_tokens
        share = f"{100.0 * c.cpu_tier_tokens / bound:>8.1f}%" if bound else f"{'-':>9}"
        print(
            f"{c.workload:<14}{c.tier:<7}{c.cpu_blocks:>7} {c.policy:<9}{c.cpu_tier_tokens:>13,}{share}"
            f"{c.device_tokens:>11,}{c.ttft_mean_s * 1e3:>9.3f}{c.hits_on_retained_blocks:>14,}"
            f"{c.unhinted_cpu_tier_tokens:>13,}"
        )
    if all(c.belady_cpu_tier_tokens is not None for c in cells):
        bounds = [f"{c.workload}/{c.tier} {c.belady_cpu_tier_tokens:,}" for c in cells if c.policy == "lru"]
        print("Belady's CPU-tier tokens: " + ", ".join(bounds))
    else:
        print("Belady: none printed (a layout with Mamba or windowed groups has no exact capacity in tokens)")
    return 0
