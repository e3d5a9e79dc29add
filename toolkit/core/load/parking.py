"""`ParkedLoads`: keep the device blocks that asynchronous CPU-tier loads hold small enough that one can always finish.

An asynchronous load takes device blocks for its hit when vLLM admits the request, then the request *parks*: it
holds those blocks while the copy runs and until the scheduler next gives it compute. To continue past the hit it
needs more blocks (the rest of the prompt and its output for attention groups, a running-state block for each Mamba
group in `align` mode). vLLM serves block-holding waiting requests first and in order, and never preempts a waiting
request, so if every request in the engine is parked and the first one's continuation does not fit in what the
others leave free, no request ever runs again: a deadlock that only shows under a tight device pool (the soak finds
it with 28 blocks). vLLM's own admission reservation counts a parked Mamba request's continuation as zero blocks,
so it does not prevent this.

The rule: a new asynchronous load may park now only if, once it is parked, the blocks all parked requests hold
plus the largest continuation among them fit in the usable pool. Then, when nothing runs, every block not held by a
parked request is free, so at least the largest-need parked request, and therefore any one of them, can run;
finishing it frees its blocks for the next. A load that fails the rule is *deferred*, not declined: the connector
answers vLLM "ask again" (None), the request keeps waiting with its CPU-tier hit pinned, and it parks as soon as
the parked requests have computed. A load that would park alone is always admitted: with no other parked request
it waits only for running requests, which vLLM finishes or preempts, so it continues whenever vLLM could run the
request at all (the continuation below is an upper bound, loose enough that applying it to a lone request would
decline hits vLLM's own connector serves). So the rule costs a few steps of waiting under a tight pool, never a hit.
Pure Python: no torch, no vllm.
"""

from __future__ import annotations

from typing import Container, Sequence

from toolkit.core.geometry import HybridGeometry
from toolkit.core.specs import GroupKind


class ParkedLoads:
    """Requests whose asynchronous load holds device blocks and that have not computed since; see the module doc."""

    def __init__(self, geometry: HybridGeometry, *, usable_device_blocks: int) -> None:
        if usable_device_blocks < 0:
            raise ValueError(f"usable_device_blocks: {usable_device_blocks} is negative")
        self.geometry = geometry
        self.usable_device_blocks = usable_device_blocks
        # request id -> (device blocks its hit holds in all groups, further blocks it needs to finish)
        self._parked: dict[str, tuple[int, int]] = {}
        self._held_total = 0
        # request id -> (hit end, final tokens) of a hit granted at lookup, parked once its load is planned
        self._granted: dict[str, tuple[int, int]] = {}
        self.num_deferred = 0  # lookups whose load had to wait for the parked requests to compute
        # The arithmetic below runs at every lookup that hits and every allocation with a load: its per-group
        # terms are read from the geometry once here, not re-derived group by group (and kind by kind) per call.
        held_fixed, held_windows, held_full, continuation_fixed, continuation_full = 0, [], [], 0, []
        for group, block in zip(geometry.groups, geometry.group_block_tokens):
            if group.kind.is_mamba:
                held_fixed += 1  # the state at the hit boundary
                # The running state beside the cached boundary state; align mode also checkpoints at block
                # boundaries, but frees the previous checkpoint, so one more block covers the prefill.
                continuation_fixed += 2 if group.kind is GroupKind.MAMBA_ALIGN else 1
            elif group.kind.is_windowed:
                held_windows.append((block, -(-group.window // block) + 1))
                continuation_fixed += -(-group.window // block) + 1
            else:
                held_full.append(block)
                continuation_full.append(block)
        self._held_fixed, self._held_windows, self._held_full = held_fixed, tuple(held_windows), tuple(held_full)
        self._continuation_fixed, self._continuation_full = continuation_fixed, tuple(continuation_full)

    # ----- block arithmetic (per geometry) ------------------------------------------------------------------

    def held_blocks(self, hit_end_tokens: int) -> int:
        """Device blocks vLLM allocates for a request whose first `hit_end_tokens` tokens are cached (all groups):
        one state block per Mamba group, the window's blocks (at most) per windowed group, every block per
        full-attention group."""
        if hit_end_tokens == 0:
            return 0
        total = self._held_fixed
        for block, most in self._held_windows:
            total += min(-(-hit_end_tokens // block), most)
        for block in self._held_full:
            total += -(-hit_end_tokens // block)
        return total

    def continuation_blocks(self, hit_end_tokens: int, final_tokens: int) -> int:
        """Further device blocks a request parked at `hit_end_tokens` needs to reach `final_tokens` (an upper bound):
        per Mamba group the running state (align mode: plus one checkpoint), per windowed group its window, per
        full-attention group the blocks between the hit and the request's end."""
        total = self._continuation_fixed
        for block in self._continuation_full:
            total += max(0, -(-final_tokens // block) - -(-hit_end_tokens // block))
        return total

    # ----- the admission rule ---------------------------------------------------------------------------------

    def admits(self, *, hit_end_tokens: int, final_tokens: int) -> bool:
        """Whether a new load ending at `hit_end_tokens` (request ending at `final_tokens`) keeps the parked set
        safe: held blocks plus the largest continuation within the usable pool (a query)."""
        need = max(self.continuation_blocks(hit_end_tokens, final_tokens), self.largest_continuation())
        return self._held_total + self.held_blocks(hit_end_tokens) + need <= self.usable_device_blocks

    def defers(self, *, hit_end_tokens: int, final_tokens: int) -> bool:
        """Whether the load must wait for the parked requests to compute first (a query: the caller counts it).
        Never true while nothing is parked, so every deferred load is admitted once the parked set drains."""
        return bool(self._parked) and not self.admits(hit_end_tokens=hit_end_tokens, final_tokens=final_tokens)

    def grant(self, request_id: str, *, hit_end_tokens: int, final_tokens: int) -> bool:
        """At a lookup that hit: False (counted) when its load must wait for the parked requests (`defers`);
        otherwise the grant is remembered until `settle` parks the request or drops it."""
        if self.defers(hit_end_tokens=hit_end_tokens, final_tokens=final_tokens):
            self.num_deferred += 1
            return False
        self._granted[request_id] = (hit_end_tokens, final_tokens)
        return True

    def settle(self, request_id: str, block_ids: Sequence[Sequence[int]] | None, null_block_id: int) -> None:
        """After allocation: park a granted request on the device blocks vLLM gave it (`block_ids`, per group; None:
        no load was planned, the grant is dropped). A declined load parks too: the request waits, holding its
        blocks, to recompute."""
        granted = self._granted.pop(request_id, None)
        if granted is None or block_ids is None:
            return
        hit_end_tokens, final_tokens = granted
        held = sum(len(group) - group.count(null_block_id) for group in block_ids)
        self.park(
            request_id, held_blocks=held, continuation_blocks=self.continuation_blocks(hit_end_tokens, final_tokens)
        )

    def park(self, request_id: str, *, held_blocks: int, continuation_blocks: int) -> None:
        """Record a request vLLM just allocated an asynchronous load for (`held_blocks` read from its block ids)."""
        self.release(request_id)
        self._parked[request_id] = (held_blocks, continuation_blocks)
        self._held_total += held_blocks

    def release(self, request_id: str) -> None:
        """The request computed, finished or was aborted: its blocks are no longer parked."""
        self._granted.pop(request_id, None)
        entry = self._parked.pop(request_id, None)
        if entry is not None:
            self._held_total -= entry[0]

    def release_scheduled(self, scheduled_request_ids: Container[str]) -> None:
        """Release every parked request the scheduler gave compute this step (`scheduled_request_ids`: a container)."""
        if self._parked:
            for request_id in [r for r in self._parked if r in scheduled_request_ids]:
                self.release(request_id)

    def clear(self) -> None:
        self._granted.clear()
        self._parked.clear()
        self._held_total = 0

    # ----- read-only queries ----------------------------------------------------------------------------------

    def largest_continuation(self) -> int:
        return max((continuation for _, continuation in self._parked.values()), default=0)

    @property
    def held_total(self) -> int:
        return self._held_total

    def __len__(self) -> int:
        return len(self._parked)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._parked
