"""The dry engine's disk-tier read time, from the disk tier's model (`toolkit/tiers/disk/model.py`): the engines
cannot import the tiers (layering), so the experiment resolves a profile name into `DiskReadTime` and hands it over.

Every rank of a TP/DCP group reads its shard of a block from the same host's disk at once, so a load of `disk_bytes`
per rank moves `disk_bytes x ranks` through the disk, `QUEUE_DEPTH_PER_RANK` I/Os in flight per rank (capped by
the profile's own queue depth), one I/O per block; the disk read and the host -> device copy are pipelined block
by block (`staged_load_s`). A shared store below the disk (`--store-gib`, `--store-profile`) is read the same way
from its own model, in parallel with the disk (two devices): a load takes the slower of the two reads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from toolkit.core.load.from_disk import DiskHitCost
from toolkit.errors import BadInput
from toolkit.experiments.config_fields import DISK_PROFILES
from toolkit.tiers.disk.model import GEN5_X4, THIS_HOST, DiskModel, load_s, staged_load_s
from toolkit.tiers.shared.model import MOONCAKE_RDMA_4X200G, MOONCAKE_TCP_THIS_HOST

DISK_MODELS: dict[str, DiskModel] = {
    "this-host": THIS_HOST,
    "nvme-gen5-x4": GEN5_X4,
    "mooncake-tcp-this-host": MOONCAKE_TCP_THIS_HOST,
    "mooncake-rdma-4x200g": MOONCAKE_RDMA_4X200G,
}
QUEUE_DEPTH_PER_RANK = 16  # the disk tier's I/O threads per rank (`toolkit.tiers.disk`: queue_depth)
assert tuple(DISK_MODELS) == DISK_PROFILES
DiskReadTimes = Callable[[int, int], Callable[[int, float, int], float]]
DiskHitCosts = Callable[[int, int, float], DiskHitCost]


@dataclass(frozen=True, slots=True)
class DiskReadTime:
    """`staged_load_s(disk_bytes, copy_s)` for one engine: its profile, block bytes per rank and ranks."""

    model: DiskModel
    block_bytes: int
    ranks: int
    queue_depth_per_rank: int = QUEUE_DEPTH_PER_RANK
    store: DiskModel | None = None  # the shared store below the disk (None: none)

    def disk_s(self, disk_bytes: int) -> float:
        """Seconds to read `disk_bytes` per rank from the shared disk (every rank at once)."""
        return load_s(self.model, disk_bytes * self.ranks, self.block_bytes, self.queue_depth_per_rank * self.ranks)

    def store_s(self, store_bytes: int) -> float:
        """`disk_s` on the store's model (every rank reads its shard through the host's network at once)."""
        if self.store is None or not store_bytes:
            return 0.0
        return load_s(self.store, store_bytes * self.ranks, self.block_bytes, self.queue_depth_per_rank * self.ranks)

    def staged_load_s(self, disk_bytes: int, copy_s: float, store_bytes: int = 0) -> float:
        blocks = math.ceil((disk_bytes + store_bytes) / self.block_bytes)
        read_s = self.disk_s(disk_bytes)
        if store_bytes:
            read_s = max(read_s, self.store_s(store_bytes))
        return staged_load_s(read_s, copy_s, blocks)


def disk_model(profile: str) -> DiskModel:
    model = DISK_MODELS.get(profile)
    if model is None:
        raise BadInput(f"disk_profile: unknown disk profile {profile!r}; valid: {', '.join(DISK_MODELS)}")
    return model


def staged_reads(profile: str, store_profile: str | None = None) -> DiskReadTimes:
    """The dry engine's `disk_time`: `(block_bytes per rank, ranks) -> staged_load_s(disk_bytes, copy_s,
    store_bytes)`; `store_profile`: the shared store's model below the disk (None: none)."""
    model = disk_model(profile)
    store = disk_model(store_profile) if store_profile is not None else None
    return lambda block_bytes, ranks: DiskReadTime(model, block_bytes, ranks, store=store).staged_load_s


def hit_cost(model: DiskModel, block_bytes: int, ranks: int, prefill_tokens_per_s: float) -> DiskHitCost:
    """The core's load-or-recompute numbers for one engine: a block per rank costs `ranks` times its bytes at the
    shared disk's rate with every rank's I/Os in flight (a byte per rank moves `ranks` bytes through the disk),
    plus one I/O's latency per block (conservative: the queue hides part of it)."""
    in_flight = min(QUEUE_DEPTH_PER_RANK * ranks, model.max_queue_depth)
    rate = model.read.rate(block_bytes, in_flight)
    return DiskHitCost(
        read_s_per_byte=ranks / rate,
        read_latency_s=model.read.latency_s,
        block_bytes=block_bytes,
        prefill_tokens_per_s=prefill_tokens_per_s,
    )


def hit_costs(profile: str) -> DiskHitCosts:
    """The dry engine's `disk_cost`: `(block_bytes per rank, ranks, prefill tokens/s) -> DiskHitCost`."""
    model = disk_model(profile)
    return lambda block_bytes, ranks, tokens_per_s: hit_cost(model, block_bytes, ranks, tokens_per_s)
