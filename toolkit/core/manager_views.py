"""Read-only views of an offload manager for people: CPU usage per group and the visualizer's snapshot.

Built from the parts' read-only queries only, so nothing here can change what the manager does. The manager is
seen through `ManagerParts` (the public parts these views read), so this module needs no import of the manager.
"""

from __future__ import annotations

from typing import Any, Protocol

from toolkit.core.geometry import HybridGeometry
from toolkit.core.load.tracker import LoadTracker
from toolkit.core.offload_config import OffloadConfig
from toolkit.core.pool.blocks import CpuBlockPool
from toolkit.core.stats import BoundaryStoreStats, GroupUsage, MissStats
from toolkit.core.store.request_progress import RequestStores
from toolkit.core.store.store_events import StoreEvents


class ManagerParts(Protocol):
    """The parts of an `OffloadManager` the views read."""

    @property
    def cpu(self) -> CpuBlockPool: ...
    @property
    def geometry(self) -> HybridGeometry: ...
    @property
    def config(self) -> OffloadConfig: ...
    @property
    def stores(self) -> StoreEvents: ...
    @property
    def request_stores(self) -> RequestStores: ...
    @property
    def loads(self) -> LoadTracker: ...
    @property
    def boundary_stats(self) -> BoundaryStoreStats: ...
    @property
    def miss_stats(self) -> MissStats: ...


def usage(manager: ManagerParts) -> tuple[GroupUsage, ...]:
    """CPU usage per group: which group's blocks fill the pool."""
    cpu, geometry = manager.cpu, manager.geometry
    used = cpu.num_used_blocks_per_group()
    out = []
    for group_id, group in enumerate(geometry.groups):
        blocks = cpu.group_block_ids(group_id)
        out.append(
            GroupUsage(
                group_id=group_id,
                kind=group.kind.value,
                num_used_blocks=used.get(group_id, 0),
                num_pinned_blocks=sum(1 for b in blocks if cpu.ref_count(b)),
                used_bytes=used.get(group_id, 0) * geometry.block_bytes,
            )
        )
    return tuple(out)


def snapshot(manager: ManagerParts) -> dict[str, Any]:
    """A JSON-ready view of the CPU tier for the visualizer. Schema:

    {
      "mode": "eager" | "lazy", "policy": str, "num_cpu_blocks": int, "num_free_blocks": int,
      "groups": [{"group_id": int, "kind": str, "num_used_blocks": int,
                  "lru_block_ids": [cpu ids, next victim first: free blocks holding this group's data],
                  "pinned_block_ids": [cpu ids with a ref], "in_flight_block_ids": [cpu ids being written]}],
      "requests": {request_id: {"stored_tokens": [per group: tokens stored positionally or by hand-off],
                                "finished": bool, "num_store_events": int}},
      "store_events": [event ids in flight], "load_events": {event id: [request ids]},
      "boundary_stats": BoundaryStoreStats fields, "miss_stats": MissStats.as_dict(),
    }
    Step events (from `take_step_events`) are the typed events of `toolkit.core.events`; their `to_json()` has
    "type" in: lookup, store, load, handoff (with "outcome": stored | pending_retry | a drop/skip counter name),
    load_declined, load_failed, load_complete, store_complete, evict, drop_keys, reset.
    """
    cpu, geometry = manager.cpu, manager.geometry
    in_flight_cpu = manager.stores.in_flight_cpu_ids()
    free_order = [b for b in cpu.policy.iter_free() if cpu.group_of(b) >= 0]
    groups: list[dict[str, Any]] = []
    for group_id, group in enumerate(geometry.groups):
        blocks = cpu.group_block_ids(group_id)
        groups.append(
            {
                "group_id": group_id,
                "kind": group.kind.value,
                "num_used_blocks": len(blocks),
                "lru_block_ids": [b for b in free_order if cpu.group_of(b) == group_id],
                "pinned_block_ids": sorted(b for b in blocks if cpu.ref_count(b)),
                "in_flight_block_ids": sorted(b for b in blocks if b in in_flight_cpu),
            }
        )
    requests: dict[str, dict[str, Any]] = {}
    for progress in manager.request_stores.all_progress():
        stored = [
            max(n * block, handoff)
            for n, block, handoff in zip(
                progress.num_stored_blocks, geometry.group_block_tokens, progress.handoff_boundary_tokens
            )
        ]
        requests[progress.request_id] = {
            "stored_tokens": stored,
            "finished": progress.finished,
            "num_store_events": len(progress.store_event_ids),
        }
    return {
        "mode": "lazy" if manager.config.lazy else "eager",
        "policy": cpu.policy.name,
        "num_cpu_blocks": cpu.num_blocks,
        "num_free_blocks": cpu.num_free_blocks,
        "groups": groups,
        "requests": requests,
        "store_events": list(manager.stores.stores_in_flight()),
        "load_events": {str(e): list(r) for e, r in manager.loads.events_in_flight().items()},
        "boundary_stats": manager.boundary_stats.as_dict(),
        "miss_stats": manager.miss_stats.as_dict(),
    }
