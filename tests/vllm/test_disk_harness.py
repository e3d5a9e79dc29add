"""The disk tier through the real connector's both roles, engine-less (vLLM's scheduler, the toolkit's copy worker
over host tensors, a real disk store in a temporary folder): prompts evicted from a tiny CPU tier come back from
disk with the bytes they were stored with; and a store whose slots were damaged on disk (a restart finds it) makes
every read fail verification, so the loads fail and the requests recompute, with nothing left pinned."""

from __future__ import annotations

import time

import torch
from vllm_test_utils import random_prompts

from toolkit.engines.harness import SHAPES, Phase, run_phases

HYBRID = "tiny-qwen3-next"
PAGE = SHAPES[HYBRID].attention_page_bytes


def _harness(make_harness, folder):
    extra = {"cpu_bytes_to_use": 16 * PAGE, "disk_bytes_to_use": 64 << 20, "disk_path": str(folder)}
    return make_harness(HYBRID, connector="toolkit", worker="copy", extra_config=extra)


def _counters(harness) -> dict:
    return dict(harness.connector.cumulative_stats()["counters"])


def test_blocks_come_back_from_disk_and_a_damaged_store_means_recompute(make_harness, tmp_path):
    folder = tmp_path / "disk"
    prompts = random_prompts(6, 2000, seed=11)
    harness = _harness(make_harness, folder)
    rows = next(iter(harness.device_kv.values()))  # every group aliases this one region
    rows.copy_((torch.arange(rows.shape[0], dtype=torch.int64) % 127 + 1).to(torch.int8)[:, None].expand_as(rows))
    # One prompt at a time: the tiny CPU tier then takes every Mamba hand-off (all at once, they find it pinned full)
    run_phases(harness, [Phase("cold", {f"c{i}": p for i, p in enumerate(prompts)}, wave=1)])
    harness.run_until_idle()
    mover = harness.worker.worker_side.disk
    deadline = time.monotonic() + 30
    while mover.busy and time.monotonic() < deadline:  # the cold phase's writes land before the hot phase reads
        time.sleep(0.005)
        harness.step()
    assert not mover.busy
    rows.zero_()  # whatever the hot phase loads must come from the CPU tier or, through it, from disk
    hot = run_phases(harness, [Phase("hot", {f"h{i}": p for i, p in enumerate(prompts)}, reset_before=True)])["hot"]
    counters = _counters(harness)
    assert [r.external_hit_tokens for r in hot.values()] == [1920] * 6
    assert mover.counts.promotions_read > 0 and counters.get("disk_reads_failed", 0) == 0
    loaded = [block for r in hot.values() for _, block in r.loaded_pairs]
    assert loaded and all(rows[b].ne(0).all() for b in loaded)  # real bytes, not the zeroed device
    assert harness.connector.scheduler_side.manager.held_cpu_blocks() == []
    tier = harness.connector.scheduler_side.counts()["lower_tier"]  # the workers' reports (tier_counts.py)
    assert tier.tier == "disk" and tier.blocks_read == tier.hits == mover.counts.promotions_read
    assert tier.read_latency.count == tier.blocks_read and tier.bytes_read == mover.counts.bytes_read
    assert 0 < tier.blocks_written <= mover.counts.demotions_written and tier.writes_not_held == 0
    harness.worker.shutdown()  # closes the store cleanly: a restart reuses it

    pool_file = folder / "rank-0" / "pool-block.data"
    with open(pool_file, "r+b") as f:  # damage every slot (headers and payloads) behind the index's back
        size = f.seek(0, 2)
        for offset in range(0, size, 4096):
            f.seek(offset)
            f.write(b"\xa5" * 64)
    again = _harness(make_harness, folder)
    assert _counters(again).get("disk_blocks_restored", 0) > 0
    phase = Phase("again", {f"a{i}": p for i, p in enumerate(prompts)}, wave=1)
    results = run_phases(again, [phase], timeout_s=20)["again"]
    counters = _counters(again)
    assert counters.get("disk_reads_failed", 0) > 0 and counters.get("loads_failed", 0) > 0
    tier = again.connector.scheduler_side.counts()["lower_tier"]
    assert tier.reads_failed == counters["disk_reads_failed"] == tier.corrupt + tier.misses + tier.read_errors
    assert tier.blocks_read == tier.hits == 0
    assert all(r.finished for r in results.values())  # recomputed, never stuck waiting for a read
    assert again.connector.scheduler_side.manager.num_pinned_device_blocks() == 0
    again.worker.shutdown()
