"""No silent hang in the dry engine (`toolkit/engines/progress_guard.py`): a request the device cache can never hold
is refused before its phase steps, with the numbers, and a scheduler that stops scheduling ends the run."""

from __future__ import annotations

import random
import time

import pytest

from toolkit.engines.base import PhaseRequest, VariantSpec
from toolkit.engines.harness import SHAPES, HarnessStalled
from toolkit.engines.harness.stall import StallWatch
from toolkit.engines.progress_guard import min_device_blocks

pytestmark = pytest.mark.engine


def _prompt(tokens: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, 2000) for _ in range(tokens)]


def _engine(num_gpu_blocks: int):
    from toolkit.engines.dry import DryEngine

    return DryEngine(
        VariantSpec(name="toolkit"),
        model="tiny-qwen3-next",
        cpu_bytes=64 << 20,
        num_gpu_blocks=num_gpu_blocks,
        prefix_match_unit=128,
    )


def test_the_lower_bound_counts_attention_blocks_and_one_block_per_other_group():
    config = SHAPES["tiny-qwen3-next"].kv_cache_config(64)
    assert min_device_blocks(config, 640) == 1 + 3  # one attention block, three GDN groups
    assert min_device_blocks(config, 2000) == 4 + 3
    assert min_device_blocks(SHAPES["tiny-qwen2"].kv_cache_config(64), 1280) == 10


def test_a_request_that_can_never_be_scheduled_is_refused_before_any_step():
    engine = _engine(num_gpu_blocks=8)  # 7 usable: a 2600-token prompt needs 5 attention + 3 state blocks
    steps = len(engine.harness.steps)
    started = time.monotonic()
    with pytest.raises(ValueError, match=r"request long: 2600 prompt \+ 1 output tokens need at least 8 device "):
        engine.run_phase("cold", [PhaseRequest("short", _prompt(300, 1), 1), PhaseRequest("long", _prompt(2600, 2), 1)])
    assert time.monotonic() - started < 5 and len(engine.harness.steps) == steps  # refused before stepping


def test_a_scheduler_that_stops_scheduling_ends_the_phase_with_a_clear_line():
    # Within the lower bound (7 blocks), but Mamba align mode holds more than one block per group: never scheduled.
    engine = _engine(num_gpu_blocks=8)
    started = time.monotonic()
    with pytest.raises(HarnessStalled, match="steps in a row scheduled nothing with 1 request"):
        engine.run_phase("cold", [PhaseRequest("stuck", _prompt(2000, 3), 1)])
    assert time.monotonic() - started < 60


def test_the_watch_counts_only_idle_steps_in_a_row_with_work_waiting():
    watch = StallWatch(limit=3, who="test")
    for scheduled, unfinished in [(0, 1), (0, 1), (5, 1), (0, 0), (0, 0), (0, 0), (0, 1), (0, 1)]:
        watch.step(scheduled, lambda unfinished=unfinished: unfinished)
    with pytest.raises(HarnessStalled, match="^test: 3 steps in a row"):
        watch.step(0, lambda: 1)
