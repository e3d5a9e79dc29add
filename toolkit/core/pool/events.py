"""What the CPU pool did on its own, as the event log records it (`CpuBlockPool.take_events`)."""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.core.pool.keys import BlockKey


@dataclass(frozen=True, kw_only=True)
class PoolEvent:
    """Something the pool did on its own: `kind` is "evicted" (reused by allocation), "dropped" (keys removed on
    request, e.g. after a failed load) or "cleared" (reset; `block_id` is -1)."""

    kind: str
    block_id: int
    group_id: int
    keys: tuple[BlockKey, ...]
