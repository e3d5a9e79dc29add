"""Per-request observation of the connector's scheduler side, for experiments (opt-in, read-only).

    obs = connector.observe_requests()          # HybridOffloadConnector, scheduler role, after the block pool is bound
    ...run requests...
    obs.take(request_id)                        # {"hit_boundary_per_group", "miss_reason", "limiting_group_id",
                                                #  "group_miss_reasons", "load_blocks", "store_blocks",
                                                #  "load_bytes", "store_bytes"}

It subscribes to the manager's events (`toolkit.core.observer`; the manager's behaviour is unchanged):
- `on_lookup`: the request's last `LookupResult` gives the hit boundary per group (local prefix + that group's
  reach) and the miss reason (None when the hit covered every hashed token);
- `on_load_planned`: the blocks the accepted hit loads (CPU -> device);
- `on_step`: the blocks each store event copies (device -> CPU), attributed to the request whose block table
  last received that device block (finish-time stores included: they are attributed to the finished request).

Bytes are blocks x `geometry.block_bytes` (one block id owns a row in every tensor of the KV allocation).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from toolkit.core.load.pairing import LoadPlan
from toolkit.core.lookup.result import LookupResult
from toolkit.core.metadata import StepMetadata
from toolkit.core.observer import OffloadObserver, subscribe
from toolkit.core.requests import StepInput

if TYPE_CHECKING:
    from toolkit.vllm.scheduler_side import SchedulerSide


class RequestObservations(OffloadObserver):
    needs_lookup_diagnosis = True  # per-group reach and reasons for `take`

    def __init__(self, scheduler_side: SchedulerSide) -> None:
        manager = scheduler_side.manager
        if manager is None:
            raise RuntimeError("observe_requests: the block pool is not bound yet (no manager)")
        self.block_bytes = int(scheduler_side.geometry.block_bytes)
        self.lookups: dict[str, LookupResult] = {}
        self.load_blocks: Counter[str] = Counter()
        self.store_blocks: Counter[str] = Counter()
        self._owner: dict[int, str] = {}
        subscribe(manager, self)

    def on_lookup(self, request_id: str, local_tokens: int, result: LookupResult) -> None:
        self.lookups[request_id] = result

    def on_load_planned(self, request_id: str, plan: LoadPlan) -> None:
        if not plan.declined:
            self.load_blocks[request_id] += len(plan.device_block_ids)

    def on_step(self, step: StepInput, meta: StepMetadata) -> None:
        owner = self._owner
        for scheduled in step.all_scheduled():
            request_id = scheduled.request.request_id
            for ids in scheduled.new_block_ids:
                for block_id in ids:
                    owner[block_id] = request_id
        for request_id, handoffs in step.handoffs.items():
            for handoff in handoffs:  # a `Handoff` or vLLM's plain (group, block, boundary) triple
                owner[handoff[1]] = request_id
        if meta.store is not None:
            for block_id in meta.store.device_block_ids:
                self.store_blocks[owner.get(block_id, "")] += 1

    def clear(self) -> None:
        """Forget what was observed so far (e.g. a warm-up request)."""
        self.lookups.clear()
        self.load_blocks.clear()
        self.store_blocks.clear()

    def take(self, request_id: str) -> dict[str, Any]:
        """What was observed for `request_id` (entries are removed: ids may be reused by a later run)."""
        result = self.lookups.pop(request_id, None)
        loads = self.load_blocks.pop(request_id, 0)
        stores = self.store_blocks.pop(request_id, 0)
        out: dict[str, Any] = {
            "load_blocks": loads,
            "store_blocks": stores,
            "load_bytes": loads * self.block_bytes,
            "store_bytes": stores * self.block_bytes,
            "hit_boundary_per_group": [],
            "miss_reason": None,
            "limiting_group_id": None,
            "group_miss_reasons": [],
        }
        if result is not None:
            local = int(result.local_tokens)
            out["hit_boundary_per_group"] = [local + int(r) for r in result.group_reach_tokens]
            reason = result.miss_reason.value
            out["miss_reason"] = None if reason == "none" else reason
            out["limiting_group_id"] = result.limiting_group_id
            out["group_miss_reasons"] = [None if r is None else r.value for r in result.group_miss_reasons]
        return out
