"""ParkedLoads: the block arithmetic per group kind and the admission rule that keeps one parked load runnable."""

import pytest

from toolkit.core.geometry import HybridGeometry
from toolkit.core.load.parking import ParkedLoads
from toolkit.core.specs import CacheGroupSpec, GroupKind


def _qwen3_next_like() -> HybridGeometry:
    # Three Mamba (align) groups and one full-attention group, 512-token blocks: the tiny Qwen3-Next layout.
    mamba = [CacheGroupSpec(kind=GroupKind.MAMBA_ALIGN, block_tokens=512, page_bytes=4096) for _ in range(3)]
    return HybridGeometry(
        groups=(*mamba, CacheGroupSpec(kind=GroupKind.FULL_ATTENTION, block_tokens=512, page_bytes=4096)),
        hash_block_tokens=128,
    )


def test_held_and_continuation_blocks_per_group_kind():
    parked = ParkedLoads(_qwen3_next_like(), usable_device_blocks=27)
    assert parked.held_blocks(0) == 0
    assert parked.held_blocks(896) == 3 + 2  # one state block per Mamba group, ceil(896/512) attention blocks
    # Continuing from 896 to 1014 tokens: a running-state block beside each cached state, no new attention block.
    assert parked.continuation_blocks(896, 1014) == 3 * 2 + 0
    assert parked.continuation_blocks(896, 1100) == 3 * 2 + 1


def test_sliding_window_holds_at_most_the_window():
    geometry = HybridGeometry(
        groups=(
            CacheGroupSpec(kind=GroupKind.SLIDING_WINDOW, block_tokens=16, page_bytes=64, window_tokens=64),
            CacheGroupSpec(kind=GroupKind.FULL_ATTENTION, block_tokens=16, page_bytes=64),
        )
    )
    parked = ParkedLoads(geometry, usable_device_blocks=1000)
    assert parked.held_blocks(1600) == 5 + 100
    assert parked.continuation_blocks(1600, 1632) == 5 + 2


def test_admission_keeps_the_largest_continuation_free():
    """Reproduces the deadlock's arithmetic: five loads of 896 tokens hold 25 of 27 usable blocks, and the first
    needs 6 more to continue. The rule admits while held + largest continuation fits, then declines."""
    parked = ParkedLoads(_qwen3_next_like(), usable_device_blocks=27)
    admitted = 0
    for index in range(5):
        if not parked.admits(hit_end_tokens=896, final_tokens=1014):
            break
        parked.park(f"r{index}", held_blocks=parked.held_blocks(896), continuation_blocks=6)
        admitted += 1
    assert admitted == 4  # 4 x 5 held + 6 <= 27; a fifth would make 25 + 6 > 27
    assert parked.held_total == 20
    assert not parked.admits(hit_end_tokens=896, final_tokens=1014)  # still refused: admits() is a pure query
    # Whatever order vLLM serves them in, any parked request fits in what the others leave free.
    assert parked.held_total + parked.largest_continuation() <= 27
    parked.release_scheduled({"r0": 118})
    assert "r0" not in parked and parked.held_total == 15
    assert parked.admits(hit_end_tokens=896, final_tokens=1014)
    parked.release("r1"), parked.release("missing")
    assert len(parked) == 2
    parked.clear()
    assert len(parked) == 0 and parked.held_total == 0 and parked.largest_continuation() == 0


def test_negative_pool_is_refused():
    with pytest.raises(ValueError, match="usable_device_blocks: -1"):
        ParkedLoads(_qwen3_next_like(), usable_device_blocks=-1)


def test_a_load_that_would_park_alone_is_never_deferred():
    """The continuation is an upper bound: applied to a lone request it would refuse hits that vLLM runs fine. A
    lone parked request waits only for running requests, so it is admitted whatever the bound says."""
    parked = ParkedLoads(_qwen3_next_like(), usable_device_blocks=11)
    assert not parked.admits(hit_end_tokens=512, final_tokens=1750)  # 4 held + 3 x 2 + 3 > 11
    assert not parked.defers(hit_end_tokens=512, final_tokens=1750)
    parked.park("r0", held_blocks=parked.held_blocks(512), continuation_blocks=parked.continuation_blocks(512, 1750))
    # A second load waits until the first computed, then parks in its turn.
    assert parked.defers(hit_end_tokens=512, final_tokens=1750)
    parked.release_scheduled({"r0"})
    assert not parked.defers(hit_end_tokens=512, final_tokens=1750)


def test_a_load_that_fits_beside_the_parked_ones_is_not_deferred():
    parked = ParkedLoads(_qwen3_next_like(), usable_device_blocks=27)
    parked.park("r0", held_blocks=5, continuation_blocks=6)
    assert parked.admits(hit_end_tokens=896, final_tokens=1014)
    assert not parked.defers(hit_end_tokens=896, final_tokens=1014)


def _hot_rerun(device_blocks: int):
    """Four 640-token prompts run cold, the device cache emptied, then all four again at once with loads taking
    three steps, on a device pool of `device_blocks`: the manager (and so the simulator) applies the parking rule."""
    from toolkit.core import DeviceBlockPoolModel, OffloadConfig, OffloadManager, parse_groups_spec
    from toolkit.core.sim import SimEngine

    geometry = HybridGeometry(groups=parse_groups_spec("full_attention:64,mamba_align:64"), hash_block_tokens=64)
    device = DeviceBlockPoolModel(device_blocks)
    manager = OffloadManager(geometry=geometry, device_pool=device, config=OffloadConfig(num_cpu_blocks=256))
    prompts = {f"p{i}": [1000 * i + t for t in range(640)] for i in range(4)}
    cold = SimEngine(manager, device, chunk_tokens=64, completion_delay_steps=3)  # a Mamba state every 64
    for request_id, prompt in prompts.items():
        cold.add_request(request_id, prompt, num_decode_tokens=4)
        cold.run_until_idle()
    device.__init__(device_blocks)  # an empty device cache: every hot prompt hits the CPU tier only
    hot = SimEngine(manager, device, chunk_tokens=640, completion_delay_steps=3)
    for request_id, prompt in prompts.items():
        hot.add_request(f"hot-{request_id}", prompt, num_decode_tokens=4)
    hot.run_until_idle(max_steps=500)
    return manager, hot


def test_the_simulator_defers_loads_by_the_managers_parking_rule():
    roomy_manager, roomy = _hot_rerun(device_blocks=200)
    tight_manager, tight = _hot_rerun(device_blocks=30)
    for manager, engine in ((roomy_manager, roomy), (tight_manager, tight)):
        assert sorted(engine.finished_ids) == [f"hot-p{i}" for i in range(4)]  # no deadlock, every request done
        assert all(hit > 0 for hit in engine.hit_tokens.values())  # each hot prompt loaded from the CPU tier
        assert len(manager.parking) == 0  # everything parked was released when it computed
    assert roomy_manager.parking.num_deferred == 0
    assert tight_manager.parking.num_deferred > 0  # the tight pool made later loads wait, not park at once
