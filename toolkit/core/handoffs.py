"""Boundary hand-offs (Mamba align states published by the engine), eager mode only (notes §4.6, §5).

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
from toolkit.core.requests import Handoff
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
              events: list[dict]) -> list[int]:
        """Retry waiting hand-offs first; returns device ids whose retry pin the caller releases after the batch
        has pinned its blocks."""
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
            events.append(_event(entry.request_id, entry.handoff, outcome, retried=True))
        return release

    def take(self, *, handoffs: Mapping[str, Sequence[Handoff]], states: Mapping[str, StoreState],
             gone_request_ids: frozenset[str] | set[str], device: DevicePool, cpu: CpuBlockPool,
             batch: StoreBatch, stats: BoundaryStoreStats, events: list[dict]) -> list[int]:
        """Classify this step's hand-offs; returns device ids newly pinned for the retry queue."""
        pinned: list[int] = []
        for request_id, entries in handoffs.items():
            state = states.get(request_id)
            gone = state is None or state.finished or request_id in gone_request_ids
            for handoff in entries:
                stats.published += 1
                if gone:
                    # Its blocks may already be reused: copying them would publish unrelated KV under a valid key.
                    outcome = "dropped_request_gone"
                else:
                    admission = classify(device, cpu, batch.in_flight, handoff.device_block_id, self.waiting_device_ids)
                    if admission is not Admission.READY:
                        outcome = _OUTCOME[admission]
                    elif batch.has_room():
                        batch.add(device, handoff.device_block_id, handoff.group_id, source="handoff",
                                  request_id=request_id)
                        state.handoff_boundary_tokens[handoff.group_id] = max(
                            state.handoff_boundary_tokens[handoff.group_id], handoff.boundary_tokens)
                        outcome = "stored"
                    elif len(self.waiting) < self.max_waiting and self.max_retry_steps > 0:
                        self.waiting.append(_Waiting(request_id, handoff, self.max_retry_steps))
                        self.waiting_device_ids.add(handoff.device_block_id)
                        pinned.append(handoff.device_block_id)
                        outcome = "pending_retry"
                    else:
                        outcome = "dropped_cpu_full"
                setattr(stats, outcome, getattr(stats, outcome) + 1)
                events.append(_event(request_id, handoff, outcome, retried=False))
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
