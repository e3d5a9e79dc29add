"""The scheduler side below a disk (toolkit/vllm/shared_store.py, a real Mooncake store on loopback): a key the store
holds is learnt by asking; the audit that drops what the store evicted asks only about keys learnt from the store,
so a key this engine's disk holds (restored at start, never in the store) stays indexed; with the store alone
every indexed key is audited."""

from __future__ import annotations

import time

from shared_rig import identity, needs_store, payload

from toolkit.core.pool.blocks import CpuBlockPool
from toolkit.core.pool.disk_index import DiskIndex, disk_key
from toolkit.core.pool.keys import BlockKey
from toolkit.tiers.shared import StoreServer
from toolkit.vllm.disk_store import POOL
from toolkit.vllm.shared_store import StoreLookups, connect_tier

pytestmark = needs_store
BLOCK_BYTES = 64 << 10


def _until(check, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"{what} not within {timeout_s} s"
        time.sleep(0.005)


def _index_after_learning_and_an_audit(master: str, *, below_a_disk: bool) -> tuple[DiskIndex, StoreLookups]:
    learnt, on_disk = BlockKey(0, b"in-the-store"), BlockKey(0, b"on-this-disk")
    index = DiskIndex(8)
    index.restore([on_disk])  # what the disk kept (keys_kept at start): never written to the store
    lookups = StoreLookups(
        connect_tier(master, identity(), BLOCK_BYTES), num_groups=1, hash_tokens=16, audit_learnt_only=below_a_disk
    )
    cpu = CpuBlockPool(4)
    # a request whose two blocks are the disk's key and, past it, the store's: only the store's is asked
    _until(lambda: not lookups.waiting("r", [b"on-this-disk", b"in-the-store"], 0, cpu, index), "the store's answer")
    assert learnt in index and lookups.counts.keys_asked == lookups.counts.keys_found == 1
    lookups.audit(index, every_key=True)
    _until(lambda: not lookups.audit(index), "the audit's answer")
    return index, lookups


def test_below_a_disk_only_keys_learnt_from_the_store_are_audited():
    with StoreServer(32 << 20) as server:
        writer = connect_tier(server.master, identity(), BLOCK_BYTES)
        try:
            name = disk_key(BlockKey(0, b"in-the-store"))
            assert name is not None and isinstance(writer.submit_write(POOL, name, payload(3, BLOCK_BYTES)), int)
            _until(lambda: writer.contains(POOL, name), "the store's copy")
            cascade_index, cascade = _index_after_learning_and_an_audit(server.master, below_a_disk=True)
            alone_index, alone = _index_after_learning_and_an_audit(server.master, below_a_disk=False)
            cascade.close()
            alone.close()
        finally:
            writer.close()
    assert BlockKey(0, b"on-this-disk") in cascade_index and cascade.counts.audit_dropped == 0
    assert BlockKey(0, b"in-the-store") in cascade_index and cascade.counts.audits >= 1  # asked, still held
    assert BlockKey(0, b"on-this-disk") not in alone_index and alone.counts.audit_dropped == 1
