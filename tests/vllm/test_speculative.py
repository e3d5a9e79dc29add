"""Speculative decoding: the toolkit's lookups and loads agree with each vLLM release's own SimpleCPU, request by
request, with an ngram drafter (no block drop) and an MTP drafter (EAGLE family: the last drop unit of every hit is
recomputed by the drafter, `speculative_block_drop`). The harness builds vLLM's real `SpeculativeConfig`; no drafter
runs (only the scheduler's rules are exercised). Prompt lengths include exact block and hash-unit multiples, where
the drop and the last-token cap meet."""

from __future__ import annotations

import pytest
from vllm_test_utils import random_prompts

from toolkit.engines.harness import SHAPES, Phase, run_phases

pytestmark = pytest.mark.engine

HYBRID = "tiny-qwen3-next"


def _phases():
    prefix = random_prompts(1, 1300, seed=21)[0]
    prompts = (
        random_prompts(2, 2000, seed=22)
        + random_prompts(2, 2000, seed=23, prefix=prefix)
        + [random_prompts(1, 1920, seed=5)[0], random_prompts(1, 1921, seed=6)[0], random_prompts(1, 1408, seed=7)[0]]
    )
    cold = {f"c{i}": p for i, p in enumerate(prompts)}
    later = {f"s{i}": p for i, p in enumerate(random_prompts(3, 1700, seed=24, prefix=prefix))}
    return [
        Phase("cold", cold, max_tokens=3, wave=2),
        Phase("hot", {k.replace("c", "h"): v for k, v in cold.items()}, max_tokens=3, reset_before=True, wave=2),
        Phase("shared", later, max_tokens=2, reset_before=True, wave=3),
    ]


def _run(make_harness, connector: str, unit: int | None, speculative: dict | None):
    extra = {"cpu_bytes_to_use": 400 * SHAPES[HYBRID].attention_page_bytes}
    if connector == "toolkit":
        extra["eviction_policy"] = "lru"
    harness = make_harness(
        HYBRID, connector=connector, extra_config=extra, prefix_match_unit=unit, speculative=speculative
    )
    return harness, run_phases(harness, _phases())


@pytest.mark.parametrize("method", ["ngram", "mtp"])
@pytest.mark.parametrize("unit", [None, 128])
def test_hits_and_loads_agree_with_simplecpu_under_speculation(make_harness, method, unit):
    harness, mine = _run(make_harness, "toolkit", unit, {"method": method})
    assert harness.connector.scheduler_side.manager_config.speculative_block_drop == (method == "mtp")
    _, theirs = _run(make_harness, "simplecpu", unit, {"method": method})
    differing = [
        (phase, req_id, record.external_hit_tokens, theirs[phase][req_id].external_hit_tokens)
        for phase, records in mine.items()
        for req_id, record in records.items()
        if record.external_hit_tokens != theirs[phase][req_id].external_hit_tokens
        or sorted(record.loaded_pairs) != sorted(theirs[phase][req_id].loaded_pairs)
    ]
    assert not differing, differing
    hot = sum(r.external_hit_tokens for r in mine["hot"].values())
    assert hot > 0
    if method == "mtp":
        # The drop is exercised: without speculation the same prompts load more.
        _, plain = _run(make_harness, "toolkit", unit, None)
        assert hot < sum(r.external_hit_tokens for r in plain["hot"].values())
