"""The dry engine predicts the live engine per request: local, CPU-tier and recomputed tokens, on every committed
trace and on each generator with a non-default seed.

Both engines get the same history: one dry engine and one live engine (tiny Qwen3-Next, 64 device blocks, a CPU
tier of a few dozen blocks so that stores evict), and the same sequence of phases, trace after trace. The CPU tier
is deliberately not reset between traces (the toolkit connector's reset is covered elsewhere): both engines carry
the same tier contents into the next trace, so each trace also runs against a half-full, evicting tier.

Tolerance. Exact per request: the hit tokens (local + CPU tier) and the recomputed tokens. Exact on all but one
request in ten overall and one in three per trace and phase: which of the two serves a hit. Both engines run vLLM's own scheduler and KV cache manager with the
same connector code and feed requests the same way (one at a time, the next when the previous has finished); what
differs is below the scheduler (the dry engine completes every copy at the end of its step, the live engine copies
on threads). On this build the live engine's device prefix cache sometimes lacks a Mamba state the connector loaded
for the first request of a phase (seen on longdoc: the next request on the same document finds it in the CPU tier
again, the dry engine finds it on the device); delaying the dry engine's copy completions by a step does not
reproduce it, so the cause is still open. The same prefix is then served by the CPU tier instead of the device:
hit and recomputed tokens stay equal, local and CPU-tier tokens trade whole scheduler blocks. A wrongly modelled
engine (the wide feeding window this test was written against) moved them on 5 of agentic-small's 9 hot requests.

Traces are small slices (5-9 requests, outputs of 4 tokens) so the whole comparison takes about a minute here.
"""

from __future__ import annotations

import pytest

from toolkit.engines.base import VariantSpec
from toolkit.experiments.runner import phase_prompts
from toolkit.workloads.resolve import committed_traces, resolve_trace

pytestmark = pytest.mark.engine

MODEL = "tiny-qwen3-next"
DEVICE_BLOCKS = 64
CPU_BYTES = 16 << 20  # ~100 CPU blocks of the tiny model: the traces below need several times that
MAX_REQUESTS = 6  # a slice of each committed trace
GENERATED = (  # each generator with a seed other than its default (0)
    "fewshot:seed=3,num_requests=5,prefix_tokens=1500,question_tokens=80",
    "agentic:seed=5,num_sessions=2,num_turns=3",
    "longdoc:seed=7,num_docs=2,doc_tokens=1500,num_questions=5",
)
PHASES = ("cold", "hot")  # a device reset before each phase; the CPU tier persists


def _traces() -> list[tuple[str, object]]:
    committed = [(name, resolve_trace(name).head(MAX_REQUESTS)) for name in committed_traces()]
    # The case in full: all three turns of agentic-small's sessions (9 requests).
    committed = [(n, resolve_trace(n) if n == "agentic-small" else t) for n, t in committed]
    return committed + [(spec, resolve_trace(spec)) for spec in GENERATED]


def _split(rec) -> tuple[int, int, int]:
    return rec.local_hit_tokens, rec.external_hit_tokens, rec.recomputed_tokens


def test_dry_predicts_live_per_request(connector):
    from toolkit.engines.dry import DryEngine
    from toolkit.engines.live import LiveEngine

    spec = VariantSpec(name=connector, connector=connector)
    live = LiveEngine(spec, model=MODEL, cpu_bytes=CPU_BYTES, num_gpu_blocks=DEVICE_BLOCKS, prefix_match_unit=128)
    try:
        dry = DryEngine(spec, model=MODEL, cpu_bytes=CPU_BYTES, num_gpu_blocks=DEVICE_BLOCKS, prefix_match_unit=128)
        geometry = (
            "scheduler_block_tokens",
            "hash_block_tokens",
            "group_block_tokens",
            "group_page_bytes",
            "device_blocks",
            "cpu_blocks",
        )
        assert {k: getattr(dry.describe(), k) for k in geometry} == {k: getattr(live.describe(), k) for k in geometry}
        mismatches: list[str] = []  # hit or recomputed tokens differ: never allowed
        swapped: list[str] = []  # same hits, served by the other tier
        totals = {"local": 0, "external": 0, "recomputed": 0}
        compared = 0
        block = dry.describe().scheduler_block_tokens
        for index, (name, trace) in enumerate(_traces()):
            requests = phase_prompts(trace)
            for phase in PHASES:
                dry.reset_device_cache()
                live.reset_device_cache()
                label = f"{index}-{phase}"  # request ids stay unique over the run
                predicted = dry.run_phase(label, requests)
                measured = live.run_phase(label, requests)
                swapped_before = len(swapped)
                for want, got in zip(measured, predicted, strict=True):
                    compared += 1
                    line = (
                        f"{name} {phase} {want.request_id}: dry (local, cpu, recomputed) {_split(got)}, live "
                        f"{_split(want)} (live miss: {want.miss_reason}, {want.group_miss_reasons})"
                    )
                    hits = (got.local_hit_tokens + got.external_hit_tokens, got.recomputed_tokens)
                    if hits != (want.local_hit_tokens + want.external_hit_tokens, want.recomputed_tokens):
                        mismatches.append(line)
                    elif _split(got) != _split(want):
                        assert (got.local_hit_tokens - want.local_hit_tokens) % block == 0, line
                        swapped.append(line)
                    totals["local"] += want.local_hit_tokens
                    totals["external"] += want.external_hit_tokens
                    totals["recomputed"] += want.recomputed_tokens
                assert (len(swapped) - swapped_before) * 3 <= len(requests), "\n".join(swapped[swapped_before:])
        assert not mismatches, "\n".join(mismatches)
        assert len(swapped) * 10 <= compared, "\n".join(swapped)
        assert compared >= 2 * (MAX_REQUESTS * 2 + 9 + 5 + 6 + 5)
        # The comparison covers all three outcomes, so equality is not equality of zeros.
        assert all(totals.values()), totals
        if connector == "toolkit":  # the small tier did evict (the pool remembers the keys it evicted)
            assert len(dry.harness.connector.scheduler_side.manager.cpu.evicted_key_container) > 0
    finally:
        live.close()


def test_tiny_qwen2_layout_equals_the_live_engine():
    """The other tiny model: the dry engine allocates what the live engine does (one block id owns both layers'
    pages, in the model dtype the host rule picks)."""
    from toolkit.engines.dry import DryEngine
    from toolkit.engines.live import LiveEngine

    spec = VariantSpec(name="toolkit")
    keys = (
        "scheduler_block_tokens",
        "hash_block_tokens",
        "group_block_tokens",
        "group_page_bytes",
        "group_kinds",
        "device_blocks",
        "cpu_block_bytes",
        "cpu_blocks",
    )
    dry = DryEngine(spec, model="tiny-qwen2", cpu_bytes=1 << 30, num_gpu_blocks=128, prefix_match_unit=None)
    live = LiveEngine(spec, model="tiny-qwen2", cpu_bytes=1 << 30, num_gpu_blocks=128, prefix_match_unit=None)
    try:
        assert {k: getattr(dry.describe(), k) for k in keys} == {k: getattr(live.describe(), k) for k in keys}
    finally:
        live.close()


def test_dry_predicts_live_with_closed_loop_clients(connector):
    """`--concurrency`: 4 clients on agentic-small (3 sessions x 3 turns), so every session is in flight at once
    and each turn waits for its previous turn. Same tolerance as above: hit and recomputed tokens exact per
    request; which tier serves a hit may differ on at most one request in three per phase."""
    from toolkit.engines.dry import DryEngine
    from toolkit.engines.live import LiveEngine
    from toolkit.workloads.clients import previous_turns

    spec = VariantSpec(name=connector, connector=connector)
    trace = resolve_trace("agentic-small")
    requests, after = phase_prompts(trace), previous_turns(trace)
    live = LiveEngine(spec, model=MODEL, cpu_bytes=CPU_BYTES, num_gpu_blocks=DEVICE_BLOCKS, prefix_match_unit=128)
    try:
        dry = DryEngine(spec, model=MODEL, cpu_bytes=CPU_BYTES, num_gpu_blocks=DEVICE_BLOCKS, prefix_match_unit=128)
        block = dry.describe().scheduler_block_tokens
        totals = [0, 0]
        for phase in PHASES:
            dry.reset_device_cache()
            live.reset_device_cache()
            predicted = dry.run_phase(phase, requests, concurrency=4, after=after)
            measured = live.run_phase(phase, requests, concurrency=4, after=after)
            assert dry.clients.max_in_flight == live.clients.max_in_flight == 3  # one turn per session at once
            swapped = []
            for want, got in zip(measured, predicted, strict=True):
                line = f"{phase} {want.request_id}: dry {_split(got)}, live {_split(want)}"
                assert (got.local_hit_tokens + got.external_hit_tokens, got.recomputed_tokens) == (
                    want.local_hit_tokens + want.external_hit_tokens,
                    want.recomputed_tokens,
                ), line
                if _split(got) != _split(want):
                    assert (got.local_hit_tokens - want.local_hit_tokens) % block == 0, line
                    swapped.append(line)
                totals[0] += want.local_hit_tokens
                totals[1] += want.external_hit_tokens
            assert len(swapped) * 3 <= len(requests), "\n".join(swapped)
        assert all(totals), totals  # both tiers served hits: the equality is not one of zeros
    finally:
        live.close()
