"""Which blocks the CPU tier hands down to disk: the write policy, a pure decision the cascade asks per event.

- write-through: every block the CPU tier stores is also written to disk at once. Most writes (every block,
  reused or not), but a block the CPU tier evicts is already on disk, and the disk copy survives a restart as soon
  as it is stored.
- write-back (on eviction): a block is written when the CPU tier evicts it. Blocks that live and die in host
  memory cost no disk write; a crash loses what was only in host memory.
- reused-once: on eviction, only blocks that were hit at least once while in the CPU tier. The fewest writes
  (one-shot prompts never reach the disk) at the cost of a block's first reuse after eviction.
"""

from __future__ import annotations

import enum


class WritePolicy(enum.Enum):
    WRITE_THROUGH = "write-through"
    WRITE_BACK = "write-back"
    REUSED_ONCE = "reused-once"


class CpuTierEvent(enum.Enum):
    STORED = "stored"  # the block entered the CPU tier
    EVICTED = "evicted"  # the CPU tier is about to drop the block


def should_write(policy: WritePolicy, event: CpuTierEvent, cpu_hits: int) -> bool:
    """Whether the disk tier writes a block on this CPU-tier event (`cpu_hits`: its loads while in host memory)."""
    if policy is WritePolicy.WRITE_THROUGH:
        return event is CpuTierEvent.STORED
    if event is not CpuTierEvent.EVICTED:
        return False
    return policy is WritePolicy.WRITE_BACK or cpu_hits >= 1
