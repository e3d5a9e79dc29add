"""Hybrid prefix lookup: the longest boundary every cache group holds (the fixed point), and why it is not longer.

The joint hit is the fixed point of "every group shrinks the candidate to the largest boundary it holds" (what
each group holds: `lookup_probe`; docs/reference-behaviour.md, "Lookup"). Hit lengths are multiples of
`geometry.alignment_tokens`, capped at `num_tokens - 1 - local` (the last token is always recomputed), and a lookup
starts only on a scheduler-block aligned local prefix. The group that stopped the hit and the per-group reasons
come from `lookup_diagnostics`; the result types from `lookup_result` (re-exported here).
"""

from __future__ import annotations

from typing import Hashable, Sequence

from toolkit.core.geometry import HybridGeometry
from toolkit.core.lookup.diagnostics import limiting_group, per_group_reach
from toolkit.core.lookup.probe import GroupWalk, LookupContainer, Probe, full_reach, state_largest
from toolkit.core.lookup.result import KeyIndex, KeyStatus, LookupResult, MissReason, new_result
from toolkit.core.pool.keys import BlockKey

__all__ = ["HybridLookup", "KeyIndex", "KeyStatus", "LookupResult", "MissReason"]


class HybridLookup:
    """Runs lookups of one geometry against one key index (the CPU pool plus in-flight knowledge).

    Hot path: a lookup probes many (group, hash) keys, so per-geometry tables are built once here and probes use
    plain `(group_id, block_hash)` tuples (equal to, and hashing like, `BlockKey`, at a fraction of its construction
    cost). An index offering `key_container` (a container of the keys it holds) is probed with `in` directly.
    """

    def __init__(self, geometry: HybridGeometry, index: KeyIndex) -> None:
        self.geometry = geometry
        self.index = index
        self._fine = geometry.fine_grained.enabled
        groups = geometry.groups
        self._num_groups = len(groups)
        self._group_ids = tuple(range(len(groups)))
        self._kinds = tuple(g.kind for g in groups)
        self._is_mamba = tuple(g.kind.is_mamba for g in groups)
        self._is_windowed = tuple(g.kind.is_windowed for g in groups)
        self._windows = tuple(g.window_tokens for g in groups)
        self._block_tokens = geometry.group_block_tokens
        self._hash_tokens = geometry.hash_tokens
        self._align_tokens = geometry.alignment_tokens
        self._scheduler_block_tokens = geometry.scheduler_block_tokens
        self._walks = tuple(GroupWalk.of(g.kind) for g in groups)
        self._sparse_group_ids = tuple(i for i, g in enumerate(groups) if g.kind.is_mamba or g.kind.is_windowed)
        self._full_group_ids = tuple(i for i, walk in enumerate(self._walks) if walk is GroupWalk.FULL)
        self._no_blocks = ((),) * len(groups)
        self._no_reach = (0,) * len(groups)
        self._no_reasons = (None,) * len(groups)
        container = getattr(index, "key_container", None)
        if container is not None:
            self._contains = container
            self._get = index.lookup
            self._status = index.key_status
        else:  # a foreign index may read BlockKey fields: hand it real BlockKeys
            self._contains = LookupContainer(index)
            self._get = lambda key: index.lookup(BlockKey(*key))
            self._status = lambda key: index.key_status(BlockKey(*key))
        # Miss attribution without method calls when the index exposes where in-flight and evicted keys live.
        self._in_flight_keys = getattr(index, "in_flight_key_container", None) if container is not None else None
        self._evicted_keys = getattr(index, "evicted_key_container", None) if container is not None else None
        if self._in_flight_keys is None or self._evicted_keys is None:
            self._in_flight_keys = self._evicted_keys = None

    def _miss(self, local_tokens: int, cap: int, reason: MissReason) -> LookupResult:
        return new_result(
            {
                "hit_tokens": 0,
                "local_tokens": local_tokens,
                "max_hit_tokens": cap,
                "block_ids": self._no_blocks,
                "group_reach_tokens": self._no_reach,
                "miss_reason": reason,
                "limiting_group_id": None,
                "group_miss_reasons": self._no_reasons,
            }
        )

    def find(
        self, *, block_hashes: Sequence[Hashable], num_tokens: int, local_tokens: int, diagnose: bool = True
    ) -> LookupResult:
        """The joint hit after `local_tokens`, the group that stopped it and why.

        `diagnose=False` leaves `group_reach_tokens` and `group_miss_reasons` empty: every group's own reach costs a
        scan of each sparse group over the whole candidate range, which the joint hit never needs (the connector's
        hot path; `toolkit.vllm.observe` and the visualizer ask for them).
        """
        cap = num_tokens - 1 - local_tokens
        if cap < 0:
            cap = 0
        if local_tokens % self._scheduler_block_tokens:
            return self._miss(local_tokens, cap, MissReason.MISALIGNED_LOCAL_PREFIX)
        hash_tokens, align = self._hash_tokens, self._align_tokens
        hashed_end = len(block_hashes) * hash_tokens
        if hashed_end <= local_tokens:
            return self._miss(local_tokens, cap, MissReason.NOTHING_BEYOND_LOCAL)
        if cap == 0:
            return self._miss(local_tokens, cap, MissReason.LAST_TOKEN_CAP)
        hash_limit = min(hashed_end, (local_tokens + cap) // hash_tokens * hash_tokens)
        allowed_end = local_tokens + (hash_limit - local_tokens) // align * align
        end = allowed_end
        fa_reach: dict[int, int] = {}
        fa_missing: dict[int, tuple | None] = {}
        probe: Probe | None = None
        if end > local_tokens:
            # Full attention first: downward closed, so the shortest full-attention reach bounds the hit, and the
            # sparse groups are only scanned below it (most misses end there without probing them at all).
            for g in self._full_group_ids:
                reach, fa_missing[g] = full_reach(self, block_hashes, g, local_tokens, allowed_end, hashed_end)
                fa_reach[g] = reach
                if reach < end:
                    end = reach
            # Fixed point over the sparse groups: each shrinks the candidate to the largest boundary it holds.
            sparse, walks = self._sparse_group_ids, self._walks
            while end > local_tokens:
                shrunk = end
                for g in sparse:
                    if walks[g] is GroupWalk.STATE:
                        held = state_largest(self, block_hashes, g, local_tokens, shrunk)
                    else:
                        if probe is None:
                            probe = Probe(self, block_hashes, local_tokens, hashed_end)
                        held = probe.window_largest(g, shrunk)
                    if held < shrunk:
                        shrunk = held
                if shrunk == end:
                    break
                end = shrunk
        limiting: int | None = None
        if end < allowed_end:
            limiting, reason = limiting_group(
                self, block_hashes, local_tokens, hashed_end, end + align, fa_reach, fa_missing, probe
            )
        elif allowed_end < hash_limit:
            reason = MissReason.ALIGNMENT_CLAMP
        elif hash_limit < hashed_end:
            reason = MissReason.LAST_TOKEN_CAP
        else:
            reason = MissReason.NONE
        hit = end - local_tokens
        if hit:
            if probe is None:
                probe = Probe(self, block_hashes, local_tokens, hashed_end)
            blocks = probe.blocks_at_all(end)
            assert blocks is not None, f"joint boundary {end} is not held by every group"
        else:
            blocks = self._no_blocks
        if diagnose:
            reaches, reasons = per_group_reach(self, block_hashes, local_tokens, hashed_end, allowed_end)
        else:
            reaches, reasons = (), ()
        return new_result(
            {
                "hit_tokens": hit,
                "local_tokens": local_tokens,
                "max_hit_tokens": cap,
                "block_ids": blocks,
                "group_reach_tokens": reaches,
                "miss_reason": reason,
                "limiting_group_id": limiting,
                "group_miss_reasons": reasons,
            }
        )

    def key_status(self, key: tuple) -> KeyStatus:
        """Why a plain `(group_id, block_hash)` key is or is not a hit (the index's `key_status` order)."""
        if self._evicted_keys is None:
            return self._status(key)
        if key in self._contains:  # the same order as `KeyIndex.key_status`, read straight from the containers
            return KeyStatus.CACHED
        if key in self._in_flight_keys:
            return KeyStatus.IN_FLIGHT
        return KeyStatus.EVICTED if key in self._evicted_keys else KeyStatus.NEVER_STORED

    def blocks_at(
        self, *, block_hashes: Sequence[Hashable], local_tokens: int, end_tokens: int
    ) -> tuple[tuple[int, ...], ...] | None:
        """Per-group CPU blocks serving exactly the boundary `end_tokens`, or None if some group lacks it."""
        hashed_end = len(block_hashes) * self._hash_tokens
        if end_tokens <= local_tokens or end_tokens > hashed_end or end_tokens % self._hash_tokens:
            return None
        return Probe(self, block_hashes, local_tokens, hashed_end).blocks_at_all(end_tokens)
