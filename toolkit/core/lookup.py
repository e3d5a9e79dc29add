"""Hybrid prefix lookup: the longest boundary every cache group holds, and why it is not longer.

Per group (behaviour notes §4.3-§4.5), for a boundary `end` (absolute tokens):
- full attention / MLA: every block up to `end` (downward closed). Phase 1 walks whole blocks left to right; if
  fine-grained hits are on, phase 2 probes the interior hash boundaries of the first missing block from high to
  low through alias keys.
- sliding window / chunked local: only the blocks the next token attends to (inside the window or the chunk);
  the others are null entries.
- Mamba (align or all): the single state block whose primary or alias key is the boundary's key.
The joint hit is the fixed point of "every group shrinks the candidate to the largest boundary it holds".
Hit lengths are multiples of `geometry.alignment_tokens`, capped at `num_tokens - 1 - local` (the last token is
always recomputed), and a lookup starts only on a scheduler-block aligned local prefix.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Hashable, Protocol, Sequence

from toolkit.core.geometry import HybridGeometry
from toolkit.core.keys import BlockKey
from toolkit.core.pool import NULL_BLOCK_ID
from toolkit.core.specs import GroupKind


class MissReason(str, enum.Enum):
    """Why a lookup did not return every hashed token of the prompt (NONE: it did)."""

    NONE = "none"
    NEVER_STORED = "never_stored"
    EVICTED = "evicted"
    STORE_IN_FLIGHT = "store_in_flight"
    WINDOW_INCOMPLETE = "window_incomplete"
    MAMBA_STATE_ABSENT = "mamba_state_absent"
    ALIGNMENT_CLAMP = "alignment_clamp"
    LAST_TOKEN_CAP = "last_token_cap"
    MISALIGNED_LOCAL_PREFIX = "misaligned_local_prefix"
    NOTHING_BEYOND_LOCAL = "nothing_beyond_local"


class KeyStatus(enum.Enum):
    CACHED = "cached"
    IN_FLIGHT = "in_flight"
    EVICTED = "evicted"
    NEVER_STORED = "never_stored"


class KeyIndex(Protocol):
    """Where lookups read keys: `lookup(key)` gives a CPU block id or None; `key_status(key)` explains a miss."""

    def lookup(self, key: BlockKey) -> int | None: ...

    def key_status(self, key: BlockKey) -> KeyStatus: ...


@dataclass(frozen=True, kw_only=True)
class LookupResult:
    """One lookup's answer.

    Attributes:
        hit_tokens: tokens the CPU tier can supply after the local prefix (0 on a miss).
        local_tokens: the local (device) prefix the hit starts after.
        max_hit_tokens: the last-token cap, `num_tokens - 1 - local_tokens` (>= 0).
        block_ids: per group, the CPU block ids serving the hit, `ceil(hit_tokens / group block)` entries, null
            (0) where the group needs no data (outside a window; Mamba positions before the boundary).
        group_reach_tokens: per group, the longest hit that group alone could give (its best boundary - local).
        miss_reason: why the hit is not every hashed token (NONE when it is).
        limiting_group_id: the group that stopped the hit, or None for request-level reasons: the group with
            the shortest reach when the hit equals it; otherwise (the joint hit is below every group's own reach)
            the sparse group lacking data at that shortest reach.
        group_miss_reasons: per group, why that group's reach stops where it does (None if it is not limiting).
    """

    hit_tokens: int
    local_tokens: int
    max_hit_tokens: int
    block_ids: tuple[tuple[int, ...], ...]
    group_reach_tokens: tuple[int, ...]
    miss_reason: MissReason
    limiting_group_id: int | None = None
    group_miss_reasons: tuple[MissReason | None, ...] = ()

    @property
    def end_tokens(self) -> int:
        return self.local_tokens + self.hit_tokens

    def real_block_ids(self) -> list[int]:
        return [b for blocks in self.block_ids for b in blocks if b != NULL_BLOCK_ID]


class HybridLookup:
    """Runs lookups of one geometry against one key index (the CPU pool plus in-flight knowledge)."""

    def __init__(self, geometry: HybridGeometry, index: KeyIndex) -> None:
        self.geometry = geometry
        self.index = index
        self._fine = geometry.fine_grained.enabled

    def find(self, *, block_hashes: Sequence[Hashable], num_tokens: int, local_tokens: int) -> LookupResult:
        geo = self.geometry
        num_groups = geo.num_groups
        cap = max(0, num_tokens - 1 - local_tokens)

        def miss(reason: MissReason) -> LookupResult:
            return LookupResult(
                hit_tokens=0, local_tokens=local_tokens, max_hit_tokens=cap, block_ids=((),) * num_groups,
                group_reach_tokens=(0,) * num_groups, miss_reason=reason, group_miss_reasons=(None,) * num_groups,
            )

        if local_tokens % geo.scheduler_block_tokens:
            return miss(MissReason.MISALIGNED_LOCAL_PREFIX)
        hash_tokens, align = geo.hash_tokens, geo.alignment_tokens
        hashed_end = len(block_hashes) * hash_tokens
        if hashed_end <= local_tokens:
            return miss(MissReason.NOTHING_BEYOND_LOCAL)
        if cap == 0:
            return miss(MissReason.LAST_TOKEN_CAP)
        hash_limit = min(hashed_end, (local_tokens + cap) // hash_tokens * hash_tokens)
        allowed_end = local_tokens + (hash_limit - local_tokens) // align * align
        ctx = _Probe(self, block_hashes, local_tokens, hashed_end)
        reaches = [ctx.largest_at_most(g, allowed_end) for g in range(num_groups)]
        end = min(reaches)
        while True:
            shrunk = min(ctx.largest_at_most(g, end) for g in range(num_groups))
            if shrunk == end:
                break
            end = shrunk
        reasons = tuple(ctx.reason(g, allowed_end) if reaches[g] < allowed_end else None for g in range(num_groups))
        limiting: int | None = None
        if end < allowed_end:
            min_reach = min(reaches)
            if end == min_reach:
                limiting = reaches.index(min_reach)
                reason = reasons[limiting]
            else:
                # Every group reaches min_reach alone, but not jointly: a sparse group lacks that boundary.
                limiting = next(g for g in range(num_groups) if ctx.largest_at_most(g, min_reach) < min_reach)
                reason = ctx.reason(limiting, min_reach)
        elif allowed_end < hash_limit:
            reason = MissReason.ALIGNMENT_CLAMP
        elif hash_limit < hashed_end:
            reason = MissReason.LAST_TOKEN_CAP
        else:
            reason = MissReason.NONE
        hit = end - local_tokens
        blocks = ctx.blocks_at_all(end) if hit else ((),) * num_groups
        assert blocks is not None, f"joint boundary {end} is not held by every group"
        return LookupResult(
            hit_tokens=hit, local_tokens=local_tokens, max_hit_tokens=cap, block_ids=blocks,
            group_reach_tokens=tuple(r - local_tokens for r in reaches), miss_reason=reason,
            limiting_group_id=limiting, group_miss_reasons=reasons,
        )

    def blocks_at(
        self, *, block_hashes: Sequence[Hashable], local_tokens: int, end_tokens: int
    ) -> tuple[tuple[int, ...], ...] | None:
        """Per-group CPU blocks serving exactly the boundary `end_tokens`, or None if some group lacks it."""
        hashed_end = len(block_hashes) * self.geometry.hash_tokens
        if end_tokens <= local_tokens or end_tokens > hashed_end or end_tokens % self.geometry.hash_tokens:
            return None
        return _Probe(self, block_hashes, local_tokens, hashed_end).blocks_at_all(end_tokens)


class _Probe:
    """One lookup's working state: absolute token positions, memoised per-group answers."""

    def __init__(self, lookup: HybridLookup, block_hashes: Sequence[Hashable], local: int, hashed_end: int) -> None:
        geo = lookup.geometry
        self.index = lookup.index
        self.fine = lookup._fine
        self.hashes = block_hashes
        self.local = local
        self.hashed_end = hashed_end
        self.hash_tokens = geo.hash_tokens
        self.align = geo.alignment_tokens
        self.kinds = [g.kind for g in geo.groups]
        self.windows = [g.window_tokens for g in geo.groups]
        self.block_tokens = geo.group_block_tokens
        self._fa_reach: dict[int, int] = {}
        self._fa_missing: dict[int, BlockKey | None] = {}
        self._present: dict[tuple[int, int], int | None] = {}
        self._window_missing: dict[tuple[int, int], int] = {}

    def key(self, group_id: int, end: int) -> BlockKey:
        return BlockKey(group_id, self.hashes[end // self.hash_tokens - 1])

    def _align_down(self, end: int) -> int:
        return self.local + (end - self.local) // self.align * self.align

    # ----- per-group "largest boundary <= candidate" -----------------------------------------------------------

    def largest_at_most(self, group_id: int, candidate: int) -> int:
        kind = self.kinds[group_id]
        if candidate <= self.local:
            return self.local
        if kind.is_mamba:
            for end in range(candidate, self.local, -self.align):
                if self.index.lookup(self.key(group_id, end)) is not None:
                    return end
            return self.local
        if kind.is_windowed:
            return self._window_largest(group_id, candidate)
        return min(candidate, self._full_reach(group_id, candidate))

    def _full_reach(self, group_id: int, allowed_end: int) -> int:
        if group_id in self._fa_reach:
            return self._fa_reach[group_id]
        block, hash_tokens = self.block_tokens[group_id], self.hash_tokens
        end = self.local
        index = self.local // block
        while (index + 1) * block <= allowed_end and self.index.lookup(self.key(group_id, (index + 1) * block)) is not None:
            index += 1
            end = index * block
        missing_end = (index + 1) * block
        missing_key = self.key(group_id, missing_end) if missing_end <= min(allowed_end, self.hashed_end) else None
        if self.fine and block > hash_tokens:
            top = min(missing_end - hash_tokens, allowed_end) // hash_tokens * hash_tokens
            for boundary in range(top, index * block, -hash_tokens):
                if self.index.lookup(self.key(group_id, boundary)) is not None:
                    end = boundary
                    break
            if missing_key is None and top > index * block:
                missing_key = self.key(group_id, top)
        end = self._align_down(end)
        self._fa_reach[group_id] = end
        self._fa_missing[group_id] = missing_key
        return end

    def _present_block(self, group_id: int, index: int) -> int | None:
        """The CPU block holding whole block `index` of a windowed group, memoised."""
        slot = (group_id, index)
        if slot not in self._present:
            end = (index + 1) * self.block_tokens[group_id]
            self._present[slot] = self.index.lookup(self.key(group_id, end)) if end <= self.hashed_end else None
        return self._present[slot]

    def _first_needed_token(self, group_id: int, end: int) -> int:
        window = self.windows[group_id]
        if self.kinds[group_id] is GroupKind.SLIDING_WINDOW:
            first = end - (window - 1)
        else:  # chunked local: the next token attends within its own chunk
            first = end // window * window
        return max(self.local, first)

    def _needed_range(self, group_id: int, end: int) -> range:
        block = self.block_tokens[group_id]
        return range(self._first_needed_token(group_id, end) // block, -(-end // block))

    def _window_largest(self, group_id: int, candidate: int) -> int:
        block = self.block_tokens[group_id]
        end = candidate
        while end > self.local:
            missing = next((i for i in reversed(self._needed_range(group_id, end))
                            if self._present_block(group_id, i) is None), None)
            if missing is None:
                return end
            self._window_missing.setdefault((group_id, candidate), missing)
            # Every boundary whose window still contains the missing block fails too: jump below it.
            end = self._align_down(min(end - self.align, missing * block))
        return self.local

    # ----- blocks ------------------------------------------------------------------------------------------

    def blocks_at_all(self, end: int) -> tuple[tuple[int, ...], ...] | None:
        out = []
        for group_id in range(len(self.kinds)):
            blocks = self._blocks_at(group_id, end)
            if blocks is None:
                return None
            out.append(blocks)
        return tuple(out)

    def _blocks_at(self, group_id: int, end: int) -> tuple[int, ...] | None:
        kind, block = self.kinds[group_id], self.block_tokens[group_id]
        first_index = self.local // block
        num_entries = -(-(end - self.local) // block)
        if kind.is_mamba:
            state = self.index.lookup(self.key(group_id, end))
            return None if state is None else (NULL_BLOCK_ID,) * (num_entries - 1) + (state,)
        if kind.is_windowed:
            needed = self._needed_range(group_id, end)
            out = []
            for index in range(first_index, first_index + num_entries):
                if index in needed:
                    found = self._present_block(group_id, index)
                    if found is None:
                        return None
                    out.append(found)
                else:
                    out.append(NULL_BLOCK_ID)
            return tuple(out)
        out = []
        for index in range(first_index, first_index + num_entries):
            block_end = (index + 1) * block
            found = self.index.lookup(self.key(group_id, block_end)) if block_end <= self.hashed_end else None
            if found is None and block_end > end:
                # The boundary is inside this block: any interior alias at or past it covers the tokens.
                top = min(block_end - self.hash_tokens, self.hashed_end)
                for boundary in range(top, end - 1, -self.hash_tokens):
                    found = self.index.lookup(self.key(group_id, boundary))
                    if found is not None:
                        break
            if found is None:
                return None
            out.append(found)
        return tuple(out)

    # ----- attribution ----------------------------------------------------------------------------------------

    def reason(self, group_id: int, end: int) -> MissReason:
        """Why group `group_id` does not hold the boundary `end`."""
        kind = self.kinds[group_id]
        if kind.is_mamba:
            return _status_reason(self.index.key_status(self.key(group_id, end)), MissReason.MAMBA_STATE_ABSENT)
        if kind.is_windowed:
            missing = next((i for i in reversed(self._needed_range(group_id, end))
                            if self._present_block(group_id, i) is None), None)
            if missing is None:
                return MissReason.WINDOW_INCOMPLETE
            block_end = (missing + 1) * self.block_tokens[group_id]
            if block_end > self.hashed_end:
                return MissReason.WINDOW_INCOMPLETE
            return _status_reason(self.index.key_status(self.key(group_id, block_end)), MissReason.WINDOW_INCOMPLETE)
        self._full_reach(group_id, end)
        missing_key = self._fa_missing.get(group_id)
        if missing_key is None:
            return MissReason.NEVER_STORED
        return _status_reason(self.index.key_status(missing_key), MissReason.NEVER_STORED)


def _status_reason(status: KeyStatus, absent: MissReason) -> MissReason:
    if status is KeyStatus.EVICTED:
        return MissReason.EVICTED
    if status is KeyStatus.IN_FLIGHT:
        return MissReason.STORE_IN_FLIGHT
    return absent
