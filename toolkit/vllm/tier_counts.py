"""What a worker's tier below host memory (the disk tier, the shared store, or the disk with the store below it) did,
as it travels to the scheduler side (a cascade's store in `TierCounts.below`).

The worker's mover (`disk_worker.DiskMover.take_tier_counts`) reports the change since its last report, per step
and only when something happened, in the worker metadata (`HybridWorkerMetadata.lower_tier`, summed over workers);
the scheduler side keeps the running total (`LowerTierBook`), which its stats (`counts()["lower_tier"]`),
Prometheus (`metrics.stats_delta`: `vllm:kvtk_tier_*`, `vllm:kvtk_shared_*`) and a run's phase rows
(`engines/disk_columns.py`) read. Writes the tier did not keep (refused: full, down, declined; failed; skipped for
want of staging) travel by key, and the scheduler drops them from its index so it never advertises them as held.

Read latency is the mover's: a read's submit to the step that saw it done (what a promotion costs a waiting
request), in power-of-two buckets (`OpLatency`); call latency is the tier's own, a served read's call from submit to
its return (the shared store's `SharedTierStats.read_latency`; the disk tier keeps none: zeros).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Iterable

from toolkit.tiers.shared.stats import LATENCY_BUCKETS, OpLatency

if TYPE_CHECKING:
    from toolkit.core.load.from_disk import DiskCascade
    from toolkit.core.pool.disk_index import DiskIndex

OCCUPANCY_EVERY_S = 10.0  # counting the index by group walks it (~50 ms for 400k slots): at most this often...
OCCUPANCY_ALWAYS_BLOCKS = 10_000  # ...unless it is this small (~1 ms)


@dataclass(slots=True)
class TierCounts:
    tier: str = ""  # "disk" or "shared" ("" before a report); a cascade's disk is "disk", its store `below`
    # The mover's view: blocks moved between the host mirrors and the tier.
    blocks_read: int = 0  # promotions that verified and landed in their host block
    blocks_read_from_staging: int = 0  # promotions served from a write still staged on the worker
    blocks_written: int = 0  # demotions the tier stored
    reads_failed: int = 0  # promotions not served (missing, corrupt, error, timed out): their loads recompute
    writes_not_held: int = 0  # demotions the tier refused, failed or that found no staging: not in the tier
    bytes_read: int = 0
    bytes_written: int = 0
    # The tier's own answers (toolkit/tiers: `DiskTier.stats()` / `SharedTier.stats()`).
    hits: int = 0
    misses: int = 0
    corrupt: int = 0  # a value that failed verification: a miss
    read_errors: int = 0  # the call failed or timed out
    writes_refused_full: int = 0
    writes_failed: int = 0  # the call failed or timed out
    refused_busy: int = 0  # the in-flight bound: retried after a poll
    refused_unavailable: int = 0  # the shared store not connected or paused: a miss / an unkept write
    read_latency: OpLatency = field(default_factory=OpLatency)  # the mover's: submit to the step that saw it
    call_latency: OpLatency = field(default_factory=OpLatency)  # the tier's own: a served read's call
    # CPU -> disk -> shared: the store below the disk, its own counts (blocks it served after the disk missed or
    # failed, blocks written to it, its answers); this one's moves are then the disk's, read failures and read
    # latency the cascade's as a whole. None with one tier.
    below: TierCounts | None = None

    def add(self, other: TierCounts) -> None:
        """Sum `other` into this (another worker, or the next interval)."""
        self.tier = self.tier or other.tier
        for name in _COUNT_FIELDS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in _LATENCY_FIELDS:
            getattr(self, name).merge(getattr(other, name))
        if other.below is not None:
            self.below = self.below or TierCounts(tier=other.below.tier)
            self.below.add(other.below)

    def minus(self, before: TierCounts) -> TierCounts:
        """The change since `before` (an earlier copy of this running total); `max_s` is the running max."""
        out = TierCounts(tier=self.tier)
        for name in _COUNT_FIELDS:
            setattr(out, name, getattr(self, name) - getattr(before, name))
        for name in _LATENCY_FIELDS:
            setattr(out, name, getattr(self, name).minus(getattr(before, name)))
        if self.below is not None:
            out.below = self.below.minus(before.below or TierCounts(tier=self.below.tier))
        return out

    def copy(self) -> TierCounts:
        out = TierCounts(tier=self.tier)
        for name in _COUNT_FIELDS:
            setattr(out, name, getattr(self, name))
        for name in _LATENCY_FIELDS:
            setattr(out, name, getattr(self, name).copy())
        out.below = self.below.copy() if self.below is not None else None
        return out

    def is_zero(self) -> bool:
        return (
            not any(getattr(self, name).count for name in _LATENCY_FIELDS)
            and not any(getattr(self, name) for name in _COUNT_FIELDS)
            and (self.below is None or self.below.is_zero())
        )

    @property
    def write_amplification(self) -> float | None:
        """Bytes written per byte later read back (None before any read)."""
        return self.bytes_written / self.bytes_read if self.bytes_read else None


_COUNT_FIELDS = tuple(f.name for f in fields(TierCounts) if f.type in ("int", int))  # every counter but the latency
_LATENCY_FIELDS = ("read_latency", "call_latency")


def tier_name(tier: Any) -> str:
    from toolkit.tiers.shared.tier import SharedTier

    return "shared" if isinstance(tier, SharedTier) else "disk"  # a cascade: its disk (the store is `below`)


def split_by_tier(moved: TierCounts, tier: Any, payload_bytes: int) -> None:
    """A cascade's blocks by the tier that served or kept them: the mover counted each read and write once (for
    the cascade), the cascade says which tier did it. `moved` then holds the disk's moves and `moved.below` the
    store's; a write both kept is written twice. Nothing changes for a single tier."""
    from toolkit.tiers.cascade import CascadeTier

    if not isinstance(tier, CascadeTier) or moved.below is None:
        return
    c, below = tier.counts, moved.below
    moved.blocks_read = max(0, moved.blocks_read - c.reads_from_lower)  # the mover's verified reads, either tier's
    below.blocks_read = c.reads_from_lower
    moved.blocks_written, below.blocks_written = c.writes_upper, c.writes_lower
    below.writes_not_held = c.writes_not_held_lower  # not in the store, though perhaps on the disk
    moved.bytes_read, below.bytes_read = moved.blocks_read * payload_bytes, below.blocks_read * payload_bytes
    moved.bytes_written, below.bytes_written = c.writes_upper * payload_bytes, c.writes_lower * payload_bytes


def tier_answers(tier: Any) -> TierCounts:
    """The tier's own cumulative answers (hits, misses, refusals, ...), from its `stats()`; zeros for a tier without;
    a cascade's disk with its store's `below`."""
    from toolkit.tiers.cascade import CascadeTier
    from toolkit.tiers.disk.stats import DiskTierStats
    from toolkit.tiers.shared.stats import SharedTierStats

    if isinstance(tier, CascadeTier):
        out = tier_answers(tier.upper)
        out.below = tier_answers(tier.lower)
        return out

    stats = tier.stats() if hasattr(tier, "stats") else None
    out = TierCounts(tier=tier_name(tier))
    if isinstance(stats, SharedTierStats):
        out.hits, out.misses, out.corrupt = stats.hits, stats.misses, stats.corrupt
        out.read_errors = stats.read_errors + stats.reads_timed_out
        out.writes_refused_full = stats.writes_refused_full
        out.writes_failed = stats.writes_failed + stats.writes_timed_out
        out.refused_busy, out.refused_unavailable = stats.refused_busy, stats.refused_unavailable
        out.call_latency = stats.read_latency.copy()
    elif isinstance(stats, DiskTierStats):
        total = stats.total()
        out.hits, out.misses, out.corrupt, out.read_errors = total.hits, total.misses, total.corrupt, total.read_errors
        out.writes_refused_full, out.writes_failed = total.refused_full, total.writes_failed
        out.refused_busy = total.refused_busy
    return out


class LowerTierBook:
    """The scheduler side's running total of its workers' reports, and the unkept writes it dropped from its index."""

    def __init__(self, tier: str) -> None:
        self.counts = TierCounts(tier=tier)
        self.unheld_dropped = 0  # index slots dropped because a worker reported their write not kept
        self._occupancy: tuple[tuple[int, int], ...] = ()
        self._occupancy_at_s = -OCCUPANCY_EVERY_S

    def held_by_group(self, index: DiskIndex, *, every_s: float = OCCUPANCY_EVERY_S) -> tuple[tuple[int, int], ...]:
        """(group id, blocks) the index holds as in the tier below, by the group of each block's primary key;
        recounted at most every `every_s` for a large index (else the last count)."""
        now = time.monotonic()
        if len(index) <= OCCUPANCY_ALWAYS_BLOCKS or now - self._occupancy_at_s >= every_s:
            self._occupancy_at_s = now
            self._occupancy = tuple(sorted(Counter(key.group_id for key in index.primary_keys()).items()))
        return self._occupancy

    def on_report(self, counts: TierCounts | None, unheld_keys: Iterable[bytes], disk: DiskCascade | None) -> None:
        if counts is not None:
            self.counts.add(counts)
        if unheld_keys and disk is not None:
            self.unheld_dropped += disk.index.forget(unheld_keys)

    def snapshot(self) -> TierCounts:
        return self.counts.copy()


def read_buckets_upper_s() -> list[float]:
    """Each latency bucket's upper bound, seconds (the last: +inf)."""
    return [2**n * 1e-6 for n in range(LATENCY_BUCKETS - 1)] + [float("inf")]
