"""What every lookup of one geometry reads: per-group tables built once, and the key index's probes.

`HybridLookup` builds one `LookupTables` per geometry and hands it to the probing (`probe`) and the miss
attribution (`diagnostics`) explicitly, so each stage reads public fields of one object and none reaches into
another's state. Keys are plain `(group_id, block_hash)` tuples (`ProbeKey`): equal to, and hashing like,
`BlockKey`, at a fraction of its construction cost.
"""

from __future__ import annotations

import enum
from typing import Callable, Container, Hashable, cast

from toolkit.core.geometry import HybridGeometry
from toolkit.core.lookup.result import KeyIndex, KeyStatus
from toolkit.core.pool.keys import BlockKey
from toolkit.core.specs import GroupKind

ProbeKey = tuple[int, Hashable]
"""A `(group_id, block_hash)` key as lookups build it: probes the index like the `BlockKey` it equals."""


class GroupWalk(enum.IntEnum):
    """Which rule decides what a group holds (`LookupTables.walks`, one per group; `probe` describes them)."""

    FULL = 0  # full attention / MLA: downward closed
    STATE = 1  # Mamba: one state block per boundary
    WINDOW = 2  # sliding window / chunked local: the blocks the next token attends to

    @classmethod
    def of(cls, kind: GroupKind) -> GroupWalk:
        return cls.STATE if kind.is_mamba else cls.WINDOW if kind.is_windowed else cls.FULL


class LookupContainer:
    """`key in container` for an index that only offers `lookup(key)`."""

    __slots__ = ("_index",)

    def __init__(self, index: KeyIndex) -> None:
        self._index = index

    def __contains__(self, key: object) -> bool:
        return self._index.lookup(BlockKey(*cast(ProbeKey, key))) is not None


class LookupTables:
    """One geometry's per-group tables and one index's probes, read by every lookup against them.

    An index offering `key_container` (a container of the keys it holds) is probed with `in` directly; one that
    also exposes where in-flight and evicted keys live (`in_flight_key_container`, `evicted_key_container`) has
    its misses attributed without method calls (`key_status`).
    """

    __slots__ = (
        "fine",
        "num_groups",
        "group_ids",
        "kinds",
        "is_mamba",
        "is_windowed",
        "windows",
        "block_tokens",
        "hash_tokens",
        "align_tokens",
        "scheduler_block_tokens",
        "walks",
        "sparse_group_ids",
        "full_group_ids",
        "drop_tokens",
        "no_blocks",
        "no_reach",
        "no_reasons",
        "contains",
        "get",
        "status",
        "in_flight_keys",
        "evicted_keys",
    )

    def __init__(self, geometry: HybridGeometry, index: KeyIndex, *, speculative_block_drop: bool = False) -> None:
        self.fine = geometry.fine_grained.enabled
        groups = geometry.groups
        self.num_groups = len(groups)
        self.group_ids = tuple(range(len(groups)))
        self.kinds = tuple(g.kind for g in groups)
        self.is_mamba = tuple(g.kind.is_mamba for g in groups)
        self.is_windowed = tuple(g.kind.is_windowed for g in groups)
        self.windows = tuple(g.window_tokens or 0 for g in groups)  # read only for windowed groups
        self.block_tokens = geometry.group_block_tokens
        self.hash_tokens = geometry.hash_tokens
        self.align_tokens = geometry.alignment_tokens
        self.scheduler_block_tokens = geometry.scheduler_block_tokens
        self.walks = tuple(GroupWalk.of(g.kind) for g in groups)
        self.sparse_group_ids = tuple(i for i, g in enumerate(groups) if g.kind.is_mamba or g.kind.is_windowed)
        self.full_group_ids = tuple(i for i, walk in enumerate(self.walks) if walk is GroupWalk.FULL)
        # Per full-attention group, the tokens it must hold past a hit that an EAGLE-family drafter recomputes
        # (empty without one): a hash block where lookups are finer than its block, else its block.
        self.drop_tokens: dict[int, int] = {}
        if speculative_block_drop:
            for g in self.full_group_ids:
                block = self.block_tokens[g]
                self.drop_tokens[g] = self.hash_tokens if self.fine and block > self.hash_tokens else block
        self.no_blocks: tuple[tuple[int, ...], ...] = ((),) * len(groups)
        self.no_reach: tuple[int, ...] = (0,) * len(groups)
        self.no_reasons: tuple[None, ...] = (None,) * len(groups)
        container: Container[object] | None = getattr(index, "key_container", None)
        self.contains: Container[object]
        self.get: Callable[[ProbeKey], int | None]
        self.status: Callable[[ProbeKey], KeyStatus]
        if container is not None:
            self.contains = container
            # The index's methods take `BlockKey`; a plain tuple equals and hashes like one.
            self.get = cast(Callable[[ProbeKey], int | None], index.lookup)
            self.status = cast(Callable[[ProbeKey], KeyStatus], index.key_status)
        else:  # a foreign index may read BlockKey fields: hand it real BlockKeys
            self.contains = LookupContainer(index)
            self.get = lambda key: index.lookup(BlockKey(*key))
            self.status = lambda key: index.key_status(BlockKey(*key))
        in_flight: Container[object] | None = None
        evicted: Container[object] | None = None
        if container is not None:
            in_flight = getattr(index, "in_flight_key_container", None)
            evicted = getattr(index, "evicted_key_container", None)
        if in_flight is None or evicted is None:
            in_flight = evicted = None
        self.in_flight_keys = in_flight
        self.evicted_keys = evicted

    def key_status(self, key: ProbeKey) -> KeyStatus:
        """Why a plain `(group_id, block_hash)` key is or is not a hit (the index's `key_status` order)."""
        in_flight, evicted = self.in_flight_keys, self.evicted_keys
        if in_flight is None or evicted is None:
            return self.status(key)
        if key in self.contains:  # the same order as `KeyIndex.key_status`, read straight from the containers
            return KeyStatus.CACHED
        if key in in_flight:
            return KeyStatus.IN_FLIGHT
        return KeyStatus.EVICTED if key in evicted else KeyStatus.NEVER_STORED
