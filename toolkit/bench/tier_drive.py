"""Keep a tier below host memory as busy as it accepts while moving a list of blocks: the loop both tier benches
time (`kvtk bench tiers`, the disk; `--tier shared`, the Mooncake store), written once over the `LowerTier` contract.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from toolkit.tiers.disk.store import Refused
from toolkit.tiers.lower import LowerTier


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
