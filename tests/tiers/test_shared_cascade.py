"""The cascade's worker-side mover (toolkit/vllm/disk_worker.py, written for the disk tier against the `LowerTier`
contract) drives the shared tier unchanged: engine A's worker demotes host blocks into the store, engine B's worker
promotes them into its own host mirrors, bit-identical; a key nobody wrote fails its promotion (a recompute)."""

from __future__ import annotations

import time

import pytest
from shared_rig import BLOCK_BYTES, config, needs_store

from toolkit.core.metadata import DiskBatch
from toolkit.tiers.shared import SharedTier, StoreServer

torch = pytest.importorskip("torch")
pytestmark = needs_store


def _until(check, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"{what} not within {timeout_s} s"
        time.sleep(0.005)


def test_one_engines_worker_demotes_and_anothers_promotes_bit_identical():
    from toolkit.vllm.disk_worker import FAILED, READY, DiskMover

    rows = (BLOCK_BYTES // 4, 3 * BLOCK_BYTES // 4)  # two regions (say K and V): one block is a row of each
    gen = torch.Generator().manual_seed(5)
    mirrors_a = [torch.randint(-128, 128, (8, r), dtype=torch.int8, generator=gen) for r in rows]
    mirrors_b = [torch.zeros((8, r), dtype=torch.int8) for r in rows]
    keys = (b"prefix-0", b"prefix-1", b"prefix-2")
    with StoreServer(32 << 20) as server:
        a = DiskMover(SharedTier.connect(config(server.master)), "attn", mirrors_a)
        b = DiskMover(SharedTier.connect(config(server.master)), "attn", mirrors_b)
        a.apply(DiskBatch(event_id=1, demote_host_block_ids=(0, 3, 5), demote_keys=keys))
        _until(lambda: a.poll() or not a.busy, "engine A's demotions")
        b.apply(DiskBatch(event_id=7, promote_host_block_ids=(1, 2, 6), promote_keys=keys))
        _until(lambda: b.poll() or b.status([1, 2, 6]) == READY, "engine B's promotions")
        b.apply(DiskBatch(event_id=8, promote_host_block_ids=(4,), promote_keys=(b"never-written",)))
        _until(lambda: b.poll() or b.status([4]) == FAILED, "the failed promotion")
        settled, failed = b.take_report()
        a.close()
        b.close()
    for mirror_a, mirror_b in zip(mirrors_a, mirrors_b):
        assert torch.equal(mirror_b[[1, 2, 6]], mirror_a[[0, 3, 5]])
        assert not mirror_b[[0, 3, 4, 5, 7]].any()  # nothing else written, the failed promotion included
    assert (a.counts.demotions_written, b.counts.promotions_read, b.counts.promotions_failed) == (3, 3, 1)
    assert settled == {7: 1, 8: 1} and failed == {4}
