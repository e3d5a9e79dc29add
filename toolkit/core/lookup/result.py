"""What a hybrid lookup answers: the hit, the group that stopped it and why (the vocabulary the lookup modules share).

`KeyIndex` is where lookups read keys (the CPU pool plus in-flight knowledge); `KeyStatus` is its explanation of a
key that is not a hit, and `status_reason` turns that into the `MissReason` a result carries.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from toolkit.core.pool.blocks import NULL_BLOCK_ID
from toolkit.core.pool.keys import BlockKey


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


def status_reason(status: KeyStatus, absent: MissReason) -> MissReason:
    """The miss reason of a key in `status`: evicted, in flight, or `absent` (never stored, or a missing state)."""
    if status is KeyStatus.EVICTED:
        return MissReason.EVICTED
    if status is KeyStatus.IN_FLIGHT:
        return MissReason.STORE_IN_FLIGHT
    return absent
