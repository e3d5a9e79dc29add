"""Hybrid prefix lookup: the longest boundary every cache group holds (the fixed point), and why it is not longer.

The joint hit is the fixed point of "every group shrinks the candidate to the largest boundary it holds" (what
each group holds: `probe`; docs/reference-behaviour.md, "Lookup"). Hit lengths are multiples of
`geometry.alignment_tokens`, capped at `num_tokens - 1 - local` (the last token is always recomputed), and a lookup
starts only on a scheduler-block aligned local prefix. The group that stopped the hit and the per-group reasons
come from `diagnostics`; the result types from `result` (re-exported here). Every stage reads the geometry's
`LookupTables` (`tables`), which this class builds once and passes to each.
"""

from __future__ import annotations

from typing import Hashable, Sequence

from toolkit.core.geometry import HybridGeometry
from toolkit.core.lookup.diagnostics import limiting_group, per_group_reach
from toolkit.core.lookup.probe import Probe, full_reach, state_largest
from toolkit.core.lookup.result import KeyIndex, KeyStatus, LookupResult, MissReason
from toolkit.core.lookup.tables import GroupWalk, LookupTables, ProbeKey

__all__ = ["HybridLookup", "KeyIndex", "KeyStatus", "LookupResult", "MissReason"]


class HybridLookup:
    """Runs lookups of one geometry against one key index (the CPU pool plus in-flight knowledge).

    Hot path: a lookup probes many (group, hash) keys, so the per-geometry tables (`tables`, handed to the
    probing and the diagnostics) are built once here and probes use plain `(group_id, block_hash)` tuples.
    """

    def __init__(self, geometry: HybridGeometry, index: KeyIndex, *, speculative_block_drop: bool = False) -> None:
        self.geometry = geometry
        self.index = index
        self.tables = LookupTables(geometry, index, speculative_block_drop=speculative_block_drop)
        self.key_status = self.tables.key_status  # why a plain key is or is not a hit

    def _miss(self, local_tokens: int, cap: int, reason: MissReason) -> LookupResult:
        tables = self.tables
        return LookupResult(
            hit_tokens=0,
            local_tokens=local_tokens,
            max_hit_tokens=cap,
            block_ids=tables.no_blocks,
            group_reach_tokens=tables.no_reach,
            miss_reason=reason,
            limiting_group_id=None,
            group_miss_reasons=tables.no_reasons,
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
        tables = self.tables
        if local_tokens % tables.scheduler_block_tokens:
            return self._miss(local_tokens, cap, MissReason.MISALIGNED_LOCAL_PREFIX)
        hash_tokens, align = tables.hash_tokens, tables.align_tokens
        hashed_end = len(block_hashes) * hash_tokens
        if hashed_end <= local_tokens:
            return self._miss(local_tokens, cap, MissReason.NOTHING_BEYOND_LOCAL)
        if cap == 0:
            return self._miss(local_tokens, cap, MissReason.LAST_TOKEN_CAP)
        hash_limit = min(hashed_end, (local_tokens + cap) // hash_tokens * hash_tokens)
        allowed_end = local_tokens + (hash_limit - local_tokens) // align * align
        end, fa_reach, fa_missing, probe = self._joint_end(block_hashes, local_tokens, cap, allowed_end, hashed_end)
        limiting: int | None = None
        if end < allowed_end:
            limiting, reason = limiting_group(
                tables, block_hashes, local_tokens, hashed_end, end + align, fa_reach, fa_missing, probe
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
                probe = Probe(tables, block_hashes, local_tokens, hashed_end)
            blocks = probe.blocks_at_all(end)
            assert blocks is not None, f"joint boundary {end} is not held by every group"
        else:
            blocks = tables.no_blocks
        if diagnose:
            reaches, reasons = per_group_reach(tables, block_hashes, local_tokens, hashed_end, allowed_end)
        else:
            reaches, reasons = (), ()
        return LookupResult(
            hit_tokens=hit,
            local_tokens=local_tokens,
            max_hit_tokens=cap,
            block_ids=blocks,
            group_reach_tokens=reaches,
            miss_reason=reason,
            limiting_group_id=limiting,
            group_miss_reasons=reasons,
        )

    def held_prefix(
        self, *, block_hashes: Sequence[Hashable], end_tokens: int
    ) -> tuple[int, tuple[tuple[int, ...], ...]]:
        """The longest joint hit from token 0 ending at or before `end_tokens`, and its CPU blocks per group: what
        `find(num_tokens=end_tokens + 1, local_tokens=0)` answers, without the miss attribution and the result
        object nobody reads there (the local-prefix refresh, once per admitted request with a device-local prefix,
        needs only the blocks). (0, empty tables) when nothing is held."""
        tables = self.tables
        hash_tokens, align = tables.hash_tokens, tables.align_tokens
        hashed_end = len(block_hashes) * hash_tokens
        if hashed_end <= 0 or end_tokens <= 0:
            return 0, tables.no_blocks
        allowed_end = min(hashed_end, end_tokens // hash_tokens * hash_tokens) // align * align
        end, _, _, probe = self._joint_end(block_hashes, 0, end_tokens, allowed_end, hashed_end)
        if not end:
            return 0, tables.no_blocks
        if probe is None:
            probe = Probe(tables, block_hashes, 0, hashed_end)
        blocks = probe.blocks_at_all(end)
        assert blocks is not None, f"joint boundary {end} is not held by every group"
        return end, blocks

    def _joint_end(
        self, block_hashes: Sequence[Hashable], local_tokens: int, cap: int, allowed_end: int, hashed_end: int
    ) -> tuple[int, dict[int, int], dict[int, ProbeKey | None], Probe | None]:
        """The joint hit's end in (local_tokens, allowed_end] (local_tokens: none): the fixed point. Also the
        full-attention reaches and first missing keys, and the probe if one was made (the diagnostics reuse them)."""
        tables = self.tables
        hash_tokens, align = tables.hash_tokens, tables.align_tokens
        end = allowed_end
        fa_reach: dict[int, int] = {}
        fa_missing: dict[int, ProbeKey | None] = {}
        probe: Probe | None = None
        if end > local_tokens:
            # Full attention first: downward closed, so the shortest full-attention reach bounds the hit, and the
            # sparse groups are only scanned below it (most misses end there without probing them at all).
            drop_tokens = tables.drop_tokens
            for g in tables.full_group_ids:
                drop = drop_tokens.get(g, 0) if drop_tokens else 0
                if drop:
                    # An EAGLE-family drafter recomputes the last drop unit of a hit: the group must hold it too,
                    # so it is walked `drop` tokens past the cap, and the hit ends `drop` tokens before its reach.
                    limit = min(hashed_end, (local_tokens + cap + drop) // hash_tokens * hash_tokens)
                    reach, fa_missing[g] = full_reach(tables, block_hashes, g, local_tokens, limit, hashed_end)
                    reach = min(allowed_end, reach - drop)
                    reach = local_tokens + max(0, reach - local_tokens) // align * align
                else:
                    reach, fa_missing[g] = full_reach(tables, block_hashes, g, local_tokens, allowed_end, hashed_end)
                fa_reach[g] = reach
                if reach < end:
                    end = reach
            # Fixed point over the sparse groups: each shrinks the candidate to the largest boundary it holds.
            sparse, walks = tables.sparse_group_ids, tables.walks
            while end > local_tokens:
                shrunk = end
                for g in sparse:
                    if walks[g] is GroupWalk.STATE:
                        held = state_largest(tables, block_hashes, g, local_tokens, shrunk)
                    else:
                        if probe is None:
                            probe = Probe(tables, block_hashes, local_tokens, hashed_end)
                        held = probe.window_largest(g, shrunk)
                    if held < shrunk:
                        shrunk = held
                if shrunk == end:
                    break
                end = shrunk
        return end, fa_reach, fa_missing, probe

    def blocks_at(
        self, *, block_hashes: Sequence[Hashable], local_tokens: int, end_tokens: int
    ) -> tuple[tuple[int, ...], ...] | None:
        """Per-group CPU blocks serving exactly the boundary `end_tokens`, or None if some group lacks it."""
        tables = self.tables
        hashed_end = len(block_hashes) * tables.hash_tokens
        if end_tokens <= local_tokens or end_tokens > hashed_end or end_tokens % tables.hash_tokens:
            return None
        return Probe(tables, block_hashes, local_tokens, hashed_end).blocks_at_all(end_tokens)
