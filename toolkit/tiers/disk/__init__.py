"""The disk tier (issue 37): fixed-size block slots on a local file system, below the CPU tier.

`DiskTier.open(DiskTierConfig(...))`, then `submit_write` / `submit_read` / `poll` (never blocking the caller) and
`close`; restart-safe and keyed by a `CacheIdentity`. Modules: identity (what the bytes mean), layout (slots and
their headers), commit_log (the crash-safe index on disk), index (LRU and pins), io_ops + workers (the I/O
threads), aio + aio_abi (reads through kernel AIO), manifest + opening (reuse or discard at open), policy (write
policy), stats, model (the dry engine's view of a disk: time to load N bytes).
"""

from toolkit.tiers.disk.config import Direct, DiskTierConfig, Durability, IoPath, PoolSpec
from toolkit.tiers.disk.identity import CacheIdentity, GroupGeometry
from toolkit.tiers.disk.policy import CpuTierEvent, WritePolicy
from toolkit.tiers.disk.stats import DiskTierStats, PoolStats
from toolkit.tiers.disk.store import Completion, DiskTier, Refused

__all__ = [
    "CacheIdentity",
    "Completion",
    "CpuTierEvent",
    "Direct",
    "DiskTier",
    "DiskTierConfig",
    "DiskTierStats",
    "Durability",
    "GroupGeometry",
    "IoPath",
    "PoolSpec",
    "PoolStats",
    "Refused",
    "WritePolicy",
]
