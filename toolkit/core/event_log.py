"""What the manager reports about itself: the visualizer's step events and the engine's KV-cache events.

Every part of the manager (loads, stores, the finish flush) writes here; only the facade's `take_*` drains.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from toolkit.core.pool.blocks import CpuBlockPool
from toolkit.core.pool.keys import BlockKey
from toolkit.core.store.selection import BlockMeta

if TYPE_CHECKING:  # annotations only: the lookup package imports the store package, which imports this module
    from toolkit.core.lookup.result import LookupResult

StepEvent = dict[str, Any]
"""One visualizer step event: JSON-ready, with a "type" (the kinds: `OffloadManager.snapshot`)."""


@dataclass(frozen=True, kw_only=True)
class CacheEvent:
    """A KV-cache event for the engine's event stream: kind "stored", "removed" or "cleared".

    `meta` is the stored block's payload when KV events are on and the block was stored positionally (hand-offs,
    tails and lazy stores carry none, as in vLLM).
    """

    kind: str
    cpu_block_id: int
    group_id: int
    keys: tuple[BlockKey, ...]
    meta: BlockMeta | None = None


class EventLog:
    """Undrained step events (bounded, oldest dropped first) and KV-cache events.

    `records_steps` is False when nobody will drain step events (`max_step_events == 0`, the vLLM connector):
    writers test it before building an event's dict, so the bookkeeping costs nothing there. Appending while it
    is False is still safe (the deque keeps nothing), which the rare paths (failures, reset) rely on.
    """

    def __init__(self, cpu: CpuBlockPool, *, max_step_events: int, kv_events: bool) -> None:
        self._cpu = cpu
        self.records_steps = max_step_events > 0
        self.records_kv = kv_events
        self._steps: deque[StepEvent] = deque(maxlen=max_step_events)
        self._kv: list[CacheEvent] = []

    def step(self, event: StepEvent) -> None:
        self._steps.append(event)

    def lookup(self, request_id: str, local_tokens: int, result: LookupResult) -> None:
        """A lookup's outcome: where its hit ended, why, and the group that stopped it."""
        self._steps.append(
            {
                "type": "lookup",
                "request_id": request_id,
                "local_tokens": local_tokens,
                "hit_tokens": result.hit_tokens,
                "miss_reason": result.miss_reason.value,
                "limiting_group_id": result.limiting_group_id,
            }
        )

    def steps(self, events: list[StepEvent]) -> None:
        self._steps.extend(events)

    def stored(self, cpu_id: int, group_id: int, meta: BlockMeta | None) -> None:
        """A "stored" KV event, with the keys the CPU block holds now (call after caching)."""
        self._kv.append(
            CacheEvent(kind="stored", cpu_block_id=cpu_id, group_id=group_id, keys=self._cpu.keys_of(cpu_id), meta=meta)
        )

    def drain_pool(self) -> None:
        """Turn the pool's evictions and key drops into events (the pool records them only for this log)."""
        cpu = self._cpu
        if not cpu.records_events:
            return  # nobody reads them (no step events, no KV events): the pool recorded none
        for event in cpu.take_events():
            kind = "cleared" if event.kind == "cleared" else "removed"
            if self.records_kv:
                self._kv.append(
                    CacheEvent(kind=kind, cpu_block_id=event.block_id, group_id=event.group_id, keys=event.keys)
                )
            if event.kind != "cleared":
                self._steps.append(
                    {
                        "type": "evict" if event.kind == "evicted" else "drop_keys",
                        "cpu_block_id": event.block_id,
                        "group_id": event.group_id,
                        "num_keys": len(event.keys),
                    }
                )

    def take_kv(self) -> list[CacheEvent]:
        self.drain_pool()
        events, self._kv = self._kv, []
        return events

    def take_steps(self) -> list[StepEvent]:
        self.drain_pool()
        events = list(self._steps)
        self._steps.clear()
        return events
