"""Store selection: the eager positional scan, the finish-time prompt tail and the lazy free-queue walk
(docs/reference-behaviour.md, "Stores", "Finish flush"); each admits blocks through `StoreBatch.admit`
(`store_batch`, re-exported here with the batch types).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import repeat
from typing import Sequence

from toolkit.core.events import BlockMeta
from toolkit.core.geometry import HybridGeometry
from toolkit.core.pool.blocks import CpuBlockPool
from toolkit.core.pool.device_pool import DevicePool
from toolkit.core.pool.group_tags import NO_GROUP
from toolkit.core.pool.in_flight import InFlightStores
from toolkit.core.pool.keys import BlockKey, key_at
from toolkit.core.requests import RequestView
from toolkit.core.store.batch import Admission, StoreBatch

__all__ = [
    "Admission",
    "NO_WORK",
    "PositionalLayout",
    "StoreBatch",
    "StoreState",
    "find_prompt_tail",
    "has_positional_work",
    "next_work_tokens",
    "positional_layout",
    "select_lazy",
    "select_positional",
]


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
    groups = tuple(
        (group_id, block)
        for group_id, (group, block) in enumerate(zip(geometry.groups, geometry.group_block_tokens))
        if group.kind.positionally_stable
    )
    return PositionalLayout(groups=groups, alignment_tokens=geometry.alignment_tokens, hash_tokens=geometry.hash_tokens)


def has_positional_work(
    layout: PositionalLayout,
    num_stored_blocks: Sequence[int],
    block_ids: Sequence[Sequence[int]],
    confirmed_tokens: int,
) -> bool:
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


def next_work_tokens(
    layout: PositionalLayout, num_stored_blocks: Sequence[int], block_ids: Sequence[Sequence[int]]
) -> int:
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
    *,
    geometry: HybridGeometry,
    device: DevicePool,
    cpu: CpuBlockPool,
    batch: StoreBatch,
    num_stored_blocks: list[int],
    block_ids: Sequence[Sequence[int]],
    request: RequestView,
    confirmed_tokens: int,
    source: str,
    with_meta: bool = False,
    layout: PositionalLayout | None = None,
) -> None:
    """Select every confirmed, not yet handled block per positionally stable group, advancing the cursors in
    `num_stored_blocks` (leading blocks handled per group; the caller's own list); cursors never move back.

    `layout`: `positional_layout(geometry)`, precomputed by callers on a hot path. A group whose cursor already
    covers every confirmed block costs two comparisons (most requests, most steps).
    """
    if layout is None:
        layout = positional_layout(geometry)
    if confirmed_tokens < 0:
        confirmed_tokens = 0
    align = layout.alignment_tokens
    aligned = confirmed_tokens // align * align
    num_stored = num_stored_blocks
    null_id = device.null_block_id
    for group_id, block in layout.groups:
        if len(batch.device_ids) >= batch.capacity:
            return  # nothing fits: every cursor stays (what `admit(stop_when_full=True)` would do, without a copy)
        ids = block_ids[group_id]
        stop = aligned // block
        if len(ids) < stop:
            stop = len(ids)
        cursor = num_stored[group_id]
        if cursor >= stop:
            continue
        candidates = ids[cursor:stop]
        if null_id in candidates:
            # A window block that left the table may still be cached on the device: recover it by key.
            hashes, candidates = request.block_hashes, list(candidates)
            for offset, device_id in enumerate(candidates):
                end = (cursor + offset + 1) * block
                if device_id == null_id and end <= len(hashes) * layout.hash_tokens:
                    recovered = device.find_cached_block(key_at(group_id, hashes, end, layout.hash_tokens))
                    if recovered is not None:
                        candidates[offset] = recovered
        meta_of = None
        if with_meta:
            # defaults bind this group's values
            meta_of = lambda offset, group_id=group_id, first=cursor: (  # noqa: E731
                _block_meta(geometry, request, group_id, first + offset)
            )
        # The cursor passes every block examined; a full batch leaves it on the first block not examined.
        num_stored[group_id] = cursor + len(
            batch.admit(
                device,
                cpu,
                candidates,
                repeat(group_id),
                source=source,
                request_id=request.request_id,
                meta_of=meta_of,
                stop_when_full=True,
            )
        )


def _block_meta(geometry: HybridGeometry, request: RequestView, group_id: int, index: int) -> BlockMeta:
    block = geometry.group_block_tokens[group_id]
    token_ids = getattr(request, "all_token_ids", None)
    parent = key_at(group_id, request.block_hashes, index * block, geometry.hash_tokens) if index else None
    return BlockMeta(
        num_tokens=block,
        token_ids=tuple(token_ids[index * block : (index + 1) * block]) if token_ids is not None else None,
        parent_key=parent,
    )


def find_prompt_tail(
    *,
    geometry: HybridGeometry,
    device: DevicePool,
    cpu: CpuBlockPool,
    in_flight: InFlightStores,
    block_ids: Sequence[Sequence[int]],
    request: RequestView,
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
    last = request.num_prompt_tokens // hash_tokens * hash_tokens
    if not 0 < last <= request.num_computed_tokens or last % block == 0:
        return None
    hashes = request.block_hashes
    if last // hash_tokens > len(hashes):
        return None
    ids = block_ids[group_id]
    index = last // block
    if index >= len(ids):
        return None
    device_id = ids[index]
    if device_id == device.null_block_id or device_id in in_flight.device_ids:
        return None
    primary = device.primary_key(device_id)
    aliases = device.alias_keys(device_id)
    # The prompt's last hash boundary, else the largest one before it inside the block that the device registered:
    # a prompt ending exactly on a hash boundary is registered only up to the boundary before its last token, the
    # one an identical replay can reach (a hit stops one token short of the prompt).
    for boundary in range(last, index * block, -hash_tokens):
        key = (group_id, hashes[boundary // hash_tokens - 1])  # probes like the `BlockKey` it equals
        if key == primary or key in aliases:
            break
    else:
        return None
    if key in cpu.key_container or key in in_flight.keys:
        return None
    return group_id, device_id, ((primary, *aliases) if primary is not None else tuple(aliases))


def select_lazy(
    *, device: DevicePool, cpu: CpuBlockPool, batch: StoreBatch, cursor: int | None, target_blocks: int
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
        primary = device.primary_key(device_id)
        batch.admit(device, cpu, (device_id,), (NO_GROUP if primary is None else primary.group_id,), source="lazy")
        if covered >= target_blocks:
            break
    return last
