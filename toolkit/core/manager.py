"""The offload manager: the scheduler side of the CPU tier (rules: docs/reference-behaviour.md).

Lifecycle, per engine step:
1. `lookup(request, local_tokens)` for each waiting request: pins the hit's CPU blocks (closes the window
   between lookup and allocation).
2. `prepare_load(request, block_ids, external_tokens)` after the engine allocated: pairs CPU and device blocks,
   moves the pins to the load, pins the device blocks. Partial acceptance is re-planned for exactly the accepted
   boundary in every group, or declined.
3. `build_step(StepInput)` once per step: hand-offs, then positional (eager) or free-queue (lazy) stores, then the
   queued finish-time stores, under one store event; every unsent load under one load event. Returns `StepMetadata`.
4. The engine advances its token counts and runs the step; workers report.
5. `complete_stores({event_id: num_workers})`, `complete_loads(request_ids)`, `fail_loads(request_ids)`.
6. `request_finished(request, block_ids)` when a request leaves: finish-time flush, then (deferred) cleanup.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from dataclasses import dataclass
from typing import Sequence

from toolkit.core.completion import CompletionMixin
from toolkit.core.device_pool import DevicePool
from toolkit.core.geometry import HybridGeometry
from toolkit.core.handoffs import HandoffIntake
from toolkit.core.keys import BlockKey
from toolkit.core.lifecycle import LifecycleMixin, StoreTransfer as _StoreTransfer
from toolkit.core.loads import LoadPlan, LoadState, covering_device_blocks, pair_load_blocks
from toolkit.core.lookup import HybridLookup, KeyStatus, LookupResult
from toolkit.core.metadata import StepMetadata, TransferBatch
from toolkit.core.pool import CpuBlockPool
from toolkit.core.requests import RequestView, StepInput
from toolkit.core.stats import BoundaryStoreStats, MissStats
from toolkit.core.stores import (
    InFlightStores, StoreBatch, StoreState, next_work_tokens, positional_layout, select_lazy, select_positional,
)


@dataclass(frozen=True, kw_only=True)
class OffloadConfig:
    """Manager settings, decided once at construction.

    Attributes:
        num_cpu_blocks: CPU pool size in blocks, null block included (so `num_cpu_blocks - 1` are usable).
        lazy: store from the device free queue (blocks about to be evicted) instead of eagerly; turns
            fine-grained hits off (the geometry is rebuilt with `allow_fine_grained=False`).
        world_size: workers that must each report a store before its keys become hits.
        eviction_policy: "lru" (exactly vLLM's) or "slru" (scan-resistant).
        max_num_batched_tokens: the engine's per-step token budget (sizes the lazy watermark).
        handoff_retry_queue_blocks / handoff_retry_steps: bounded waiting room for hand-offs that find the pool
            full (0 disables, as in vLLM).
        num_remembered_evictions: evicted keys remembered to tell "evicted" from "never stored".
        enable_kv_events: keep KV-event payloads index-parallel with store batches and emit `CacheEvent`s.
        max_step_events: bound on undrained visualizer events (oldest dropped first); 0 records none, so the
            bookkeeping costs nothing where nobody calls `take_step_events` (the vLLM connector).
        diagnose_lookups: fill every lookup's per-group reach and reasons (`LookupResult.group_reach_tokens`,
            `group_miss_reasons`); the joint hit, the limiting group and the reason never need them. Off in the
            vLLM connector unless an observer turns it on (`manager.diagnose_lookups`).
    """

    num_cpu_blocks: int
    lazy: bool = False
    world_size: int = 1
    eviction_policy: str = "lru"
    max_num_batched_tokens: int = 8192
    handoff_retry_queue_blocks: int = 64
    handoff_retry_steps: int = 8
    num_remembered_evictions: int = 1 << 16
    enable_kv_events: bool = False
    max_step_events: int = 100_000
    diagnose_lookups: bool = True

    def __post_init__(self) -> None:
        for name in ("num_cpu_blocks", "world_size", "max_num_batched_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}: must be a positive integer, got {value!r}")


class _KeyIndex:
    """The lookup's view of the CPU tier: the pool, plus in-flight keys for miss attribution."""

    def __init__(self, cpu: CpuBlockPool, in_flight: InFlightStores) -> None:
        self.lookup = cpu.lookup
        # Lookups probe membership with `in` on these containers directly (one dict probe, no method call);
        # `key_status` below is the same decision.
        self.key_container = cpu.key_container
        self.in_flight_key_container = in_flight.keys
        self.evicted_key_container = cpu.evicted_key_container
        self._cpu, self._in_flight = cpu, in_flight

    def key_status(self, key: BlockKey) -> KeyStatus:
        if key in self.key_container:
            return KeyStatus.CACHED
        if key in self._in_flight.keys:
            return KeyStatus.IN_FLIGHT
        return KeyStatus.EVICTED if self._cpu.was_evicted(key) else KeyStatus.NEVER_STORED


class OffloadManager(CompletionMixin, LifecycleMixin):
    """Scheduler-side CPU offload for one engine. See the module docstring for the lifecycle."""

    def __init__(self, *, geometry: HybridGeometry, device_pool: DevicePool, config: OffloadConfig) -> None:
        if config.lazy and geometry.allow_fine_grained:
            geometry = dataclasses.replace(geometry, allow_fine_grained=False)
        self.geometry = geometry
        self.config = config
        self.device = device_pool
        # Step events and KV events are the only readers of pool events: record them only for those.
        self._record_step_events = config.max_step_events > 0
        self.diagnose_lookups = config.diagnose_lookups
        self.cpu = CpuBlockPool(config.num_cpu_blocks, policy=config.eviction_policy,
                                num_remembered_evictions=config.num_remembered_evictions,
                                record_events=self._record_step_events or config.enable_kv_events)
        self.in_flight = InFlightStores()
        self._lookup = HybridLookup(geometry, _KeyIndex(self.cpu, self.in_flight))
        self._handoffs = HandoffIntake(max_waiting=config.handoff_retry_queue_blocks,
                                       max_retry_steps=config.handoff_retry_steps)
        self._lazy_target = geometry.lazy_target_blocks(config.max_num_batched_tokens)
        self._positional_layout = positional_layout(geometry)
        self._spare_batch: StoreBatch | None = None
        # `find_prompt_tail`'s first test, decided once (it runs for every finishing request).
        self._tail_possible = bool(geometry.fine_grained.enabled and geometry.full_attention_group_ids)
        self._hash_tokens = geometry.hash_tokens
        self._num_groups = geometry.num_groups
        self._lazy_cursor: int | None = None
        self._pending_hits: dict[str, tuple[LookupResult, list[int]]] = {}
        self._loads: dict[str, LoadState] = {}
        self._abandoned_loads: dict[str, LoadState] = {}
        self._load_event_to_reqs: dict[int, list[str]] = {}
        self._store_reqs: dict[str, StoreState] = {}
        self._store_events: dict[int, _StoreTransfer] = {}
        self._abandoned_stores: dict[int, _StoreTransfer] = {}
        self._store_event_to_reqs: dict[int, list[str]] = {}
        self._store_pending_counts: dict[int, int] = {}
        self._pending_finish: StoreBatch | None = None  # finish-time selections, committed by the next step
        self.finish_stores_dropped = 0  # finish-time blocks cut because lookups pinned the free CPU blocks first
        self._next_load_event = 0
        self._next_store_event = 0
        self._failed_loads: dict[str, tuple[int, ...]] = {}
        self._kv_events: list[CacheEvent] = []
        self._step_events: deque[dict] = deque(maxlen=config.max_step_events)
        self.boundary_stats = BoundaryStoreStats()
        self.miss_stats = MissStats()

    # ----- lookup and load ---------------------------------------------------------------------------------

    def lookup(self, request: RequestView, local_tokens: int) -> LookupResult:
        """Longest CPU hit after `local_tokens`; pins its blocks until `prepare_load` (replacing older pins)."""
        request_id = request.request_id
        if request_id in self._pending_hits:
            self._release_pending_hit(request_id)
        block_hashes, num_tokens = request.block_hashes, request.num_tokens
        result = self._lookup.find(block_hashes=block_hashes, num_tokens=num_tokens, local_tokens=local_tokens,
                                   diagnose=self.diagnose_lookups)
        hashed_end = len(block_hashes) * self._hash_tokens
        wanted = max(0, min(hashed_end, num_tokens - 1) - local_tokens)
        self.miss_stats.record(result, num_wanted_tokens=wanted)
        if result.hit_tokens:
            pins = result.real_block_ids()
            self.cpu.touch(pins, hit=True)
            self._pending_hits[request_id] = (result, pins)
        if self._record_step_events:
            self._step_events.append({
                "type": "lookup", "request_id": request_id, "local_tokens": local_tokens,
                "hit_tokens": result.hit_tokens, "miss_reason": result.miss_reason.value,
                "limiting_group_id": result.limiting_group_id,
            })
        return result

    def prepare_load(self, request: RequestView, block_ids: Sequence[Sequence[int]],
                     external_tokens: int) -> LoadPlan | None:
        """After allocation: plan the load of `external_tokens` accepted tokens into the request's device tables
        (`block_ids[g]`: the whole table of group g). Returns None when nothing is to be loaded."""
        request_id = request.request_id
        if not self.config.lazy and request_id not in self._store_reqs:
            self._store_reqs[request_id] = StoreState.empty(self._num_groups)
        pending = self._pending_hits.pop(request_id, None)
        if external_tokens == 0:
            if pending is not None:
                self.cpu.free(pending[1])
            return None
        if external_tokens < 0 or external_tokens % self.geometry.hash_tokens:
            raise ValueError(f"external_tokens: {external_tokens} is not a non-negative multiple of the hash block "
                             f"{self.geometry.hash_tokens}")
        if pending is None:
            return self._decline(request_id, block_ids, 0, external_tokens, "no pending lookup for this request")
        result, pins = pending
        local = result.local_tokens
        if external_tokens > result.hit_tokens:
            self.cpu.free(pins)
            raise ValueError(f"external_tokens: {external_tokens} exceeds the offered hit of {result.hit_tokens}")
        hit_blocks: Sequence[Sequence[int]] | None = result.block_ids
        if external_tokens < result.hit_tokens:
            # Re-plan for exactly the accepted boundary: window blocks and the Mamba state differ per boundary.
            hit_blocks = self._lookup.blocks_at(block_hashes=request.block_hashes, local_tokens=local,
                                                end_tokens=local + external_tokens)
            if hit_blocks is None:
                self.cpu.free(pins)
                return self._decline(request_id, block_ids, local, external_tokens,
                                     f"some group holds no data for the accepted boundary {local + external_tokens}")
        device_ids, cpu_ids = pair_load_blocks(
            geometry=self.geometry, hit_block_ids=hit_blocks, device_block_ids=block_ids, local_tokens=local,
            external_tokens=external_tokens, device_null_id=self.device.null_block_id)
        assert request_id not in self._loads, f"request {request_id} already has a pending load"
        self.cpu.touch(cpu_ids)  # the load pin first, then the lookup pin goes: no window for eviction
        self.cpu.free(pins)
        self.device.touch(device_ids)
        self._loads[request_id] = LoadState(request_id, device_ids, cpu_ids)
        return LoadPlan(request_id=request_id, external_tokens=external_tokens,
                        device_block_ids=tuple(device_ids), cpu_block_ids=tuple(cpu_ids))

    def _decline(self, request_id: str, block_ids: Sequence[Sequence[int]], local: int, external: int,
                 reason: str) -> LoadPlan:
        failed = tuple(covering_device_blocks(geometry=self.geometry, device_block_ids=block_ids, local_tokens=local,
                                              external_tokens=external, device_null_id=self.device.null_block_id))
        self._failed_loads[request_id] = failed
        if self._record_step_events:
            self._step_events.append({"type": "load_declined", "request_id": request_id, "reason": reason,
                                      "failed_device_block_ids": list(failed)})
        return LoadPlan(request_id=request_id, external_tokens=external, declined=True,
                        failed_device_block_ids=failed, reason=reason)

    def _release_pending_hit(self, request_id: str) -> None:
        pending = self._pending_hits.pop(request_id, None)
        if pending is not None:
            self.cpu.free(pending[1])

    # ----- the step --------------------------------------------------------------------------------------

    def build_step(self, step: StepInput) -> StepMetadata:
        """Choose this step's stores and loads (see the module docstring for the order)."""
        cpu, device = self.cpu, self.device
        # The batch starts with what finishing requests left (device blocks already pinned). Otherwise most steps
        # select nothing: the last step's batch is reused while it stayed empty (a committed batch hands its lists to
        # the store event, so a new one is built after each store).
        capacity = len(cpu.policy)  # the pool's free blocks now
        batch = self._take_pending_finish(capacity)
        num_pinned = len(batch) if batch is not None else 0
        if batch is None:
            batch = self._spare_batch
            if batch is None:
                batch = self._spare_batch = StoreBatch(capacity, self.in_flight)
            else:
                batch.capacity = capacity
        retry_release: list[int] = []
        if not self.config.lazy:
            events: list[dict] | None = [] if self._record_step_events else None
            handoffs = self._handoffs
            if handoffs.waiting:
                retry_release = handoffs.retry(device=device, cpu=cpu, batch=batch, stats=self.boundary_stats,
                                               events=events)
            if step.handoffs:
                pinned = handoffs.take(
                    handoffs=step.handoffs, states=self._store_reqs,
                    gone_request_ids=step.finished_request_ids | step.preempted_request_ids,
                    device=device, cpu=cpu, batch=batch, stats=self.boundary_stats, events=events)
                if pinned:
                    device.touch(pinned)
            if events:
                self._step_events.extend(events)
            self._select_positional(step, batch)
        else:
            self._lazy_cursor = select_lazy(device=device, cpu=cpu, batch=batch, cursor=self._lazy_cursor,
                                            target_blocks=self._lazy_target)
        store = None
        if batch.device_ids:
            store = self._assign_store_event(batch, num_pinned)
            if batch is self._spare_batch:
                self._spare_batch = None  # its lists now belong to the store event
        if retry_release:
            device.free(retry_release)  # after the batch pinned them: the pin moves, never drops to zero between
        load = self._assign_load_event() if self._loads else None
        load_reqs = self._load_event_to_reqs
        return StepMetadata(load=load, store=store,
                            load_event_to_req_ids={e: tuple(r) for e, r in load_reqs.items()} if load_reqs else {},
                            need_flush=bool(step.preempted_request_ids))

    def _select_positional(self, step: StepInput, batch: StoreBatch) -> None:
        states = self._store_reqs
        if not states:
            return
        for scheduled in step.scheduled:
            request = scheduled.request
            state = states.get(request.request_id)
            if state is None or state.finished:
                continue
            self._positional_one(state, request, scheduled.new_block_ids, scheduled.num_scheduled_tokens,
                                 scheduled.resumed, batch)
        running = step.running
        if running is None:
            return
        # Column layout: most running requests get no new block and have not reached their next block end, so
        # they cost two dict probes and one comparison here (no per-request object, no call).
        requests, counts, resumed_ids = running.requests, running.num_scheduled_tokens, running.resumed_ids
        positional_one = self._positional_one
        for req_id, new_ids in zip(running.req_ids, running.new_block_ids):
            state = states.get(req_id)
            if state is None or state.finished:
                continue
            request = requests.get(req_id)
            if request is None:
                continue
            if new_ids is None and (request.num_computed_tokens - request.num_output_placeholders
                                    < state.next_work_tokens):
                continue
            positional_one(state, request, () if new_ids is None else new_ids, counts.get(req_id, 0),
                           req_id in resumed_ids, batch)

    def _positional_one(self, state, request, new_block_ids, num_scheduled_tokens: int, resumed: bool,
                        batch: StoreBatch) -> None:
        """One scheduled request: append this step's new blocks, then store what is confirmed (eager)."""
        layout = self._positional_layout
        if resumed:
            state.block_ids = [[] for _ in range(self._num_groups)]
            state.num_stored_blocks = [0] * self._num_groups
        # Incremental: only this step's new block ids are appended, tables are never rebuilt.
        tables = state.block_ids
        if resumed or any(new_block_ids):
            for table, new_ids in zip(tables, new_block_ids):
                if new_ids:
                    table.extend(new_ids)
            state.next_work_tokens = next_work_tokens(layout, state.num_stored_blocks, tables)
        if num_scheduled_tokens == 0:
            return
        confirmed_tokens = request.num_computed_tokens - request.num_output_placeholders
        if confirmed_tokens >= state.next_work_tokens:
            select_positional(geometry=self.geometry, device=self.device, cpu=self.cpu, batch=batch, state=state,
                              block_ids=tables, request=request, confirmed_tokens=confirmed_tokens,
                              source="positional", with_meta=self.config.enable_kv_events, layout=layout)
            state.next_work_tokens = next_work_tokens(layout, state.num_stored_blocks, tables)

    def _assign_store_event(self, batch: StoreBatch, num_pinned: int = 0) -> TransferBatch:
        """Commit `batch` as one store event: one CPU allocation for the whole batch (not one per block or per
        request), device pins for its blocks (the first `num_pinned` were pinned when their request finished)."""
        cpu_ids = self.cpu.allocate(batch.group_ids)
        self.device.touch(batch.device_ids[num_pinned:] if num_pinned else batch.device_ids)
        if self.cpu.records_events:
            self._drain_pool_events()
        merged = _StoreTransfer(batch.device_ids, cpu_ids, batch.group_ids, batch.keys, batch.metas, batch.sources)
        assert len(merged.metas) == len(merged.device_ids) == len(merged.cpu_ids), "block metadata not parallel"
        event_id = self._next_store_event
        self._next_store_event += 1
        self._store_events[event_id] = merged
        request_ids = list(batch.request_ids)
        if request_ids:
            self._store_event_to_reqs[event_id] = request_ids
            states = self._store_reqs
            for request_id in request_ids:
                state = states.get(request_id)
                if state is not None:
                    state.store_event_ids.add(event_id)
        if self._record_step_events:
            self._step_events.append({
                "type": "store", "event_id": event_id, "device_block_ids": list(merged.device_ids),
                "cpu_block_ids": list(merged.cpu_ids), "group_ids": list(merged.group_ids),
                "sources": list(merged.sources), "request_ids": request_ids,
            })
        return TransferBatch(event_id=event_id, device_block_ids=tuple(merged.device_ids),
                             host_block_ids=tuple(merged.cpu_ids))

    def _assign_load_event(self) -> TransferBatch | None:
        unsent = [state for state in self._loads.values() if state.event_id is None]
        if not unsent:
            return None
        event_id = self._next_load_event
        self._next_load_event += 1
        device_ids: list[int] = []
        cpu_ids: list[int] = []
        for state in unsent:
            state.event_id = event_id
            device_ids.extend(state.device_block_ids)
            cpu_ids.extend(state.cpu_block_ids)
        self._load_event_to_reqs[event_id] = [state.request_id for state in unsent]
        if self._record_step_events:
            self._step_events.append({"type": "load", "event_id": event_id,
                                      "request_ids": [s.request_id for s in unsent],
                                      "device_block_ids": device_ids, "cpu_block_ids": cpu_ids})
        return TransferBatch(event_id=event_id, device_block_ids=tuple(device_ids), host_block_ids=tuple(cpu_ids))
