"""vLLM's own SimpleCPU connector as a baseline that runs on CPU.

vLLM's `SimpleCPUOffloadConnector` cannot start its worker on CPU (its copy engine is CUDA-only), but its scheduler
side (`vllm.v1.simple_kv_offload.manager`) is plain Python. `SimpleCPUReferenceConnector` keeps vLLM's scheduler
side untouched and replaces the worker with plain torch row copies between the device KV regions and host mirrors,
done synchronously inside the hooks. Use it as the reference in differential tests and benchmarks:

    kv_transfer_config=toolkit.vllm.transfer_config.kv_transfer_config("simplecpu", {"cpu_bytes_to_use": ...})
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1, KVConnectorRole
from vllm.distributed.kv_transfer.kv_connector.v1.simple_cpu_offload_connector import (
    DEFAULT_CPU_CAPACITY_BYTES,
    SimpleCPUOffloadConnector,
)
from vllm.v1.simple_kv_offload.metadata import SimpleCPUOffloadMetadata, SimpleCPUOffloadWorkerMetadata

from toolkit.copy.regions import discover_regions
from toolkit.vllm.regions import placements_from_kv_cache_config

if TYPE_CHECKING:  # vLLM's types, for the reader (mypy sees them as Any: vLLM is not analysed)
    from vllm.config import VllmConfig
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorMetadata
    from vllm.v1.kv_cache_interface import KVCacheConfig


class SimpleCPUReferenceConnector(SimpleCPUOffloadConnector):  # type: ignore[misc]  # vLLM's base is Any to mypy
    """vLLM's SimpleCPU scheduler side with a synchronous torch-copy worker."""

    def __init__(self, vllm_config: VllmConfig, role: KVConnectorRole, kv_cache_config: KVCacheConfig) -> None:
        if role == KVConnectorRole.SCHEDULER:
            super().__init__(vllm_config, role, kv_cache_config)
            return
        KVConnectorBase_V1.__init__(self, vllm_config, role, kv_cache_config)
        self.scheduler_manager = None
        self.worker_handler = None
        extra = self._kv_transfer_config.kv_connector_extra_config or {}
        world = vllm_config.parallel_config.world_size
        capacity = int(extra.get("cpu_bytes_to_use", DEFAULT_CPU_CAPACITY_BYTES)) // world
        capacity = int(extra.get("cpu_bytes_to_use_per_rank", capacity))
        # Same formula as the scheduler side's CPU pool, so block ids agree.
        total = kv_cache_config.kv_cache_tensors[0].size
        self._num_host_blocks = max(1, kv_cache_config.num_blocks * capacity // total)
        self._regions: list[torch.Tensor] | None = None  # [num_blocks, row_bytes] int8 device views
        self._host: list[torch.Tensor] = []
        self._meta: SimpleCPUOffloadMetadata | None = None
        self._done_loads: set[int] = set()
        self._done_stores: dict[int, int] = {}

    # ----- worker role ----------------------------------------------------------------------------------------

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        if self._role != KVConnectorRole.WORKER:
            return
        placements = placements_from_kv_cache_config(self._kv_cache_config)
        self._regions = [r.view for r in discover_regions(placements, kv_caches)]
        self._host = [torch.zeros((self._num_host_blocks, r.shape[1]), dtype=torch.int8) for r in self._regions]

    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        KVConnectorBase_V1.bind_connector_metadata(self, connector_metadata)
        if self._role == KVConnectorRole.WORKER:
            self._meta = connector_metadata

    def clear_connector_metadata(self) -> None:
        KVConnectorBase_V1.clear_connector_metadata(self)
        self._meta = None

    def handle_preemptions(self, kv_connector_metadata: KVConnectorMetadata) -> None:
        return  # every copy completes inside its hook

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        meta = self._meta
        if self._role != KVConnectorRole.WORKER or meta is None or meta.load_event < 0:
            return
        if self._regions is not None and meta.load_gpu_blocks:
            for rows, mirror in zip(self._regions, self._host):
                _copy_rows(dst=rows, dst_ids=meta.load_gpu_blocks, src=mirror, src_ids=meta.load_cpu_blocks)
        self._done_loads.add(meta.load_event)

    def wait_for_save(self) -> None:
        meta = self._meta
        if self._role != KVConnectorRole.WORKER or meta is None or meta.store_event < 0:
            return
        if self._regions is not None and meta.store_gpu_blocks:
            for rows, mirror in zip(self._regions, self._host):
                _copy_rows(dst=mirror, dst_ids=meta.store_cpu_blocks, src=rows, src_ids=meta.store_gpu_blocks)
        self._done_stores[meta.store_event] = 1

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        if self._role != KVConnectorRole.WORKER:
            finished: tuple[set[str] | None, set[str] | None] = super().get_finished(finished_req_ids)
            return finished
        meta = self._meta
        if not self._done_loads or meta is None:
            return None, None
        recving: set[str] = set()
        for event in list(self._done_loads):
            req_ids = meta.load_event_to_reqs.get(event)
            if req_ids is not None:
                recving.update(req_ids)
                self._done_loads.discard(event)
        return None, recving or None

    def build_connector_worker_meta(self) -> SimpleCPUOffloadWorkerMetadata | None:
        if self._role != KVConnectorRole.WORKER:
            return super().build_connector_worker_meta()
        if not self._done_stores:
            return None
        done, self._done_stores = self._done_stores, {}
        return SimpleCPUOffloadWorkerMetadata(completed_store_events=done)

    def get_kv_connector_stats(self) -> Any:  # vLLM's KVConnectorStats or None
        if self._role == KVConnectorRole.WORKER:
            return None
        return super().get_kv_connector_stats()

    def shutdown(self) -> None:
        self._host = []


def _copy_rows(*, dst: torch.Tensor, dst_ids: Sequence[int], src: torch.Tensor, src_ids: Sequence[int]) -> None:
    """Row-wise block copy, `dst[dst_ids[i]] = src[src_ids[i]]`: the reference worker's whole copy path."""
    dst.index_copy_(
        0, torch.tensor(dst_ids, dtype=torch.long), src.index_select(0, torch.tensor(src_ids, dtype=torch.long))
    )
