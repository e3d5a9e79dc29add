"""What stands in for the model runner's connector calls in the harness, and the loads a step's metadata carries.

- `drive_worker`: the connector's real worker role, run in-process over a fake KV allocation (bytes really move);
- `instant_output`: no worker; every transfer in the step's metadata completes at the end of the step.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Any, Iterable, Protocol

if TYPE_CHECKING:
    from toolkit.vllm.messages import HybridConnectorMetadata


class Harness(Protocol):
    """What these read of the harness (`driver.Harness`, which imports this module): its ranks and scheduler."""

    @property
    def num_ranks(self) -> int: ...

    @property
    def scheduler(self) -> Any: ...


def drive_worker(worker: Any, output: Any) -> Any:
    """The model runner's connector sequence for one step (no forward): bind, load, save, collect, clear."""
    from vllm.v1.outputs import KVConnectorOutput

    meta = output.kv_connector_metadata
    worker.handle_preemptions(meta)
    worker.bind_connector_metadata(meta)
    worker.start_load_kv(None)
    worker.wait_for_save()
    results = worker.get_transfer_results(output.finished_req_ids)
    kv_output = KVConnectorOutput(
        finished_sending=results.finished_sending or None,
        finished_recving=results.finished_recving or None,
        failed_recving=set(results.failed_recving),
        invalid_block_ids=worker.get_block_ids_with_load_errors(),
        kv_connector_stats=worker.get_kv_connector_stats(),
        kv_connector_worker_meta=worker.build_connector_worker_meta(),
    )
    worker.clear_connector_metadata()
    return kv_output


def instant_output(meta: Any, finished_req_ids: Iterable[str], harness: Harness | None = None) -> Any:
    """Complete every transfer of the step at once, without a worker (the dry path).

    Every rank of the modelled engine (`parallel_config.world_size` of the harness's config) reports its store
    completions; they are summed with the metadata's own `aggregate`, as vLLM's output aggregator does, since the
    connectors count a store done when all ranks have reported it."""
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.simple_kv_offload.metadata import SimpleCPUOffloadMetadata, SimpleCPUOffloadWorkerMetadata

    if isinstance(meta, SimpleCPUOffloadMetadata):
        recving = set(meta.load_event_to_reqs.get(meta.load_event, ())) if meta.load_event >= 0 else set()
        worker_meta = (
            SimpleCPUOffloadWorkerMetadata(completed_store_events={meta.store_event: 1})
            if meta.store_event >= 0
            else None
        )
        output = KVConnectorOutput(finished_recving=recving or None, kv_connector_worker_meta=worker_meta)
    else:
        from toolkit.vllm.worker_side import instant_connector_output

        output = instant_connector_output(meta)
    ranks = harness.num_ranks if harness is not None else 1
    per_rank = output.kv_connector_worker_meta
    if per_rank is not None and ranks > 1:
        total = per_rank
        for _ in range(ranks - 1):
            total = total.aggregate(per_rank)
        output = dataclasses.replace(output, kv_connector_worker_meta=total)
    return output


@functools.cache
def _metadata_classes() -> tuple[type[HybridConnectorMetadata], Any]:
    """The toolkit's and vLLM's SimpleCPU step metadata classes, imported at the first step (this module loads
    without vLLM) and kept: `loaded_pairs_of` runs every engine step."""
    from vllm.v1.simple_kv_offload.metadata import SimpleCPUOffloadMetadata

    from toolkit.vllm.messages import HybridConnectorMetadata

    return HybridConnectorMetadata, SimpleCPUOffloadMetadata


def loaded_pairs_of(meta: Any, harness: Harness) -> dict[str, list[tuple[int, int]]]:
    """Per request, the (group, device block) pairs this step's load fills, when the metadata tells."""
    HybridConnectorMetadata, SimpleCPUOffloadMetadata = _metadata_classes()
    if isinstance(meta, SimpleCPUOffloadMetadata):
        if meta.load_event < 0:
            return {}
        return _pairs_by_request(meta.load_event_to_reqs.get(meta.load_event, ()), meta.load_gpu_blocks, harness)
    if isinstance(meta, HybridConnectorMetadata):
        req_ids = meta.load_req_ids
        return _pairs_by_request(req_ids, meta.load_device_block_ids, harness) if req_ids else {}
    return {}  # a connector whose loads this harness cannot read


def _pairs_by_request(
    req_ids: Iterable[str], gpu_blocks: Iterable[int], harness: Harness
) -> dict[str, list[tuple[int, int]]]:
    """SimpleCPU sends flat block lists; attribute each block to the request and group whose table holds it."""
    wanted = set(gpu_blocks)
    result: dict[str, list[tuple[int, int]]] = {}
    manager = harness.scheduler.kv_cache_manager
    for req_id in req_ids:
        per_group = manager.get_block_ids(req_id)
        pairs = [(g, b) for g, blocks in enumerate(per_group) for b in blocks if b in wanted]
        result[req_id] = pairs
    return result
