"""Store selection: admission classification, the eager positional scan, the finish-time prompt tail and the lazy
free-queue walk (docs/reference-behaviour.md, "Stores", "Finish flush"). Every selected device block joins the in-flight set at once, so one
device block (or one key) is never selected twice, within a step or across steps.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from itertools import chain
from typing import Iterable, Sequence

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
    """Device blocks being copied to the CPU, and the keys they held when scheduled (for dedup and attribution).

    `keys` is a set (membership is all the readers need). A key held by two in-flight blocks at once (an alias
    coinciding with another block's key: selection never takes a block whose primary is in flight) counts its
    extra holders in `_extra_holders`, so the key leaves `keys` only with its last holder. Without such keys, a
    finished event leaves in two set operations at C speed.
    """

    def __init__(self) -> None:
        self.device_ids: set[int] = set()
        self.keys: set = set()
        self._extra_holders: dict = {}

    def add(self, device_id: int, keys: Sequence[BlockKey]) -> None:
        self.device_ids.add(device_id)
        self.add_keys(keys)

    def add_keys(self, keys: Sequence[BlockKey]) -> None:
        flight_keys = self.keys
        for key in keys:
            if key in flight_keys:
                self._extra_holders[key] = self._extra_holders.get(key, 0) + 1
            else:
                flight_keys.add(key)

    def remove(self, device_id: int, keys: Sequence[BlockKey]) -> None:
        self.remove_event([device_id], [keys])

    def remove_event(self, device_ids: Iterable[int], keys_per_block: Iterable[Sequence[BlockKey]]) -> None:
        """Forget a whole store event's blocks at once: store completion runs this for every stored block."""
        self.device_ids.difference_update(device_ids)
        extra = self._extra_holders
        if not extra:
            self.keys.difference_update(chain.from_iterable(keys_per_block))
            return
        flight_keys = self.keys
        for keys in keys_per_block:
            for key in keys:
                left = extra.get(key, 0)
                if left:
                    if left > 1:
                        extra[key] = left - 1
                    else:
                        del extra[key]
                else:
                    flight_keys.discard(key)

    def clear(self) -> None:
        self.device_ids.clear()
        self.keys.clear()
        self._extra_holders.clear()


def classify(device: DevicePool, cpu: CpuBlockPool, in_flight: InFlightStores, device_id: int,
             extra_in_flight: set[int] | frozenset[int] = frozenset()) -> Admission:
    if device_id == device.null_block_id:
        return Admission.NULL_BLOCK
    primary = device.primary_key(device_id)
    if primary is None:
        return Admission.NOT_HASHED
    # Also dedupe by key: two device blocks with the same hash in one step would take two CPU blocks for one key.
    if device_id in in_flight.device_ids or device_id in extra_in_flight or primary in in_flight.keys:
        return Admission.IN_FLIGHT
    if primary in cpu:
        return Admission.ALREADY_CACHED
    return Admission.READY


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

    def add(self, device: DevicePool, device_id: int, group_id: int, *, source: str,
            meta: BlockMeta | None = None, request_id: str | None = None) -> None:
        primary = device.primary_key(device_id)
        keys = ((primary,) if primary is not None else ()) + tuple(device.alias_keys(device_id))
        self.add_keyed(device_id, group_id, keys, source, meta, request_id)

    def add_keyed(self, device_id: int, group_id: int, keys: tuple[BlockKey, ...], source: str,
                  meta: BlockMeta | None, request_id: str | None) -> None:
        """`add` for callers that already read the block's keys (primary first, then aliases)."""
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

    def truncate(self, length: int) -> tuple[list[int], list[tuple[BlockKey, ...]]]:
        """Keep the first `length` entries; returns the cut entries' device ids and keys (still in flight: the
        caller releases them)."""
        cut_ids, cut_keys = self.device_ids[length:], self.keys[length:]
        for column in (self.device_ids, self.group_ids, self.keys, self.metas, self.sources):
            del column[length:]
        return cut_ids, cut_keys


@dataclass(slots=True)
class StoreState:
    """Eager tracking of one request: its device tables and how many leading blocks per group were handled."""

    block_ids: list[list[int]]
    num_stored_blocks: list[int]
    handoff_boundary_tokens: list[int]
    store_event_ids: set[int] = field(default_factory=set)
    finished: bool = False
    # Confirmed tokens at which some positional group next has a block to store (`next_work_tokens`); kept in step
    # with the cursors and tables so a running request without work costs one comparison per step.
    next_work_tokens: int = 0

    @classmethod
    def empty(cls, num_groups: int) -> "StoreState":
        return cls([[] for _ in range(num_groups)], [0] * num_groups, [0] * num_groups)


@dataclass(frozen=True)
class PositionalLayout:
    """Per-geometry constants of the positional scan, computed once per manager: the scan runs for every
    scheduled request of every step, and geometry properties are not free to re-derive there."""

    groups: tuple[tuple[int, int], ...]  # (group_id, group block tokens) of the positionally stable groups
    alignment_tokens: int
    hash_tokens: int


def positional_layout(geometry: HybridGeometry) -> PositionalLayout:
    # Mamba align blocks are nulled, relocated and copied on write, so the k-th block need not hold the k-th
    # position's state: those groups are stored only from hand-offs.
    groups = tuple((group_id, block) for group_id, (group, block) in enumerate(zip(geometry.groups,
                                                                                   geometry.group_block_tokens))
                   if group.kind.positionally_stable)
    return PositionalLayout(groups=groups, alignment_tokens=geometry.alignment_tokens,
                            hash_tokens=geometry.hash_tokens)


def has_positional_work(layout: PositionalLayout, num_stored_blocks: Sequence[int],
                        block_ids: Sequence[Sequence[int]], confirmed_tokens: int) -> bool:
    """`select_positional`'s own no-op test, for callers to skip its (keyword, ~1 us) call: a group has work only
    while its cursor is below both its confirmed aligned blocks and its table length. Most requests, most steps, have
    none (a decode step, a prefill chunk that has not crossed its next block end)."""
    align_tokens = layout.alignment_tokens
    aligned_tokens = confirmed_tokens // align_tokens * align_tokens
    for group_id, block_tokens in layout.groups:
        cursor = num_stored_blocks[group_id]
        if cursor < aligned_tokens // block_tokens and cursor < len(block_ids[group_id]):
            return True
    return False


NO_WORK = 1 << 62  # `next_work_tokens` when no group can store anything until new blocks arrive


def next_work_tokens(layout: PositionalLayout, num_stored_blocks: Sequence[int],
                     block_ids: Sequence[Sequence[int]]) -> int:
    """The least confirmed token count at which `has_positional_work` turns true for these cursors and tables:
    group g has work once its aligned confirmed tokens cover block `cursor + 1`, and only while its table holds
    that block."""
    align = layout.alignment_tokens
    best = NO_WORK
    for group_id, block_tokens in layout.groups:
        cursor = num_stored_blocks[group_id]
        if cursor < len(block_ids[group_id]):
            tokens = -(-(cursor + 1) * block_tokens // align) * align
            if tokens < best:
                best = tokens
    return best


def select_positional(
    *, geometry: HybridGeometry, device: DevicePool, cpu: CpuBlockPool, batch: StoreBatch, state: StoreState,
    block_ids: Sequence[Sequence[int]], request: RequestView, confirmed_tokens: int, source: str,
    with_meta: bool = False, layout: PositionalLayout | None = None,
) -> None:
    """Select every confirmed, not yet handled block per positionally stable group; cursors never move back.

    `layout`: `positional_layout(geometry)`, precomputed by callers on a hot path. A group whose cursor already
    covers every confirmed block costs two comparisons (most requests, most steps).
    """
    if layout is None:
        layout = positional_layout(geometry)
    if confirmed_tokens < 0:
        confirmed_tokens = 0
    align = layout.alignment_tokens
    aligned = confirmed_tokens // align * align
    num_stored = state.num_stored_blocks
    null_id = None
    for group_id, block in layout.groups:
        ids = block_ids[group_id]
        stop = aligned // block
        if len(ids) < stop:
            stop = len(ids)
        cursor = num_stored[group_id]
        if cursor >= stop:
            continue
        if null_id is None:
            null_id = device.null_block_id
            primary_key, alias_keys = device.primary_key, device.alias_keys
            flight_ids, flight_keys = batch.in_flight.device_ids, batch.in_flight.keys
            add_keys = batch.in_flight.add_keys
            cpu_keys = cpu.key_container
            taken, capacity = batch.device_ids, batch.capacity
            request_id = request.request_id
        while cursor < stop:
            if len(taken) >= capacity:
                break  # the cursor stays: retried next step
            device_id = ids[cursor]
            if device_id == null_id:
                # A window block that left the table may still be cached on the device: recover it by key.
                end = (cursor + 1) * block
                hashes = request.block_hashes
                recovered = device.find_cached_block(key_at(group_id, hashes, end, layout.hash_tokens)) \
                    if end <= len(hashes) * layout.hash_tokens else None
                if recovered is None:
                    cursor += 1
                    continue
                device_id = recovered
            # `classify` inlined (same checks, same order): only READY blocks are selected.
            primary = primary_key(device_id)
            if (primary is not None and device_id not in flight_ids and primary not in flight_keys
                    and primary not in cpu_keys):
                # `batch.add_keyed` inlined (its checks are the tests just above): one call per block saved.
                aliases = alias_keys(device_id)
                flight_ids.add(device_id)
                if aliases:
                    keys = (primary, *aliases)
                    add_keys(keys)
                else:  # the primary is not in flight (tested above): the common case, one set insert
                    keys = (primary,)
                    flight_keys.add(primary)
                taken.append(device_id)
                batch.group_ids.append(group_id)
                batch.keys.append(keys)
                batch.metas.append(_block_meta(geometry, request, group_id, cursor) if with_meta else None)
                batch.sources.append(source)
                batch.request_ids[request_id] = None
            cursor += 1
        num_stored[group_id] = cursor


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
) -> tuple[int, int, tuple[BlockKey, ...]] | None:
    """The full-attention block holding the last prompt hash boundary when the prompt ends inside it.

    Returns (group_id, device_block_id, the block's keys: primary first when it has one, then aliases) only if the
    device registered that boundary on the block (primary or alias), the block is not null or in flight (so never
    selected twice), and the CPU does not hold the key.
    """
    if not geometry.fine_grained.enabled or not geometry.full_attention_group_ids:
        return None
    group_id = geometry.full_attention_group_ids[0]
    hash_tokens, block = geometry.hash_tokens, geometry.group_block_tokens[group_id]
    boundary = request.num_prompt_tokens // hash_tokens * hash_tokens
    if not 0 < boundary <= request.num_computed_tokens or boundary % block == 0:
        return None
    hashes = request.block_hashes
    if boundary // hash_tokens > len(hashes):
        return None
    ids = block_ids[group_id]
    index = boundary // block
    if index >= len(ids):
        return None
    device_id = ids[index]
    if device_id == device.null_block_id or device_id in in_flight.device_ids:
        return None
    key = (group_id, hashes[boundary // hash_tokens - 1])  # probes like the `BlockKey` it equals
    primary = device.primary_key(device_id)
    aliases = device.alias_keys(device_id)
    if key != primary and key not in aliases:
        return None
    if key in cpu.key_container or key in in_flight.keys:
        return None
    return group_id, device_id, ((primary, *aliases) if primary is not None else tuple(aliases))


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

