"""The disk tier's counters, per pool, and write amplification: payload bytes written per payload byte later loaded.

Write amplification is the cost side of a write policy: write-through writes every block once whatever happens to
it; only-reused-once writes fewer blocks but misses the first reuse from disk. It is reported as written / loaded
(None until something is loaded); the device also writes one 4 KiB header per slot and the padding to 4 KiB,
counted apart in `device_bytes_written`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields


@dataclass(slots=True)
class PoolStats:
    writes_ok: int = 0
    writes_failed: int = 0
    bytes_written: int = 0
    device_bytes_written: int = 0
    hits: int = 0  # reads that verified and were served
    misses: int = 0  # asked for a key the pool does not hold
    corrupt: int = 0  # a held key whose slot failed verification (torn, flipped, overwritten): a miss, dropped
    read_errors: int = 0  # the read itself failed (EIO, short read)
    bytes_loaded: int = 0
    evictions: int = 0
    refused_busy: int = 0  # more than max_in_flight: the caller retries or skips
    refused_full: int = 0  # every slot pinned or being written
    refused_present: int = 0  # the key is already stored or being stored
    declined_by_policy: int = 0  # offered by the CPU tier, not written under the write policy
    restored: int = 0  # ready at open from an earlier run
    discarded: int = 0  # ready keys the owner let go (`DiskTier.discard`)

    def add(self, other: PoolStats) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass(slots=True)
class DiskTierStats:
    pools: dict[str, PoolStats] = field(default_factory=dict)
    occupancy: dict[str, tuple[int, int]] = field(default_factory=dict)  # pool -> (ready slots, slots)
    direct: bool = False
    read_path: str = ""  # "aio" (kernel AIO, aio.py) or "threads" (the I/O threads, workers.py)
    write_path: str = ""
    checksum: str = ""
    log_records_invalid: int = 0  # torn or corrupt commit-log records skipped at open
    log_records_skipped: int = 0  # commits not logged (the log at its cap): lost by a crash, kept by a clean close

    def total(self) -> PoolStats:
        out = PoolStats()
        for stats in self.pools.values():
            out.add(stats)
        return out

    @property
    def write_amplification(self) -> float | None:
        total = self.total()
        return total.bytes_written / total.bytes_loaded if total.bytes_loaded else None
