"""A run's phase-row columns for the disk tier below the toolkit connector's CPU tier (`Engine.phase_extra`): what
each phase read from and wrote to disk. No columns where no disk tier runs, so other runs' rows are unchanged.

Bytes are server-wide: every rank holds its shard of each block (blocks x bytes per rank x ranks).

Where workers move real bytes (the live engine: `take(disk, lower)` with the scheduler side's `LowerTierBook`),
`tier_*` columns add what the tier below did by the workers' own count (`vllm/tier_counts.py`): blocks and bytes
read and written, the tier's hits, misses, refusals and failures, the read latency's p50/p99 (bucket tops) and
write amplification (bytes written per byte read back); `experiments/report_tiers.py` tabulates them. With the
disk's store below it (CPU -> disk -> shared), the `tier_*` columns are the disk's and `below_tier_*` the store's.
The dry engine's modelled store below its disk (`DiskCascade.attach_store`) adds `shared_store_*` columns, the `disk_*`
ones of the store's index (none without one).
"""

from __future__ import annotations

from dataclasses import astuple, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolkit.core.load.from_disk import DiskCascade
    from toolkit.core.pool.disk_index import DiskIndex
    from toolkit.vllm.tier_counts import LowerTierBook, TierCounts


@dataclass(frozen=True, slots=True)
class _Totals:
    """One index's running totals below the CPU tier (the disk's, or the modelled store's)."""

    hit_tokens: int = 0
    loaded_blocks: int = 0
    written_blocks: int = 0
    read_blocks: int = 0
    dropped_blocks: int = 0


def _totals(index: DiskIndex, loaded_tokens: int, loaded_blocks: int) -> _Totals:
    counts = index.counts
    return _Totals(loaded_tokens, loaded_blocks, counts.blocks_written, counts.blocks_read, counts.blocks_dropped)


def _moved_columns(prefix: str, now: _Totals, before: _Totals, per_block: int, held_blocks: int) -> dict[str, Any]:
    """One index's columns over a phase, named `<prefix>_*`."""
    hit, loaded, written, read, dropped = (a - b for a, b in zip(astuple(now), astuple(before)))
    return {
        f"{prefix}_hit_tokens": hit,  # CPU-tier hit tokens whose blocks came from this tier, pro rata of the blocks
        f"{prefix}_blocks_demoted": written,
        f"{prefix}_blocks_dropped": dropped,
        f"{prefix}_bytes_written": written * per_block,
        f"{prefix}_bytes_read": read * per_block,
        f"{prefix}_bytes_loaded": loaded * per_block,  # read and then used by a load
        f"{prefix}_write_amplification": written / read if read else None,
        f"{prefix}_blocks_held": held_blocks,
    }


class PhaseDiskColumns:
    """Per-phase deltas of the manager's disk counters (`take` once at each phase's end)."""

    def __init__(self, block_bytes: int, ranks: int) -> None:
        self._bytes_per_block = block_bytes * ranks
        self._before = _Totals()
        self._declined_before = (0, 0)  # the disk's hits and tokens cut for a slow read, at the last `take`
        self._store_before = _Totals()
        self._tier_before: TierCounts | None = None

    def take(self, disk: DiskCascade | None, lower: LowerTierBook | None = None) -> dict[str, Any]:
        if disk is None:
            return {}
        columns = self._disk_columns(disk)
        columns.update(self._store_columns(disk))
        if lower is not None:
            columns.update(self._tier_columns(lower.snapshot()))
            held = lower.held_by_group(disk.index, every_s=0.0)  # once a phase: the walk is affordable
            columns["tier_held_by_group"] = " ".join(f"{group_id}:{blocks}" for group_id, blocks in held)
        return columns

    def _tier_columns(self, now: TierCounts) -> dict[str, Any]:
        before, self._tier_before = self._tier_before, now
        d = now.minus(before) if before is not None else now
        columns = _tier_delta_columns(d)
        if d.below is not None:  # the store below the disk: its own row in the report's tier table
            columns.update({f"below_{name}": value for name, value in _tier_delta_columns(d.below).items()})
        return columns

    def _disk_columns(self, disk: DiskCascade) -> dict[str, Any]:
        now = _totals(disk.index, disk.loaded_tokens, disk.loaded_blocks)
        columns = _moved_columns("disk", now, self._before, self._bytes_per_block, len(disk.index))
        self._before = now
        declined = (disk.hits_declined_slow, disk.tokens_declined_slow)
        # hits cut to a shorter one because reading was slower than recomputing
        columns["disk_hits_declined_slow"] = declined[0] - self._declined_before[0]
        columns["disk_tokens_declined_slow"] = declined[1] - self._declined_before[1]
        self._declined_before = declined
        return columns

    def _store_columns(self, disk: DiskCascade) -> dict[str, Any]:
        """The modelled store's columns (none without one), counted as the disk's."""
        if disk.store is None:
            return {}
        now = _totals(disk.store, disk.store_loaded_tokens, disk.store_loaded_blocks)
        columns = _moved_columns("shared_store", now, self._store_before, self._bytes_per_block, len(disk.store))
        self._store_before = now
        return columns


def _tier_delta_columns(d: TierCounts) -> dict[str, Any]:
    """One tier's `tier_*` columns from its counts over a phase."""
    p50, p99 = d.read_latency.quantile_upper_s(0.5), d.read_latency.quantile_upper_s(0.99)
    return {
        "tier": d.tier,
        "tier_blocks_read": d.blocks_read,
        "tier_blocks_written": d.blocks_written,
        "tier_bytes_read": d.bytes_read,
        "tier_bytes_written": d.bytes_written,
        "tier_hits": d.hits,
        "tier_misses": d.misses,
        "tier_refusals": d.writes_refused_full + d.refused_unavailable,  # full or down: not kept / not asked
        "tier_failures": d.corrupt + d.read_errors + d.writes_failed,  # verification, errors, timeouts
        "tier_reads_failed": d.reads_failed,  # promotions whose loads recomputed
        "tier_writes_not_held": d.writes_not_held,  # dropped from the index (never advertised as held)
        "tier_read_p50_ms": None if p50 is None else p50 * 1e3,
        "tier_read_p99_ms": None if p99 is None else p99 * 1e3,
        "tier_write_amplification": d.write_amplification,
    }
