"""The dry engine's view of the shared store: one engine reading and writing a Mooncake Store over its network, as
a lower tier with the same cost shape as a disk (`toolkit/tiers/disk/model.py`: a per-call latency plus the transfer
of one stream, overlapping up to a saturated rate).

From one engine's side the store is a tier below host memory that answers a batched lookup and moves whole blocks;
what it adds over a disk (another engine's prefixes) is a property of the trace and the fleet, not of the tier's
timing, so the dry engine models the timing here and one engine's trace at a time.

Profiles:
- `MOONCAKE_TCP_THIS_HOST`: measured on this machine (2-vCPU AMD EPYC VM, 2026-12-03, load average ~1) with
  `kvtk bench tiers --tier shared --mib 32 --repeats 3 --block-kib 256,1024 --queue-depths 1,4,16`: a get through the
  tier took p50 0.45 ms at 256 KiB and 1.40 ms at 1 MiB at queue depth one (so ~0.13 ms per call plus ~0.83 GB/s per
  stream) and saturated at ~0.74 GB/s; a put 0.71 / 1.87 ms (~0.32 ms plus ~0.68 GB/s), saturating at ~0.50 GB/s.
  Loopback TCP on two shared cores: deeper queues do not help here.
- `MOONCAKE_RDMA_4X200G`: Mooncake's published Transfer Engine bandwidth, 87 GB/s on 4x200 Gbps RoCE (its README;
  190 GB/s on 8x400 Gbps). Its per-call latency and single-stream rate are not published: 30 us and a quarter of the
  NICs' rate per stream are assumptions, said so in `source`. Writes are taken as fast as reads (an upper bound).
"""

from __future__ import annotations

from toolkit.tiers.disk.model import GIB, Direction, DiskModel

MIB = 1 << 20
KIB = 1 << 10


def _direction(p50_small_s: float, p50_large_s: float, max_bytes_per_s: float) -> Direction:
    """From two queue-depth-one latencies, at 256 KiB and 1 MiB: the difference is the transfer of 768 KiB."""
    stream_bytes_per_s = (MIB - 256 * KIB) / (p50_large_s - p50_small_s)
    latency_s = p50_small_s - 256 * KIB / stream_bytes_per_s
    return Direction(latency_s, stream_bytes_per_s, max_bytes_per_s)


MOONCAKE_TCP_THIS_HOST = DiskModel(
    name="mooncake-tcp-this-host",
    read=_direction(0.45e-3, 1.40e-3, 0.74e9),
    write=_direction(0.71e-3, 1.87e-3, 0.50e9),
    capacity_bytes=64 * GIB,
    max_queue_depth=16,
    source="kvtk bench tiers --tier shared on this VM (Mooncake Store 0.3.13.post1, TCP, loopback), 2026-12-03",
)
MOONCAKE_RDMA_4X200G = DiskModel(
    name="mooncake-rdma-4x200g",
    read=Direction(30e-6, 87e9 / 4, 87e9),
    write=Direction(30e-6, 87e9 / 4, 87e9),
    capacity_bytes=8 * 1024 * GIB,
    max_queue_depth=256,
    source="Mooncake's published Transfer Engine rate: 87 GB/s on 4x200 Gbps RoCE; assumed: 30 us per call, a "
    "quarter of that per stream, writes as fast as reads",
)
