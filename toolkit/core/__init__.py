"""Scheduler-side core: pure Python, no torch, no vllm. See `geometry.py` for the glossary.

Public API (stable; the vLLM adapter in `toolkit/vllm/` builds on exactly this):

Geometry and specs
    `CacheGroupSpec`, `GroupKind`, `parse_groups_spec`, `HybridGeometry`, `FineGrainedVerdict`, `GroupLoadPlan`.

Keys and pools
    `BlockKey(group_id, block_hash)`: group-tagged key; hashes are opaque hashables (vLLM: bytes).
    `CpuBlockPool(num_blocks, *, policy="lru"|"slru"|EvictionPolicy, num_remembered_evictions, record_events)`:
        `lookup(key)`, `key in pool`, `allocate(group_ids)`, `touch(ids, hit=False)`, `free(ids)`,
        `cache(block_id, primary, aliases)`, `cache_and_free(ids, primaries, aliases)`, `drop_keys(block_id)`, `ref_count`, `primary_key`, `alias_keys`,
        `keys_of`, `was_evicted(key)`, `num_free_blocks`, `num_usable_blocks`, `num_used_blocks_per_group()`,
        `iter_free(after)`, `take_events() -> [PoolEvent]`, `reset() -> bool`. Null block id 0.
    `EvictionPolicy` (contract on the class), `LruPolicy` ("lru", exactly vLLM's), `SegmentedLruPolicy` ("slru",
        scan-resistant), `make_policy(name, num_blocks)`.
    `DevicePool` (Protocol): `null_block_id`, `primary_key(id)`, `alias_keys(id)`, `ref_count(id)`, `touch(ids)`,
        `free(ids)`, `iter_free_queue(after_block_id=None)`, `find_cached_block(key)`.
    `DeviceBlockPoolModel(num_blocks)`: pure-Python model of vLLM's device pool (+ `allocate(n)`,
        `cache_block(id, key, aliases)`, `add_alias(id, key)`, `num_free_blocks`).

Lookup
    `HybridLookup(geometry, index).find(block_hashes=, num_tokens=, local_tokens=, diagnose=True) -> LookupResult`
    and `.blocks_at(block_hashes=, local_tokens=, end_tokens=)`.
    `LookupResult`: hit_tokens, local_tokens, max_hit_tokens, block_ids (per group, null-padded),
        miss_reason (`MissReason`), limiting_group_id (the first group, in group order, lacking data one alignment
        step above the hit), and with `diagnose` group_reach_tokens, group_miss_reasons (else empty); `end_tokens`.
    `MissReason`: none, never_stored, evicted, store_in_flight, window_incomplete, mamba_state_absent,
        alignment_clamp, last_token_cap, misaligned_local_prefix, nothing_beyond_local. `KeyStatus`.

Manager inputs
    `RequestView` (Protocol): request_id, num_tokens, num_prompt_tokens, num_computed_tokens,
        num_output_placeholders, block_hashes, optional all_token_ids. `SimpleRequest` implements it.
    `ScheduledRequest(request, new_block_ids, num_scheduled_tokens, resumed=False)`.
    `Handoff(group_id, device_block_id, boundary_tokens)`.
    `StepInput(scheduled, finished_request_ids, preempted_request_ids, handoffs={req_id: [Handoff]},
        running=None)`; `RunningColumns(req_ids, new_block_ids, num_scheduled_tokens, resumed_ids, requests)`:
        running requests in the engine's column layout, read in place (`StepInput.all_scheduled()` yields both).

Manager
    `OffloadConfig(num_cpu_blocks, lazy=False, world_size=1, eviction_policy="lru", max_num_batched_tokens=8192,
        handoff_retry_queue_blocks=64, handoff_retry_steps=8, num_remembered_evictions=65536,
        enable_kv_events=False, max_step_events=100000, diagnose_lookups=True)`.
    `OffloadManager(geometry=, device_pool=, config=)`:
        `lookup(request, local_tokens) -> LookupResult` (pins the hit)
        `prepare_load(request, block_ids, external_tokens) -> LoadPlan | None`
        `build_step(StepInput) -> StepMetadata`
        `complete_stores({event_id: num_workers})`, `fail_stores(event_ids)`
        `complete_loads(request_ids)`
        `fail_loads(request_ids) -> device ids to recompute`, `fail_load_events(event_ids)`,
        `take_load_failures() -> {request_id: device ids}` (failed or declined loads)
        `request_finished(request, block_ids=None)`, `has_pending_work()`, `reset() -> bool`
        `take_kv_events() -> [CacheEvent]`, `take_step_events() -> [ManagerEvent]`, `snapshot() -> dict`,
        `usage() -> (GroupUsage, ...)`, `num_pinned_device_blocks()`, `held_cpu_blocks()`, `held_device_blocks()`
        attributes: `boundary_stats: BoundaryStoreStats`, `miss_stats: MissStats`, `geometry`, `cpu`, `device`,
        `diagnose_lookups` (settable), `finish_flush.dropped_blocks` (finish-time blocks cut for lack of free CPU blocks),
        `lazy_target_blocks`, `lazy_cursor`.
        parts, each the one owner of its state, with read-only queries: `loads` (`LoadTracker`: `load_info(id)`,
        `pending_hit_ids()`, `events_in_flight()`, `num_tracked()`), `stores` (`StoreEvents`: `stores_in_flight()`,
        `is_pending(event)`, `transfer(event)`, `event_request_ids(event)`), `request_stores` (`RequestStores`:
        `progress(id) -> StoreProgress`, `len`, `in`), `finish_flush` (`FinishFlush`: `queued_device_blocks()`).
    `LoadPlan`: request_id, external_tokens, device_block_ids, cpu_block_ids, declined, failed_device_block_ids,
        reason. `CacheEvent`: kind, cpu_block_id, group_id, keys, meta (`BlockMeta`).
    `BoundaryStoreStats`: published == stored + dropped_cpu_full + dropped_request_gone + skipped_already_cached
        + skipped_in_flight + dropped_null_block + dropped_not_hashed + pending_retry (`accounted()`).
    `MissStats`, `GroupUsage`.

Watching the manager (`toolkit.core.observer`): `subscribe(manager, observer)` / `unsubscribe`; an
`OffloadObserver` overrides `on_lookup`, `on_load_planned`, `on_store_committed`, `on_step` (several fan out through
`FanOut`; none costs one attribute test per event). `CallTimer`: the one helper that times calls.

Admitting asynchronous loads under a tight device pool (`toolkit.core.load.parking`): `ParkedLoads(geometry,
usable_device_blocks=)` with `admits(hit_end_tokens=, final_tokens=)`, `defers(...)`, `park(id, held_blocks=,
continuation_blocks=)`, `release(id)`, `release_scheduled(ids)`: the blocks parked loads hold plus the largest
continuation stay within the pool, so one parked request can always continue; a load that does not fit beside the
parked ones waits (the connector answers vLLM "ask again") instead of being declined.

Step metadata (scheduler -> worker): `StepMetadata`, `TransferBatch`, `WorkerReport`, `NO_EVENT`.
"""

from toolkit.core.event_log import CacheEvent
from toolkit.core.events import BlockMeta
from toolkit.core.geometry import FineGrainedVerdict, GroupLoadPlan, HybridGeometry
from toolkit.core.load.pairing import LoadPlan
from toolkit.core.lookup.hybrid import HybridLookup, KeyStatus, LookupResult, MissReason
from toolkit.core.manager import OffloadConfig, OffloadManager
from toolkit.core.metadata import NO_EVENT, StepMetadata, TransferBatch, WorkerReport
from toolkit.core.observer import CallTimer, FanOut, OffloadObserver, subscribe, unsubscribe
from toolkit.core.pool.blocks import NULL_BLOCK_ID, CpuBlockPool
from toolkit.core.pool.device_pool import DeviceBlockPoolModel, DevicePool
from toolkit.core.pool.events import PoolEvent
from toolkit.core.pool.eviction import EvictionPolicy, LruPolicy, SegmentedLruPolicy, make_policy
from toolkit.core.pool.keys import BlockKey
from toolkit.core.requests import Handoff, RequestView, RunningColumns, ScheduledRequest, SimpleRequest, StepInput
from toolkit.core.specs import CacheGroupSpec, GroupKind, parse_groups_spec
from toolkit.core.stats import BoundaryStoreStats, GroupUsage, MissStats
from toolkit.core.store.selection import Admission

__all__ = [
    "Admission",
    "BlockKey",
    "BlockMeta",
    "BoundaryStoreStats",
    "CallTimer",
    "CacheEvent",
    "CacheGroupSpec",
    "CpuBlockPool",
    "DeviceBlockPoolModel",
    "DevicePool",
    "EvictionPolicy",
    "FanOut",
    "FineGrainedVerdict",
    "GroupKind",
    "GroupLoadPlan",
    "GroupUsage",
    "Handoff",
    "HybridGeometry",
    "HybridLookup",
    "KeyStatus",
    "LoadPlan",
    "LookupResult",
    "LruPolicy",
    "MissReason",
    "MissStats",
    "NO_EVENT",
    "NULL_BLOCK_ID",
    "OffloadConfig",
    "OffloadManager",
    "OffloadObserver",
    "PoolEvent",
    "RequestView",
    "RunningColumns",
    "ScheduledRequest",
    "SegmentedLruPolicy",
    "SimpleRequest",
    "StepInput",
    "StepMetadata",
    "TransferBatch",
    "WorkerReport",
    "make_policy",
    "parse_groups_spec",
    "subscribe",
    "unsubscribe",
]
