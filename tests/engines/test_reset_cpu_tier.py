"""`reset_device_cache(cpu_tier=True)` empties the connector's CPU tier too (vLLM's `reset_connector`), so the next
phase is as cold as the first; without it the tier serves the repeat (what `kvtk calibrate`'s checks rely on)."""

from __future__ import annotations

import pytest

from toolkit.engines.base import VariantSpec

pytestmark = pytest.mark.engine


def _hits(records) -> list[tuple[int, int]]:
    return [(r.local_hit_tokens, r.external_hit_tokens) for r in records]


def test_a_phase_after_a_full_reset_sees_what_the_first_saw():
    from toolkit.engines.dry import DryEngine
    from toolkit.experiments.phases import phase_prompts
    from toolkit.workloads.resolve import resolve_trace

    prompts = phase_prompts(resolve_trace("fewshot-small"))
    engine = DryEngine(
        VariantSpec(name="toolkit"),
        model="tiny-qwen3-next",
        cpu_bytes=256 << 20,
        num_gpu_blocks=64,
        prefix_match_unit=128,
    )
    first = engine.run_phase("first", prompts)
    engine.reset_device_cache()  # device only: the tier serves the repeat
    repeat = engine.run_phase("repeat", prompts)
    engine.reset_device_cache(cpu_tier=True)
    again = engine.run_phase("again", prompts)
    assert sum(r.external_hit_tokens for r in repeat) > sum(r.external_hit_tokens for r in first)
    assert _hits(again) == _hits(first)
