"""The dry engine's fast path (quiet decode stretches in one call) against vLLM's scheduler step by step, with a
disk tier below a CPU tier too small for the sessions: the same records (hits, loads, modelled times, the disk
reads on the clock), the same steps."""

from __future__ import annotations

import pytest

from toolkit.engines.base import VariantSpec

pytestmark = pytest.mark.engine


def test_tiny_model_sessions_with_a_disk_tier_are_the_step_by_step_run():
    from tests.experiments.test_dry_fast import _run_both
    from toolkit.engines.dry import DryEngine
    from toolkit.experiments.disk_time import staged_reads
    from toolkit.experiments.runner import phase_prompts
    from toolkit.workloads.clients import previous_turns
    from toolkit.workloads.resolve import resolve_trace

    trace = resolve_trace("agentic:num_sessions=4,num_turns=3,max_tokens=40")
    prompts, after = phase_prompts(trace), previous_turns(trace)
    engines: list[DryEngine] = []

    def make(step_by_step: bool) -> DryEngine:
        engine = DryEngine(
            VariantSpec(name="toolkit"),
            model="tiny-qwen3-next",
            cpu_bytes=4 << 20,  # a few blocks: the sessions evict each other to disk
            num_gpu_blocks=48,
            prefix_match_unit=128,
            step_by_step=step_by_step,
            disk_bytes=1 << 30,
            disk_time=staged_reads("this-host"),
        )
        engines.append(engine)
        return engine

    skipped, steps = _run_both(make, [("cold", prompts), ("hot", prompts)], concurrency=3, after=after)
    assert skipped > 0.3 * steps, (skipped, steps)
    for engine in engines:  # the disk tier served loads in both runs, and the same ones (the records agree)
        disk = engine.offload_manager().disk
        assert disk is not None and disk.loaded_blocks > 0 and disk.index.counts.blocks_written > 0
    assert engines[0].offload_manager().disk.loaded_blocks == engines[1].offload_manager().disk.loaded_blocks
