"""Store events in flight: device -> CPU copies from the step that commits them to the last worker's report.

A step's selections become one event (one CPU allocation for the whole batch). Its keys become hits only once
`world_size` workers reported it; a failure frees its CPU blocks uncached. A reset abandons the events in
flight: their pins stay until the workers report, and nothing of them is cached.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from toolkit.core.event_log import EventLog
from toolkit.core.events import BlockMeta, StoreDone, StoreSent
from toolkit.core.metadata import TransferBatch
from toolkit.core.pool.blocks import CpuBlockPool
from toolkit.core.pool.device_pool import DevicePool
from toolkit.core.pool.in_flight import InFlightStores
from toolkit.core.pool.keys import BlockKey
from toolkit.core.store.selection import StoreBatch

# `StoreBatch.sources` of the stores that serve fine-grained hits only: the finish flush's prompt-tail block and
# Mamba states handed off at a boundary inside a scheduler block.
FINE_ONLY_SOURCES = frozenset({"tail", "handoff_fine"})


@dataclass
class StoreTransfer:
    """One committed store event: index-parallel lists, `keys` as read when scheduled."""

    device_ids: list[int]
    cpu_ids: list[int]
    group_ids: list[int]
    keys: list[tuple[BlockKey, ...]]
    metas: list[BlockMeta | None]
    sources: list[str]


class StoreEvents:
    """The store events in flight or abandoned, their worker counts and the requests they carry blocks of.

    `on_done(event_id, request_ids)` is told when an event with request blocks leaves (cached, failed or
    abandoned), so whoever tracks those requests can let a finished one go.
    """

    def __init__(
        self,
        cpu: CpuBlockPool,
        device: DevicePool,
        in_flight: InFlightStores,
        log: EventLog,
        *,
        world_size: int,
        on_done: Callable[[int, list[str]], None],
        low_priority_sources: frozenset[str] = FINE_ONLY_SOURCES,
    ) -> None:
        self._cpu, self._device, self._in_flight, self._log = cpu, device, in_flight, log
        # Stores whose blocks serve fine-grained hits only: cached with the pool's low-priority hint.
        self._low_sources = low_priority_sources
        self.stored_blocks_by_source: Counter[str] = Counter()
        self._world_size = world_size
        self._on_done = on_done
        self._events: dict[int, StoreTransfer] = {}
        self._abandoned: dict[int, StoreTransfer] = {}
        self._reported: dict[int, int] = {}  # workers that reported an event so far, below `world_size`
        self._event_to_reqs: dict[int, list[str]] = {}
        self._next_event = 0

    def commit(self, batch: StoreBatch, num_pinned: int = 0) -> tuple[TransferBatch, list[str]]:
        """Commit `batch` as one store event: one CPU allocation for the whole batch (not one per block or per
        request), device pins for its blocks (the first `num_pinned` were pinned when their request finished). The
        finish-time entries go last, as vLLM appends its queued finish-time transfers to the step's store event: the
        order in which the event's blocks are allocated and, once stored, join the eviction queue.
        Returns the event and the requests whose blocks it carries (the batch's lists now belong to the event)."""
        fresh = len(batch) - num_pinned  # entries this step selected (the pinned ones move behind them)
        if num_pinned and fresh:
            batch.rotate(num_pinned)
        self._device.touch(batch.device_ids[:fresh] if num_pinned else batch.device_ids)
        cpu_ids = self._cpu.allocate(batch.group_ids)
        if self._cpu.records_events:
            self._log.drain_pool()
        merged = StoreTransfer(batch.device_ids, cpu_ids, batch.group_ids, batch.keys, batch.metas, batch.sources)
        assert len(merged.metas) == len(merged.device_ids) == len(merged.cpu_ids), "block metadata not parallel"
        event_id = self._next_event
        self._next_event += 1
        self._events[event_id] = merged
        request_ids = list(batch.request_ids)
        if request_ids:
            self._event_to_reqs[event_id] = request_ids
        if self._log.recording:
            self._log.emit(
                StoreSent(
                    event_id=event_id,
                    device_block_ids=tuple(merged.device_ids),
                    cpu_block_ids=tuple(merged.cpu_ids),
                    group_ids=tuple(merged.group_ids),
                    sources=tuple(merged.sources),
                    request_ids=tuple(request_ids),
                )
            )
        return TransferBatch(
            event_id=event_id, device_block_ids=tuple(merged.device_ids), host_block_ids=tuple(merged.cpu_ids)
        ), request_ids

    def complete(self, event_counts: Mapping[int, int]) -> None:
        """Count reports per event; at `world_size` register the device blocks' keys *as they are now* on the CPU
        blocks and release pins. Unknown event ids (e.g. stale after a reset) are ignored."""
        for event_id, count in event_counts.items():
            if event_id not in self._events and event_id not in self._abandoned:
                continue
            total = self._reported.get(event_id, 0) + count
            if total < self._world_size:
                self._reported[event_id] = total
                continue
            self._reported.pop(event_id, None)
            self._finalize(event_id, cache=True)

    def fail(self, event_ids: Iterable[int]) -> None:
        """A worker failed a store: release its pins now and never let its keys become hits."""
        for event_id in event_ids:
            if event_id in self._events or event_id in self._abandoned:
                self._reported.pop(event_id, None)
                self._finalize(event_id, cache=False)

    def _finalize(self, event_id: int, *, cache: bool) -> None:
        abandoned = event_id in self._abandoned
        transfer = self._abandoned.pop(event_id) if abandoned else self._events.pop(event_id)
        if not abandoned:
            # Abandoned events left the in-flight set at reset; new stores may reuse those device ids since.
            self._in_flight.remove_event(transfer.device_ids, transfer.keys)
        log = self._log
        stored = 0
        device_ids, cpu_ids = transfer.device_ids, transfer.cpu_ids
        if cache and not abandoned:
            # Keys read *now* (not the ones captured at scheduling): what the device block holds when the copy landed
            # (a pinned block keeps its hash; aliases may have been added since).
            primary_key, alias_keys = self._device.primary_key, self._device.alias_keys
            primaries = [primary_key(device_id) for device_id in device_ids]
            aliases = [alias_keys(device_id) for device_id in device_ids]
            sources = transfer.sources
            self.stored_blocks_by_source.update(sources)  # a Counter: one C-level pass
            low_sources = self._low_sources
            if low_sources and not low_sources.isdisjoint(sources):
                self._cpu.mark_low([cpu_id for cpu_id, source in zip(cpu_ids, sources) if source in low_sources])
            self._cpu.cache_and_free(cpu_ids, primaries, aliases)  # one pass for the event, not one call per block
            if log.records_kv or log.recording:
                keys_of = self._cpu.keys_of
                cached = [index for index, cpu_id in enumerate(cpu_ids) if keys_of(cpu_id)]
                stored = len(cached)
                if log.records_kv:  # after caching: an event carries the keys the CPU block holds
                    for index in cached:
                        log.stored(cpu_ids[index], transfer.group_ids[index], transfer.metas[index])
        else:
            self._cpu.free(cpu_ids)
        self._device.free(device_ids)
        request_ids = self._event_to_reqs.pop(event_id, None)
        if request_ids:
            self._on_done(event_id, request_ids)
        if log.recording:
            log.emit(
                StoreDone(
                    event_id=event_id,
                    num_blocks=len(cpu_ids),
                    num_cached_blocks=stored,
                    abandoned=abandoned,
                    failed=not cache,
                )
            )

    def reset(self) -> bool:
        """Abandon the events in flight (the caller clears the in-flight key set and the request states).
        True when any was abandoned now."""
        abandoned = bool(self._events)
        self._abandoned.update(self._events)
        self._events.clear()
        self._event_to_reqs.clear()  # the request states go with the reset: nobody to tell
        self._reported = {e: n for e, n in self._reported.items() if e in self._abandoned}
        return abandoned

    # ----- read-only queries --------------------------------------------------------------------------------

    def has_work(self) -> bool:
        """Events in flight or abandoned: their pins are still held."""
        return bool(self._events or self._abandoned)

    def has_abandoned(self) -> bool:
        return bool(self._abandoned)

    def num_in_flight(self) -> int:
        return len(self._events)

    def num_abandoned(self) -> int:
        return len(self._abandoned)

    def stores_in_flight(self) -> tuple[int, ...]:
        """Event ids sent and not yet reported by every worker (abandoned ones excluded)."""
        return tuple(sorted(self._events))

    def is_pending(self, event_id: int) -> bool:
        """True while the event waits for reports (in flight or abandoned)."""
        return event_id in self._events or event_id in self._abandoned

    def transfer(self, event_id: int) -> StoreTransfer | None:
        """The event's blocks (in flight or abandoned); read it, do not change it."""
        return self._events.get(event_id) or self._abandoned.get(event_id)

    def event_request_ids(self, event_id: int) -> tuple[str, ...]:
        return tuple(self._event_to_reqs.get(event_id, ()))

    def in_flight_cpu_ids(self) -> set[int]:
        """CPU blocks being written by events in flight (abandoned ones excluded)."""
        return {c for t in self._events.values() for c in t.cpu_ids}

    def held_cpu_blocks(self) -> list[int]:
        """CPU blocks pinned by events in flight or abandoned, once per pin."""
        return [c for events in (self._events, self._abandoned) for t in events.values() for c in t.cpu_ids]

    def held_device_blocks(self) -> list[int]:
        """Device blocks pinned by events in flight or abandoned, once per pin."""
        return [d for events in (self._events, self._abandoned) for t in events.values() for d in t.device_ids]
