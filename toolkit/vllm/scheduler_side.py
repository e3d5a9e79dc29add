"""The connector's scheduler role: vLLM's scheduler hooks feeding `toolkit.core.OffloadManager`.

vLLM objects are adapted, never copied: `Request` already is a `RequestView`, `BlockPool` is wrapped by
`VllmDevicePool`, `KVCacheConfig` becomes a `HybridGeometry`, and each `SchedulerOutput` (with the Mamba boundary
hand-offs vLLM publishes in `kv_connector_block_state.boundary_state_offloads`) becomes a `StepInput`.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from toolkit.core.hints.book import HintBook
from toolkit.core.hints.schema import parse_envelope
from toolkit.core.load.deferral import Deferred
from toolkit.core.manager import OffloadManager
from toolkit.core.metadata import IDLE_STEP
from toolkit.core.requests import RunningColumns, ScheduledRequest, StepInput
from toolkit.vllm.adapters import VllmDevicePool
from toolkit.vllm.config import ConnectorConfig, host_blocks_for
from toolkit.vllm.engine_settings import disk_blocks_for, geometry_of, manager_settings
from toolkit.vllm.hints import envelope_builtins
from toolkit.vllm.messages import HybridConnectorMetadata, HybridWorkerMetadata
from toolkit.vllm.metrics import HybridOffloadStats, stats_delta
from toolkit.vllm.tier_counts import LowerTierBook

if TYPE_CHECKING:  # vLLM's types, for the reader (mypy sees them as Any: vLLM is not analysed)
    from vllm.config import VllmConfig
    from vllm.v1.core.block_pool import BlockPool
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request

# vLLM's boundary hand-offs: per request, (group, block, boundary) triples.
_Handoffs = Mapping[str, Sequence[tuple[int, int, int]]]
_NO_HANDOFFS: _Handoffs = {}  # shared, never mutated: most steps publish none
_NO_IDS: frozenset[str] = frozenset()
_NOT_DELAYED = (False, None)  # request_finished's answer: the device blocks may be freed now, no transfer params
_IDLE_MESSAGE = HybridConnectorMetadata(step=IDLE_STEP)  # a step with nothing to copy and no load in flight


class SchedulerSide:
    def __init__(self, vllm_config: VllmConfig, kv_cache_config: KVCacheConfig, config: ConnectorConfig) -> None:
        self.config = config
        self.kv_cache_config = kv_cache_config
        self.geometry, self.scheduler_block_tokens = geometry_of(vllm_config, kv_cache_config, config)
        self.num_cpu_blocks = host_blocks_for(kv_cache_config, config.cpu_bytes_per_rank)
        self.manager_config = manager_settings(
            vllm_config, config, self.num_cpu_blocks, num_disk_blocks=disk_blocks_for(kv_cache_config, config)
        )
        self.manager: OffloadManager | None = None
        self._max_model_len = vllm_config.model_config.max_model_len if vllm_config.model_config else 1 << 62
        self._requests: dict[str, Request] = {}
        self._declined: list[str] = []
        # The one set of counts: these transfer counters, plus the manager's `miss_stats` (lookups) and
        # `boundary_stats` (hand-offs). `counts()` reads them all; vLLM's interval stats (logged, Prometheus) are
        # deltas of `counts()` between reports (`metrics.stats_delta`), results read `stats_snapshot()`.
        self.counters: Counter[str] = Counter()
        self._usage: list[dict[str, Any]] | None = None
        self._usage_at = 0.0
        self._reported_counts: dict[str, Any] = {}  # `counts()` at the last reported interval
        self._stats_due_at = 0.0  # time.monotonic() at which the interval is reported next
        # Hand-off outcomes of the manager's stats a reset replaced.
        self._boundary_before_reset: Counter[str] = Counter()
        self._last_usage: dict[int, int] | None = None
        self._geometry_reported = False
        self.hints: HintBook | None = None  # the orchestrator's KV hints (`request.kv_hints`), made with the pool
        from toolkit.vllm.disk_store import keys_kept

        self._disk_kept = keys_kept(vllm_config, kv_cache_config, config)  # a restart's disk tier, for the manager
        from toolkit.vllm.shared_store import scheduler_lookups

        # Another engine's blocks in the shared store are learnt by asking (None without `shared_store_url`).
        self.store_lookups = scheduler_lookups(vllm_config, kv_cache_config, config, self.geometry)
        # The workers' reports of the tier below the CPU tier (tier_counts.py).
        self.lower_tier = LowerTierBook("shared" if config.shared_store_master and not config.disk_path else "disk")
        self._started_at = time.monotonic()  # the hint clock for hints that carry no `issued_at_s`

    # ----- binding ----------------------------------------------------------------------------------------

    def bind_block_pool(self, block_pool: BlockPool) -> OffloadManager:
        """Build the manager on vLLM's device block pool (before vLLM's first scheduler hook); returns it."""
        manager = self.manager = OffloadManager(
            geometry=self.geometry, device_pool=VllmDevicePool(block_pool), config=self.manager_config
        )
        self.hints = HintBook(manager.cpu, num_groups=len(self.geometry.groups))
        if manager.disk is not None and self._disk_kept:
            self.counters["disk_blocks_restored"] += manager.disk.index.restore(self._disk_kept)
        self._disk_kept = []
        return manager

    # ----- lookup and load ---------------------------------------------------------------------------------

    # The hooks below run only once `bind_block_pool` has built the manager and the parking (vLLM binds the block
    # pool before its first scheduling pass); each one's `assert` says so to the type checker.

    def matched_tokens(self, request: Request, num_computed_tokens: int) -> tuple[int | None, bool]:
        if request.request_id not in self._requests:
            self._new_request(request)
        self._requests[request.request_id] = request
        assert self.manager is not None
        if getattr(request, "skip_reading_external_kv", False):
            return 0, False  # a bounded prefix-cache read (vLLM 0.34: prompt logprobs, scoring)
        if num_computed_tokens % self.scheduler_block_tokens:
            # An external hit must start on a scheduler block; the local prefix still refreshes its CPU copy.
            self.manager.note_local_prefix(request.request_id, num_computed_tokens)
            return 0, False
        disk, lookups = self.manager.disk, self.store_lookups
        if lookups is not None and disk is not None:  # the shared store is asked first (never blocking the step)
            if lookups.waiting(
                request.request_id, request.block_hashes, num_computed_tokens, self.manager.cpu, disk.index
            ):
                return None, False
        # Counted in `miss_stats`; None: parking this load now could leave every parked request unable to continue
        # (core/load/parking.py), so vLLM keeps the request waiting and asks again next step, its hit pinned.
        final_tokens = self._final_tokens(request)
        hit_tokens = self.manager.lookup_for_load(request, num_computed_tokens, final_tokens=final_tokens)
        if isinstance(hit_tokens, Deferred):
            if hit_tokens is Deferred.DEVICE_POOL_TIGHT:  # CPU room for disk blocks: disk_lookups_waited_for_room
                self.counters["lookups_deferred_device_pool_tight"] += 1
            return None, False
        return hit_tokens, hit_tokens > 0

    def _new_request(self, request: Request) -> None:
        """A request seen for the first time (its first lookup): its KV hints, if it carries any, apply now."""
        raw = envelope_builtins(request)
        if raw is not None and self.hints is not None:
            now_s = time.monotonic() - self._started_at
            self.hints.on_request(request.request_id, request.block_hashes, parse_envelope(raw), now_s=now_s)

    def _final_tokens(self, request: Request) -> int:
        final: int = min(request.num_prompt_tokens + request.max_tokens, self._max_model_len)
        return final

    def after_alloc(self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int) -> None:
        self._requests[request.request_id] = request
        assert self.manager is not None
        block_ids = blocks.get_block_ids() if num_external_tokens else ()
        plan = self.manager.prepare_load(request, block_ids, num_external_tokens)  # parks the request's load
        if plan is None:
            return
        if plan.declined:
            self.counters["loads_declined"] += 1
            self._declined.append(request.request_id)
            return
        counters = self.counters
        num_blocks = len(plan.device_block_ids)
        counters["external_hit_tokens"] += plan.external_tokens
        if plan.external_tokens:
            # What fine-grained hits add: the tokens past the last scheduler-block boundary of the loaded hit.
            hit_end_tokens = plan.local_tokens + plan.external_tokens
            counters["fine_grained_hit_tokens"] += hit_end_tokens % self.scheduler_block_tokens
        counters["loads_planned"] += 1
        counters["load_blocks"] += num_blocks

    # ----- the step --------------------------------------------------------------------------------------

    def build_meta(self, so: SchedulerOutput) -> HybridConnectorMetadata:
        assert self.manager is not None
        cached = so.scheduled_cached_reqs
        running = None
        if cached.req_ids:
            # vLLM 0.34 dropped `resumed_req_ids` (a resumed request always comes back as a new-request entry); on
            # 0.32/0.33 it is empty under Model Runner V2 for the same reason, and lists V1's resumed requests.
            resumed = getattr(cached, "resumed_req_ids", None) or _NO_IDS
            running = RunningColumns(
                cached.req_ids, cached.new_block_ids, so.num_scheduled_tokens, resumed, self._requests
            )
        handoffs = _NO_HANDOFFS
        state = getattr(so, "kv_connector_block_state", None)
        if state is not None and state.boundary_state_offloads:
            # vLLM's entries already are plain (group, block, boundary) triples, `Handoff`'s field order: passed
            # through as they are (the core unpacks them positionally), no per-entry conversion every step.
            handoffs = state.boundary_state_offloads
        elif running is not None and not (so.scheduled_new_reqs or so.preempted_req_ids or self._declined):
            # Most decode steps: when no running request can have work, the step is idle and no StepInput is built
            # (finished ids only matter to hand-offs).
            if self.manager.skips_idle_step(running):
                return _IDLE_MESSAGE
        step = self.manager.build_step(self._step_input(so, running, handoffs))
        if self._declined:
            declined, self._declined = tuple(self._declined), []
        elif step is IDLE_STEP:
            return _IDLE_MESSAGE  # most decode steps: one shared message (nothing reads it but to look up)
        else:
            declined = ()
        if step.store is not None:
            self.counters["store_blocks"] += step.store.num_blocks
        if step.disk is not None:
            self.counters["disk_demote_blocks"] += len(step.disk.demote_keys)
            self.counters["disk_promote_blocks"] += len(step.disk.promote_keys)
        return HybridConnectorMetadata(step=step, declined_req_ids=declined)

    def _step_input(self, so: SchedulerOutput, running: RunningColumns | None, handoffs: _Handoffs) -> StepInput:
        # New requests as `ScheduledRequest`s (a few per step); running ones stay in vLLM's own columns, read in
        # place (`RunningColumns`); vLLM's block-id lists and id sets are passed through read-only (no copies).
        requests = self._requests
        num_scheduled = so.num_scheduled_tokens
        scheduled = []
        for new in so.scheduled_new_reqs:
            req_id = new.req_id
            request = requests.get(req_id)
            if request is not None:
                # A new-request entry carries the request's whole table. Under Model Runner V2 (the default of
                # official vLLM wherever Triton is installed, the only runner of 0.34) a preempted request comes
                # back as one, with a new table: marked resumed, the core drops what it knew of the old table and
                # its store cursors (a first admission has nothing to drop). Appending the new table to the stale
                # one would store from freed device blocks and skip the new blocks' prefix.
                scheduled.append(ScheduledRequest(request, new.block_ids, num_scheduled.get(req_id, 0), True))
        return StepInput(
            scheduled=scheduled,
            finished_request_ids=so.finished_req_ids,
            preempted_request_ids=so.preempted_req_ids or _NO_IDS,
            handoffs=handoffs,
            running=running,
        )

    def on_output(self, connector_output: KVConnectorOutput) -> None:
        meta = connector_output.kv_connector_worker_meta
        failed_recv = connector_output.failed_recving
        if meta is None and not failed_recv and not connector_output.finished_recving:
            return  # most steps: no copy finished or failed
        assert self.manager is not None
        failed_recv = set(failed_recv) if failed_recv else ()
        worker_meta = meta if isinstance(meta, HybridWorkerMetadata) else None
        if worker_meta is not None:
            if worker_meta.failed_load_events:
                # Single-group layouts report failed blocks, not requests: fail the events' requests here.
                self.counters["load_events_failed"] += len(worker_meta.failed_load_events)
                self.manager.fail_load_events(sorted(worker_meta.failed_load_events))
            self.counters["bytes_loaded"] += worker_meta.bytes_loaded
            self.counters["bytes_stored"] += worker_meta.bytes_stored
            if worker_meta.disk_settled_events or worker_meta.disk_failed_host_blocks:
                self.counters["disk_reads_failed"] += len(worker_meta.disk_failed_host_blocks)
                self.manager.complete_disk(worker_meta.disk_settled_events, worker_meta.disk_failed_host_blocks)
            if worker_meta.lower_tier is not None or worker_meta.unheld_keys:
                self.lower_tier.on_report(worker_meta.lower_tier, worker_meta.unheld_keys, self.manager.disk)
        if failed_recv:
            self.counters["loads_failed"] += len(failed_recv)
            self.manager.fail_loads(sorted(failed_recv))
        finished_recving = connector_output.finished_recving
        if finished_recving:
            # In id order, not the set's: completing a load releases its CPU pins, and the release order is the
            # eviction order, so a set's per-process hash order made hits depend on PYTHONHASHSEED.
            done = sorted(r for r in finished_recving if r not in failed_recv)
            if done:
                self.manager.complete_loads(done)
        # Stores after loads, as vLLM's connectors take a step's output: a finished load releases its CPU blocks
        # before a finished store's blocks join the tier, and the two orders give two different eviction queues.
        if worker_meta is not None:
            if worker_meta.failed_store_events:
                self.manager.fail_stores(worker_meta.failed_store_events)
                self.counters["stores_failed"] += len(worker_meta.failed_store_events)
            if worker_meta.completed_store_events:
                self.manager.complete_stores(worker_meta.completed_store_events)
        self.manager.take_load_failures()

    def finished(self, request: Request, block_ids: Sequence[Sequence[int]]) -> tuple[bool, None]:
        """`request_finished_all_groups`: the finish-time flush pins what it stores, so vLLM may free at once."""
        assert self.manager is not None
        if self.hints is not None:
            self.hints.on_finished(request.request_id, request.block_hashes)
        self.manager.request_finished(request, block_ids)
        if self.store_lookups is not None:
            self.store_lookups.forget(request.request_id)
        requests = self._requests
        requests.pop(request.request_id, None)
        if not requests:
            self._stats_due_at = 0.0  # the engine may go idle: report this interval at the next stats call
        return _NOT_DELAYED

    def close(self) -> None:
        """The shared store's lookup client (a clean shutdown; nothing else here holds a resource)."""
        if self.store_lookups is not None:
            self.store_lookups.close()
            self.store_lookups = None

    def reset(self) -> bool:
        assert self.manager is not None
        before = self.manager.boundary_stats
        done = self.manager.reset()
        if self.manager.boundary_stats is not before:  # a new stats object: carry the outcomes counted so far
            self._boundary_before_reset.update({k: v for k, v in vars(before).items() if k != "pending_retry"})
        self._stats_due_at = 0.0
        return done

    # ----- stats ------------------------------------------------------------------------------------------

    def take_interval_stats(self) -> HybridOffloadStats | None:
        """Stats since the last report, for vLLM's per-step `get_kv_connector_stats`.

        Reported at most every `stats_interval_s` (and at the next call after the last tracked request finished, or
        after a reset), else None: the counters keep accumulating in the interval, so nothing is lost, only batched.
        vLLM sends every returned stats object from the engine core to the front end; per-step payloads cost the
        scheduler loop and the IPC for counters that loggers and Prometheus read every few seconds anyway."""
        now = time.monotonic()
        if now < self._stats_due_at or self.manager is None:
            return None
        self._stats_due_at = now + self.config.stats_interval_s
        counts = self.counts()
        stats = stats_delta(counts, self._reported_counts)
        used = self.manager.cpu.num_used_blocks_per_group()  # O(groups): the gauges, not `usage()`'s pool walk
        if used != self._last_usage:
            self._last_usage = used
            block_bytes = self.geometry.block_bytes
            for group_id in range(len(self.geometry.groups)):
                blocks = used.get(group_id, 0)
                stats.set("cpu_used_blocks", blocks, group_id)
                stats.set("cpu_used_bytes", blocks * block_bytes, group_id)
        if not self._geometry_reported:
            # Once: a Prometheus gauge keeps its value, and these facts do not change while the engine runs.
            self._geometry_reported = True
            for fact, value in self.geometry_facts().items():
                stats.set("tier_geometry", value, fact)
        if stats.is_empty():
            return None
        self._reported_counts = counts
        return stats

    def num_tracked_requests(self) -> int:
        """Requests the lookup or allocation hooks saw that have not finished (a drained engine holds none)."""
        return len(self._requests)

    def geometry_facts(self) -> dict[str, int]:
        """What a client needs to size pressure traffic and bounds without access to this process."""
        geometry = self.geometry
        facts = {
            "hash_block_tokens": geometry.hash_tokens,
            "scheduler_block_tokens": self.scheduler_block_tokens,
            "blocks_per_scheduler_block": geometry.blocks_per_scheduler_block,
            "cpu_blocks": self.num_cpu_blocks,
            "cpu_block_bytes": geometry.block_bytes,
        }
        if self.manager is not None:
            facts["device_blocks"] = self.manager.parking.usable_device_blocks + 1  # + the null block
        return facts

    def counts(self) -> dict[str, Any]:
        """The cumulative counts (no pool walk): transfer counters, lookups by outcome and limiting group, hand-off
        outcomes (across resets; `pending_retry` is the current gauge)."""
        manager = self.manager
        if manager is None:
            return {"counters": dict(self.counters), "miss": {}, "boundary": {}}
        miss = manager.miss_stats
        boundary = dict(vars(manager.boundary_stats))
        for outcome, count in self._boundary_before_reset.items():
            boundary[outcome] = boundary.get(outcome, 0) + count
        counters = dict(self.counters, finish_stores_dropped=manager.finish_flush.dropped_blocks)
        if manager.disk is not None:  # lookups asked again for CPU blocks to promote into (also in the deferred ones)
            counters["disk_lookups_waited_for_room"] = manager.disk.lookups_waited_for_room
        if self.store_lookups is not None:
            counters.update(self.store_lookups.counts.as_counters())
        if self.lower_tier.unheld_dropped:  # writes the tier below did not keep, dropped from the index
            counters["disk_unheld_dropped"] = self.lower_tier.unheld_dropped
        return {
            "counters": counters,
            # What the tier holds and how the fine-grained-only stores fared (`CpuBlockPool.low_counts`).
            "tier": {
                "stored_blocks_by_source": dict(manager.stores.stored_blocks_by_source),
                "fine_only_blocks": dict(manager.cpu.low_counts),
            },
            "miss": {
                "by_reason": dict(miss.lookups_by_reason),
                "by_group": miss.by_group(),
                "num_lookups": miss.num_lookups,
                "num_hit_tokens": miss.num_hit_tokens,
                "num_missed_tokens": miss.num_missed_tokens,
            },
            "boundary": boundary,
            "hints": self.hint_counts(),
            # Without a tier below the CPU tier nothing reports to the book: no copy of its zeros every interval.
            "lower_tier": self.lower_tier.snapshot() if manager.disk is not None else None,
            "lower_tier_held_blocks": len(manager.disk.index) if manager.disk is not None else None,
            "lower_tier_held_by_group": self.lower_tier.held_by_group(manager.disk.index) if manager.disk else (),
        }

    def hint_counts(self) -> dict[str, Any]:
        """What the KV hints did (`HintStats`) and the hint segments now, with retained bytes per rank."""
        if self.hints is None or not self.hints.stats.received:
            return {}  # no hint yet: nothing to report (and no gauge keeps an idle interval's stats non-empty)
        gauges = self.hints.gauges()
        gauges["retained_free_bytes"] = gauges["retained_free_blocks"] * self.geometry.block_bytes
        return {**self.hints.stats.as_dict(), **gauges}

    def stats_snapshot(self, *, usage_every_s: float = 0.0) -> dict[str, Any]:
        """Cumulative counters. CPU usage per group walks the pool, so with `usage_every_s` it is recomputed at
        most that often (vLLM asks for stats every step)."""
        manager = self.manager
        now = time.monotonic()
        if manager is not None and (self._usage is None or now - self._usage_at >= usage_every_s):
            self._usage = [
                {"group_id": u.group_id, "kind": u.kind, "used_blocks": u.num_used_blocks, "used_bytes": u.used_bytes}
                for u in manager.usage()
            ]
            self._usage_at = now
        return {**self.counts(), "usage": self._usage or [], "num_cpu_blocks": self.num_cpu_blocks}
