"""Differential: the toolkit connector against vLLM's own SimpleCPU scheduler side, same streams, same harness.

vLLM is the reference wherever it is right: per request, the external hit tokens and the loaded (group, device
block) pairs must be equal. Where the toolkit deliberately differs, the test shows the difference:
- under CPU-tier pressure the two pools' contents diverge (the toolkit dedupes keys already in flight and keeps
  hand-offs waiting for room instead of dropping them); the toolkit must then serve at least as many tokens,
- a hit vLLM cannot load because the local prefix does not end on a scheduler block is the same for both.
"""

from __future__ import annotations

import pytest
from vllm_test_utils import random_prompts, simplecpu_is_inclusive

from toolkit.engines.harness import SHAPES, Phase, run_phases

pytestmark = pytest.mark.engine

HYBRID = "tiny-qwen3-next"


def streams(shape: str):
    """Cold, hot (after a device reset) and a shared-prefix stream, in waves of two requests."""
    prefix = random_prompts(1, 1300, seed=21)[0]
    unrelated = random_prompts(3, 2000, seed=22)
    shared = random_prompts(3, 2000, seed=23, prefix=prefix)
    cold = {f"c{i}": p for i, p in enumerate(unrelated + shared)}
    later = random_prompts(4, 1700, seed=24, prefix=prefix)
    return [
        Phase("cold", cold, max_tokens=3, wave=2),
        Phase("hot", {k.replace("c", "h"): v for k, v in cold.items()}, max_tokens=3, reset_before=True, wave=2),
        Phase("shared", {f"s{i}": p for i, p in enumerate(later)}, max_tokens=2, reset_before=True, wave=3),
    ]


def run_both(
    make_harness,
    shape: str,
    phases_fn,
    *,
    extra_config: dict | None = None,
    toolkit_extra: dict | None = None,
    **kwargs,
):
    """The toolkit runs with `eviction_policy="lru"` (vLLM's order; its default is slru): apples to apples."""
    out = {}
    for connector in ("toolkit", "simplecpu"):
        extra = dict(extra_config or {})
        if connector == "toolkit":
            extra["eviction_policy"] = "lru"
            extra.update(toolkit_extra or {})
        harness = make_harness(shape, connector=connector, extra_config=extra, **kwargs)
        out[connector] = run_phases(harness, phases_fn())
    return out


def per_request(out):
    rows = []
    for phase, records in out["toolkit"].items():
        for req_id, mine in records.items():
            ref = out["simplecpu"][phase][req_id]
            rows.append(
                (
                    phase,
                    req_id,
                    mine.external_hit_tokens,
                    ref.external_hit_tokens,
                    sorted(mine.loaded_pairs),
                    sorted(ref.loaded_pairs),
                )
            )
    return rows


@pytest.mark.parametrize(
    "shape, unit, batched",
    [
        ("tiny-qwen2", None, 8192),
        (HYBRID, None, 8192),
        (HYBRID, 128, 8192),
        (HYBRID, 128, 640),  # chunked prefill: Mamba states at every chunk end, fine-grained hits inside blocks
    ],
)
def test_same_hits_and_loads_as_vllm(make_harness, shape, unit, batched):
    out = run_both(
        make_harness,
        shape,
        lambda: streams(shape),
        prefix_match_unit=unit,
        max_num_batched_tokens=batched,
        extra_config={"cpu_bytes_to_use": 400 * SHAPES[shape].attention_page_bytes},
    )
    rows = per_request(out)
    differing = [r for r in rows if r[2] != r[3] or r[4] != r[5]]
    assert not differing, differing
    assert sum(r[2] for r in rows) > 0  # the streams do exercise external hits


@pytest.mark.parametrize("fine_store_priority", ["equal", "low"])
def test_under_cpu_pressure_the_toolkit_serves_at_least_as_much(make_harness, fine_store_priority):
    """With `fine_store_priority="equal"` the toolkit follows vLLM 0.34's SimpleCPU rules on every version: identical
    per request on 0.34, more CPU-tier tokens than 0.32/0.33's SimpleCPU (which lets locally served prefixes age
    out of the tier). With the default "low" the toolkit keeps fine-grained-only blocks from displacing
    block-aligned prefixes, and its tiers deliberately diverge: more tokens reused, device and CPU together."""
    from toolkit.bench.scheduler_vllm import TraceSpec, make_trace

    spec = TraceSpec(num_requests=256, max_tokens=4)  # prefill-heavy: the pools diverge most, and it runs fast
    prompts = make_trace(spec)
    out = run_both(
        make_harness,
        HYBRID,
        lambda: [Phase("trace", prompts, max_tokens=spec.max_tokens, wave=spec.wave)],
        prefix_match_unit=spec.prefix_match_unit,
        num_gpu_blocks=spec.num_gpu_blocks,
        max_num_batched_tokens=spec.max_num_batched_tokens,
        extra_config={"cpu_bytes_to_use": spec.cpu_blocks * SHAPES[HYBRID].attention_page_bytes},
        toolkit_extra={"fine_store_priority": fine_store_priority},
    )
    rows = per_request(out)
    mine, ref = sum(r[2] for r in rows), sum(r[3] for r in rows)
    trace = {c: out[c]["trace"] for c in out}
    reused = {c: sum(r.local_hit_tokens + r.external_hit_tokens for r in trace[c].values()) for c in trace}
    differing = [
        (
            req_id,
            trace["toolkit"][req_id].local_hit_tokens,
            trace["toolkit"][req_id].external_hit_tokens,
            trace["simplecpu"][req_id].local_hit_tokens,
            trace["simplecpu"][req_id].external_hit_tokens,
        )
        for req_id in prompts
        if trace["toolkit"][req_id].external_hit_tokens != trace["simplecpu"][req_id].external_hit_tokens
    ]
    print(
        f"external hit tokens: toolkit {mine} vs vLLM {ref}; device + CPU: toolkit {reused['toolkit']} vs vLLM "
        f"{reused['simplecpu']}; differing requests (id, toolkit local, external, vLLM local, external): {differing}"
    )
    # Tokens not recomputed (device cache and CPU tier together) is what a request's prefill saves: never fewer.
    assert reused["toolkit"] >= reused["simplecpu"] and ref > 0
    if fine_store_priority == "equal":
        if simplecpu_is_inclusive():
            # vLLM 0.34's SimpleCPU keeps the toolkit's rules, local-prefix refresh included: the same tier, request
            # by request. Under vLLM's Mamba retention (the harness's since 2026-12-04) this caught two orders the
            # toolkit had differently: finish-time stores go last in a step's store event, and a step's finished
            # loads release their CPU blocks before its finished stores join the tier.
            assert not differing and mine == ref
        else:
            # Earlier SimpleCPU lets a prefix the device keeps serving age out of the CPU tier: the toolkit serves
            # more.
            assert mine > ref
    else:
        # Fine-grained-only blocks yield first when the tier is full: fewer device blocks stay pinned for them, more
        # prefixes stay on the device. Fewer CPU-tier tokens than 0.34's SimpleCPU on this workload, more reuse.
        assert reused["toolkit"] > reused["simplecpu"]
