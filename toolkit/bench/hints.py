"""`kvtk bench hints`: retention by KV hints against LRU, SLRU and Belady on session traffic (issue 39).

Two session workloads, each with one-off prompts mixed in (a scan while sessions wait: unhinted traffic): `agentic`
(sessions over a shared system prompt, round robin) and `conversation` (uneven turn counts and gaps,
`workloads/hints_conversation.py`). Each runs on the dry engine (vLLM's real scheduler, one closed-loop client, a
device cache of one prompt's blocks, so sessions come back to the CPU tier) at a tight and an ample CPU tier, for
the CPU tier's eviction `lru`, `slru`, `slru+hints` with oracle hints and with TTL hints (`workloads/hints.py`).

Printed per cell: CPU-tier hit tokens, device hit tokens, mean TTFT on the dry engine's virtual clock (modelled, the
model's default step-time profile), hits on hint-retained blocks, and Belady: store-on-access Belady eviction over
the same prompts (`experiments/belady.py`) for a cache of the device's and the tier's tokens together (the repo's
bound, `oracle.bound_capacity_tokens`), less the device hits of the oracle run: Belady's CPU-tier tokens, as near
as one number can say them. On a dense model (`tiny-qwen2`, the default) the capacity is exact; on a hybrid one
Mamba states count free there, so the bound is loose. No wall time is measured.
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
    hints_accepted: int
    belady_cpu_tier_tokens: int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    parser.add_argument(
        "--model", default="tiny-qwen2", help="tiny-qwen2 (dense, default), tiny-qwen3-next, or a preset of data/models"
    )
    parser.add_argument("--tp", type=int, default=1, help="tensor parallel size of a preset's layout (default 1)")
    parser.add_argument(
        "--budget", type=float, default=None, help="the share of the tier hints may hold (default: the connector's)"
    )
    parser.add_argument("--sessions", type=int, default=12, help="sessions per workload (default 12)")
    parser.add_argument("--turns", type=int, default=6, help="turns per session, at most for conversation (6)")
    parser.add_argument(
        "--ttl-s", type=float, default=None, help="TTL hints' TTL in trace seconds (default: 2x the sessions)"
    )


def workloads(sessions: int, turns: int) -> dict[str, Trace]:
    from toolkit.workloads.generators import agentic
    from toolkit.workloads.hints_conversation import conversation, with_scan

    scan = max(2, sessions // 3)  # a one-off prompt after every `scan` requests
    return {
        "agentic": with_scan(
            agentic(num_sessions=sessions, num_turns=turns, system_tokens=512, user_tokens=160, assistant_tokens=96),
            every=scan,
            prompt_tokens=768,
        ),
        "conversation": with_scan(
            conversation(
                num_sessions=sessions, max_turns=turns, first_tokens=640, user_tokens=96, assistant_tokens=160
            ),
            every=scan,
            prompt_tokens=768,
        ),
    }


def _session_tokens(trace: Trace) -> int:
    """What all sessions' latest prefixes take at their largest: the ample tier holds it, the tight one a third."""
    from toolkit.workloads.hints import sessions_of

    sessions = sessions_of(trace)
    last: dict[str, int] = {}
    for req in trace.requests:
        if req.request_id in sessions:
            last[sessions[req.request_id]] = trace.prompt_len(req) + req.max_tokens
    return sum(last.values())


def run_cell(
    trace: Trace, eviction: str, mode: str, *, model: str, tp: int, cpu_tokens: int, ttl_s: float
) -> dict[str, Any]:
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
    sched = facts.scheduler_block_tokens
    per_sched = max(1, facts.blocks_per_scheduler_block)
    device_blocks = (longest // sched + 2) * per_sched
    cpu_blocks = max(4, cpu_tokens // sched * per_sched)
    engine = DryEngine(
        VariantSpec(name=f"{eviction}/{mode}", eviction=eviction),
        model=model,
        tp=tp,
        cpu_bytes=cpu_blocks * (facts.cpu_block_bytes or 1) * tp,
        num_gpu_blocks=device_blocks,
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
        facts = engine.describe()
    finally:
        engine.close()
    ttfts = [r.ttft_s for r in records if r.ttft_s is not None]
    return {
        "cpu_tier_tokens": sum(r.external_hit_tokens for r in records),
        "device_tokens": sum(r.local_hit_tokens for r in records),
        "device_hits": [r.local_hit_tokens for r in records],
        "ttft_mean_s": sum(ttfts) / max(1, len(ttfts)),
        "hits_on_retained_blocks": hint_counts.get("hits_on_retained_blocks", 0),
        "hints_accepted": hint_counts.get("accepted", 0),
        "facts": facts,
    }


def belady_tokens(trace: Trace, facts: Any, device_hits: list[int]) -> int:
    """Belady's CPU-tier tokens: store-on-access Belady over every prompt's keys for a cache of the tier's tokens
    (an inclusive tier: it holds what the device also holds), each request's hit less what the device served it."""
    from toolkit.experiments.oracle import simulate_cache, tier_capacity_tokens
    from toolkit.experiments.prefix_keys import prefix_keys

    unit = facts.hash_block_tokens
    keyed = [(prefix_keys(trace.prompt_token_ids(r), unit), trace.prompt_len(r)) for r in trace.requests]
    hits = simulate_cache(keyed, unit, tier_capacity_tokens(facts) // unit).hit_tokens
    return sum(max(0, hit - local) for hit, local in zip(hits, device_hits))


def measure(model: str, tp: int, sessions: int, turns: int, ttl_s: float | None) -> list[Cell]:
    cells = []
    for name, trace in workloads(sessions, turns).items():
        ttl = ttl_s if ttl_s is not None else 2.0 * sessions
        for tier, share in (("tight", 1 / 3), ("ample", 1.25)):
            cpu_tokens = int(_session_tokens(trace) * share)
            runs = {
                label: run_cell(trace, ev, mode, model=model, tp=tp, cpu_tokens=cpu_tokens, ttl_s=ttl)
                for label, ev, mode in POLICIES
            }
            bound = belady_tokens(trace, runs["oracle"]["facts"], runs["oracle"]["device_hits"])
            for label, got in runs.items():
                got.pop("facts"), got.pop("device_hits")
                cells.append(Cell(workload=name, tier=tier, policy=label, belady_cpu_tier_tokens=bound, **got))
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
    cells = measure(args.model, args.tp, args.sessions, args.turns, args.ttl_s)
    if args.json:
        print(json.dumps([asdict(c) for c in cells], indent=2))
        return 0
    print(f"model {args.model}, {args.sessions} sessions x <= {args.turns} turns, dry engine (virtual clock)")
    head = f"{'workload':<14}{'tier':<7}{'policy':<8}{'CPU-tier tok':>13}{'% Belady':>9}{'device tok':>11}"
    print(head + f"{'TTFT ms':>9}{'retained hits':>14}")
    for c in cells:
        share = 100.0 * c.cpu_tier_tokens / c.belady_cpu_tier_tokens if c.belady_cpu_tier_tokens > 0 else float("nan")
        print(
            f"{c.workload:<14}{c.tier:<7}{c.policy:<8}{c.cpu_tier_tokens:>13,}{share:>8.1f}%{c.device_tokens:>11,}"
            f"{c.ttft_mean_s * 1e3:>9.2f}{c.hits_on_retained_blocks:>14,}"
        )
    print(
        "Belady's CPU-tier tokens per (workload, tier): "
        + ", ".join(f"{c.workload}/{c.tier} {c.belady_cpu_tier_tokens:,}" for c in cells if c.policy == "lru")
    )
    return 0
