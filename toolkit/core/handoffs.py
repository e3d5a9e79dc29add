"""Boundary hand-offs (Mamba align states published by the engine), eager mode only
(docs/reference-behaviour.md, "Boundary hand-offs").

Beyond vLLM: a hand-off that finds the CPU pool full (every block pinned) is not dropped at once. It waits in a
bounded retry queue with its device block pinned (so its content cannot be reused under it) and is retried at the
start of the next steps; only when the queue is full or its retry budget is spent is it counted `dropped_cpu_full`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Mapping, Sequence

from toolkit.core.device_pool import DevicePool
from toolkit.core.pool import CpuBlockPool
from toolkit.core.requests import Handoff, HandoffEntry
from toolkit.core.stats import BoundaryStoreStats
from toolkit.core.stores import Admission, StoreBatch, StoreState, classify

_OUTCOME = {
    Admission.NULL_BLOCK: "dropped_null_block",
    Admission.NOT_HASHED: "dropped_not_hashed",
    Admission.IN_FLIGHT: "skipped_in_flight",
    Admission.ALREADY_CACHED: "skipped_already_cached",
}


@dataclass
class _Waiting:
    request_id: str
    handoff: Handoff
    num_steps_left: int


class HandoffIntake:
    """Classifies hand-offs into a step's store batch and owns the retry queue."""

    def __init__(self, *, max_waiting: int, max_retry_steps: int) -> None:
        if max_waiting < 0 or max_retry_steps < 0:
            raise ValueError(f"handoff retry: max_waiting={max_waiting} and max_retry_steps={max_retry_steps} "
                             "must be >= 0")
        self.max_waiting = max_waiting
        self.max_retry_steps = max_retry_steps
        self.waiting: deque[_Waiting] = deque()
        self.waiting_device_ids: set[int] = set()

    def retry(self, *, device: DevicePool, cpu: CpuBlockPool, batch: StoreBatch, stats: BoundaryStoreStats,
              events: list[dict] | None) -> list[int]:
        """Retry waiting hand-offs first; returns device ids whose retry pin the caller releases after the batch
        has pinned its blocks. `events`: where to append step events, or None when nobody records them."""
        release: list[int] = []
        for _ in range(len(self.waiting)):
            entry = self.waiting.popleft()
            device_id = entry.handoff.device_block_id
            admission = classify(device, cpu, batch.in_flight, device_id)
            if admission is Admission.READY and not batch.has_room():
                entry.num_steps_left -= 1
                if entry.num_steps_left > 0:
                    self.waiting.append(entry)
                    continue
                outcome = "dropped_cpu_full"
            elif admission is Admission.READY:
                batch.add(device, device_id, entry.handoff.group_id, source="handoff", request_id=None)
                outcome = "stored"
                stats.num_retried_stored += 1
            else:
                outcome = _OUTCOME[admission]
            setattr(stats, outcome, getattr(stats, outcome) + 1)
            stats.pending_retry -= 1
            self.waiting_device_ids.discard(device_id)
            release.append(device_id)
            if events is not None:
                events.append(_event(entry.request_id, entry.handoff, outcome, retried=True))
        return release

    def take(self, *, handoffs: Mapping[str, Sequence[HandoffEntry]], states: Mapping[str, StoreState],
             gone_request_ids: frozenset[str] | set[str], device: DevicePool, cpu: CpuBlockPool,
             batch: StoreBatch, stats: BoundaryStoreStats, events: list[dict] | None) -> list[int]:
        """Classify this step's hand-offs; returns device ids newly pinned for the retry queue. `events`: where to
        append step events, or None when nobody records them. Entries may be `Handoff`s or plain
        (group_id, device_block_id, boundary_tokens) triples (vLLM's own, passed through uncopied)."""
        pinned: list[int] = []
        if not handoffs:
            return pinned
        # Every step brings a few hand-offs per running request: `classify` and `batch.add` are inlined (same checks,
        # same order) so each block's keys are read once.
        null_id = device.null_block_id
        primary_key, alias_keys = device.primary_key, device.alias_keys
        flight_ids, flight_keys = batch.in_flight.device_ids, batch.in_flight.keys
        add_keys = batch.in_flight.add_keys
        cpu_keys, waiting_ids = cpu.key_container, self.waiting_device_ids
        taken, capacity = batch.device_ids, batch.capacity
        batch_groups, batch_keys, batch_metas = batch.group_ids, batch.keys, batch.metas
        batch_sources, batch_requests = batch.sources, batch.request_ids
        outcomes: dict[str, int] = {}
        num_stored = 0
        for request_id, entries in handoffs.items():
            state = states.get(request_id)
            if state is None or state.finished or request_id in gone_request_ids:
                # Its blocks may already be reused: copying them would publish unrelated KV under a valid key.
                outcomes["dropped_request_gone"] = outcomes.get("dropped_request_gone", 0) + len(entries)
                if events is not None:
                    events.extend(_event(request_id, Handoff._make(h), "dropped_request_gone", retried=False)
                                  for h in entries)
                continue
            bounds = state.handoff_boundary_tokens
            stored_before = num_stored
            for handoff in entries:
                group_id, device_id, boundary_tokens = handoff
                outcome = None  # stored
                if device_id == null_id:
                    outcome = "dropped_null_block"
                else:
                    primary = primary_key(device_id)
                    if primary is None:
                        outcome = "dropped_not_hashed"
                    elif device_id in flight_ids or device_id in waiting_ids or primary in flight_keys:
                        outcome = "skipped_in_flight"
                    elif primary in cpu_keys:
                        outcome = "skipped_already_cached"
                    elif len(taken) < capacity:
                        # `batch.add_keyed` inlined (its checks are the tests just above): one call per block saved.
                        aliases = alias_keys(device_id)
                        flight_ids.add(device_id)
                        if aliases:
                            keys = (primary, *aliases)
                            add_keys(keys)
                        else:  # the primary is not in flight (tested above): one set insert
                            keys = (primary,)
                            flight_keys.add(primary)
                        taken.append(device_id)
                        batch_groups.append(group_id)
                        batch_keys.append(keys)
                        batch_metas.append(None)
                        batch_sources.append("handoff")
                        if boundary_tokens > bounds[group_id]:
                            bounds[group_id] = boundary_tokens
                        num_stored += 1
                    elif len(self.waiting) < self.max_waiting and self.max_retry_steps > 0:
                        self.waiting.append(_Waiting(request_id, Handoff._make(handoff), self.max_retry_steps))
                        waiting_ids.add(device_id)
                        pinned.append(device_id)
                        outcome = "pending_retry"
                    else:
                        outcome = "dropped_cpu_full"
                if outcome is not None:
                    outcomes[outcome] = outcomes.get(outcome, 0) + 1
                if events is not None:
                    events.append(_event(request_id, Handoff._make(handoff), outcome or "stored", retried=False))
            if num_stored > stored_before:
                batch_requests[request_id] = None
        if num_stored:
            outcomes["stored"] = outcomes.get("stored", 0) + num_stored
        # Counters are only read between steps: add them once per outcome.
        for outcome, count in outcomes.items():
            stats.published += count
            setattr(stats, outcome, getattr(stats, outcome) + count)
        return pinned

    def clear(self) -> list[int]:
        """Forget every waiting hand-off; returns the device ids whose pins the caller releases."""
        released = [entry.handoff.device_block_id for entry in self.waiting]
        self.waiting.clear()
        self.waiting_device_ids.clear()
        return released


def _event(request_id: str, handoff: Handoff, outcome: str, *, retried: bool) -> dict:
    return {
        "type": "handoff", "request_id": request_id, "group_id": handoff.group_id,
        "device_block_id": handoff.device_block_id, "boundary_tokens": handoff.boundary_tokens,
        "outcome": outcome, "retried": retried,
    }
