"""Where the manager's events go: the one typed stream (`toolkit.core.events`) and the engine's KV-cache events.

Every part of the manager (lookup, loads, stores, hand-offs, the finish flush, reset) emits here; the log keeps a
bounded buffer for the visualizer (`take_steps`) and hands each event to the observer that wants them (the
manager's observer slot, `toolkit.core.observer`). KV-cache events are a separate, engine-facing list (vLLM's
format, drained by the connector).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Protocol

from toolkit.core.events import BlockEvicted, BlockMeta, KeysDropped, LookupDone, ManagerEvent
from toolkit.core.pool.blocks import CpuBlockPool
from toolkit.core.pool.keys import BlockKey

if TYPE_CHECKING:
    from toolkit.core.lookup.result import LookupResult


class EventSink(Protocol):
    """What the log needs of an observer (`toolkit.core.observer.OffloadObserver` is one)."""

    @property
    def wants_events(self) -> bool: ...

    def on_event(self, event: ManagerEvent) -> None: ...


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
    """The bounded buffer of undrained events (oldest dropped first), the event observer, and KV-cache events.

    `recording` is True when anybody reads events (a buffer: `max_step_events > 0`; or an observer with
    `wants_events`): writers test it before building an event, so the stream costs nothing where nobody reads it
    (the vLLM connector). Emitting while it is False is still safe, which the rare paths (failures, reset) rely on.
    """

    def __init__(self, cpu: CpuBlockPool, *, max_step_events: int, kv_events: bool) -> None:
        self._cpu = cpu
        self._buffer: deque[ManagerEvent] | None = deque(maxlen=max_step_events) if max_step_events > 0 else None
        self._observer: EventSink | None = None
        self.records_kv = kv_events
        self.recording = self._buffer is not None
        self._kv: list[CacheEvent] = []

    def watch(self, observer: EventSink | None) -> None:
        """The observer slot changed: events go to it when it wants them; the pool records what it does while
        anybody reads events (never switched off once on: KV events may need them too)."""
        self._observer = observer if observer is not None and observer.wants_events else None
        self.recording = self._buffer is not None or self._observer is not None
        if self.recording:
            self._cpu.records_events = True

    def emit(self, event: ManagerEvent) -> None:
        if self._buffer is not None:
            self._buffer.append(event)
        if self._observer is not None:
            self._observer.on_event(event)

    def emit_all(self, events: Iterable[ManagerEvent]) -> None:
        for event in events:
            self.emit(event)

    def lookup(self, request_id: str, local_tokens: int, result: LookupResult) -> None:
        """A lookup's outcome: where its hit ended, why, and the group that stopped it."""
        self.emit(
            LookupDone(
                request_id=request_id,
                local_tokens=local_tokens,
                hit_tokens=result.hit_tokens,
                miss_reason=result.miss_reason.value,
                limiting_group_id=result.limiting_group_id,
            )
        )

    def stored(self, cpu_id: int, group_id: int, meta: BlockMeta | None) -> None:
        """A "stored" KV event, with the keys the CPU block holds now (call after caching)."""
        self._kv.append(
            CacheEvent(kind="stored", cpu_block_id=cpu_id, group_id=group_id, keys=self._cpu.keys_of(cpu_id), meta=meta)
        )

    def drain_pool(self) -> None:
        """Turn the pool's evictions and key drops into events (the pool records them only for this log)."""
        cpu = self._cpu
        if not cpu.records_events:
            return  # nobody reads them (no events, no KV events): the pool recorded none
        for event in cpu.take_events():
            kind = "cleared" if event.kind == "cleared" else "removed"
            if self.records_kv:
                self._kv.append(
                    CacheEvent(kind=kind, cpu_block_id=event.block_id, group_id=event.group_id, keys=event.keys)
                )
            if event.kind != "cleared" and self.recording:
                made = BlockEvicted if event.kind == "evicted" else KeysDropped
                self.emit(made(cpu_block_id=event.block_id, group_id=event.group_id, num_keys=len(event.keys)))

    def take_kv(self) -> list[CacheEvent]:
        self.drain_pool()
        events, self._kv = self._kv, []
        return events

    def take_steps(self) -> list[ManagerEvent]:
        """Drain the buffer (empty when the manager keeps none: `max_step_events == 0`)."""
        self.drain_pool()
        if self._buffer is None:
            return []
        events = list(self._buffer)
        self._buffer.clear()
        return events
