"""A disk tier below the CPU pool, seen from the scheduler side: demotion on eviction, promotion of a hit's
disk-held blocks into CPU blocks, and which loads read from disk.

A lookup over both tiers (`TierKeyIndex` with a `DiskIndex`) reports a disk-held block as a negative id
(`disk_marker`). Before the hit is pinned, `promote` takes a CPU block for each (pinning the hit's CPU blocks
first, so the allocation's evictions never take them), registers the slot's keys on it and marks it *arriving
from disk*: from then on the load is planned exactly like a CPU hit; the engine times its disk read
(`take_load_blocks`: the disk blocks of each load planned since it was last called). A CPU block evicted before
any load used it was read for nothing (counted in the reads, in no load).
"""

from __future__ import annotations

from dataclasses import replace

from toolkit.core.lookup.hybrid import HybridLookup
from toolkit.core.lookup.result import LookupResult
from toolkit.core.lookup.tier_index import TierKeyIndex, disk_slot
from toolkit.core.pool.blocks import CpuBlockPool
from toolkit.core.pool.disk_index import DiskIndex
from toolkit.core.pool.in_flight import InFlightStores
from toolkit.core.pool.keys import BlockKey


class DiskCascade:
    """The disk index under `cpu`, hooked to its evictions (write-back on eviction)."""

    def __init__(self, cpu: CpuBlockPool, num_blocks: int) -> None:
        self.index = DiskIndex(num_blocks)
        self._cpu = cpu
        self._arriving: set[int] = set()  # CPU blocks promoted from disk that no planned load has used yet
        self._load_blocks: dict[str, int] = {}  # request -> disk blocks in its planned load, until taken
        self.loaded_blocks = 0  # disk blocks that planned loads used
        self.loaded_tokens = 0  # hit tokens those loads served, pro rata of their blocks from disk
        cpu.on_evict = self._demote

    def lookup(self, cpu_lookup: HybridLookup, in_flight: InFlightStores) -> HybridLookup:
        """A lookup of `cpu_lookup`'s geometry and options over the CPU pool and this disk tier."""
        drop = bool(cpu_lookup.tables.drop_tokens)
        index = TierKeyIndex(self._cpu, in_flight, self.index)
        return HybridLookup(cpu_lookup.geometry, index, speculative_block_drop=drop)

    def _demote(self, block_id: int, keys: tuple[BlockKey, ...]) -> None:
        self._arriving.discard(block_id)
        self.index.demote(keys)

    def promote(self, result: LookupResult) -> LookupResult:
        """`result` with its disk-held blocks promoted into fresh CPU blocks (cached, unpinned: the caller pins
        the hit as usual). Without room in the CPU pool for them, a miss at the same local prefix."""
        cpu = self._cpu
        cpu_ids = [b for group in result.block_ids for b in group if b > 0]
        slots: dict[int, int] = {}  # slot -> group, in hit order
        for group_id, group in enumerate(result.block_ids):
            for block_id in group:
                slot = disk_slot(block_id)
                if slot is not None:
                    slots.setdefault(slot, group_id)
        if not slots:
            return result
        cpu.touch(cpu_ids)  # pinned while the allocation below evicts
        if len(slots) > cpu.num_free_blocks:
            cpu.free(cpu_ids)
            return replace(result, hit_tokens=0, block_ids=tuple(() for _ in result.block_ids))
        self.index.touch(list(slots))
        keys = [self.index.promote(slot) for slot in slots]  # read before the allocation's demotions
        fresh = cpu.allocate(list(slots.values()))
        promoted: dict[int, int] = {}
        for slot, block_id, slot_keys in zip(slots, fresh, keys):
            cpu.cache(block_id, slot_keys[0], slot_keys[1:])
            self._arriving.add(block_id)
            promoted[-1 - slot] = block_id
        cpu.free(cpu_ids)
        cpu.free(fresh)  # cached and free: the caller's pin follows at once, nothing allocates in between
        blocks = tuple(tuple(promoted.get(b, b) for b in group) for group in result.block_ids)
        return replace(result, block_ids=blocks)

    def note_load(self, request_id: str, cpu_block_ids: tuple[int, ...], external_tokens: int) -> None:
        """A planned load: which of its CPU blocks arrive from disk (their bytes are in host memory after it)."""
        arriving = self._arriving
        if not arriving or not cpu_block_ids:
            return
        from_disk = sum(1 for b in cpu_block_ids if b in arriving)
        if not from_disk:
            return
        arriving.difference_update(cpu_block_ids)
        self._load_blocks[request_id] = self._load_blocks.get(request_id, 0) + from_disk
        self.loaded_blocks += from_disk
        self.loaded_tokens += external_tokens * from_disk // len(cpu_block_ids)

    def take_load_blocks(self) -> dict[str, int]:
        """Per request, the disk blocks of the loads planned since the last call (the engine's step: a load is
        planned and sent in the same step)."""
        blocks, self._load_blocks = self._load_blocks, {}
        return blocks

    def clear(self) -> None:
        self.index.clear()
        self._arriving.clear()
        self._load_blocks.clear()
