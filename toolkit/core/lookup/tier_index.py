"""The lookup's view of the tiers: the CPU pool's cached keys (and a disk tier's, when one is below it, and a shared
store's below that), plus the keys of stores in flight for miss attribution.

A key held below the CPU tier only gets a negative block id, `disk_marker(slot)`: slots `0 .. disk.num_blocks - 1`
are the disk's, the store's slot `s` is `disk.num_blocks + s` (`TierKeyIndex.store_slot_base`)."""

from __future__ import annotations

from typing import Callable, Container

from toolkit.core.lookup.result import KeyStatus
from toolkit.core.pool.blocks import CpuBlockPool
from toolkit.core.pool.disk_index import DiskIndex
from toolkit.core.pool.in_flight import InFlightStores
from toolkit.core.pool.keys import BlockKey


def disk_marker(slot: int) -> int:
    """The block id a lookup reports for a key held on disk only: negative, never a CPU block (`disk_slot`)."""
    return -1 - slot


def disk_slot(block_id: int) -> int | None:
    """The disk slot behind a lookup's block id, or None for a CPU block (including the null block)."""
    return -1 - block_id if block_id < 0 else None


class _EitherTier:
    """`key in` the CPU pool or the disk tier."""

    __slots__ = ("_cpu", "_disk")

    def __init__(self, cpu: Container[object], disk: Container[object]) -> None:
        self._cpu, self._disk = cpu, disk

    def __contains__(self, key: object) -> bool:
        return key in self._cpu or key in self._disk


class TierKeyIndex:
    """The lookup's view of the CPU tier: the pool, plus in-flight keys for miss attribution.

    With `disk`, a key held on disk only counts as held too, and `lookup` gives it a negative id
    (`disk_marker(slot)`): the manager promotes those slots into CPU blocks before the hit is pinned. With `store`
    (below the disk), a key held by the store only is held too, its id past the disk's slots."""

    def __init__(
        self,
        cpu: CpuBlockPool,
        in_flight: InFlightStores,
        disk: DiskIndex | None = None,
        store: DiskIndex | None = None,
    ) -> None:
        # Lookups probe membership with `in` on these containers directly (one dict probe, no method call);
        # `key_status` below is the same decision.
        self.key_container: Container[object] = cpu.key_container
        self.in_flight_key_container = in_flight.keys
        self.evicted_key_container = cpu.evicted_key_container
        self._cpu, self._in_flight, self._disk, self._store = cpu, in_flight, disk, store
        self.store_slot_base = disk.num_blocks if disk is not None else 0
        self.lookup: Callable[[BlockKey], int | None]
        if disk is None:
            self.lookup = cpu.lookup
        elif store is None:
            self.key_container = _EitherTier(cpu.key_container, disk.key_container)
            self.lookup = self._lookup_either
        else:  # nested: the disk-only path above keeps its single extra probe
            self.key_container = _EitherTier(cpu.key_container, _EitherTier(disk.key_container, store.key_container))
            self.lookup = self._lookup_any

    def _lookup_either(self, key: BlockKey) -> int | None:
        found = self._cpu.lookup(key)
        if found is not None or self._disk is None:
            return found
        slot = self._disk.slot_of(key)
        return None if slot is None else disk_marker(slot)

    def _lookup_any(self, key: BlockKey) -> int | None:
        """The CPU pool first, then the disk, then the store (the disk's copy is read when both hold a key)."""
        found = self._lookup_either(key)
        if found is not None or self._store is None:
            return found
        slot = self._store.slot_of(key)
        return None if slot is None else disk_marker(self.store_slot_base + slot)

    def key_status(self, key: BlockKey) -> KeyStatus:
        if key in self.key_container:
            return KeyStatus.CACHED
        if key in self._in_flight.keys:
            return KeyStatus.IN_FLIGHT
        return KeyStatus.EVICTED if self._cpu.was_evicted(key) else KeyStatus.NEVER_STORED
