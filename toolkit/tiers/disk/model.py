"""The dry engine's view of a disk tier: how long N bytes take at a block size and queue depth (pure functions).

One I/O of `b` bytes takes `latency_s + b / stream_bytes_per_s` (a submission-to-completion cost plus the
transfer of one stream); `q` I/Os in flight overlap, up to the device's saturated rate:

    rate(q, b) = min(q * b / (latency_s + b / stream_bytes_per_s), max_bytes_per_s)
    time_s     = max(one I/O, total_bytes / rate(min(q, I/Os, max_queue_depth), b))

A load from disk is staged through host memory: disk -> host, then host -> device, pipelined block by block, so
it takes about the slower of the two plus one block of the faster (`staged_load_s`). Capacity counts what a slot
really takes on disk (a 4 KiB header, the payload padded to 4 KiB: `slots_for`).

Profiles: `THIS_HOST` was measured with fio on this machine (2-vCPU EPYC VM, ext4 on virtio /dev/vda, 2026-12-03:
4 KiB QD1 random read 46-68 us, 1 MiB QD1 1.34 GB/s read and 2.45 GB/s write, QD16 1.75 / 2.0 GB/s; the issue
quotes 2.1 / 1.7 GB/s at 1 MiB QD1 on a quieter run: a shared disk varies 1.5x). `GEN5_X4` is Mooncake's
published NVMe offload (4 Gen5 drives, ~22 GiB/s with batched io_uring reads, 4.7 GiB/s at queue depth one); its
latency and write rates are not published and are assumptions, said so in `source`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from toolkit.tiers.disk.layout import PoolGeometry

GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class Direction:
    latency_s: float  # one small I/O, submission to completion, nothing else in flight
    stream_bytes_per_s: float  # the transfer rate of one I/O once started
    max_bytes_per_s: float  # the device saturated (many I/Os in flight)

    def __post_init__(self) -> None:
        if not (self.latency_s >= 0 and self.stream_bytes_per_s > 0 and self.max_bytes_per_s > 0):
            raise ValueError(f"disk model: latency >= 0 and positive rates, got {self}")

    def one_io_s(self, block_bytes: int) -> float:
        return self.latency_s + block_bytes / self.stream_bytes_per_s

    def rate(self, block_bytes: int, queue_depth: int) -> float:
        return min(queue_depth * block_bytes / self.one_io_s(block_bytes), self.max_bytes_per_s)

    @classmethod
    def from_qd1(cls, latency_s: float, block_bytes: int, qd1_bytes_per_s: float, max_bytes_per_s: float) -> Direction:
        """From a measured QD1 rate at one block size and a small-I/O latency (what fio reports)."""
        transfer_s = block_bytes / qd1_bytes_per_s - latency_s
        if transfer_s <= 0:
            raise ValueError("disk model: the QD1 rate is faster than the latency allows")
        return cls(latency_s, block_bytes / transfer_s, max_bytes_per_s)


@dataclass(frozen=True, slots=True)
class DiskModel:
    name: str
    read: Direction
    write: Direction
    capacity_bytes: int
    max_queue_depth: int
    source: str


def io_time_s(
    direction: Direction, total_bytes: int, block_bytes: int, queue_depth: int, max_queue_depth: int
) -> float:
    """Seconds to move `total_bytes` in `block_bytes` I/Os with `queue_depth` in flight."""
    if total_bytes <= 0:
        return 0.0
    if block_bytes <= 0 or queue_depth < 1:
        raise ValueError(f"disk model: block_bytes > 0 and queue_depth >= 1, got {block_bytes}, {queue_depth}")
    ios = math.ceil(total_bytes / block_bytes)
    in_flight = min(queue_depth, ios, max_queue_depth)
    return max(direction.one_io_s(min(block_bytes, total_bytes)), total_bytes / direction.rate(block_bytes, in_flight))


def load_s(model: DiskModel, total_bytes: int, block_bytes: int, queue_depth: int) -> float:
    return io_time_s(model.read, total_bytes, block_bytes, queue_depth, model.max_queue_depth)


def store_s(model: DiskModel, total_bytes: int, block_bytes: int, queue_depth: int) -> float:
    return io_time_s(model.write, total_bytes, block_bytes, queue_depth, model.max_queue_depth)


def staged_load_s(disk_s: float, copy_s: float, blocks: int) -> float:
    """Disk -> host -> device, pipelined per block: the slower stage, plus one block of the faster one."""
    if blocks <= 0:
        return 0.0
    return max(disk_s, copy_s) + min(disk_s, copy_s) / blocks


def slots_for(capacity_bytes: int, payload_bytes: int) -> int:
    """Blocks of `payload_bytes` a disk tier of `capacity_bytes` holds (headers and padding counted)."""
    return capacity_bytes // PoolGeometry(payload_bytes, 1).slot_bytes


MIB = 1 << 20
THIS_HOST = DiskModel(
    name="this-host-vda",
    read=Direction.from_qd1(57e-6, MIB, 1.34e9, 1.75e9),
    write=Direction.from_qd1(102e-6, MIB, 2.45e9, 2.45e9),
    capacity_bytes=56 * GIB,
    max_queue_depth=64,
    source="fio on this VM (ext4, virtio), 2026-12-03: 4 KiB QD1 and 1 MiB QD1/QD16, random, O_DIRECT, libaio",
)
GEN5_X4 = DiskModel(
    name="nvme-gen5-x4",
    read=Direction.from_qd1(80e-6, MIB, 4.7 * GIB, 22 * GIB),
    write=Direction.from_qd1(80e-6, MIB, 4.7 * GIB, 22 * GIB),
    capacity_bytes=4 * 2 * 1024 * GIB,
    max_queue_depth=256,
    source="Mooncake's published NVMe offload: 4.7 GiB/s at QD1, ~22 GiB/s batched io_uring (4 Gen5 drives); "
    "assumed: 80 us latency, 1 MiB blocks for the QD1 figure, writes as fast as reads (an upper bound), 2 TiB "
    "per drive",
)
