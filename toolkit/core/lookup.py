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
        group_reach_tokens: per group, the longest hit that group alone could give (its best boundary - local);
            empty unless the lookup ran with `diagnose=True`.
        miss_reason: why the hit is not every hashed token (NONE when it is).
        limiting_group_id: the group that stopped the hit, or None for request-level reasons: the first group, in
            group order, lacking its data at the boundary one alignment step above the hit (the hit is the largest
            boundary every group holds, so at the next one some group lacks data); `miss_reason` says why it lacks it.
        group_miss_reasons: per group, why that group's own reach stops where it does (None if it reaches the end);
            empty unless the lookup ran with `diagnose=True`.
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


def _new_result(fields: dict) -> LookupResult:
    """A `LookupResult` from a complete field dict, skipping the frozen dataclass's per-field `object.__setattr__`
    (one result per lookup; the caller passes every field, so nothing is defaulted)."""
    result = object.__new__(LookupResult)
    result.__dict__.update(fields)
    return result


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
        # 0: full attention / MLA (downward closed), 1: Mamba (one state per boundary), 2: windowed.
        self._codes = tuple(1 if g.kind.is_mamba else 2 if g.kind.is_windowed else 0 for g in groups)
        self._sparse_group_ids = tuple(i for i, g in enumerate(groups) if g.kind.is_mamba or g.kind.is_windowed)
        self._full_group_ids = tuple(i for i, code in enumerate(self._codes) if code == 0)
        self._no_blocks = ((),) * len(groups)
        self._no_reach = (0,) * len(groups)
        self._no_reasons = (None,) * len(groups)
        container = getattr(index, "key_container", None)
        if container is not None:
            self._contains = container
            self._get = index.lookup
            self._status = index.key_status
        else:  # a foreign index may read BlockKey fields: hand it real BlockKeys
            self._contains = _LookupContainer(index)
            self._get = lambda key: index.lookup(BlockKey(*key))
            self._status = lambda key: index.key_status(BlockKey(*key))
        # Miss attribution without method calls when the index exposes where in-flight and evicted keys live.
        self._in_flight_keys = getattr(index, "in_flight_key_container", None) if container is not None else None
        self._evicted_keys = getattr(index, "evicted_key_container", None) if container is not None else None
        if self._in_flight_keys is None or self._evicted_keys is None:
            self._in_flight_keys = self._evicted_keys = None

    def _miss(self, local_tokens: int, cap: int, reason: MissReason) -> LookupResult:
        return _new_result({
            "hit_tokens": 0, "local_tokens": local_tokens, "max_hit_tokens": cap, "block_ids": self._no_blocks,
            "group_reach_tokens": self._no_reach, "miss_reason": reason, "limiting_group_id": None,
            "group_miss_reasons": self._no_reasons,
        })

    def find(self, *, block_hashes: Sequence[Hashable], num_tokens: int, local_tokens: int,
             diagnose: bool = True) -> LookupResult:
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
        contains = self._contains
        end = allowed_end
        fa_reach: dict[int, int] = {}
        fa_missing: dict[int, tuple | None] = {}
        probe: _Probe | None = None
        if end > local_tokens:
            # Full attention first: downward closed, so the shortest full-attention reach bounds the hit, and the
            # sparse groups are only scanned below it (most misses end there without probing them at all).
            block_tokens, fine = self._block_tokens, self._fine
            for g in self._full_group_ids:
                block = block_tokens[g]
                per_block = block // hash_tokens
                index = local_tokens // block
                last_index = allowed_end // block  # whole blocks with (index + 1) * block <= allowed_end
                while index < last_index and (g, block_hashes[(index + 1) * per_block - 1]) in contains:
                    index += 1
                reach = index * block
                missing_end = reach + block
                missing_key = ((g, block_hashes[missing_end // hash_tokens - 1])
                               if missing_end <= allowed_end and missing_end <= hashed_end else None)
                if fine and block > hash_tokens:
                    # Phase 2: the interior hash boundaries of the first missing block, high to low (alias keys).
                    top = min(missing_end - hash_tokens, allowed_end) // hash_tokens * hash_tokens
                    for boundary in range(top, reach, -hash_tokens):
                        if (g, block_hashes[boundary // hash_tokens - 1]) in contains:
                            reach = boundary
                            break
                    if missing_key is None and top > index * block:
                        missing_key = (g, block_hashes[top // hash_tokens - 1])
                reach = local_tokens + (reach - local_tokens) // align * align
                if reach > allowed_end:
                    reach = allowed_end
                fa_reach[g] = reach
                fa_missing[g] = missing_key
                if reach < end:
                    end = reach
            # Fixed point over the sparse groups: each shrinks the candidate to the largest boundary it holds.
            sparse, codes = self._sparse_group_ids, self._codes
            step, low = align // hash_tokens, local_tokens // hash_tokens - 1
            while end > local_tokens:
                shrunk = end
                for g in sparse:
                    if codes[g] == 1:
                        held = local_tokens
                        for index in range(shrunk // hash_tokens - 1, low, -step):
                            if (g, block_hashes[index]) in contains:
                                held = (index + 1) * hash_tokens
                                break
                    else:
                        if probe is None:
                            probe = _Probe(self, block_hashes, local_tokens, hashed_end)
                        held = probe._window_largest(g, shrunk)
                    if held < shrunk:
                        shrunk = held
                if shrunk == end:
                    break
                end = shrunk
        limiting: int | None = None
        if end < allowed_end:
            limiting, reason = self._blocker(block_hashes, local_tokens, hashed_end, end + align, fa_reach,
                                             fa_missing, probe)
        elif allowed_end < hash_limit:
            reason = MissReason.ALIGNMENT_CLAMP
        elif hash_limit < hashed_end:
            reason = MissReason.LAST_TOKEN_CAP
        else:
            reason = MissReason.NONE
        hit = end - local_tokens
        if hit:
            if probe is None:
                probe = _Probe(self, block_hashes, local_tokens, hashed_end)
            blocks = probe.blocks_at_all(end)
            assert blocks is not None, f"joint boundary {end} is not held by every group"
        else:
            blocks = self._no_blocks
        if diagnose:
            reaches, reasons = self._diagnose(block_hashes, local_tokens, hashed_end, allowed_end)
        else:
            reaches, reasons = (), ()
        return _new_result({
            "hit_tokens": hit, "local_tokens": local_tokens, "max_hit_tokens": cap, "block_ids": blocks,
            "group_reach_tokens": reaches, "miss_reason": reason, "limiting_group_id": limiting,
            "group_miss_reasons": reasons,
        })

    def _blocker(self, block_hashes: Sequence[Hashable], local_tokens: int, hashed_end: int, boundary: int,
                 fa_reach: dict[int, int], fa_missing: dict[int, tuple | None],
                 probe: "_Probe | None") -> tuple[int, MissReason]:
        """The first group (in group order) lacking data at `boundary`, one alignment step above the joint hit,
        and why. Some group must lack it: otherwise `boundary` would be a longer joint hit."""
        codes, contains = self._codes, self._contains
        state_key_hash = block_hashes[boundary // self._hash_tokens - 1]
        for g in self._group_ids:
            code = codes[g]
            if code == 0:
                if fa_reach[g] >= boundary:
                    continue
                key = fa_missing[g]
                return g, (MissReason.NEVER_STORED if key is None else self._key_reason(key, MissReason.NEVER_STORED))
            if code == 1:
                key = (g, state_key_hash)
                if key in contains:
                    continue
                return g, self._key_reason(key, MissReason.MAMBA_STATE_ABSENT)
            if probe is None:
                probe = _Probe(self, block_hashes, local_tokens, hashed_end)
            if probe._window_largest(g, boundary) < boundary:
                return g, probe.reason(g, boundary)
        raise AssertionError(f"every group holds boundary {boundary} above the joint hit")

    def _key_reason(self, key: tuple, absent: MissReason) -> MissReason:
        """Why `key` is not a hit: in flight, evicted, or `absent` (never stored, or a state the pool lacks)."""
        return _status_reason(self._key_status(key), absent)

    def _key_status(self, key: tuple) -> KeyStatus:
        if self._evicted_keys is None:
            return self._status(key)
        if key in self._contains:  # the same order as `KeyIndex.key_status`, read straight from the containers
            return KeyStatus.CACHED
        if key in self._in_flight_keys:
            return KeyStatus.IN_FLIGHT
        return KeyStatus.EVICTED if key in self._evicted_keys else KeyStatus.NEVER_STORED

    def _diagnose(self, block_hashes: Sequence[Hashable], local_tokens: int, hashed_end: int,
                  allowed_end: int) -> tuple[tuple[int, ...], tuple[MissReason | None, ...]]:
        """Per group: the longest hit that group alone could give, and why it stops there (None: it reaches
        `allowed_end`). Each sparse group is scanned over the whole candidate range."""
        if allowed_end <= local_tokens:
            return self._no_reach, self._no_reasons
        probe = _Probe(self, block_hashes, local_tokens, hashed_end)
        reaches = []
        for g in self._group_ids:
            if self._codes[g] == 0:
                reach = probe._full_reach(g, allowed_end)
                reaches.append(allowed_end if reach > allowed_end else reach)
            else:
                reaches.append(probe.largest_at_most(g, allowed_end))
        reasons = tuple([probe.reason(g, allowed_end) if reaches[g] < allowed_end else None
                         for g in self._group_ids])
        return tuple([r - local_tokens for r in reaches]), reasons

    def blocks_at(
        self, *, block_hashes: Sequence[Hashable], local_tokens: int, end_tokens: int
    ) -> tuple[tuple[int, ...], ...] | None:
        """Per-group CPU blocks serving exactly the boundary `end_tokens`, or None if some group lacks it."""
        hashed_end = len(block_hashes) * self._hash_tokens
        if end_tokens <= local_tokens or end_tokens > hashed_end or end_tokens % self._hash_tokens:
            return None
        return _Probe(self, block_hashes, local_tokens, hashed_end).blocks_at_all(end_tokens)


class _LookupContainer:
    """`key in container` for an index that only offers `lookup(key)`."""

    __slots__ = ("_index",)

    def __init__(self, index: KeyIndex) -> None:
        self._index = index

    def __contains__(self, key: tuple) -> bool:
        return self._index.lookup(BlockKey(*key)) is not None


class _Probe:
    """One lookup's working state: absolute token positions, memoised per-group answers. Keys are plain
    `(group_id, block_hash)` tuples (see `HybridLookup`)."""

    __slots__ = ("lookup", "contains", "get", "fine", "hashes", "local", "hashed_end", "hash_tokens", "align",
                 "kinds", "windows", "block_tokens", "_fa_reach", "_fa_missing", "_present", "_window_missing")

    def __init__(self, lookup: HybridLookup, block_hashes: Sequence[Hashable], local: int, hashed_end: int) -> None:
        self.lookup = lookup
        self.contains = lookup._contains
        self.get = lookup._get
        self.fine = lookup._fine
        self.hashes = block_hashes
        self.local = local
        self.hashed_end = hashed_end
        self.hash_tokens = lookup._hash_tokens
        self.align = lookup._align_tokens
        self.kinds = lookup._kinds
        self.windows = lookup._windows
        self.block_tokens = lookup._block_tokens
        self._fa_reach: dict[int, int] = {}
        self._fa_missing: dict[int, tuple | None] = {}
        self._present: dict[tuple[int, int], int | None] = {}
        self._window_missing: dict[tuple[int, int], int] = {}

    def key(self, group_id: int, end: int) -> tuple:
        return (group_id, self.hashes[end // self.hash_tokens - 1])

    def _align_down(self, end: int) -> int:
        return self.local + (end - self.local) // self.align * self.align

    # ----- per-group "largest boundary <= candidate" -----------------------------------------------------------

    def largest_at_most(self, group_id: int, candidate: int) -> int:
        local = self.local
        if candidate <= local:
            return local
        if self.lookup._is_mamba[group_id]:
            # The single state block at a boundary: scan boundaries high to low (hash-block indices, no keys built
            # beyond one tuple per probe).
            hash_tokens, hashes, contains = self.hash_tokens, self.hashes, self.contains
            for index in range(candidate // hash_tokens - 1, local // hash_tokens - 1, -(self.align // hash_tokens)):
                if (group_id, hashes[index]) in contains:
                    return (index + 1) * hash_tokens
            return local
        if self.lookup._is_windowed[group_id]:
            return self._window_largest(group_id, candidate)
        reach = self._fa_reach.get(group_id)
        if reach is None:
            reach = self._full_reach(group_id, candidate)
        return candidate if candidate < reach else reach

    def _full_reach(self, group_id: int, allowed_end: int) -> int:
        if group_id in self._fa_reach:
            return self._fa_reach[group_id]
        block, hash_tokens = self.block_tokens[group_id], self.hash_tokens
        hashes, contains = self.hashes, self.contains
        index = self.local // block
        # Whole blocks left to right: hash index of block `index`'s end is (index + 1) * (block // hash) - 1.
        per_block = block // hash_tokens
        last_index = allowed_end // block  # blocks with (index + 1) * block <= allowed_end
        while index < last_index and (group_id, hashes[(index + 1) * per_block - 1]) in contains:
            index += 1
        end = index * block
        missing_end = (index + 1) * block
        missing_key = self.key(group_id, missing_end) if missing_end <= min(allowed_end, self.hashed_end) else None
        if self.fine and block > hash_tokens:
            top = min(missing_end - hash_tokens, allowed_end) // hash_tokens * hash_tokens
            for boundary in range(top, index * block, -hash_tokens):
                if (group_id, hashes[boundary // hash_tokens - 1]) in contains:
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
            self._present[slot] = self.get(self.key(group_id, end)) if end <= self.hashed_end else None
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
        codes, get = self.lookup._codes, self.get
        state_key = self.hashes[end // self.hash_tokens - 1] if end > 0 else None
        for group_id in self.lookup._group_ids:
            if codes[group_id] == 1 and end > self.local:  # `_blocks_at` for Mamba, inlined
                state = get((group_id, state_key))
                if state is None:
                    return None
                num_entries = -(-(end - self.local) // self.block_tokens[group_id])
                out.append((NULL_BLOCK_ID,) * (num_entries - 1) + (state,))
                continue
            blocks = self._blocks_at(group_id, end)
            if blocks is None:
                return None
            out.append(blocks)
        return tuple(out)

    def _blocks_at(self, group_id: int, end: int) -> tuple[int, ...] | None:
        block = self.block_tokens[group_id]
        first_index = self.local // block
        num_entries = -(-(end - self.local) // block)
        get = self.get
        if self.lookup._is_mamba[group_id]:
            state = get(self.key(group_id, end))
            return None if state is None else (NULL_BLOCK_ID,) * (num_entries - 1) + (state,)
        if self.lookup._is_windowed[group_id]:
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
        hashes, hash_tokens, hashed_end = self.hashes, self.hash_tokens, self.hashed_end
        out = []
        for index in range(first_index, first_index + num_entries):
            block_end = (index + 1) * block
            found = get((group_id, hashes[block_end // hash_tokens - 1])) if block_end <= hashed_end else None
            if found is None and block_end > end:
                # The boundary is inside this block: any interior alias at or past it covers the tokens.
                top = min(block_end - hash_tokens, hashed_end)
                for boundary in range(top, end - 1, -hash_tokens):
                    found = get((group_id, hashes[boundary // hash_tokens - 1]))
                    if found is not None:
                        break
            if found is None:
                return None
            out.append(found)
        return tuple(out)

    # ----- attribution ----------------------------------------------------------------------------------------

    def _status(self, key: tuple) -> KeyStatus:
        return self.lookup._key_status(key)

    def reason(self, group_id: int, end: int) -> MissReason:
        """Why group `group_id` does not hold the boundary `end`."""
        status = self._status
        if self.lookup._codes[group_id] == 1:
            return _status_reason(status(self.key(group_id, end)), MissReason.MAMBA_STATE_ABSENT)
        if self.lookup._is_windowed[group_id]:
            missing = next((i for i in reversed(self._needed_range(group_id, end))
                            if self._present_block(group_id, i) is None), None)
            if missing is None:
                return MissReason.WINDOW_INCOMPLETE
            block_end = (missing + 1) * self.block_tokens[group_id]
            if block_end > self.hashed_end:
                return MissReason.WINDOW_INCOMPLETE
            return _status_reason(status(self.key(group_id, block_end)), MissReason.WINDOW_INCOMPLETE)
        self._full_reach(group_id, end)
        missing_key = self._fa_missing.get(group_id)
        if missing_key is None:
            return MissReason.NEVER_STORED
        return _status_reason(status(missing_key), MissReason.NEVER_STORED)


def _status_reason(status: KeyStatus, absent: MissReason) -> MissReason:
    if status is KeyStatus.EVICTED:
        return MissReason.EVICTED
    if status is KeyStatus.IN_FLIGHT:
        return MissReason.STORE_IN_FLIGHT
    return absent
