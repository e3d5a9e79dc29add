"""Tight device pools: per request the toolkit reuses at least what vLLM's SimpleCPU reuses on the same workload.

The parking rule (core/load/parking.py) keeps asynchronous loads from deadlocking vLLM's block-holding waiting queue. It
used to decline a hit whose load could not park, and a declined hit is recomputed: fewer CPU-tier tokens than vLLM's
own connector, and, on hosts where a recompute in another batch flips a near-tie token, a different answer. Now a
load that cannot park yet waits (asked again next step) and one that would park alone is admitted. This test holds
the promise on a hybrid workload shaped like a user's: few-shot prompts sharing a prefix, two multi-turn sessions
whose turns extend the previous prompt, and unrelated long prompts; cold -> device reset -> hot -> pressure ->
replay, at device pools of 8 to 64 blocks and 2 to 16 sequences at once, with an ample CPU tier.
"""

from __future__ import annotations

import pytest
from vllm_test_utils import prompt_cap_tokens, tight_pool_phases

from toolkit.engines.harness import SHAPES, HarnessStalled, run_phases

pytestmark = pytest.mark.engine

HYBRID = "tiny-qwen3-next"


def _run(make_harness, connector: str, num_gpu_blocks: int, max_num_seqs: int, cap_tokens: int | None):
    extra = {"cpu_bytes_to_use": 4000 * SHAPES[HYBRID].attention_page_bytes}
    if connector == "toolkit":
        extra["eviction_policy"] = "lru"  # vLLM's order: apples to apples
    harness = make_harness(
        HYBRID,
        connector=connector,
        extra_config=extra,
        num_gpu_blocks=num_gpu_blocks,
        max_num_seqs=max_num_seqs,
        prefix_match_unit=128,
        max_num_batched_tokens=2048,
    )
    return harness, run_phases(
        harness, tight_pool_phases(cap_tokens or prompt_cap_tokens(num_gpu_blocks)), stall_steps=STALL_STEPS
    )


STALL_STEPS = 500  # instant transfers: 500 steps that schedule nothing while requests wait is a deadlock


@pytest.mark.parametrize(
    "num_gpu_blocks, max_num_seqs, cap_tokens",
    [
        (8, 2, None),
        (8, 16, None),
        (12, 2, None),
        (12, 4, None),
        (12, 4, 1300),
        (16, 8, None),
        (16, 8, 1900),
        (24, 16, None),
        (32, 16, None),
        (48, 4, None),
        (64, 2, None),
        (64, 16, None),
    ],
)
def test_tight_pool_loads_at_least_what_simplecpu_loads(make_harness, num_gpu_blocks, max_num_seqs, cap_tokens):
    harness, mine = _run(make_harness, "toolkit", num_gpu_blocks, max_num_seqs, cap_tokens)  # never stalls
    counters = harness.connector.scheduler_side.counters
    assert "hits_declined_device_pool_tight" not in counters
    total = sum(r.external_hit_tokens for records in mine.values() for r in records.values())
    assert total > 0  # the workload does exercise CPU-tier hits
    try:
        _, ref = _run(make_harness, "simplecpu", num_gpu_blocks, max_num_seqs, cap_tokens)
    except HarnessStalled as stalled:
        # vLLM's own connector admits every asynchronous load and deadlocks its waiting queue here; the toolkit
        # finished the same workload with CPU-tier hits.
        print(
            f"{num_gpu_blocks} blocks, {max_num_seqs} seqs, cap {cap_tokens}: SimpleCPU deadlocked ({stalled}); toolkit {total}"
        )
        return
    fewer = []
    reused = {"toolkit": 0, "simplecpu": 0}
    for phase, records in mine.items():
        for req_id, record in records.items():
            theirs = ref[phase][req_id]
            reused["toolkit"] += record.local_hit_tokens + record.external_hit_tokens
            reused["simplecpu"] += theirs.local_hit_tokens + theirs.external_hit_tokens
            assert record.finished and theirs.finished, req_id
            # Reused tokens, device cache and CPU tier together: where the two device caches diverge, a prompt
            # tail the toolkit still has on the device is a local hit there and a load in SimpleCPU's run.
            if (
                record.local_hit_tokens + record.external_hit_tokens
                < theirs.local_hit_tokens + theirs.external_hit_tokens
            ):
                fewer.append(
                    (
                        req_id,
                        record.local_hit_tokens,
                        record.external_hit_tokens,
                        theirs.local_hit_tokens,
                        theirs.external_hit_tokens,
                    )
                )
    theirs_total = sum(r.external_hit_tokens for records in ref.values() for r in records.values())
    print(
        f"{num_gpu_blocks} blocks, {max_num_seqs} seqs, cap {cap_tokens}: external hit tokens toolkit {total}, SimpleCPU "
        f"{theirs_total}; device + CPU tier {reused}; loads deferred {counters.get('lookups_deferred_device_pool_tight', 0)}"
    )
    assert not fewer, f"requests the toolkit reused less for (id, toolkit local, CPU, SimpleCPU local, CPU): {fewer}"
