"""The worker's mover over the disk with the shared store below it (toolkit/vllm/disk_worker.py over a CascadeTier,
real disk files and a real Mooncake store): engine A's demotions land in both tiers, engine B (an empty disk)
promotes them from the store bit-identical, and the tier counts say which tier did what, down to the connector's
stats labels (`tier_blocks{tier="disk"|"shared"}`)."""

from __future__ import annotations

import time

import pytest
from disk_rig import make_identity
from shared_rig import BLOCK_BYTES, config, needs_store

from toolkit.core.metadata import DiskBatch
from toolkit.tiers.cascade import CascadeTier
from toolkit.tiers.disk import DiskTier, DiskTierConfig, PoolSpec
from toolkit.tiers.disk.layout import PoolGeometry
from toolkit.tiers.shared import SharedTier, StoreServer

torch = pytest.importorskip("torch")
pytestmark = needs_store
ROWS = (BLOCK_BYTES // 4, 3 * BLOCK_BYTES // 4)  # two regions (say K and V): one block is a row of each


def _mover(folder, master: str, mirrors):
    from toolkit.vllm.disk_worker import DiskMover

    pool = PoolSpec("attn", BLOCK_BYTES, 8 * PoolGeometry(BLOCK_BYTES, 1).slot_bytes)
    disk = DiskTier.open(DiskTierConfig(folder=folder, identity=make_identity(), pools=(pool,), queue_depth=4))
    return DiskMover(CascadeTier(disk, SharedTier.connect(config(master))), "attn", mirrors)


def _until(mover, check, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"{what} not within {timeout_s} s"
        mover.poll()
        time.sleep(0.005)


def test_blocks_are_counted_by_the_tier_that_kept_and_served_them(tmp_path):
    from toolkit.vllm.disk_worker import READY
    from toolkit.vllm.metrics import COUNTER, stats_delta

    gen = torch.Generator().manual_seed(9)
    mirrors_a = [torch.randint(-128, 128, (8, r), dtype=torch.int8, generator=gen) for r in ROWS]
    mirrors_b = [torch.zeros((8, r), dtype=torch.int8) for r in ROWS]
    keys = (b"prefix-0", b"prefix-1", b"prefix-2")
    with StoreServer(32 << 20) as server:
        a = _mover(tmp_path / "a", server.master, mirrors_a)
        b = _mover(tmp_path / "b", server.master, mirrors_b)
        try:
            a.apply(DiskBatch(event_id=1, demote_host_block_ids=(0, 3, 5), demote_keys=keys))
            _until(a, lambda: not a.busy, "engine A's demotions")
            a.apply(DiskBatch(event_id=2, promote_host_block_ids=(7,), promote_keys=(keys[1],)))  # from A's disk
            _until(a, lambda: a.status([7]) == READY, "engine A's promotion")
            b.apply(DiskBatch(event_id=3, promote_host_block_ids=(1, 2, 6), promote_keys=keys))  # from the store
            _until(b, lambda: b.status([1, 2, 6]) == READY, "engine B's promotions")
            wrote, read = a.take_tier_counts(), b.take_tier_counts()
        finally:
            a.close()
            b.close()
    for mirror_a, mirror_b in zip(mirrors_a, mirrors_b):
        assert torch.equal(mirror_b[[1, 2, 6]], mirror_a[[0, 3, 5]]) and torch.equal(mirror_a[7], mirror_a[3])
    assert wrote is not None and wrote.below is not None and read is not None and read.below is not None
    assert (wrote.tier, wrote.below.tier) == ("disk", "shared")
    assert (wrote.blocks_written, wrote.below.blocks_written) == (3, 3)
    assert (wrote.blocks_read, wrote.below.blocks_read, wrote.hits) == (1, 0, 1)  # A's own disk served A
    assert (read.blocks_read, read.below.blocks_read, read.below.hits, read.misses) == (0, 3, 3, 3)
    assert read.below.bytes_read == 3 * BLOCK_BYTES and read.reads_failed == 0
    total = wrote.copy()
    total.add(read)  # two workers' reports summed, as the scheduler side does
    blocks = stats_delta({"counters": {}, "lower_tier": total}, {}).data[COUNTER]["tier_blocks"]
    assert blocks == {"disk|read": 1, "disk|written": 3, "shared|read": 3, "shared|written": 3}
