"""A step's store batch and the store admission rule: which device blocks one store event copies, which blocks are
being copied now, and whether a device block may be stored (docs/reference-behaviour.md, "Stores: admission and the
positional scan"). Every admitted device block joins the in-flight set at once, so one device block (or one key) is
never selected twice, within a step or across steps.
"""

from __future__ import annotations

import enum
from itertools import compress, repeat
from typing import Any, Callable, Collection, Iterable, Sequence

from toolkit.core.events import BlockMeta
from toolkit.core.pool.blocks import CpuBlockPool
from toolkit.core.pool.device_pool import DevicePool
from toolkit.core.pool.group_tags import NO_GROUP
from toolkit.core.pool.in_flight import InFlightStores
from toolkit.core.pool.keys import BlockKey


class Admission(str, enum.Enum):
    """Whether a device block may be stored, checked in this order (`StoreBatch.admit`)."""

    NULL_BLOCK = "null_block"
    NOT_HASHED = "not_hashed"  # no key, or a key of another group than the one the block is read for
    IN_FLIGHT = "in_flight"  # the block, or its primary key, is being stored already
    ALREADY_CACHED = "already_cached"  # the CPU holds its primary key
    READY = "ready"  # stored: added to the batch
    NO_ROOM = "no_room"  # would be READY, but the batch is full (not added)


class StoreBatch:
    """The device blocks one store event will copy, index-parallel lists. `capacity`: free CPU blocks.

    A plain slotted class, not a dataclass: one is built every step and for every finishing request.
    """

    __slots__ = ("capacity", "in_flight", "device_ids", "group_ids", "keys", "metas", "sources", "request_ids")

    def __init__(self, capacity: int, in_flight: InFlightStores) -> None:
        self.capacity = capacity
        self.in_flight = in_flight
        self.device_ids: list[int] = []
        self.group_ids: list[int] = []
        self.keys: list[tuple[BlockKey, ...]] = []
        self.metas: list[BlockMeta | None] = []
        self.sources: list[str] = []
        self.request_ids: dict[str, None] = {}

    def has_room(self) -> bool:
        return len(self.device_ids) < self.capacity

    def admit(
        self,
        device: DevicePool,
        cpu: CpuBlockPool,
        device_ids: Iterable[int],
        group_ids: Iterable[int],
        *,
        source: str,
        request_id: str | None = None,
        also_in_flight: Collection[int] = frozenset(),
        meta_of: Callable[[int], BlockMeta] | None = None,
        stop_when_full: bool = False,
        adds: Iterable[bool] | None = None,
    ) -> list[Admission]:
        """The store admission rule (the one place it is written): each device block, in order, is checked as
        `Admission` lists; a READY one joins the batch and the in-flight set at once, so a later block with the same
        key is IN_FLIGHT. Returns one outcome per block examined.

        `group_ids`: the group each block serves, parallel to `device_ids`. `also_in_flight`: more device ids that
        count as in flight (hand-offs waiting for room). `meta_of(i)`: the KV-event payload of the i-th block, asked
        only for added ones. `stop_when_full`: stop at the first block met while the batch is full, unexamined (the
        positional scan retries it next step); otherwise every block is classified, NO_ROOM where READY does not fit.
        `adds`: parallel to `device_ids`, whether a READY block is added (False: classified only, reported READY,
        takes no room); None adds every READY block.

        One call classifies a whole run of blocks: the scan and the hand-off intake call it per request and group,
        not per block (a call per block would cost more than the rule itself).
        """
        null_id = device.null_block_id
        primary_key, alias_keys, cpu_keys = device.primary_key, device.alias_keys, cpu.key_container
        in_flight = self.in_flight
        flight_ids, flight_keys, add_keys = in_flight.device_ids, in_flight.keys, in_flight.add_keys
        taken, group_column, key_column = self.device_ids, self.group_ids, self.keys
        meta_column, source_column = self.metas, self.sources
        room = self.capacity - len(taken)
        outcomes: list[Admission] = []
        if stop_when_full and room <= 0:
            return outcomes
        outcome_of = outcomes.append
        num_added = 0
        for device_id, group_id, add in zip(device_ids, group_ids, repeat(True) if adds is None else adds):
            if device_id == null_id:
                outcome_of(Admission.NULL_BLOCK)
                continue
            primary = primary_key(device_id)
            if primary is None or (primary[0] != group_id and group_id != NO_GROUP):
                # Not hashed, or hashed for another group: the device pool is shared by every group, so a block id
                # read from a stale table may now serve another group, whose tensors, not the scanned group's, hold
                # its KV. Copying the scanned group's bytes under that key would serve wrong KV: never stored.
                outcome_of(Admission.NOT_HASHED)
            elif device_id in flight_ids or primary in flight_keys or device_id in also_in_flight:
                # Also dedupe by key: two device blocks with one hash would take two CPU blocks for one key.
                outcome_of(Admission.IN_FLIGHT)
            elif primary in cpu_keys:
                outcome_of(Admission.ALREADY_CACHED)
            elif not add:
                outcome_of(Admission.READY)
            elif num_added == room:
                outcome_of(Admission.NO_ROOM)
            else:
                aliases = alias_keys(device_id)
                flight_ids.add(device_id)
                if aliases:
                    keys = (primary, *aliases)
                    add_keys(keys)
                else:  # the primary is not in flight (tested above): the common case, one set insert
                    keys = (primary,)
                    flight_keys.add(primary)
                taken.append(device_id)
                group_column.append(group_id)
                key_column.append(keys)
                if meta_of is not None:
                    meta_column.append(meta_of(len(outcomes)))
                outcome_of(Admission.READY)
                num_added += 1
                if num_added == room and stop_when_full:
                    break
        if num_added:
            # The per-block constants join their columns once per call, at C speed (in order: every added block
            # came from this call, so the columns stay index-parallel).
            source_column.extend(repeat(source, num_added))
            if meta_of is None:
                meta_column.extend(repeat(None, num_added))
            if request_id is not None:
                self.request_ids[request_id] = None
        return outcomes

    def add_keyed(
        self,
        device_id: int,
        group_id: int,
        keys: tuple[BlockKey, ...],
        source: str,
        meta: BlockMeta | None,
        request_id: str | None,
    ) -> None:
        """Add a block the caller admitted by its own rule (the finish flush's prompt tail, keyed by an alias),
        with its keys already read (primary first, then aliases)."""
        assert len(self.device_ids) < self.capacity, (len(self.device_ids), self.capacity)
        in_flight = self.in_flight
        assert device_id not in in_flight.device_ids, f"device block {device_id} selected twice"
        in_flight.device_ids.add(device_id)
        in_flight.add_keys(keys)
        self.device_ids.append(device_id)
        self.group_ids.append(group_id)
        self.keys.append(keys)
        self.metas.append(meta)
        self.sources.append(source)
        if request_id is not None:
            self.request_ids[request_id] = None

    def __len__(self) -> int:
        return len(self.device_ids)

    def _columns(self) -> tuple[list[Any], ...]:
        """The index-parallel lists, for the operations that cut or reorder entries (one list of them to keep)."""
        return (self.device_ids, self.group_ids, self.keys, self.metas, self.sources)

    def remove(self, indices: Sequence[int]) -> tuple[list[int], list[tuple[BlockKey, ...]]]:
        """Drop the entries at `indices` (ascending); returns their device ids and keys (still in flight: the caller
        releases them)."""
        device_ids, keys = self.device_ids, self.keys
        cut_ids = [device_ids[i] for i in indices]
        cut_keys = [keys[i] for i in indices]
        keep = [True] * len(device_ids)
        for i in indices:
            keep[i] = False
        # `compress` filters each column at C speed with the one mask (a fine-only cut runs most steps under pressure).
        for column in self._columns():
            column[:] = compress(column, keep)
        return cut_ids, cut_keys

    def rotate(self, count: int) -> None:
        """Move the first `count` entries to the end, in their order."""
        for column in self._columns():
            column[:] = column[count:] + column[:count]

    def truncate(self, length: int) -> tuple[list[int], list[tuple[BlockKey, ...]]]:
        """Keep the first `length` entries; returns the cut entries' device ids and keys (still in flight: the
        caller releases them)."""
        cut_ids, cut_keys = self.device_ids[length:], self.keys[length:]
        for column in self._columns():
            del column[length:]
        return cut_ids, cut_keys
