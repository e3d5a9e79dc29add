"""The eager CPU tier is inclusive of the device cache: a request admitted on a device-local prefix also reuses the
CPU tier's copy of that prefix, so that copy moves to the most-recently-used end (vLLM 0.34's SimpleCPU rule,
docs/reference-behaviour.md, "Local prefix refresh").

Without it, a prefix the device keeps serving is never touched in the CPU tier (eager stores skip what the CPU
holds, lookups start after the local prefix), ages there as if unused, and is evicted first under CPU pressure:
the next request that finds it gone from the device misses in both tiers.
"""

from __future__ import annotations

from typing import Hashable, Sequence

from toolkit.core.lookup.hybrid import HybridLookup
from toolkit.core.pool.blocks import CpuBlockPool


class LocalPrefixRefresh:
    """Remembers each waiting request's device-local prefix from its latest lookup; at its admission (`refresh`)
    touches the CPU blocks of the longest hybrid hit inside that prefix, in vLLM's order."""

    def __init__(self, lookup: HybridLookup, cpu: CpuBlockPool) -> None:
        self._lookup, self._cpu = lookup, cpu
        self._local_tokens: dict[str, int] = {}  # request id -> local prefix at its latest lookup

    def note(self, request_id: str, local_tokens: int) -> None:
        """The latest lookup of a waiting request found `local_tokens` on the device (a request waiting for blocks
        is looked up again every step: the last one counts)."""
        if local_tokens > 0:
            self._local_tokens[request_id] = local_tokens
        else:
            self._local_tokens.pop(request_id, None)

    def refresh(self, request_id: str, block_hashes: Sequence[Hashable]) -> int:
        """The request was admitted: move the CPU copy of its local prefix to the most-recently-used end. Returns
        the number of CPU blocks moved (blocks pinned elsewhere keep their pins and are not in the queue)."""
        local_tokens = self._local_tokens.pop(request_id, 0)
        if not local_tokens:
            return 0
        # The longest joint hit that ends inside the local prefix: a lookup from token 0 capped there.
        hit_tokens, block_ids = self._lookup.held_prefix(block_hashes=block_hashes, end_tokens=local_tokens)
        if not hit_tokens:
            return 0
        blocks = [block for group in block_ids for block in group]
        # As a pin then a release in reverse: the first block of the first group ends up the most recently used, as
        # in vLLM (its eviction order is what `eviction_policy="lru"` promises).
        self._cpu.refresh(blocks)
        return len(blocks)

    def forget(self, request_id: str) -> None:
        self._local_tokens.pop(request_id, None)

    def clear(self) -> None:
        self._local_tokens.clear()
