"""The connector's worker role: vLLM's worker hooks driving `toolkit.copy.OffloadWorker`.

Hook order in vLLM's model runner (per step): `handle_preemptions`, `bind_connector_metadata`, forward (with
`start_load_kv` before it only when a request has synchronous loads; ours are asynchronous, so after it),
`wait_for_save`, `get_transfer_results`, `get_block_ids_with_load_errors`, `get_kv_connector_stats`,
`build_connector_worker_meta`, `clear_connector_metadata`. Copies never block the step: loads and stores are
submitted, and completions are reported by later calls.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Iterable

from toolkit.core.metadata import StepMetadata, TransferBatch
from toolkit.vllm.config import ConnectorConfig, available_host_bytes, check_host_memory, host_blocks_for
from toolkit.vllm.messages import HybridConnectorMetadata, HybridWorkerMetadata

if TYPE_CHECKING:
    from vllm.v1.kv_cache_interface import KVCacheConfig  # Any to mypy: vLLM is not analysed
    from vllm.v1.outputs import KVConnectorOutput

    from toolkit.copy import OffloadWorker
    from toolkit.copy.regions import KVCaches
    from toolkit.vllm.disk_store import DiskSettings
    from toolkit.vllm.disk_worker import DiskMover

_BACKEND_NAMES = {"auto": "auto", "cpu": "cpu", "cuda": "cuda-dma", "triton": "triton"}


class WorkerSide:
    def __init__(
        self,
        kv_cache_config: KVCacheConfig,
        config: ConnectorConfig,
        *,
        ranks_on_host: int = 1,
        disk: DiskSettings | None = None,
    ) -> None:
        self.kv_cache_config = kv_cache_config
        self.disk_settings = disk
        self.disk: DiskMover | None = None
        self._deferred_loads: deque[TransferBatch] = deque()  # waiting on promotions, in event order
        self.config = config
        self.num_host_blocks = host_blocks_for(kv_cache_config, config.cpu_bytes_per_rank)
        # Only the worker role allocates the tier (the scheduler side of a dry run may model any size).
        check_host_memory(config.cpu_bytes_per_rank, ranks_on_host, available_host_bytes())
        self.single_group = len(kv_cache_config.kv_cache_groups) == 1
        self.worker: OffloadWorker | None = None
        self._meta: HybridConnectorMetadata | None = None
        self._event_reqs: dict[int, tuple[str, ...]] = {}
        self._load_blocks: dict[int, tuple[int, ...]] = {}
        self._started: dict[tuple[str, int], tuple[float, int]] = {}
        self._pending_meta = HybridWorkerMetadata()
        self._load_errors: set[int] = set()
        self._declined: set[str] = set()
        self.copy_seconds = {"load": 0.0, "store": 0.0}
        self.copy_bytes = {"load": 0, "store": 0}
        self.num_failed_load_events = 0
        self._kv_caches: KVCaches | None = None  # what `restore` registers again
        # Host blocks whose bytes this worker holds, once the tier was dropped (`unregister`); None: every block the
        # scheduler side believes stored is here. A load reading any other block fails, so the engine recomputes.
        self._valid_host_blocks: set[int] | None = None
        self._failed_unbacked: list[int] = []  # load events failed without a copy (no host bytes behind them)

    def register_kv_caches(self, kv_caches: KVCaches) -> None:
        self._kv_caches = kv_caches
        from toolkit.copy import OffloadWorker, WorkerConfig
        from toolkit.vllm.regions import placements_from_kv_cache_config

        placements = placements_from_kv_cache_config(self.kv_cache_config)
        worker_config = WorkerConfig(
            num_host_blocks=self.num_host_blocks,
            backend=_BACKEND_NAMES[self.config.copy_backend],
            dma_descriptors_per_call=self.config.copy_descriptors_per_call or None,
            # Only the connector config switches faults on in vLLM: never the environment (KVTK_FAULT_INJECT is for
            # the engine-less copy tests).
            fault_inject=self.config.fault_injection,
            rank=worker_rank(),
        )
        worker = self.worker = OffloadWorker.from_placements(
            placements=placements, kv_caches=kv_caches, config=worker_config
        )
        self._row_bytes = sum(r.row_bytes for r in worker.regions)
        if self.disk_settings is not None:
            self.disk = self._open_disk(worker, self.disk_settings)

    def _open_disk(self, worker: OffloadWorker, settings: DiskSettings) -> DiskMover:
        """This rank's tier below the CPU tier: its disk store (reused when its identity matches, else discarded with
        one line naming the field), the shared store, or the disk with the shared store below it."""
        from toolkit.tiers.disk import DiskTier, DiskTierConfig, PoolSpec
        from toolkit.tiers.lower import LowerTier
        from toolkit.vllm.disk_store import POOL, rank_folder, slot_capacity_bytes
        from toolkit.vllm.disk_worker import DiskMover

        payload = sum(m.view.shape[1] for m in worker.host.mirrors)
        tier: LowerTier | None = None
        if self.config.disk_path:
            pool = PoolSpec(POOL, payload, slot_capacity_bytes(settings.num_blocks, payload))
            folder = rank_folder(self.config, settings.identity.tp_rank)
            tier = DiskTier.open(DiskTierConfig(folder=folder, identity=settings.identity, pools=(pool,)))
        if self.config.shared_store_master:  # docs/shared-store.md
            from toolkit.vllm.shared_store import connect_tier

            shared = connect_tier(self.config.shared_store_master, settings.identity, payload)
            if tier is None:
                tier = shared
            else:
                from toolkit.tiers.cascade import CascadeTier

                tier = CascadeTier(tier, shared)
        assert tier is not None  # disk_settings refuses a disk tier with neither
        return DiskMover(tier, POOL, [m.view for m in worker.host.mirrors])

    # ----- per step ---------------------------------------------------------------------------------------

    def bind(self, meta: HybridConnectorMetadata) -> None:
        self._meta = meta
        self._event_reqs.update(meta.step.load_event_to_req_ids)
        self._declined.update(meta.declined_req_ids)
        if meta.step.need_flush and self.worker is not None:
            self.worker.flush()
        if meta.step.disk is not None:
            if self.disk is not None:  # before any copy of this step: the demoted blocks may be reused by it
                self.disk.apply(meta.step.disk)
            elif meta.step.disk.promote_host_block_ids:  # no store behind the CPU tier: every promotion fails
                self._pending_meta.disk_settled_events[meta.step.disk.event_id] = 1
                self._pending_meta.disk_failed_host_blocks.update(meta.step.disk.promote_host_block_ids)

    def start_load(self) -> None:
        step = self._step()
        if step is None or step.load is None:
            return
        from toolkit.copy import Direction

        self._load_blocks[step.load.event_id] = step.load.device_block_ids
        valid = self._valid_host_blocks
        if self.worker is None or (valid is not None and not valid.issuperset(step.load.host_block_ids)):
            # The host bytes are gone (unregistered, or dropped since the scheduler side stored them): reported as
            # a failed load, never copied and never left waiting, so the engine recomputes.
            self._failed_unbacked.append(step.load.event_id)
            return
        if self._deferred_loads or (self.disk is not None and self.disk.status(step.load.host_block_ids) != "ready"):
            self._deferred_loads.append(step.load)  # its host blocks are still arriving from disk (never waited on)
            return
        self._started[("load", step.load.event_id)] = (time.perf_counter(), step.load.num_blocks)
        self.worker.start(Direction.LOAD, step.load)

    def _start_deferred_loads(self) -> None:
        """Start the waiting loads whose promotions landed, in event order; a load needing a failed read fails."""
        from toolkit.copy import Direction

        disk, deferred = self.disk, self._deferred_loads
        while deferred and self.worker is not None:
            load = deferred[0]
            state = disk.status(load.host_block_ids) if disk is not None else "ready"
            if state == "pending":
                return
            deferred.popleft()
            if state == "failed":
                self._failed_unbacked.append(load.event_id)
                continue
            self._started[("load", load.event_id)] = (time.perf_counter(), load.num_blocks)
            self.worker.start(Direction.LOAD, load)

    def start_store(self) -> None:
        step = self._step()
        if step is None or step.store is None:
            return
        if self.worker is None:
            self._pending_meta.failed_store_events.add(step.store.event_id)  # nowhere to copy to: never a hit
            return
        from toolkit.copy import Direction

        if self._valid_host_blocks is not None:
            self._valid_host_blocks.update(step.store.host_block_ids)  # a failed store's keys are dropped anyway
        if self.disk is not None:
            self.disk.forget(step.store.host_block_ids)  # written anew: a failed read into them no longer matters

        self._started[("store", step.store.event_id)] = (time.perf_counter(), step.store.num_blocks)
        self.worker.start(Direction.STORE, step.store)

    def transfer_results(self) -> tuple[set[str], set[str]]:
        """(finished receives, failed receives) since the last call; failed ones are in both sets."""
        finished: set[str] = set(self._declined)
        failed: set[str] = set(self._declined)
        self._declined.clear()
        if self.disk is not None:
            self.disk.poll()
            settled, failed_blocks = self.disk.take_report()
            self._pending_meta.disk_settled_events.update(settled)
            self._pending_meta.disk_failed_host_blocks.update(failed_blocks)
            self._pending_meta.unheld_keys.update(self.disk.take_unheld_keys())
            self._pending_meta.lower_tier = self.disk.take_tier_counts(into=self._pending_meta.lower_tier)
        if self._deferred_loads:
            self._start_deferred_loads()
        for event_id in self._failed_unbacked:
            req_ids = self._event_reqs.pop(event_id, ())
            self._fail_load_event(event_id, req_ids, finished, failed)
        self._failed_unbacked.clear()
        if self.worker is None:
            return finished, failed
        report = self.worker.collect()
        now = time.perf_counter()
        for event_id in report.completed_store_event_ids:
            self._pending_meta.completed_store_events[event_id] = 1
            self._account("store", event_id, now)
        for event_id in report.failed_store_event_ids:
            self._pending_meta.failed_store_events.add(event_id)
            self._started.pop(("store", event_id), None)
        for event_id in report.completed_load_event_ids:
            finished.update(self._event_reqs.pop(event_id, ()))
            self._load_blocks.pop(event_id, None)
            self._account("load", event_id, now)
        for event_id in report.failed_load_event_ids:
            self._fail_load_event(event_id, self._event_reqs.pop(event_id, ()), finished, failed)
        return finished, failed

    def _fail_load_event(self, event_id: int, req_ids: Iterable[str], finished: set[str], failed: set[str]) -> None:
        finished.update(req_ids)
        self.num_failed_load_events += 1
        self._pending_meta.failed_load_events.add(event_id)
        self._started.pop(("load", event_id), None)
        blocks = self._load_blocks.pop(event_id, ())
        if self.single_group:
            self._load_errors.update(blocks)  # vLLM keeps the valid prefix of single-group tables
        else:
            failed.update(req_ids)  # block ids are per group here: report the requests

    def set_fault_injection(self, spec: str) -> None:
        """Testing: replace the fault-injection spec of a running worker (`toolkit.copy.faults` syntax)."""
        from toolkit.copy import FaultSpec

        if self.worker is not None:
            self.worker.set_faults(FaultSpec.parse(spec))

    def pending_declined_ids(self) -> frozenset[str]:
        """Declined loads bound but not yet reported (the next `transfer_results` reports them failed)."""
        return frozenset(self._declined)

    def num_load_events_tracked(self) -> int:
        """Load events whose requests are not yet reported finished or failed."""
        return len(self._event_reqs)

    def take_load_errors(self) -> set[int]:
        errors, self._load_errors = self._load_errors, set()
        return errors

    def take_worker_meta(self) -> HybridWorkerMetadata | None:
        meta = self._pending_meta
        if not (
            meta.completed_store_events
            or meta.failed_store_events
            or meta.failed_load_events
            or meta.bytes_loaded
            or meta.bytes_stored
            or meta.disk_settled_events
            or meta.disk_failed_host_blocks
            or meta.lower_tier is not None
            or meta.unheld_keys
        ):
            return None
        self._pending_meta = HybridWorkerMetadata()
        return meta

    def clear(self) -> None:
        self._meta = None

    def flush(self) -> None:
        if self.worker is not None:
            self.worker.flush()

    def close(self) -> None:
        if self.disk is not None:
            self.disk.close()  # its staged writes finish: a clean shutdown keeps them for a restart
            self.disk = None
        if self.worker is not None:
            self.worker.close()
            self.worker = None

    def unregister(self) -> None:
        """vLLM's `unregister_kv_caches()` (sleep mode on 0.33, also weight updates on 0.34; transfers are drained):
        the copy worker and its host mirrors go. What the scheduler side still counts as stored is gone with them,
        and after a weight update it would be KV of the old weights: loads of it fail from now on (the engine
        recomputes), and only blocks stored after `restore` are served again."""
        self.close()
        self._valid_host_blocks = set()

    def restore(self, kv_caches: KVCaches | None = None) -> None:
        """vLLM's `restore_kv_caches()`: register the same device KV again (0.33 and 0.34 pass no argument; the
        tensors keep their addresses across the release). Idempotent, as vLLM asks."""
        caches = kv_caches if kv_caches is not None else self._kv_caches
        if self.worker is None and caches is not None:
            self.register_kv_caches(caches)

    # ----- internals -----------------------------------------------------------------------------------------

    def _step(self) -> StepMetadata | None:
        return self._meta.step if self._meta is not None else None

    def _account(self, direction: str, event_id: int, now: float) -> None:
        started = self._started.pop((direction, event_id), None)
        if started is None:
            return
        seconds, num_blocks = now - started[0], started[1]
        nbytes = num_blocks * self._row_bytes
        self.copy_seconds[direction] += seconds
        self.copy_bytes[direction] += nbytes
        if direction == "load":
            self._pending_meta.bytes_loaded += nbytes
        else:
            self._pending_meta.bytes_stored += nbytes


def worker_rank() -> int:
    """This worker's rank in vLLM's world group (0 outside a distributed set-up, e.g. the engine-less harness)."""
    try:
        from vllm.distributed.parallel_state import get_world_group

        return int(get_world_group().rank_in_group)
    except (AssertionError, ImportError, AttributeError):  # no world group initialised
        return 0


def instant_connector_output(meta: HybridConnectorMetadata) -> KVConnectorOutput:
    """The engine-less harness's "instant" worker: every transfer of the step completes at once, nothing moves."""
    from vllm.v1.outputs import KVConnectorOutput

    step = meta.step
    finished = set(meta.declined_req_ids)
    if step.load is not None:
        finished.update(step.load_event_to_req_ids.get(step.load.event_id, ()))
    worker_meta = None
    if step.store is not None or step.disk is not None:
        worker_meta = HybridWorkerMetadata(
            completed_store_events={step.store.event_id: 1} if step.store is not None else {},
            disk_settled_events={step.disk.event_id: 1} if step.disk is not None else {},
        )
    return KVConnectorOutput(
        finished_recving=finished or None,
        failed_recving=set(meta.declined_req_ids),
        kv_connector_worker_meta=worker_meta,
    )
