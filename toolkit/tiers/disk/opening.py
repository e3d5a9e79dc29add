"""Opening a disk tier: check the request, lock the folder, reuse or discard what is there, replay the index.

Order matters for "nothing left behind" and for crash safety: every bound (and the free space, counting our own
files) is checked before anything is removed or created; a store is discarded before a new one is created, and a
new store's manifest is written last; after a replay the index is snapshotted and the log emptied, so a store
that survived a crash starts as clean as one that was closed.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from toolkit.errors import BadInput
from toolkit.private_fs import create_run_dir
from toolkit.tiers.disk import manifest as files
from toolkit.tiers.disk.aio import AioSubmitter, check_possible, open_submitter
from toolkit.tiers.disk.aligned import O_DIRECT, probe_direct
from toolkit.tiers.disk.checksum import default_checksum
from toolkit.tiers.disk.commit_log import CommitLog, log_cap_records, read_records, write_snapshot
from toolkit.tiers.disk.config import Direct, DiskTierConfig, Durability, check_config, check_free_space
from toolkit.tiers.disk.identity import DISK_FORMAT_VERSION
from toolkit.tiers.disk.index import PoolIndex
from toolkit.tiers.disk.io_ops import FileContext
from toolkit.tiers.disk.layout import PoolGeometry
from toolkit.tiers.disk.stats import PoolStats
from toolkit.tiers.disk.workers import IoThreads

log = logging.getLogger(__name__)


def _decide_direct(config: DiskTierConfig, folder: Path) -> bool:
    if config.direct is Direct.OFF:
        return False
    support = probe_direct(folder)
    if support.direct:
        return True
    if config.direct is Direct.ON:
        raise BadInput(f"disk tier direct: 'on', but {folder}: {support.reason}; give direct 'auto' or 'off'")
    log.warning("disk tier %s: %s; using buffered I/O (the page cache)", folder, support.reason)
    return False


def _prepare_files(folder: Path, wanted: files.Manifest, geometries: list[PoolGeometry]) -> bool:
    """Reuse the folder's store (True) or replace it with an empty one (False)."""
    existing = files.our_files(folder)
    reason = files.why_not_reuse(folder, wanted)
    check_free_space(folder, sum(g.file_bytes for g in geometries), sum(os.lstat(p).st_size for p in existing))
    if reason is None:
        return True
    if existing:
        files.discard(folder, reason)
    files.create(folder, wanted)
    return False


@dataclass(slots=True)
class PoolState:
    name: str
    geometry: PoolGeometry
    index: PoolIndex
    ctx: FileContext
    stats: PoolStats


@dataclass(slots=True)
class Opened:
    """What an open store is made of (the tier takes ownership of the descriptors and threads)."""

    pools: list[PoolState]
    io: IoThreads
    aio: AioSubmitter | None  # reads (and writes at page-cache durability) through kernel AIO, or None
    lock_fd: int
    commit_log: CommitLog
    direct: bool
    last_seq: int
    invalid_records: int


def open_tier(config: DiskTierConfig) -> Opened:
    geometries = check_config(config)
    folder = create_run_dir(config.folder, resume=True, field="disk tier folder")
    lock_fd = files.lock_folder(folder)
    opened: list[int] = []
    try:
        direct = _decide_direct(config, folder)
        check_possible(config.io_path, direct)
        checksum = default_checksum()
        pools = tuple((p.name, g.payload_bytes, g.num_slots) for p, g in zip(config.pools, geometries))
        wanted = files.Manifest(config.identity, checksum.name, pools)
        reused = _prepare_files(folder, wanted, geometries)
        cap = log_cap_records(sum(g.num_slots for g in geometries))
        commit_log = CommitLog(folder / files.LOG, sync=config.durability is Durability.FDATASYNC, cap_records=cap)
        flags = os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | (O_DIRECT if direct else 0)
        built = []
        digest = config.identity.digest()
        for n, (spec, geometry) in enumerate(zip(config.pools, geometries)):
            fd = os.open(files.pool_file(folder, spec.name), flags)
            opened.append(fd)
            ctx = FileContext(
                fd,
                n,
                geometry,
                digest,
                DISK_FORMAT_VERSION,
                checksum,
                commit_log,
                config.durability is Durability.FDATASYNC,
            )
            built.append((spec.name, geometry, PoolIndex(geometry.num_slots), ctx))
        last_seq, invalid = _replay(folder, built) if reused else (0, 0)
        pools_state = [PoolState(name, g, index, ctx, PoolStats(restored=len(index))) for name, g, index, ctx in built]
        write_snapshot(folder / files.SNAPSHOT, [r for n, p in enumerate(pools_state) for r in p.index.records(n)])
        commit_log.truncate()
        io = IoThreads(config.queue_depth, "kvtk-disk")
        slot_bytes = max(g.slot_bytes for g in geometries)
        try:
            max_waiting = config.max_in_flight or 4 * config.queue_depth
            aio = open_submitter(config.io_path, direct, config.queue_depth, max_waiting, slot_bytes, io,
                             "kvtk-disk")  # fmt: skip
        except BaseException:
            io.close()
            raise
    except BaseException:
        for fd in opened:
            os.close(fd)
        os.close(lock_fd)
        raise
    if reused:
        log.info(
            "disk tier %s: reused %d blocks (%d invalid log records skipped)",
            folder,
            sum(len(p.index) for p in pools_state),
            invalid,
        )
    return Opened(pools_state, io, aio, lock_fd, commit_log, direct, last_seq, invalid)


def _replay(folder: Path, built: list[tuple[str, PoolGeometry, PoolIndex, FileContext]]) -> tuple[int, int]:
    """Rebuild every pool's index from the snapshot, then the log; returns (last sequence, invalid records)."""
    slots = sum(g.num_slots for _, g, _, _ in built)
    snap, bad_snap = read_records(folder / files.SNAPSHOT, slots)
    logged, bad_log = read_records(folder / files.LOG, log_cap_records(slots))
    records = snap + logged
    for n, (_, _, index, _) in enumerate(built):
        index.restore([r for r in records if r.pool == n])
    return max((r.seq for r in records), default=0), bad_snap + bad_log
