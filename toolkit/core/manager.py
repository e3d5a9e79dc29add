"""The offload manager: the scheduler side of the CPU tier (rules: docs/reference-behaviour.md).

Lifecycle, per engine step:
1. `lookup_for_load(request, local_tokens, final_tokens=)` for each waiting request: `lookup` (pins the hit's CPU
   blocks: closes the window between lookup and allocation), or `Deferred` while its load must wait (for the parked
   loads to compute, `load/parking.py`, or for CPU room for its disk blocks): the engine keeps it waiting, asks again.
2. `prepare_load(request, block_ids, external_tokens)` after the engine allocated: pairs CPU and device blocks,
   moves the pins to the load, pins the device blocks. Partial acceptance is re-planned for exactly the accepted
   boundary in every group, or declined.
3. `build_step(StepInput)` once per step: hand-offs, then positional (eager) or free-queue (lazy) stores, then the
   queued finish-time stores, under one store event; every unsent load under one load event. Returns `StepMetadata`.
4. The engine advances its token counts and runs the step; workers report.
5. `complete_stores({event_id: num_workers})`, `complete_loads(request_ids)`, `fail_loads(request_ids)`.
6. `request_finished(request, block_ids)` when a request leaves: finish-time flush, then (deferred) cleanup.
The engine's own lookups (the connector, the simulator, the dry engine through the connector) all go through
`lookup_for_load`, so they share the parking rule; `lookup` alone is the bare tier query.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping, Sequence

from toolkit.core import manager_views
from toolkit.core.event_log import CacheEvent, EventLog
from toolkit.core.events import ManagerEvent, TierReset
from toolkit.core.geometry import HybridGeometry
from toolkit.core.load.deferral import Deferred
from toolkit.core.load.from_disk import DiskCascade
from toolkit.core.load.pairing import LoadPlan
from toolkit.core.load.parking import ParkedLoads
from toolkit.core.load.tracker import LoadTracker
from toolkit.core.lookup.hybrid import HybridLookup, LookupResult
from toolkit.core.lookup.tier_index import TierKeyIndex
from toolkit.core.metadata import IDLE_STEP, StepMetadata
from toolkit.core.observer import OffloadObserver
from toolkit.core.offload_config import OffloadConfig
from toolkit.core.pool.blocks import CpuBlockPool
from toolkit.core.pool.device_pool import DevicePool
from toolkit.core.pool.in_flight import InFlightStores
from toolkit.core.requests import RequestView, RunningColumns, StepInput
from toolkit.core.stats import BoundaryStoreStats, GroupUsage, MissStats
from toolkit.core.store.decode_skip import CANNOT_SKIP
from toolkit.core.store.fine_only import cut_fine_only, fine_only_has_room
from toolkit.core.store.finish_flush import FinishFlush
from toolkit.core.store.handoffs import HandoffIntake
from toolkit.core.store.request_progress import RequestStores
from toolkit.core.store.selection import StoreBatch, positional_layout, select_lazy
from toolkit.core.store.store_events import FINE_ONLY_SOURCES, StoreEvents

__all__ = ["OffloadConfig", "OffloadManager"]


class OffloadManager:
    """Scheduler-side CPU offload for one engine (see the module docstring for the lifecycle).

    A facade: the state lives in parts that each own theirs and answer read-only queries: `loads` (lookup pins
    and loads), `stores` (store events in flight), `request_stores` (each request's store progress),
    `finish_flush` (finish-time selections waiting for the next step). The manager decides the order.
    """

    def __init__(self, *, geometry: HybridGeometry, device_pool: DevicePool, config: OffloadConfig) -> None:
        if config.lazy and geometry.allow_fine_grained:
            geometry = dataclasses.replace(geometry, allow_fine_grained=False)
        self.geometry = geometry
        self.config = config
        self.device = device_pool
        self.diagnose_lookups = config.diagnose_lookups
        self.cpu = CpuBlockPool(
            config.num_cpu_blocks,
            policy=config.eviction_policy,
            num_remembered_evictions=config.num_remembered_evictions,
            record_events=config.max_step_events > 0 or config.enable_kv_events,  # their only readers
        )
        self.in_flight = InFlightStores()
        self.parking = ParkedLoads(geometry, usable_device_blocks=device_pool.usable_blocks)
        self.event_log = EventLog(self.cpu, max_step_events=config.max_step_events, kv_events=config.enable_kv_events)
        self._lookup = HybridLookup(
            geometry, TierKeyIndex(self.cpu, self.in_flight), speculative_block_drop=config.speculative_block_drop
        )
        # A disk tier below the CPU pool (off by default): the engine's lookups span both, promoting disk-held
        # blocks into CPU blocks; re-planning and the local-prefix refresh read the CPU pool alone.
        self.disk = (
            DiskCascade(
                self.cpu,
                config.num_disk_blocks,
                world_size=config.world_size,
                reused_once=config.disk_write_policy == "reused-once",
                groups_on_disk=_groups_on_disk(geometry, config.disk_groups),
            )
            if config.num_disk_blocks
            else None
        )
        self._tier_lookup = self._lookup if self.disk is None else self.disk.lookup(self._lookup, self.in_flight)
        self._handoffs = HandoffIntake(
            max_waiting=config.handoff_retry_queue_blocks,
            max_retry_steps=config.handoff_retry_steps,
            scheduler_block_tokens=geometry.scheduler_block_tokens,
        )
        self.lazy_target_blocks = geometry.lazy_target_blocks(config.max_num_batched_tokens)
        self._lazy_cursor: int | None = None  # where the lazy free-queue walk resumes
        self._spare_batch: StoreBatch | None = None
        self._hash_tokens = geometry.hash_tokens
        layout = positional_layout(geometry)
        with_meta = config.enable_kv_events  # KV events carry each positional block's tokens
        self.loads = LoadTracker(self.cpu, device_pool, self.event_log, lookup=self._lookup, eager=not config.lazy)
        self.request_stores = RequestStores(
            geometry=geometry, device=device_pool, cpu=self.cpu, layout=layout, with_meta=with_meta
        )
        self._low_sources = FINE_ONLY_SOURCES if config.fine_store_priority == "low" else frozenset()
        self.stores = StoreEvents(
            self.cpu,
            device_pool,
            self.in_flight,
            self.event_log,
            world_size=config.world_size,
            on_done=self.request_stores.detach,
            low_priority_sources=self._low_sources,
        )
        self.finish_flush = FinishFlush(
            geometry=geometry,
            device=device_pool,
            cpu=self.cpu,
            in_flight=self.in_flight,
            layout=layout,
            with_meta=with_meta,
        )
        self.boundary_stats = BoundaryStoreStats()
        self.miss_stats = MissStats()
        self.observer: OffloadObserver | None = None  # subscribers (`toolkit.core.observer.subscribe`), None: no cost

    # ----- lookup and load ---------------------------------------------------------------------------------

    def lookup(self, request: RequestView, local_tokens: int) -> LookupResult:
        """Longest CPU hit after `local_tokens`; pins its blocks until `prepare_load` (replacing older pins)."""
        request_id, loads = request.request_id, self.loads
        loads.release_hit(request_id)
        loads.note_local_prefix(request_id, local_tokens)
        block_hashes, num_tokens = request.block_hashes, request.num_tokens
        result = self._tier_lookup.find(
            block_hashes=block_hashes, num_tokens=num_tokens, local_tokens=local_tokens, diagnose=self.diagnose_lookups
        )
        if self.disk is not None:
            self.disk.no_room_blocks = 0
            if result.hit_tokens:

                def find(lookup: HybridLookup) -> LookupResult:  # a hit over fewer tiers, only when weighed
                    return lookup.find(
                        block_hashes=block_hashes, num_tokens=num_tokens, local_tokens=local_tokens, diagnose=False
                    )

                result = self.disk.promote(self.disk.weigh(result, lambda: find(self._lookup), find))
        hashed_end = len(block_hashes) * self._hash_tokens
        wanted = max(0, min(hashed_end, num_tokens - 1) - local_tokens)
        self.miss_stats.record(result, num_wanted_tokens=wanted)
        if result.hit_tokens:
            loads.pin_hit(request_id, result)
        if self.event_log.recording:
            self.event_log.lookup(request_id, local_tokens, result)
        if self.observer is not None:
            self.observer.on_lookup(request_id, local_tokens, result)
        return result

    def lookup_for_load(self, request: RequestView, local_tokens: int, *, final_tokens: int) -> int | Deferred:
        """The engine's lookup: the hit's tokens (`lookup`), or why the engine should keep the request waiting and
        ask again next step (`Deferred`): loading it now could leave every parked request unable to continue
        (`final_tokens`: where the request ends, prompt plus output), or its disk blocks found no free CPU block
        (bounded, `DiskCascade.wait_for_room`). The hit stays pinned; it is loaded later, never recomputed for it."""
        hit_tokens = self.lookup(request, local_tokens).hit_tokens
        if not hit_tokens and self.disk is not None and self.disk.wait_for_room(request.request_id):
            return Deferred.CPU_ROOM_FOR_DISK
        end = local_tokens + hit_tokens
        if hit_tokens and not self.parking.grant(request.request_id, hit_end_tokens=end, final_tokens=final_tokens):
            return Deferred.DEVICE_POOL_TIGHT
        return hit_tokens

    def note_local_prefix(self, request_id: str, local_tokens: int) -> None:
        """`LoadTracker.note_local_prefix`, for an adapter that answers a lookup itself (a misaligned local prefix)."""
        self.loads.note_local_prefix(request_id, local_tokens)

    def prepare_load(
        self, request: RequestView, block_ids: Sequence[Sequence[int]], external_tokens: int
    ) -> LoadPlan | None:
        """After allocation: plan the load of `external_tokens` accepted tokens into the request's device tables
        (`block_ids[g]`: the whole table of group g). Returns None when nothing is to be loaded; a plan may be
        declined (`LoadPlan.declined`) when the accepted boundary cannot be served in every group."""
        request_id = request.request_id
        if not self.config.lazy:
            self.request_stores.track(request_id)
        plan = self.loads.plan(request, block_ids, external_tokens)
        if self.disk is not None and plan is not None:
            self.disk.note_load(request_id, plan.cpu_block_ids, plan.external_tokens)
        self.parking.settle(request_id, block_ids if plan is not None else None, self.device.null_block_id)
        if plan is not None and self.observer is not None:  # planned or declined, both
            self.observer.on_load_planned(request_id, plan)
        return plan

    # ----- the step --------------------------------------------------------------------------------------

    def skips_idle_step(self, running: RunningColumns) -> bool:
        """For a step of running requests only (no new request, hand-off or preemption): whether `build_step` would
        return `IDLE_STEP` with nothing else to do. True takes the step (skip `build_step`); False changes nothing."""
        if (
            self.config.lazy
            or self.observer is not None
            or self._handoffs.waiting
            or self.finish_flush.has_pending()
            or self.parking  # `build_step` releases the parked requests this step computes
            or (self.disk is not None and self.disk.has_moves())  # demotions and promotions go out this step
        ):
            return False
        decode_skip = self.request_stores.decode_skip
        advance = decode_skip.skippable_advance(running) if self.loads.is_idle() else CANNOT_SKIP
        if advance == CANNOT_SKIP:
            return False
        decode_skip.spend(advance)  # the query changed nothing: taking the skip is this explicit spend
        return True

    def build_step(self, step: StepInput) -> StepMetadata:
        """Choose this step's stores and loads (see the module docstring for the order)."""
        if self.parking:
            self.parking.release_scheduled(step.computing_ids())  # they computed: their blocks are no longer parked
        cpu, device = self.cpu, self.device
        # The batch starts with what finishing requests left (device blocks already pinned). Otherwise most steps
        # select nothing: the last step's batch is reused while it stayed empty (a committed batch hands its lists to
        # the store event, so a new one is built after each store).
        capacity = len(cpu.policy)  # the pool's free blocks now
        batch = self.finish_flush.take(capacity)
        num_pinned = len(batch) if batch is not None else 0
        if batch is None:
            batch = self._spare_batch
            if batch is None:
                batch = self._spare_batch = StoreBatch(capacity, self.in_flight)
            else:
                batch.capacity = capacity
        retry_release: list[int] = []
        if not self.config.lazy:
            events: list[ManagerEvent] | None = [] if self.event_log.recording else None
            handoffs = self._handoffs
            if handoffs.waiting:
                retry_release = handoffs.retry(
                    device=device, cpu=cpu, batch=batch, stats=self.boundary_stats, events=events
                )
            if step.handoffs:
                pinned = self.request_stores.take_handoffs(
                    handoffs,
                    handoffs=step.handoffs,
                    gone_request_ids=step.finished_request_ids | step.preempted_request_ids,
                    batch=batch,
                    stats=self.boundary_stats,
                    events=events,
                    fine_room=fine_only_has_room(batch, low_sources=self._low_sources, cpu=cpu),
                )
                if pinned:
                    device.touch(pinned)
            if events:
                self.event_log.emit_all(events)
            self.request_stores.select(step, batch)
        else:
            self._lazy_cursor = select_lazy(
                device=device, cpu=cpu, batch=batch, cursor=self._lazy_cursor, target_blocks=self.lazy_target_blocks
            )
        store = None
        if batch.device_ids and self._low_sources:
            num_pinned = cut_fine_only(
                batch,
                num_pinned,
                low_sources=self._low_sources,
                cpu=cpu,
                device=device,
                in_flight=self.in_flight,
                stats=self.boundary_stats,
            )
        if batch.device_ids:
            store, request_ids = self.stores.commit(batch, num_pinned)
            if request_ids:
                self.request_stores.attach(store.event_id, request_ids)
            if batch is self._spare_batch:
                self._spare_batch = None  # its lists now belong to the store event
        if retry_release:
            device.free(retry_release)  # after the batch pinned them: the pin moves, never drops to zero between
        loads = self.loads
        meta = IDLE_STEP  # most decode steps: nothing to copy, no load in flight (one shared, frozen answer)
        disk = self.disk.take_batch() if self.disk is not None else None  # after this step's evictions
        if store is not None or step.preempted_request_ids or not loads.is_idle() or disk is not None:
            load = loads.assign_event() if loads.has_loads() else None
            flush = bool(step.preempted_request_ids)
            meta = StepMetadata(
                load=load, store=store, load_event_to_req_ids=loads.events_in_flight(), need_flush=flush, disk=disk
            )
        if self.observer is not None:
            if store is not None:
                self.observer.on_store_committed(store)
            self.observer.on_step(step, meta)
        return meta

    # ----- reports from the workers ------------------------------------------------------------------------

    def complete_stores(self, event_counts: Mapping[int, int]) -> None:
        """Count store completions per event (`{event_id: number of workers reporting}`); once `world_size`
        workers reported, register the device blocks' keys *as they are now* on the CPU blocks and release pins.
        Unknown event ids (e.g. stale after a reset) are ignored."""
        disk = self.disk
        if disk is None or self.config.disk_write_policy != "write-through":
            self.stores.complete(event_counts)
            return
        transfers = [(e, self.stores.transfer(e)) for e in event_counts]
        self.stores.complete(event_counts)
        for event_id, transfer in transfers:
            if transfer is not None and not self.stores.is_pending(event_id):  # cached now: write it through
                disk.write_through(transfer.cpu_ids)

    def fail_stores(self, event_ids: Iterable[int]) -> None:
        """A worker failed a store: release its pins now and never let its keys become hits."""
        self.stores.fail(event_ids)

    def attach_store(self, num_blocks: int) -> None:
        """A shared store of `num_blocks` below the disk tier, modelled (the dry engine): lookups span it too."""
        if self.disk is None:
            raise ValueError("attach_store: the store goes below a disk tier (num_disk_blocks)")
        self.disk.attach_store(num_blocks)
        self._tier_lookup = self.disk.lookup(self._lookup, self.in_flight)

    def complete_disk(self, event_counts: Mapping[int, int], failed_host_block_ids: Iterable[int] = ()) -> None:
        """Disk events settled (`{event_id: workers reporting}`) and promoted blocks whose read failed
        (`DiskCascade.complete`); nothing without a disk tier."""
        if self.disk is not None:
            self.disk.complete(event_counts, frozenset(failed_host_block_ids))

    def complete_loads(self, request_ids: Iterable[str]) -> None:
        """Loads that landed on the device (the engine's `finished_recving`): release their pins."""
        self.loads.complete(request_ids)

    def fail_loads(self, request_ids: Iterable[str]) -> tuple[int, ...]:
        """Loads that failed: release pins, drop the CPU blocks' keys (their data is suspect) and return the
        device block ids the engine must recompute (also kept for `take_load_failures`)."""
        return self.loads.fail(request_ids)

    def fail_load_events(self, event_ids: Iterable[int]) -> tuple[int, ...]:
        """`fail_loads` for every request of these load events."""
        return self.loads.fail_events(event_ids)

    def take_load_failures(self) -> dict[str, tuple[int, ...]]:
        """Requests whose load failed or was declined since the last call, with the device blocks to recompute."""
        return self.loads.take_failures()

    # ----- departures and reset ----------------------------------------------------------------------------

    def request_finished(self, request: RequestView, block_ids: Sequence[Sequence[int]] | None = None) -> None:
        """The request leaves (before the engine frees its blocks; `block_ids[g]`: its final table of group g).

        Queues the finish-time flush (confirmed blocks not yet stored, plus the full-attention prompt-tail block),
        releases a pending lookup pin, and cleans up now or, if a copy is in flight, when it completes."""
        self.loads.request_finished(request.request_id)
        self.parking.release(request.request_id)
        if self.disk is not None:
            self.disk.forget_request(request.request_id)
        self.request_stores.finish(request, block_ids, self.finish_flush)

    def reset(self) -> bool:
        """Drop the CPU tier's contents. In-flight copies are abandoned (their pins go when they complete, nothing
        is cached); event ids stay monotonic. Returns False if anything was abandoned, else the pool's reset."""
        abandoned = self.stores.reset()
        self.finish_flush.discard()
        self._spare_batch = None
        self.device.free(self._handoffs.clear())
        self.in_flight.clear()
        abandoned = self.loads.reset() or abandoned
        self.request_stores.clear()
        self._lazy_cursor = None
        self.boundary_stats = BoundaryStoreStats()
        self.event_log.emit(TierReset(abandoned=abandoned))
        if abandoned or self.stores.has_abandoned() or self.loads.has_abandoned():
            return False
        done = self.cpu.reset()
        if done and self.disk is not None:
            self.disk.clear()
        self.event_log.drain_pool()
        return done

    # ----- pending work, events and views ------------------------------------------------------------------

    def has_pending_work(self) -> bool:
        """True while stores are queued, in flight or abandoned, or hand-offs wait for room: keep stepping."""
        disk = self.disk is not None and self.disk.has_pending()
        return bool(self.finish_flush.has_pending() or self.stores.has_work() or self._handoffs.waiting or disk)

    def pending_work(self) -> dict[str, int]:
        """Pending work, counted, for a drain that gives up to say what it waited for. The first four are what
        `has_pending_work` waits for; loads in flight keep their requests (and so the engine) busy instead."""
        return {
            "finish_store_blocks_queued": len(self.finish_flush.queued_device_blocks()),
            "store_events_in_flight": self.stores.num_in_flight(),
            "store_events_abandoned": self.stores.num_abandoned(),
            "handoffs_waiting": len(self._handoffs.waiting),
            "load_events_in_flight": len(self.loads.events_in_flight()),
            "disk_moves_pending": int(self.disk is not None and self.disk.has_pending()),
        }

    def take_kv_events(self) -> list[CacheEvent]:
        """Drain KV-cache events (only recorded with `enable_kv_events`)."""
        return self.event_log.take_kv()

    def take_step_events(self) -> list[ManagerEvent]:
        """Drain the visualizer's buffer of events (`toolkit.core.events`; `to_json()` for the widget)."""
        return self.event_log.take_steps()

    def held_cpu_blocks(self) -> list[int]:
        """CPU blocks the manager pins now, once per pin (lookup hits, loads, store events)."""
        return self.loads.held_cpu_blocks() + self.stores.held_cpu_blocks()

    def held_device_blocks(self) -> list[int]:
        """Device blocks the manager pins now, once per pin (loads, store events, finish flush, retry queue)."""
        held = self.loads.held_device_blocks() + self.stores.held_device_blocks()
        held += self.finish_flush.queued_device_blocks()
        held.extend(entry.handoff.device_block_id for entry in self._handoffs.waiting)
        return held

    def num_pinned_device_blocks(self) -> int:
        """Device pins the manager holds now (stores, loads, retry queue); 0 when idle."""
        return len(self.held_device_blocks())

    @property
    def lazy_cursor(self) -> int | None:
        """Where the lazy free-queue walk resumes (None: from the queue's head)."""
        return self._lazy_cursor

    def usage(self) -> tuple[GroupUsage, ...]:
        """CPU usage per group: which group's blocks fill the pool."""
        return manager_views.usage(self)

    def snapshot(self) -> dict[str, Any]:
        """A JSON-ready view of the CPU tier for the visualizer (schema: `manager_views.snapshot`)."""
        return manager_views.snapshot(self)


def _groups_on_disk(geometry: HybridGeometry, placement: str) -> frozenset[int] | None:
    """`OffloadConfig.disk_groups` as the group ids whose blocks go to disk; None: every group."""
    if placement == "all":
        return None
    mamba = placement == "mamba"
    return frozenset(i for i, group in enumerate(geometry.groups) if group.kind.is_mamba == mamba)
