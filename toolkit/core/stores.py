"""Store selection: admission classification, the eager positional scan, the finish-time prompt tail and the lazy
free-queue walk (behaviour notes §3.6-§3.8). Every selected device block joins the in-flight set at once, so one
device block (or one key) is never selected twice, within a step or across steps.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

from toolkit.core.device_pool import DevicePool
from toolkit.core.geometry import HybridGeometry
from toolkit.core.keys import BlockKey, key_at
from toolkit.core.pool import CpuBlockPool
from toolkit.core.requests import RequestView


class Admission(str, enum.Enum):
    """Whether a device block may be stored, checked in this order."""

    NULL_BLOCK = "null_block"
    NOT_HASHED = "not_hashed"
    IN_FLIGHT = "in_flight"
    ALREADY_CACHED = "already_cached"
    READY = "ready"


@dataclass(frozen=True, kw_only=True)
class BlockMeta:
    """KV-event payload of one positional block (`token_ids` None when the request has no token ids)."""

    num_tokens: int
    token_ids: tuple[int, ...] | None
    parent_key: BlockKey | None


class InFlightStores:
    """Device blocks being copied to the CPU, and the keys they held when scheduled (for dedup and attribution)."""

    def __init__(self) -> None:
        self.device_ids: set[int] = set()
        self.keys: Counter = Counter()

    def add(self, device_id: int, keys: Sequence[BlockKey]) -> None:
        self.device_ids.add(device_id)
        self.keys.update(keys)

    def remove(self, device_id: int, keys: Sequence[BlockKey]) -> None:
        self.device_ids.discard(device_id)
        for key in keys:
            left = self.keys[key] - 1
            if left > 0:
                self.keys[key] = left
            else:
                del self.keys[key]

    def clear(self) -> None:
        self.device_ids.clear()
        self.keys.clear()


def classify(device: DevicePool, cpu: CpuBlockPool, in_flight: InFlightStores, device_id: int,
             extra_in_flight: set[int] | frozenset[int] = frozenset()) -> Admission:
    if device_id == device.null_block_id:
        return Admission.NULL_BLOCK
    primary = device.primary_key(device_id)
    if primary is None:
        return Admission.NOT_HASHED
    # Also dedupe by key: two device blocks with the same hash in one step waste a CPU block (notes §9.1).
    if device_id in in_flight.device_ids or device_id in extra_in_flight or primary in in_flight.keys:
        return Admission.IN_FLIGHT
    if primary in cpu:
        return Admission.ALREADY_CACHED
    return Admission.READY


@dataclass
class StoreBatch:
    """The device blocks one store event will copy, index-parallel lists. `capacity`: free CPU blocks."""

    capacity: int
    in_flight: InFlightStores
    device_ids: list[int] = field(default_factory=list)
    group_ids: list[int] = field(default_factory=list)
    keys: list[tuple[BlockKey, ...]] = field(default_factory=list)
    metas: list[BlockMeta | None] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    request_ids: dict[str, None] = field(default_factory=dict)

    def has_room(self) -> bool:
        return len(self.device_ids) < self.capacity

    def add(self, device: DevicePool, device_id: int, group_id: int, *, source: str,
            meta: BlockMeta | None = None, request_id: str | None = None) -> None:
        assert self.has_room(), (len(self.device_ids), self.capacity)
        assert device_id not in self.in_flight.device_ids, f"device block {device_id} selected twice"
        primary = device.primary_key(device_id)
        keys = ((primary,) if primary is not None else ()) + tuple(device.alias_keys(device_id))
        self.in_flight.add(device_id, keys)
        self.device_ids.append(device_id)
        self.group_ids.append(group_id)
        self.keys.append(keys)
        self.metas.append(meta)
        self.sources.append(source)
        if request_id is not None:
            self.request_ids[request_id] = None

    def __len__(self) -> int:
        return len(self.device_ids)


@dataclass
class StoreState:
    """Eager tracking of one request: its device tables and how many leading blocks per group were handled."""

    block_ids: list[list[int]]
    num_stored_blocks: list[int]
    handoff_boundary_tokens: list[int]
    store_event_ids: set[int] = field(default_factory=set)
    finished: bool = False

    @classmethod
    def empty(cls, num_groups: int) -> "StoreState":
        return cls([[] for _ in range(num_groups)], [0] * num_groups, [0] * num_groups)


def select_positional(
    *, geometry: HybridGeometry, device: DevicePool, cpu: CpuBlockPool, batch: StoreBatch, state: StoreState,
    block_ids: Sequence[Sequence[int]], request: RequestView, confirmed_tokens: int, source: str,
    with_meta: bool = False,
) -> None:
    """Select every confirmed, not yet handled block per positionally stable group; cursors never move back."""
    ready = geometry.eager_ready_blocks(max(0, confirmed_tokens))
    hashes = request.block_hashes
    hashed_end = len(hashes) * geometry.hash_tokens
    null_id = device.null_block_id
    for group_id, group in enumerate(geometry.groups):
        if not group.kind.positionally_stable:
            continue  # Mamba align: stored only from hand-offs (notes §4.7)
        block = geometry.group_block_tokens[group_id]
        ids = block_ids[group_id]
        stop = min(len(ids), ready[group_id])
        cursor = state.num_stored_blocks[group_id]
        while cursor < stop:
            if not batch.has_room():
                break  # the cursor stays: retried next step
            device_id = ids[cursor]
            end = (cursor + 1) * block
            if device_id == null_id:
                # A window block that left the table may still be cached on the device: recover it by key.
                recovered = device.find_cached_block(key_at(group_id, hashes, end, geometry.hash_tokens)) \
                    if end <= hashed_end else None
                if recovered is None:
                    cursor += 1
                    continue
                device_id = recovered
            if classify(device, cpu, batch.in_flight, device_id) is Admission.READY:
                meta = _block_meta(geometry, request, group_id, cursor) if with_meta else None
                batch.add(device, device_id, group_id, source=source, meta=meta, request_id=request.request_id)
            cursor += 1
        state.num_stored_blocks[group_id] = cursor


def _block_meta(geometry: HybridGeometry, request: RequestView, group_id: int, index: int) -> BlockMeta:
    block = geometry.group_block_tokens[group_id]
    token_ids = getattr(request, "all_token_ids", None)
    parent = key_at(group_id, request.block_hashes, index * block, geometry.hash_tokens) if index else None
    return BlockMeta(
        num_tokens=block,
        token_ids=tuple(token_ids[index * block:(index + 1) * block]) if token_ids is not None else None,
        parent_key=parent,
    )


def find_prompt_tail(
    *, geometry: HybridGeometry, device: DevicePool, cpu: CpuBlockPool, in_flight: InFlightStores,
    block_ids: Sequence[Sequence[int]], request: RequestView,
) -> tuple[int, int] | None:
    """The full-attention block holding the last prompt hash boundary when the prompt ends inside it.

    Returns (group_id, device_block_id) only if the device registered that boundary on the block (primary or
    alias), the block is not null or in flight (so never selected twice), and the CPU does not hold the key.
    """
    if not geometry.fine_grained.enabled or not geometry.full_attention_group_ids:
        return None
    group_id = geometry.full_attention_group_ids[0]
    hash_tokens, block = geometry.hash_tokens, geometry.group_block_tokens[group_id]
    boundary = request.num_prompt_tokens // hash_tokens * hash_tokens
    if not 0 < boundary <= request.num_computed_tokens or boundary % block == 0:
        return None
    if boundary // hash_tokens > len(request.block_hashes):
        return None
    ids = block_ids[group_id]
    index = boundary // block
    if index >= len(ids):
        return None
    device_id = ids[index]
    if device_id == device.null_block_id or device_id in in_flight.device_ids:
        return None
    key = key_at(group_id, request.block_hashes, boundary, hash_tokens)
    if key != device.primary_key(device_id) and key not in device.alias_keys(device_id):
        return None
    if key in cpu or key in in_flight.keys:
        return None
    return group_id, device_id


def select_lazy(
    *, device: DevicePool, cpu: CpuBlockPool, batch: StoreBatch, cursor: int | None, target_blocks: int,
) -> int | None:
    """Walk the device free queue from `cursor`, selecting hashed blocks the CPU lacks; returns the new cursor.

    Every visited block counts as covered; the walk stops at `target_blocks` covered or when the CPU is full.
    """
    if cursor is not None and device.ref_count(cursor) > 0:
        cursor = None  # the cursor block was reallocated: start over from the head
    covered = 0
    last = cursor
    # Selecting only touches the in-flight set, never the device queue, so it is safe inside the walk.
    for device_id in device.iter_free_queue(cursor):
        if not batch.has_room():
            break
        last = device_id
        covered += 1
        if classify(device, cpu, batch.in_flight, device_id) is Admission.READY:
            batch.add(device, device_id, device.primary_key(device_id).group_id, source="lazy")
        if covered >= target_blocks:
            break
    return last

