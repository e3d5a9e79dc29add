"""The worker's side of the cascade (`toolkit.vllm.disk_worker.DiskMover`) over a real disk tier in a temporary
folder and real host-mirror tensors: a demoted block comes back bit-exact into another host block, a promotion of
a block still being written is served from its staging copy, a read that cannot be served fails its block, the
store's LRU drops reach the store, and a clean close keeps what was written for the next open."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from toolkit.core.metadata import DiskBatch  # noqa: E402
from toolkit.tiers.disk import CacheIdentity, DiskTier, DiskTierConfig, GroupGeometry, PoolSpec  # noqa: E402
from toolkit.vllm.disk_worker import DiskMover  # noqa: E402

ROWS = (8192, 4096)  # two regions: an attention row and a Mamba-state row of one CPU block


def _identity() -> CacheIdentity:
    return CacheIdentity(
        model="tiny",
        model_config_hash="0",
        dtype="bfloat16",
        groups=(GroupGeometry("attn", 16, ROWS[0]), GroupGeometry("mamba", 16, ROWS[1])),
        hash_unit_tokens=16,
        hash_algorithm="sha256",
        vllm_version="0.32.0",
        tp_size=1,
        tp_rank=0,
        dcp_size=1,
        dcp_rank=0,
    )


def _mover(folder: Path, mirrors: list, slots: int = 8) -> DiskMover:
    payload = sum(ROWS)
    pool = PoolSpec("block", payload, slots * (payload + 4096))
    tier = DiskTier.open(DiskTierConfig(folder=folder, identity=_identity(), pools=(pool,)))
    return DiskMover(tier, "block", mirrors)


def _settle(mover: DiskMover, blocks: tuple[int, ...], timeout_s: float = 10.0) -> str:
    deadline = time.monotonic() + timeout_s
    while (state := mover.status(blocks)) == "pending" and time.monotonic() < deadline:
        time.sleep(0.002)
        mover.poll()
    return state


def _drain_writes(mover: DiskMover) -> None:
    deadline = time.monotonic() + 10
    while mover.busy and time.monotonic() < deadline:
        time.sleep(0.002)
        mover.poll()


def test_a_demoted_block_comes_back_bit_exact_and_survives_a_clean_close(tmp_path):
    gen = torch.Generator().manual_seed(5)
    mirrors = [torch.randint(-128, 127, (6, row), dtype=torch.int8, generator=gen) for row in ROWS]
    original = [m[2].clone() for m in mirrors]
    mover = _mover(tmp_path / "d", mirrors)
    mover.apply(DiskBatch(event_id=1, demote_host_block_ids=(2,), demote_keys=(b"k2",)))
    for m in mirrors:
        m[2].zero_()  # the evicted block is reused at once: the staged copy is what goes to disk
    _drain_writes(mover)
    assert mover.counts.demotions_written == 1
    mover.apply(DiskBatch(event_id=2, promote_host_block_ids=(4,), promote_keys=(b"k2",)))
    assert mover.status((4, 5)) == "pending" and mover.status((5,)) == "ready"
    assert _settle(mover, (4,)) == "ready"
    assert all(torch.equal(m[4], o) for m, o in zip(mirrors, original))
    assert mover.take_report() == ({2: 1}, set()) and mover.counts.bytes_read == sum(ROWS)
    mover.close()
    reopened = _mover(tmp_path / "d", mirrors)  # a restart: the same identity finds the block
    assert reopened.tier.held_keys("block") == [b"k2"]
    reopened.apply(DiskBatch(event_id=1, drop_keys=(b"k2",)))  # the scheduler's LRU let it go: so does the store
    assert reopened.tier.held_keys("block") == []
    reopened.close()


def test_a_block_still_being_written_is_served_from_staging_and_a_missing_one_fails(tmp_path):
    mirrors = [torch.arange(6 * row, dtype=torch.int64).remainder(251).to(torch.int8).view(6, row) for row in ROWS]
    original = [m[1].clone() for m in mirrors]
    mover = _mover(tmp_path / "d", mirrors)
    batch = DiskBatch(
        event_id=3,
        demote_host_block_ids=(1,),
        demote_keys=(b"k1",),
        promote_host_block_ids=(3, 5),
        promote_keys=(b"k1", b"never-written"),
    )
    mover.apply(batch)  # demotion first, then the promotion of the same key: from the staged copy, at once
    assert all(torch.equal(m[3], o) for m, o in zip(mirrors, original)) and mover.counts.promotions_from_staging == 1
    assert mover.status((3,)) == "ready" and _settle(mover, (5,)) == "failed"
    assert mover.take_report() == ({3: 1}, {5})
    mover.forget((5,))  # a store wrote the block anew
    assert mover.status((5,)) == "ready"
    _drain_writes(mover)
    mover.close()
