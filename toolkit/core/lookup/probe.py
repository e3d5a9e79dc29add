"""Probing one lookup's keys: per group, the largest boundary it holds up to a candidate, and the CPU blocks that
serve a boundary.

Per group, for a boundary `end` (absolute tokens):
- full attention / MLA: every block up to `end` (downward closed). Whole blocks are walked left to right; if
  fine-grained hits are on, the interior hash boundaries of the first missing block are probed from high to low
  through alias keys.
- sliding window / chunked local: only the blocks the next token attends to (inside the window or the chunk);
  the others are null entries.
- Mamba (align or all): the single state block whose primary or alias key is the boundary's key.

A `Probe` is one lookup's working state: it reads the geometry's `LookupTables` (passed in) and memoises
per-group answers. Keys are plain `(group_id, block_hash)` tuples (`ProbeKey`).
"""

from __future__ import annotations

from itertools import repeat
from typing import Hashable, Sequence

from toolkit.core.lookup.tables import LookupTables, ProbeKey
from toolkit.core.pool.blocks import NULL_BLOCK_ID
from toolkit.core.specs import GroupKind


def full_reach(
    tables: LookupTables, hashes: Sequence[Hashable], group_id: int, local: int, allowed_end: int, hashed_end: int
) -> tuple[int, ProbeKey | None]:
    """A full-attention / MLA group's reach: the largest aligned boundary up to `allowed_end` it holds, and the key
    of its first missing block (None: past the hashes). The one walk the lookup and its diagnostics share."""
    contains, hash_tokens, block = tables.contains, tables.hash_tokens, tables.block_tokens[group_id]
    index = local // block
    # Whole blocks left to right: hash index of block `index`'s end is (index + 1) * (block // hash) - 1.
    per_block = block // hash_tokens
    last_index = allowed_end // block  # blocks with (index + 1) * block <= allowed_end
    while index < last_index and (group_id, hashes[(index + 1) * per_block - 1]) in contains:
        index += 1
    reach = index * block
    missing_end = reach + block
    missing_key: ProbeKey | None = (
        (group_id, hashes[missing_end // hash_tokens - 1])
        if missing_end <= allowed_end and missing_end <= hashed_end
        else None
    )
    if tables.fine and block > hash_tokens:
        # The interior hash boundaries of the first missing block, high to low (alias keys).
        top = min(missing_end - hash_tokens, allowed_end) // hash_tokens * hash_tokens
        for boundary in range(top, index * block, -hash_tokens):
            if (group_id, hashes[boundary // hash_tokens - 1]) in contains:
                reach = boundary
                break
        if missing_key is None and top > index * block:
            missing_key = (group_id, hashes[top // hash_tokens - 1])
    align = tables.align_tokens
    reach = local + (reach - local) // align * align
    return (allowed_end if reach > allowed_end else reach), missing_key


def state_largest(tables: LookupTables, hashes: Sequence[Hashable], group_id: int, local: int, candidate: int) -> int:
    """A Mamba group's largest boundary in (local, candidate] holding its single state block, else `local`.

    The boundaries' keys are probed high to low inside C (`filter` over a strided slice with the container's own
    `__contains__`): a long prompt's scan is hundreds of boundaries, almost all absent, once per group per lookup.
    Chained block hashes do not repeat inside one prompt, so the first found key's position is its boundary."""
    hash_tokens = tables.hash_tokens
    step = tables.align_tokens // hash_tokens
    top, stop = candidate // hash_tokens - 1, local // hash_tokens - 1
    if top <= stop:
        return local
    boundaries = hashes[top : stop if stop >= 0 else None : -step]
    found = next(filter(tables.contains.__contains__, zip(repeat(group_id), boundaries)), None)
    if found is None:
        return local
    return (top - boundaries.index(found[1]) * step + 1) * hash_tokens


class Probe:
    """One lookup's working state: absolute token positions, memoised per-group answers."""

    __slots__ = (
        "tables",
        "contains",
        "get",
        "fine",
        "hashes",
        "local",
        "hashed_end",
        "hash_tokens",
        "align",
        "kinds",
        "windows",
        "block_tokens",
        "fa_reach",
        "fa_missing",
        "_present",
    )

    def __init__(self, tables: LookupTables, block_hashes: Sequence[Hashable], local: int, hashed_end: int) -> None:
        self.tables = tables
        self.contains = tables.contains
        self.get = tables.get
        self.fine = tables.fine
        self.hashes = block_hashes
        self.local = local
        self.hashed_end = hashed_end
        self.hash_tokens = tables.hash_tokens
        self.align = tables.align_tokens
        self.kinds = tables.kinds
        self.windows = tables.windows
        self.block_tokens = tables.block_tokens
        # Per full-attention group: its reach, and the key of its first missing block (None: past the hashes).
        self.fa_reach: dict[int, int] = {}
        self.fa_missing: dict[int, ProbeKey | None] = {}
        self._present: dict[tuple[int, int], int | None] = {}

    def key(self, group_id: int, end: int) -> ProbeKey:
        return (group_id, self.hashes[end // self.hash_tokens - 1])

    def align_down(self, end: int) -> int:
        return self.local + (end - self.local) // self.align * self.align

    # ----- per-group "largest boundary <= candidate" -----------------------------------------------------------

    def largest_at_most(self, group_id: int, candidate: int) -> int:
        local = self.local
        if candidate <= local:
            return local
        if self.tables.is_mamba[group_id]:
            return state_largest(self.tables, self.hashes, group_id, local, candidate)
        if self.tables.is_windowed[group_id]:
            return self.window_largest(group_id, candidate)
        reach = self.fa_reach.get(group_id)
        if reach is None:
            reach = self.full_reach(group_id, candidate)
        return candidate if candidate < reach else reach

    def full_reach(self, group_id: int, allowed_end: int) -> int:
        """`full_reach` for this lookup, memoised with its first missing key (`fa_reach`, `fa_missing`)."""
        if group_id in self.fa_reach:
            return self.fa_reach[group_id]
        reach, self.fa_missing[group_id] = full_reach(
            self.tables, self.hashes, group_id, self.local, allowed_end, self.hashed_end
        )
        self.fa_reach[group_id] = reach
        return reach

    def present_block(self, group_id: int, index: int) -> int | None:
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

    def needed_range(self, group_id: int, end: int) -> range:
        """The block indices of a windowed group the token after `end` attends to."""
        block = self.block_tokens[group_id]
        return range(self._first_needed_token(group_id, end) // block, -(-end // block))

    def window_largest(self, group_id: int, candidate: int) -> int:
        block = self.block_tokens[group_id]
        end = candidate
        while end > self.local:
            missing = next(
                (i for i in reversed(self.needed_range(group_id, end)) if self.present_block(group_id, i) is None), None
            )
            if missing is None:
                return end
            # Every boundary whose window still contains the missing block fails too: jump below it.
            end = self.align_down(min(end - self.align, missing * block))
        return self.local

    # ----- blocks ------------------------------------------------------------------------------------------

    def blocks_at_all(self, end: int) -> tuple[tuple[int, ...], ...] | None:
        out = []
        for group_id in self.tables.group_ids:
            blocks = self.blocks_at(group_id, end)
            if blocks is None:
                return None
            out.append(blocks)
        return tuple(out)

    def blocks_at(self, group_id: int, end: int) -> tuple[int, ...] | None:
        block = self.block_tokens[group_id]
        first_index = self.local // block
        num_entries = -(-(end - self.local) // block)
        get = self.get
        if self.tables.is_mamba[group_id]:
            state = get(self.key(group_id, end))
            return None if state is None else (NULL_BLOCK_ID,) * (num_entries - 1) + (state,)
        if self.tables.is_windowed[group_id]:
            needed = self.needed_range(group_id, end)
            out = []
            for index in range(first_index, first_index + num_entries):
                if index in needed:
                    found = self.present_block(group_id, index)
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
