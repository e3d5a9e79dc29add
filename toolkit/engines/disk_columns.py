"""A run's phase-row columns for the disk tier below the toolkit connector's CPU tier (`Engine.phase_extra`): what
each phase read from and wrote to disk. No columns where no disk tier runs, so other runs' rows are unchanged.

Bytes are server-wide: every rank holds its shard of each block (blocks x bytes per rank x ranks).
"""

from __future__ import annotations

from dataclasses import astuple, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolkit.core.load.from_disk import DiskCascade


@dataclass(frozen=True, slots=True)
class _Totals:
    hit_tokens: int = 0
    loaded_blocks: int = 0
    written_blocks: int = 0
    read_blocks: int = 0
    dropped_blocks: int = 0
    declined_hits: int = 0
    declined_tokens: int = 0


def _totals(disk: DiskCascade) -> _Totals:
    counts = disk.index.counts
    return _Totals(
        disk.loaded_tokens,
        disk.loaded_blocks,
        counts.blocks_written,
        counts.blocks_read,
        counts.blocks_dropped,
        disk.hits_declined_slow,
        disk.tokens_declined_slow,
    )


class PhaseDiskColumns:
    """Per-phase deltas of the manager's disk counters (`take` once at each phase's end)."""

    def __init__(self, block_bytes: int, ranks: int) -> None:
        self._bytes_per_block = block_bytes * ranks
        self._before = _Totals()

    def take(self, disk: DiskCascade | None) -> dict[str, Any]:
        if disk is None:
            return {}
        now = _totals(disk)
        hit, loaded, written, read, dropped, declined, declined_tokens = (
            a - b for a, b in zip(astuple(now), astuple(self._before))
        )
        self._before = now
        per_block = self._bytes_per_block
        return {
            "disk_hit_tokens": hit,  # CPU-tier hit tokens whose blocks came from disk, pro rata of the blocks
            "disk_blocks_demoted": written,
            "disk_blocks_dropped": dropped,
            "disk_bytes_written": written * per_block,
            "disk_bytes_read": read * per_block,
            "disk_bytes_loaded": loaded * per_block,  # read and then used by a load
            "disk_write_amplification": written / read if read else None,
            "disk_blocks_held": len(disk.index),
            "disk_hits_declined_slow": declined,  # hits cut to the CPU tier's own: reading was slower than recomputing
            "disk_tokens_declined_slow": declined_tokens,
        }
