"""The disk with the shared store below it (toolkit/tiers/cascade.py), over a real DiskTier and a real Mooncake
store on loopback: writes reach both, reads try the disk then the store (a miss, a corrupt slot), `discard` reaches
the disk only, a write is refused only when both refused, and every read served is bit-identical."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest
from disk_rig import make_identity
from shared_rig import BLOCK_BYTES, config, needs_store, payload

from toolkit.tiers.cascade import CascadeTier
from toolkit.tiers.disk import DiskTier, DiskTierConfig, PoolSpec, Refused
from toolkit.tiers.disk.layout import HEADER_BYTES, PoolGeometry
from toolkit.tiers.disk.manifest import pool_file
from toolkit.tiers.shared import SharedTier, StoreServer

pytestmark = needs_store
POOL = "attn"


@pytest.fixture(scope="module")
def server():
    with StoreServer(64 << 20) as running:
        yield running


def _disk(folder: Path, slots: int = 8) -> DiskTier:
    pool = PoolSpec(POOL, BLOCK_BYTES, slots * PoolGeometry(BLOCK_BYTES, 1).slot_bytes)
    return DiskTier.open(DiskTierConfig(folder=folder, identity=make_identity(), pools=(pool,), queue_depth=4))


def _cascade(folder: Path, master: str, slots: int = 8) -> CascadeTier:
    return CascadeTier(_disk(folder, slots), SharedTier.connect(config(master)))


def _wait(tier: CascadeTier, ticket: int | Refused, timeout_s: float = 10.0):
    assert isinstance(ticket, int), ticket
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for done in tier.poll(timeout_s=0.05):
            if done.ticket == ticket:
                return done
    raise AssertionError(f"ticket {ticket} did not complete within {timeout_s} s")


def _read(tier: CascadeTier, key: bytes) -> tuple[bool, bytearray]:
    dest = bytearray(BLOCK_BYTES)
    return _wait(tier, tier.submit_read(POOL, key, dest)).ok, dest


def test_a_write_reaches_both_tiers_and_another_engine_with_an_empty_disk_reads_it_from_the_store(tmp_path, server):
    key, block = b"blk-shared", payload(11)
    a = _cascade(tmp_path / "a", server.master)
    b = _cascade(tmp_path / "b", server.master)
    try:
        done = _wait(a, a.submit_write(POOL, key, block))
        assert done.ok and done.op == "write"
        assert a.upper.contains(POOL, key)
        assert a.lower.contains(POOL, key)  # type: ignore[attr-defined]  # the store, asked directly
        assert (a.counts.writes_upper, a.counts.writes_lower) == (1, 1)
        assert _read(a, key) == (True, block)
        assert (a.counts.reads_from_upper, a.counts.reads_from_lower) == (1, 0)
        assert _read(b, key) == (True, block)  # B's disk is empty: the store served it
        assert (b.counts.reads_from_upper, b.counts.reads_from_lower, b.counts.reads_fell_back) == (0, 1, 1)
        assert b.held_keys(POOL) == [] and a.held_keys(POOL) == [key]  # a restart sees the disk's keys
    finally:
        a.close()
        b.close()


def test_a_corrupt_disk_slot_falls_back_to_the_store_and_a_key_neither_holds_is_a_miss(tmp_path, server):
    key, block = b"blk-corrupt", payload(12)
    tier = _cascade(tmp_path / "a", server.master)
    try:
        assert _wait(tier, tier.submit_write(POOL, key, block)).ok
        # flip the slot's payload on disk (slot 0: the only one written), behind the tier's back
        fd = os.open(pool_file(tmp_path / "a", POOL), os.O_WRONLY)
        try:
            os.pwrite(fd, bytes(b ^ 0xFF for b in block[:4096]), HEADER_BYTES)
            os.fsync(fd)
        finally:
            os.close(fd)
        assert _read(tier, key) == (True, block)  # the disk's read did not verify: the store's copy, verified
        assert tier.upper.stats().pools[POOL].corrupt == 1
        assert (tier.counts.reads_from_upper, tier.counts.reads_from_lower, tier.counts.reads_fell_back) == (0, 1, 1)
        assert not tier.upper.contains(POOL, key)  # the disk dropped the corrupt slot itself
        ok, dest = _read(tier, b"blk-nobody")  # the disk misses at once, the store's answer is a miss
        assert not ok and not any(dest)
    finally:
        tier.close()


def test_discard_reaches_the_disk_only_the_store_still_serves_the_block(tmp_path, server):
    key, block = b"blk-discard", payload(13)
    tier = _cascade(tmp_path / "a", server.master)
    try:
        assert _wait(tier, tier.submit_write(POOL, key, block)).ok
        assert tier.discard(POOL, key)
        assert not tier.upper.contains(POOL, key) and tier.held_keys(POOL) == []
        assert _read(tier, key) == (True, block)
        assert tier.counts.reads_from_lower == 1
        # a second write of the key: the store holds it already, the disk takes it again
        assert _wait(tier, tier.submit_write(POOL, key, block)).ok
        assert tier.upper.contains(POOL, key)
    finally:
        tier.close()


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_a_write_is_held_when_either_tier_kept_it_and_refused_only_when_both_refused(tmp_path):
    down = SharedTier.connect(config(_closed_port(), pause_s=60.0))  # no store: every write refused (as full)
    tier = CascadeTier(_disk(tmp_path / "a", slots=1), down)
    try:
        first = tier.submit_write(POOL, b"blk-1", payload(1))
        second = tier.submit_write(POOL, b"blk-2", payload(2))  # the one slot is being written: the disk is full
        assert isinstance(first, int) and second is Refused.FULL
        assert _wait(tier, first).ok  # the disk kept it: held, though the store refused
        counts = tier.counts
        assert (counts.writes_upper, counts.writes_not_held_upper, counts.writes_not_held_lower) == (1, 1, 2)
        assert tier.submit_write(POOL, b"blk-1", payload(1)) is Refused.PRESENT  # present in one: held
        assert tier.in_flight == 0
    finally:
        tier.close()
