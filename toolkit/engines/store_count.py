"""Store bytes for vLLM's own SimpleCPU connector, which reports no per-request stores: the device blocks a step's
`SimpleCPUOffloadMetadata` stores, each counted for the request that last held it.

The toolkit connector counts its stores itself (`toolkit.vllm.observe`); without this, a SimpleCPU row read
`store_bytes: 0` while it loaded hundreds of MB. SimpleCPU stores a request's last blocks after the request
finished (its finish-time flush, a later step's metadata), when the scheduler no longer knows the request, so the
owner of every block is remembered as the steps schedule it (`StoreCounter`: one entry per device block at most).
A stored block no block table showed (a state block replaced within one step) is counted for a request of that
step, so phase totals are whole while the per-request split is approximate. Counted as (group, device block)
pairs, as loads are (`harness.loaded_pairs_of`).
"""

from __future__ import annotations

from typing import Any


def _simplecpu_metadata() -> type[Any] | None:
    try:
        from vllm.v1.simple_kv_offload.metadata import SimpleCPUOffloadMetadata
    except ImportError:  # a vLLM build without SimpleCPU: nothing of its kind to count
        return None
    kind: type[Any] = SimpleCPUOffloadMetadata
    return kind


class StoreCounter:
    """`step(scheduler_output, scheduler)` after each schedule(): the stored blocks of that step per request."""

    def __init__(self) -> None:
        self._owner: dict[int, str] = {}  # device block id -> the request that last held it
        self._kind = _simplecpu_metadata()

    def step(self, output: Any, scheduler: Any) -> dict[str, int]:
        meta = output.kv_connector_metadata
        if self._kind is None or not isinstance(meta, self._kind):
            return {}
        # Owners first: a step's store can name blocks allocated in that same schedule() (a state block). A block
        # SimpleCPU stores is pinned until the copy is done, so no later request can have taken it over.
        manager = scheduler.kv_cache_manager
        for req_id in output.num_scheduled_tokens:  # ids are unique across groups (one pool): a pair per id
            for blocks in manager.get_block_ids(req_id):
                for block in blocks:
                    self._owner[block] = req_id
        out: dict[str, int] = {}
        if meta.store_event < 0:
            return out
        unknown = 0
        for block in meta.store_gpu_blocks:
            owner = self._owner.get(block)
            if owner is None:
                unknown += 1
            else:
                out[owner] = out.get(owner, 0) + 1
        if unknown:
            # A state block allocated and released within one schedule() (Mamba align mode keeps only the latest
            # state) is in no block table: counted for a request the step stored or scheduled, so totals are whole.
            fallback = next(iter(out), None) or next(iter(output.num_scheduled_tokens), None)
            fallback = fallback or next(iter(sorted(output.finished_req_ids)), None)
            if fallback is not None:
                out[fallback] = out.get(fallback, 0) + unknown
        return out
