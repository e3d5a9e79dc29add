"""Boundary hand-offs (Mamba align states published by the engine), eager mode only
(docs/reference-behaviour.md, "Boundary hand-offs").

Beyond vLLM: a hand-off that finds the CPU pool full (every block pinned) is not dropped at once. It waits in a
bounded retry queue with its device block pinned (so its content cannot be reused under it) and is retried at the
start of the next steps; only when the queue is full or its retry budget is spent is it counted `dropped_cpu_full`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import AbstractSet, Mapping, Sequence

from toolkit.core.events import HandoffTaken, ManagerEvent
from toolkit.core.pool.blocks import CpuBlockPool
from toolkit.core.pool.device_pool import DevicePool
from toolkit.core.requests import Handoff, HandoffEntry
from toolkit.core.stats import BoundaryStoreStats, HandoffOutcome
from toolkit.core.store.selection import Admission, StoreBatch, StoreState

# The outcome of a hand-off the batch took or refused (NO_ROOM is decided by the retry queue instead).
_OUTCOME = {
    Admission.READY: HandoffOutcome.STORED,
    Admission.NULL_BLOCK: HandoffOutcome.DROPPED_NULL_BLOCK,
    Admission.NOT_HASHED: HandoffOutcome.DROPPED_NOT_HASHED,
    Admission.IN_FLIGHT: HandoffOutcome.SKIPPED_IN_FLIGHT,
    Admission.ALREADY_CACHED: HandoffOutcome.SKIPPED_ALREADY_CACHED,
}


@dataclass
class _Waiting:
    request_id: str
    handoff: Handoff
    num_steps_left: int


class HandoffIntake:
    """Classifies hand-offs into a step's store batch and owns the retry queue."""

    def __init__(self, *, max_waiting: int, max_retry_steps: int, scheduler_block_tokens: int = 0) -> None:
        if max_waiting < 0 or max_retry_steps < 0:
            raise ValueError(
                f"handoff retry: max_waiting={max_waiting} and max_retry_steps={max_retry_steps} must be >= 0"
            )
        self.max_waiting = max_waiting
        self.max_retry_steps = max_retry_steps
        self.waiting: deque[_Waiting] = deque()
        self.waiting_device_ids: set[int] = set()
        # A state at a boundary inside a scheduler block serves fine-grained hits only: its store is tagged
        # "handoff_fine" (cached at low priority, `store_events.FINE_ONLY_SOURCES`). 0: never tagged.
        self.scheduler_block_tokens = scheduler_block_tokens

    def _is_fine(self, boundary_tokens: int) -> bool:
        block = self.scheduler_block_tokens
        return bool(block and boundary_tokens % block)

    def _source(self, boundary_tokens: int) -> str:
        return "handoff_fine" if self._is_fine(boundary_tokens) else "handoff"

    def retry(
        self,
        *,
        device: DevicePool,
        cpu: CpuBlockPool,
        batch: StoreBatch,
        stats: BoundaryStoreStats,
        events: list[ManagerEvent] | None,
    ) -> list[int]:
        """Retry waiting hand-offs first; returns device ids whose retry pin the caller releases after the batch
        has pinned its blocks. `events`: where to append step events, or None when nobody records them."""
        release: list[int] = []
        for _ in range(len(self.waiting)):
            entry = self.waiting.popleft()
            device_id = entry.handoff.device_block_id
            (admission,) = batch.admit(
                device, cpu, (device_id,), (entry.handoff.group_id,), source=self._source(entry.handoff.boundary_tokens)
            )
            if admission is Admission.NO_ROOM:
                entry.num_steps_left -= 1
                if entry.num_steps_left > 0:
                    self.waiting.append(entry)
                    continue
                outcome = HandoffOutcome.DROPPED_CPU_FULL
            else:
                outcome = _OUTCOME[admission]
                if outcome is HandoffOutcome.STORED:
                    stats.num_retried_stored += 1
            stats.resolve_pending(outcome)
            self.waiting_device_ids.discard(device_id)
            release.append(device_id)
            if events is not None:
                events.append(_event(entry.request_id, entry.handoff, outcome, retried=True))
        return release

    def take(
        self,
        *,
        handoffs: Mapping[str, Sequence[HandoffEntry]],
        states: Mapping[str, StoreState],
        gone_request_ids: AbstractSet[str],
        device: DevicePool,
        cpu: CpuBlockPool,
        batch: StoreBatch,
        stats: BoundaryStoreStats,
        events: list[ManagerEvent] | None,
        fine_room: bool = True,
    ) -> tuple[list[int], list[tuple[str, int, int]]]:
        """Classify this step's hand-offs. Returns the device ids newly pinned for the retry queue, and the accepted
        hand-offs as (request id, group id, boundary tokens) for their records' writer (`RequestStores`): `states`
        is read only, for which requests are still live. `events`: where to
        append step events, or None when nobody records them. Entries may be `Handoff`s or plain
        (group_id, device_block_id, boundary_tokens) triples (vLLM's own, passed through uncopied).

        `fine_room=False`: the tier has no spare room for fine-grained-only stores this step
        (`fine_only.fine_only_has_room`). A hand-off inside a scheduler block is then classified only: one that
        would be stored is `skipped_fine_tier_full` at once, neither added to the batch nor queued for a retry
        (before, it was added, then cut by `cut_fine_only` in the same step)."""
        pinned: list[int] = []
        accepted: list[tuple[str, int, int]] = []
        if not handoffs:
            return pinned, accepted
        # One admission call for the whole step (a call per request would cost more than the rule): the live
        # requests' entries in order, then one pass over the outcomes.
        requests: list[tuple[str, Sequence[HandoffEntry], StoreState | None]] = []
        device_ids: list[int] = []
        group_ids: list[int] = []
        # A state at a boundary inside a scheduler block is "fine" (`_is_fine`, inlined: it runs per entry).
        block_tokens = self.scheduler_block_tokens
        # No spare room: the hand-offs inside a scheduler block are only classified (their boundaries are read).
        classify_fine = not fine_room and bool(block_tokens)
        boundaries: list[int] = []
        for request_id, entries in handoffs.items():
            state = states.get(request_id)
            if state is None or state.finished or request_id in gone_request_ids:
                state = None  # its blocks may already be reused: copying them would publish unrelated KV
            elif entries:
                # Transposed at C speed: the entries' group and device columns (plain triples or `Handoff`s).
                columns = tuple(zip(*entries))
                group_ids.extend(columns[0])
                device_ids.extend(columns[1])
                if classify_fine:
                    boundaries.extend(columns[2])
            requests.append((request_id, entries, state))
        batch_start = len(batch)
        admissions = batch.admit(
            device,
            cpu,
            device_ids,
            group_ids,
            source="handoff",
            # A waiting hand-off's block counts as in flight: it is stored from the queue, never twice.
            also_in_flight=self.waiting_device_ids,
            # Classify-only: a fine entry is reported READY without being added.
            adds=[boundary % block_tokens == 0 for boundary in boundaries] if classify_fine else None,
        )
        sources = batch.sources
        counts: dict[HandoffOutcome, int] = {}
        # Enum members read once: a class attribute lookup costs more than the test it feeds.
        ready, no_room, outcome_of = Admission.READY, Admission.NO_ROOM, _OUTCOME
        stored, total_stored = HandoffOutcome.STORED, 0
        tier_full, num_tier_full = HandoffOutcome.SKIPPED_FINE_TIER_FULL, 0
        position = 0
        for request_id, entries, state in requests:
            if state is None:
                gone = HandoffOutcome.DROPPED_REQUEST_GONE
                counts[gone] = counts.get(gone, 0) + len(entries)
                if events is not None:
                    events.extend(_event(request_id, Handoff._make(h), gone, retried=False) for h in entries)
                continue
            num_stored = 0
            for handoff in entries:
                admission = admissions[position]
                position += 1
                if admission is ready:
                    group_id, boundary_tokens = handoff[0], handoff[2]
                    fine = block_tokens and boundary_tokens % block_tokens
                    if fine and classify_fine:  # classified only (see the docstring)
                        num_tier_full += 1
                        outcome = tier_full
                    else:
                        accepted.append((request_id, group_id, boundary_tokens))
                        if fine:
                            sources[batch_start + total_stored + num_stored] = "handoff_fine"
                        num_stored += 1
                        outcome = stored
                else:
                    outcome = self._wait(request_id, handoff, pinned) if admission is no_room else outcome_of[admission]
                    counts[outcome] = counts.get(outcome, 0) + 1
                if events is not None:
                    events.append(_event(request_id, Handoff._make(handoff), outcome, retried=False))
            if num_stored:
                batch.request_ids[request_id] = None
                total_stored += num_stored
        if total_stored:
            counts[stored] = counts.get(stored, 0) + total_stored
        if num_tier_full:
            counts[tier_full] = num_tier_full
            cpu.low_counts["skipped_tier_full"] += num_tier_full
        # Counters are only read between steps: add them once per outcome.
        for outcome, count in counts.items():
            stats.record(outcome, count)
        return pinned, accepted

    def _wait(self, request_id: str, handoff: HandoffEntry, pinned: list[int]) -> HandoffOutcome:
        """A ready hand-off the batch has no room for: queue it (its block pinned) while the queue has room."""
        device_id = handoff[1]
        if device_id in self.waiting_device_ids:  # queued by an earlier entry this step: in flight now
            return HandoffOutcome.SKIPPED_IN_FLIGHT
        if len(self.waiting) < self.max_waiting and self.max_retry_steps > 0:
            self.waiting.append(_Waiting(request_id, Handoff._make(handoff), self.max_retry_steps))
            self.waiting_device_ids.add(device_id)
            pinned.append(device_id)
            return HandoffOutcome.PENDING_RETRY
        return HandoffOutcome.DROPPED_CPU_FULL

    def clear(self) -> list[int]:
        """Forget every waiting hand-off; returns the device ids whose pins the caller releases."""
        released = [entry.handoff.device_block_id for entry in self.waiting]
        self.waiting.clear()
        self.waiting_device_ids.clear()
        return released


def _event(request_id: str, handoff: Handoff, outcome: HandoffOutcome, *, retried: bool) -> HandoffTaken:
    return HandoffTaken(
        request_id=request_id,
        group_id=handoff.group_id,
        device_block_id=handoff.device_block_id,
        boundary_tokens=handoff.boundary_tokens,
        outcome=outcome.value,
        retried=retried,
    )
