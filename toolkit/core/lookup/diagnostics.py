"""Why a lookup stops where it does: the limiting group of a joint hit, and each group's own reach and reason.

The limiting group is attributed on every miss (the connector reports it); the per-group reaches and reasons are
the `diagnose=True` extras (`toolkit.vllm.observe` and the visualizer ask for them; the connector's hot path does
not). A key's reason comes from `LookupTables.key_status` (in flight, evicted, or never stored).
"""

from __future__ import annotations

from typing import Hashable, Sequence

from toolkit.core.lookup.probe import Probe
from toolkit.core.lookup.result import MissReason, status_reason
from toolkit.core.lookup.tables import GroupWalk, LookupTables, ProbeKey


def limiting_group(
    tables: LookupTables,
    block_hashes: Sequence[Hashable],
    local_tokens: int,
    hashed_end: int,
    boundary: int,
    fa_reach: dict[int, int],
    fa_missing: dict[int, ProbeKey | None],
    probe: Probe | None,
) -> tuple[int, MissReason]:
    """The first group (in group order) lacking data at `boundary`, one alignment step above the joint hit,
    and why. Some group must lack it: otherwise `boundary` would be a longer joint hit. `fa_reach` and
    `fa_missing` are the full-attention reaches and first missing keys the fixed point already found."""
    walks, contains = tables.walks, tables.contains
    state_key_hash = block_hashes[boundary // tables.hash_tokens - 1]
    for g in tables.group_ids:
        walk = walks[g]
        if walk is GroupWalk.FULL:
            if fa_reach[g] >= boundary:
                continue
            key = fa_missing[g]
            return g, (
                MissReason.NEVER_STORED
                if key is None
                else status_reason(tables.key_status(key), MissReason.NEVER_STORED)
            )
        if walk is GroupWalk.STATE:
            state_key = (g, state_key_hash)
            if state_key in contains:
                continue
            return g, status_reason(tables.key_status(state_key), MissReason.MAMBA_STATE_ABSENT)
        if probe is None:
            probe = Probe(tables, block_hashes, local_tokens, hashed_end)
        if probe.window_largest(g, boundary) < boundary:
            return g, group_miss_reason(probe, g, boundary)
    raise AssertionError(f"every group holds boundary {boundary} above the joint hit")


def group_miss_reason(probe: Probe, group_id: int, end: int) -> MissReason:
    """Why group `group_id` does not hold the boundary `end`."""
    tables = probe.tables
    status = tables.key_status
    if tables.walks[group_id] is GroupWalk.STATE:
        return status_reason(status(probe.key(group_id, end)), MissReason.MAMBA_STATE_ABSENT)
    if tables.is_windowed[group_id]:
        missing = next(
            (i for i in reversed(probe.needed_range(group_id, end)) if probe.present_block(group_id, i) is None), None
        )
        if missing is None:
            return MissReason.WINDOW_INCOMPLETE
        block_end = (missing + 1) * probe.block_tokens[group_id]
        if block_end > probe.hashed_end:
            return MissReason.WINDOW_INCOMPLETE
        return status_reason(status(probe.key(group_id, block_end)), MissReason.WINDOW_INCOMPLETE)
    probe.full_reach(group_id, end)
    missing_key = probe.fa_missing.get(group_id)
    if missing_key is None:
        return MissReason.NEVER_STORED
    return status_reason(status(missing_key), MissReason.NEVER_STORED)


def per_group_reach(
    tables: LookupTables, block_hashes: Sequence[Hashable], local_tokens: int, hashed_end: int, allowed_end: int
) -> tuple[tuple[int, ...], tuple[MissReason | None, ...]]:
    """Per group: the longest hit that group alone could give, and why it stops there (None: it reaches
    `allowed_end`). Each sparse group is scanned over the whole candidate range."""
    if allowed_end <= local_tokens:
        return tables.no_reach, tables.no_reasons
    probe = Probe(tables, block_hashes, local_tokens, hashed_end)
    reaches = []
    for g in tables.group_ids:
        if tables.walks[g] is GroupWalk.FULL:
            reach = probe.full_reach(g, allowed_end)
            reaches.append(allowed_end if reach > allowed_end else reach)
        else:
            reaches.append(probe.largest_at_most(g, allowed_end))
    reasons = tuple(
        [group_miss_reason(probe, g, allowed_end) if reaches[g] < allowed_end else None for g in tables.group_ids]
    )
    return tuple([r - local_tokens for r in reaches]), reasons
