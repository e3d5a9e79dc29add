"""The connector's scheduler role: vLLM's scheduler hooks feeding `toolkit.core.OffloadManager`.

vLLM objects are adapted, never copied: `Request` already is a `RequestView`, `BlockPool` is wrapped by
`VllmDevicePool`, `KVCacheConfig` becomes a `HybridGeometry`, and each `SchedulerOutput` (with the Mamba boundary
hand-offs vLLM publishes in `kv_connector_block_state.boundary_state_offloads`) becomes a `StepInput`.
"""

from __future__ import annotations

import time
from collections import Counter

from toolkit.core.manager import OffloadConfig, OffloadManager
from toolkit.core.requests import Handoff, ScheduledRequest, StepInput
from toolkit.vllm.adapters import VllmDevicePool, geometry_from_kv_cache_config
from toolkit.vllm.config import ConnectorConfig, host_blocks_for
from toolkit.vllm.messages import HybridConnectorMetadata, HybridWorkerMetadata
from toolkit.vllm.metrics import HybridOffloadStats


class SchedulerSide:
    def __init__(self, vllm_config, kv_cache_config, config: ConnectorConfig) -> None:
        from vllm.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes

        self.config = config
        self.kv_cache_config = kv_cache_config
        scheduler_block, hash_block = resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)
        # Fine-grained hits only where vLLM's own KV cache manager lands hits on the hash block too.
        alignment = getattr(kv_cache_config, "cache_hit_alignment_tokens", None)
        vllm_fine = alignment is None or alignment == hash_block
        self.geometry = geometry_from_kv_cache_config(
            kv_cache_config, dcp=vllm_config.parallel_config.decode_context_parallel_size,
            hash_block_tokens=hash_block,
            allow_fine_grained=config.fine_grained and vllm_fine and not config.lazy)
        self.scheduler_block_tokens = scheduler_block
        self.num_cpu_blocks = host_blocks_for(kv_cache_config, config.cpu_bytes_per_rank)
        self._manager_config = OffloadConfig(
            num_cpu_blocks=self.num_cpu_blocks, lazy=config.lazy,
            world_size=vllm_config.parallel_config.world_size, eviction_policy=config.eviction_policy,
            max_num_batched_tokens=vllm_config.scheduler_config.max_num_batched_tokens,
            enable_kv_events=bool(vllm_config.kv_events_config
                                  and vllm_config.kv_events_config.enable_kv_cache_events))
        self.manager: OffloadManager | None = None
        self._requests: dict[str, object] = {}
        self._declined: list[str] = []
        self.counters: Counter = Counter()
        self._usage: list | None = None
        self._usage_at = 0.0
        self.interval = HybridOffloadStats()  # since the last get_kv_connector_stats (vLLM asks every step)
        self._last_boundary: dict = {}

    # ----- binding ----------------------------------------------------------------------------------------

    def bind_block_pool(self, block_pool) -> None:
        self.manager = OffloadManager(geometry=self.geometry, device_pool=VllmDevicePool(block_pool),
                                      config=self._manager_config)

    # ----- lookup and load ---------------------------------------------------------------------------------

    def matched_tokens(self, request, num_computed_tokens: int) -> tuple[int, bool]:
        self._requests[request.request_id] = request
        if num_computed_tokens % self.scheduler_block_tokens:
            return 0, False  # an external hit must start on a scheduler block
        result = self.manager.lookup(request, num_computed_tokens)
        reason = result.miss_reason.value
        self.interval.add("lookups", 1, reason)
        if result.limiting_group_id is not None:
            self.interval.add("lookup_misses_by_group", 1, result.limiting_group_id, reason)
        return result.hit_tokens, result.hit_tokens > 0

    def after_alloc(self, request, blocks, num_external_tokens: int) -> None:
        self._requests[request.request_id] = request
        block_ids = blocks.get_block_ids() if num_external_tokens else ()
        plan = self.manager.prepare_load(request, block_ids, num_external_tokens)
        if plan is None:
            return
        if plan.declined:
            self.counters["loads_declined"] += 1
            self.interval.add("loads_failed", 1)
            self._declined.append(request.request_id)
            return
        self.counters["external_hit_tokens"] += plan.external_tokens
        self.counters["loads_planned"] += 1
        self.counters["load_blocks"] += len(plan.device_block_ids)
        self.interval.add("external_hit_tokens", plan.external_tokens)
        self.interval.add("load_blocks", len(plan.device_block_ids))

    # ----- the step --------------------------------------------------------------------------------------

    def build_meta(self, scheduler_output) -> HybridConnectorMetadata:
        step = self.manager.build_step(self._step_input(scheduler_output))
        declined, self._declined = tuple(self._declined), []
        if step.store is not None:
            self.counters["store_blocks"] += step.store.num_blocks
            self.interval.add("store_blocks", step.store.num_blocks)
        return HybridConnectorMetadata(step=step, declined_req_ids=declined)

    def _step_input(self, so) -> StepInput:
        scheduled = []
        requests = self._requests
        num_scheduled = so.num_scheduled_tokens
        for new in so.scheduled_new_reqs:
            request = requests.get(new.req_id)
            if request is not None:
                scheduled.append(ScheduledRequest(
                    request=request, new_block_ids=new.block_ids,  # read-only: no copy
                    num_scheduled_tokens=num_scheduled.get(new.req_id, 0)))
        cached = so.scheduled_cached_reqs
        empty = tuple(() for _ in self.geometry.groups)
        for req_id, new_ids in zip(cached.req_ids, cached.new_block_ids):
            request = requests.get(req_id)
            if request is None:
                continue
            scheduled.append(ScheduledRequest(
                request=request, new_block_ids=empty if new_ids is None else new_ids,
                num_scheduled_tokens=num_scheduled.get(req_id, 0), resumed=req_id in cached.resumed_req_ids))
        handoffs = {}
        state = getattr(so, "kv_connector_block_state", None)
        if state is not None and state.boundary_state_offloads:
            handoffs = {req_id: [Handoff(g, b, t) for g, b, t in entries]
                        for req_id, entries in state.boundary_state_offloads.items()}
        return StepInput(scheduled=tuple(scheduled), finished_request_ids=frozenset(so.finished_req_ids),
                         preempted_request_ids=frozenset(so.preempted_req_ids or ()), handoffs=handoffs)

    def on_output(self, connector_output) -> None:
        meta = connector_output.kv_connector_worker_meta
        failed_recv = set(connector_output.failed_recving or ())
        if isinstance(meta, HybridWorkerMetadata):
            if meta.failed_store_events:
                self.manager.fail_stores(meta.failed_store_events)
                self.counters["stores_failed"] += len(meta.failed_store_events)
                self.interval.add("stores_failed", len(meta.failed_store_events))
            if meta.completed_store_events:
                self.manager.complete_stores(meta.completed_store_events)
            if meta.failed_load_events:
                # Single-group layouts report failed blocks, not requests: fail the events' requests here.
                self.counters["load_events_failed"] += len(meta.failed_load_events)
                self.manager.fail_load_events(sorted(meta.failed_load_events))
            self.counters["bytes_loaded"] += meta.bytes_loaded
            self.counters["bytes_stored"] += meta.bytes_stored
            self.interval.add("bytes", meta.bytes_loaded, "load")
            self.interval.add("bytes", meta.bytes_stored, "store")
        if failed_recv:
            self.counters["loads_failed"] += len(failed_recv)
            self.interval.add("loads_failed", len(failed_recv))
            self.manager.fail_loads(sorted(failed_recv))
        done = [r for r in (connector_output.finished_recving or ()) if r not in failed_recv]
        if done:
            self.manager.complete_loads(done)
        self.manager.take_load_failures()

    def finished(self, request, block_ids) -> None:
        self.manager.request_finished(request, block_ids)
        self._requests.pop(request.request_id, None)

    def reset(self) -> bool:
        return self.manager.reset()

    # ----- stats ------------------------------------------------------------------------------------------

    def take_interval_stats(self, *, usage_every_s: float = 1.0) -> HybridOffloadStats | None:
        """Stats since the last call, for vLLM's per-step `get_kv_connector_stats` (O(1) unless gauges are due)."""
        stats, self.interval = self.interval, HybridOffloadStats()
        boundary = vars(self.manager.boundary_stats)
        if boundary != self._last_boundary:
            for outcome, count in boundary.items():
                if outcome not in ("published", "pending_retry"):
                    stats.add("boundary_stores", count - self._last_boundary.get(outcome, 0), outcome)
            self._last_boundary = dict(boundary)
        now = time.monotonic()
        if now - self._usage_at >= usage_every_s:
            self._usage_at = now
            self._usage = [{"group_id": u.group_id, "kind": u.kind, "used_blocks": u.num_used_blocks,
                            "used_bytes": u.used_bytes} for u in self.manager.usage()]
            for usage in self._usage:
                stats.set("cpu_used_blocks", usage["used_blocks"], usage["group_id"])
                stats.set("cpu_used_bytes", usage["used_bytes"], usage["group_id"])
        return None if stats.is_empty() else stats

    def stats_snapshot(self, *, usage_every_s: float = 0.0) -> dict:
        """Cumulative counters. CPU usage per group walks the pool, so with `usage_every_s` it is recomputed at
        most that often (vLLM asks for stats every step)."""
        manager = self.manager
        now = time.monotonic()
        if manager is not None and (self._usage is None or now - self._usage_at >= usage_every_s):
            self._usage = [{"group_id": u.group_id, "kind": u.kind, "used_blocks": u.num_used_blocks,
                            "used_bytes": u.used_bytes} for u in manager.usage()]
            self._usage_at = now
        miss = manager.miss_stats if manager is not None else None
        return {
            "counters": dict(self.counters),
            "miss": {"by_reason": dict(miss.lookups_by_reason), "by_group": miss.by_group(),
                     "num_lookups": miss.num_lookups, "num_hit_tokens": miss.num_hit_tokens,
                     "num_missed_tokens": miss.num_missed_tokens} if miss is not None else {},
            "boundary": dict(vars(manager.boundary_stats)) if manager is not None else {},
            "usage": self._usage or [],
            "num_cpu_blocks": self.num_cpu_blocks,
        }

