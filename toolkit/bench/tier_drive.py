"""What both benches of a tier below host memory share (`kvtk bench tiers`, the disk; `--tier shared`, the
Mooncake store): the cache identity their blocks are stored under, and the loop that keeps a tier as busy as it
accepts while moving a list of blocks, written once over the `LowerTier` contract.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from toolkit.tiers.disk import CacheIdentity, GroupGeometry
from toolkit.tiers.disk.store import Refused
from toolkit.tiers.lower import LowerTier


def bench_identity(block_bytes: int) -> CacheIdentity:
    """One full-attention group of `block_bytes` blocks: a bench's blocks belong to no model."""
    return CacheIdentity(
        model="bench", model_config_hash="0", dtype="bfloat16",
        groups=(GroupGeometry("full_attention", 16, block_bytes),), hash_unit_tokens=16, hash_algorithm="sha256",
        vllm_version="bench", tp_size=1, tp_rank=0, dcp_size=1, dcp_rank=0,
    )  # fmt: skip


def drive(
    tier: LowerTier,
    keys: Sequence[bytes],
    buffers: Sequence[Any],
    *,
    write: bool,
    poll_timeout_s: float,
    poll_at_least: int = 1,
    what: str = "tier",
) -> tuple[float, int]:
    """(payload bytes per second, writes the tier completed as full) moving `keys` with up to len(buffers) in
    flight, one buffer per block in flight. A block refused at submit (other than busy) or failing raises
    `RuntimeError`: a bench that lost blocks would time the wrong amount of data."""
    free = list(range(len(buffers)))
    owner: dict[int, int] = {}
    refused_full, failed, i = 0, 0, 0
    start = time.perf_counter()
    while i < len(keys) or tier.in_flight:
        while i < len(keys) and free:
            buf = buffers[free[-1]]
            got = tier.submit_write("b", keys[i], buf) if write else tier.submit_read("b", keys[i], buf)
            if got is Refused.BUSY:
                break
            if isinstance(got, Refused):
                raise RuntimeError(f"bench: the {what} refused block {i}: {got.value}")
            owner[got] = free.pop()
            i += 1
        for done in tier.poll(timeout_s=poll_timeout_s, at_least=poll_at_least):
            free.append(owner.pop(done.ticket))
            refused_full += done.reason == "full"
            failed += not done.ok and done.reason != "full"
    elapsed = time.perf_counter() - start
    if failed:
        raise RuntimeError(f"bench: {failed} of {len(keys)} {what} operations failed")
    return (len(keys) - refused_full) * len(buffers[0]) / elapsed, refused_full
