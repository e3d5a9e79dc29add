"""Fine-grained-only stores (`FINE_ONLY_SOURCES` with `fine_store_priority="low"`) take only spare room.

A store that serves hits inside a scheduler block only (the finish flush's prompt tail, a hand-off at a boundary
inside a scheduler block) must never cost a block-aligned prefix its CPU block: it takes only never used, empty or
low-priority free blocks, after the batch's other entries took theirs. What does not fit is cut from the batch.
"""

from __future__ import annotations

from typing import AbstractSet

from toolkit.core.pool.blocks import CpuBlockPool
from toolkit.core.pool.device_pool import DevicePool
from toolkit.core.pool.in_flight import InFlightStores
from toolkit.core.stats import BoundaryStoreStats, HandoffOutcome
from toolkit.core.store.batch import StoreBatch


def fine_only_has_room(batch: StoreBatch, *, low_sources: AbstractSet[str], cpu: CpuBlockPool) -> bool:
    """Whether a fine-grained-only entry added to `batch` now could survive `cut_fine_only`. The entries already in
    the batch come first, and the batch only grows before the cut: with no more spare blocks than entries now, every
    fine-grained-only entry added later would be cut."""
    return not low_sources or cpu.policy.num_cheap_free() > len(batch)


def cut_fine_only(
    batch: StoreBatch,
    num_pinned: int,
    *,
    low_sources: AbstractSet[str],
    cpu: CpuBlockPool,
    device: DevicePool,
    in_flight: InFlightStores,
    stats: BoundaryStoreStats,
) -> int:
    """Cut the fine-grained-only entries that find no spare room: counted, released (their in-flight marks and
    the device pins taken before the step). Returns the batch's new count of entries pinned before the step (they
    come first)."""
    sources = batch.sources
    if low_sources.isdisjoint(sources):  # one C-level pass: most batches hold no fine-grained-only entry
        return num_pinned
    fine = [i for i, source in enumerate(sources) if source in low_sources]
    room = cpu.policy.num_cheap_free() - (len(sources) - len(fine))
    cut = fine[max(0, room) :]
    if not cut:
        return num_pinned
    num_handoffs = sum(1 for i in cut if sources[i] == "handoff_fine")
    pre_pinned = [batch.device_ids[i] for i in cut if i < num_pinned]
    cut_ids, cut_keys = batch.remove(cut)
    in_flight.remove_event(cut_ids, cut_keys)
    if pre_pinned:
        device.free(pre_pinned)
    if num_handoffs:
        stats.reclassify_stored(HandoffOutcome.SKIPPED_FINE_TIER_FULL, num_handoffs)
    cpu.low_counts["skipped_tier_full"] += len(cut)
    return num_pinned - len(pre_pinned)
