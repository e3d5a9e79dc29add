"""What a disk tier is asked to be, checked at the edge: one line naming the field and the value on anything absurd
(BadInput, exit 2), before any file is created."""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from pathlib import Path

from toolkit.errors import BadInput
from toolkit.limits import MAX_SIZE_GIB, check_int, check_name
from toolkit.tiers.disk.identity import CacheIdentity
from toolkit.tiers.disk.layout import PoolGeometry

GIB = 1 << 30
MAX_QUEUE_DEPTH = 256
MAX_POOLS = 64
MAX_PAYLOAD_BYTES = 1 << 30  # one block (a Mamba state of a huge model is tens of MiB)
MAX_SLOTS_PER_POOL = 1 << 24  # the index keeps a few words per slot up front
MAX_CAPACITY_BYTES = int(MAX_SIZE_GIB) * GIB


class Direct(enum.Enum):
    AUTO = "auto"  # O_DIRECT where the file system takes it, buffered otherwise (one log line)
    ON = "on"  # O_DIRECT or refuse to open
    OFF = "off"  # buffered (the page cache): for file systems that refuse O_DIRECT, and to compare


class IoPath(enum.Enum):
    """How slot reads and writes reach the disk (aio.py says why two; writes at `fdatasync` durability always take
    the I/O threads). The environment variable `KVTK_DISK_IO_PATH`
    (auto | aio | threads) overrides `auto`, so a bench or a test can force either without a config."""

    AUTO = "auto"  # reads through kernel AIO when libaio loads and the files are O_DIRECT; writes on the threads
    AIO = "aio"  # reads and writes (at page-cache durability) through kernel AIO, or refuse to open
    THREADS = "threads"  # the thread pool (os.preadv per thread)


class Durability(enum.Enum):
    # Data and commit records reach the page cache: a killed process loses nothing; a power loss may lose blocks
    # (never serves a torn one: every load verifies its checksum).
    PAGE_CACHE = "page-cache"
    # Also fdatasync the data before its commit record, and the record itself (O_DSYNC): a power loss loses at
    # most the writes in flight. Costs a device flush per block.
    FDATASYNC = "fdatasync"


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """One pool per group kind: its blocks' payload size and the disk it may use."""

    name: str
    payload_bytes: int
    capacity_bytes: int


@dataclass(frozen=True, slots=True)
class DiskTierConfig:
    folder: Path  # one per rank: the identity holds the rank layout
    identity: CacheIdentity
    pools: tuple[PoolSpec, ...]
    queue_depth: int = 4
    direct: Direct = Direct.AUTO
    durability: Durability = Durability.PAGE_CACHE
    max_in_flight: int = 0  # 0: 4 x queue_depth; past it a submit is refused (busy), never queued without end
    io_path: IoPath = IoPath.AUTO


def check_config(config: DiskTierConfig) -> list[PoolGeometry]:
    """The pools' geometries, or BadInput naming the first field out of bounds."""
    check_int(config.queue_depth, "disk tier queue_depth", 1, MAX_QUEUE_DEPTH)
    check_int(config.max_in_flight, "disk tier max_in_flight", 0, 64 * MAX_QUEUE_DEPTH)
    if not 0 < len(config.pools) <= MAX_POOLS:
        raise BadInput(f"disk tier pools: 1-{MAX_POOLS} pools, got {len(config.pools)}")
    names = [check_name(p.name, "disk tier pool name") for p in config.pools]
    if len(set(names)) != len(names):
        raise BadInput(f"disk tier pools: names must differ, got {names}")
    out = []
    for p in config.pools:
        check_int(p.payload_bytes, f"disk tier pool {p.name} payload_bytes", 1, MAX_PAYLOAD_BYTES)
        check_int(p.capacity_bytes, f"disk tier pool {p.name} capacity_bytes", 0, MAX_CAPACITY_BYTES)
        geometry = PoolGeometry(p.payload_bytes, 1)
        num_slots = p.capacity_bytes // geometry.slot_bytes
        if num_slots < 1:
            raise BadInput(
                f"disk tier pool {p.name}: capacity {p.capacity_bytes} B holds no slot of {geometry.slot_bytes} B"
            )
        if num_slots > MAX_SLOTS_PER_POOL:
            raise BadInput(
                f"disk tier pool {p.name}: {num_slots} slots, more than the limit {MAX_SLOTS_PER_POOL}; "
                "give larger blocks or less capacity"
            )
        out.append(PoolGeometry(p.payload_bytes, num_slots))
    return out


def check_free_space(folder: Path, needed_bytes: int, reusable_bytes: int) -> None:
    """Refuse a store larger than the file system can hold (counting files of ours it would reuse)."""
    stats = os.statvfs(folder)
    if stats.f_blocks == 0:
        return  # a file system that keeps no block count (ramfs): its limit is memory, not known here
    free = stats.f_bavail * stats.f_frsize + reusable_bytes
    if needed_bytes > free:
        raise BadInput(
            f"disk tier capacity: {needed_bytes / GIB:.2f} GiB is more than the {free / GIB:.2f} GiB free in "
            f"{folder}; give less capacity or another folder"
        )
