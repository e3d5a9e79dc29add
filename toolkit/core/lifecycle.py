"""Request departure, reset, pending work, events and the visualizer snapshot (part of `OffloadManager`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from toolkit.core.keys import BlockKey
from toolkit.core.requests import RequestView
from toolkit.core.stats import BoundaryStoreStats, GroupUsage
from toolkit.core.stores import BlockMeta, StoreBatch, find_prompt_tail, has_positional_work, select_positional


@dataclass(frozen=True, kw_only=True)
class CacheEvent:
    """A KV-cache event for the engine's event stream: kind "stored", "removed" or "cleared".

    `meta` is the stored block's payload when KV events are on and the block was stored positionally (hand-offs,
    tails and lazy stores carry none, as in vLLM).
    """

    kind: str
    cpu_block_id: int
    group_id: int
    keys: tuple[BlockKey, ...]
    meta: BlockMeta | None = None


@dataclass
class StoreTransfer:
    """One scheduled store (or part of one): index-parallel lists, `keys` as read when scheduled."""

    device_ids: list[int]
    cpu_ids: list[int]
    group_ids: list[int]
    keys: list[tuple[BlockKey, ...]]
    metas: list[BlockMeta | None]
    sources: list[str]


class LifecycleMixin:
    def request_finished(self, request: RequestView, block_ids: Sequence[Sequence[int]] | None = None) -> None:
        """The request leaves (before the engine frees its blocks; `block_ids[g]`: its final table of group g).

        Queues the finish-time flush (confirmed blocks not yet stored, plus the full-attention prompt-tail block),
        releases a pending lookup pin, and cleans up now or, if a copy is in flight, when it completes."""
        request_id = request.request_id
        self._release_pending_hit(request_id)
        load = self._loads.get(request_id)
        if load is not None:
            if load.event_id is None:
                del self._loads[request_id]
                self.cpu.free(load.cpu_block_ids)
                self.device.free(load.device_block_ids)
            else:
                load.finished = True
        state = self._store_reqs.get(request_id)
        if state is None:
            return
        if not state.finished:
            self._queue_finish_flush(request, state, block_ids if block_ids is not None else state.block_ids)
        if state.store_event_ids:
            state.finished = True
        else:
            del self._store_reqs[request_id]

    def _queue_finish_flush(self, request: RequestView, state, block_ids: Sequence[Sequence[int]]) -> None:
        """Select what the finishing request has left to store into the pending finish batch, which the next step's
        store event commits (CPU blocks are allocated there, once for the step). Its device blocks are pinned now:
        the engine frees the request's blocks as soon as this returns."""
        confirmed_tokens = request.num_computed_tokens - request.num_output_placeholders
        layout = self._positional_layout
        batch, start = None, 0  # the pending batch, only once there is something to store (most have nothing)
        if has_positional_work(layout, state.num_stored_blocks, block_ids, confirmed_tokens):
            batch = self._pending_finish_batch()
            start = len(batch)
            select_positional(geometry=self.geometry, device=self.device, cpu=self.cpu, batch=batch, state=state,
                              block_ids=block_ids, request=request, confirmed_tokens=confirmed_tokens,
                              source="finish", with_meta=self.config.enable_kv_events, layout=layout)
        if self._tail_possible:  # after the positional pick, which may have taken the tail block or its key
            tail = find_prompt_tail(geometry=self.geometry, device=self.device, cpu=self.cpu,
                                    in_flight=self.in_flight, block_ids=block_ids, request=request)
            if tail is not None:
                if batch is None:
                    batch = self._pending_finish_batch()
                    start = len(batch)
                if batch.has_room():
                    batch.add_keyed(tail[1], tail[0], tail[2], "tail", None, None)
        if batch is not None and len(batch) > start:
            self.device.touch(batch.device_ids[start:])

    def _pending_finish_batch(self) -> StoreBatch:
        batch = self._pending_finish
        if batch is None:
            batch = self._pending_finish = StoreBatch(len(self.cpu.policy), self.in_flight)
        else:
            batch.capacity = len(self.cpu.policy)  # pending entries hold no CPU block yet: all free blocks count
        return batch

    def _take_pending_finish(self, capacity: int) -> StoreBatch | None:
        """The pending finish batch for this step's store event, cut to `capacity` free CPU blocks: lookup hits
        since the finish may have pinned free blocks. Cut entries lose their pin and in-flight mark (not stored)."""
        batch, self._pending_finish = self._pending_finish, None
        if batch is None:
            return None
        if len(batch) > capacity:
            cut_ids, cut_keys = batch.truncate(capacity)
            self.in_flight.remove_event(cut_ids, cut_keys)
            self.device.free(cut_ids)
            self.finish_stores_dropped += len(cut_ids)
        batch.capacity = capacity
        return batch

    def has_pending_work(self) -> bool:
        """True while stores are queued, in flight or abandoned, or hand-offs wait for room: keep stepping."""
        return bool(self._pending_finish is not None or self._store_events or self._abandoned_stores
                    or self._handoffs.waiting)

    def pending_work(self) -> dict[str, int]:
        """Pending work, counted, for a drain that gives up to say what it waited for. The first four are what
        `has_pending_work` waits for; loads in flight keep their requests (and so the engine) busy instead."""
        finish = self._pending_finish
        return {"finish_store_blocks_queued": len(finish.device_ids) if finish is not None else 0,
                "store_events_in_flight": len(self._store_events),
                "store_events_abandoned": len(self._abandoned_stores),
                "handoffs_waiting": len(self._handoffs.waiting),
                "load_events_in_flight": len(self._load_event_to_reqs)}

    def reset(self) -> bool:
        """Drop the CPU tier's contents. In-flight copies are abandoned (their pins go when they complete, nothing
        is cached); event ids stay monotonic. Returns False if anything was abandoned, else the pool's reset."""
        abandoned = bool(self._store_events) or any(s.event_id is not None for s in self._loads.values())
        self._abandoned_stores.update(self._store_events)
        self._store_events.clear()
        pending, self._pending_finish = self._pending_finish, None
        if pending is not None:
            self.device.free(pending.device_ids)  # pinned at finish, never copied (no CPU block yet)
        self._spare_batch = None
        self.device.free(self._handoffs.clear())
        self.in_flight.clear()
        for request_id, load in list(self._loads.items()):
            if load.event_id is None:
                self.cpu.free(load.cpu_block_ids)
                self.device.free(load.device_block_ids)
            else:
                self._abandoned_loads[request_id] = load
        self._loads.clear()
        for request_id in list(self._pending_hits):
            self._release_pending_hit(request_id)
        self._store_reqs.clear()
        self._store_event_to_reqs.clear()
        self._store_pending_counts = {e: n for e, n in self._store_pending_counts.items()
                                      if e in self._abandoned_stores}
        self._lazy_cursor = None
        self.boundary_stats = BoundaryStoreStats()
        self._step_events.append({"type": "reset", "abandoned": abandoned})
        if abandoned or self._abandoned_stores or self._abandoned_loads:
            return False
        done = self.cpu.reset()
        self._drain_pool_events()
        return done

    # ----- events and views ----------------------------------------------------------------------------------

    def _drain_pool_events(self) -> None:
        if not self.cpu.records_events:
            return  # nobody reads them (no step events, no KV events): the pool recorded none
        for event in self.cpu.take_events():
            kind = "cleared" if event.kind == "cleared" else "removed"
            if self.config.enable_kv_events:
                self._kv_events.append(CacheEvent(kind=kind, cpu_block_id=event.block_id, group_id=event.group_id,
                                                  keys=event.keys))
            if event.kind != "cleared":
                self._step_events.append({"type": "evict" if event.kind == "evicted" else "drop_keys",
                                          "cpu_block_id": event.block_id, "group_id": event.group_id,
                                          "num_keys": len(event.keys)})

    def _stored_event(self, cpu_id: int, transfer: StoreTransfer, index: int) -> CacheEvent:
        return CacheEvent(kind="stored", cpu_block_id=cpu_id, group_id=transfer.group_ids[index],
                          keys=self.cpu.keys_of(cpu_id), meta=transfer.metas[index])

    def take_kv_events(self) -> list[CacheEvent]:
        """Drain KV-cache events (only recorded with `enable_kv_events`)."""
        self._drain_pool_events()
        events, self._kv_events = self._kv_events, []
        return events

    def take_step_events(self) -> list[dict]:
        """Drain the visualizer's event list (JSON-ready dicts with a "type"; see `snapshot`)."""
        self._drain_pool_events()
        events = list(self._step_events)
        self._step_events.clear()
        return events

    def usage(self) -> tuple[GroupUsage, ...]:
        """CPU usage per group: which group's blocks fill the pool."""
        used = self.cpu.num_used_blocks_per_group()
        out = []
        for group_id, group in enumerate(self.geometry.groups):
            blocks = self.cpu.group_block_ids(group_id)
            out.append(GroupUsage(
                group_id=group_id, kind=group.kind.value, num_used_blocks=used.get(group_id, 0),
                num_pinned_blocks=sum(1 for b in blocks if self.cpu.ref_count(b)),
                used_bytes=used.get(group_id, 0) * self.geometry.block_bytes,
            ))
        return tuple(out)

    def num_pinned_device_blocks(self) -> int:
        """Device pins the manager holds now (stores, loads, retry queue); 0 when idle."""
        pins = sum(len(t.device_ids) for t in self._store_events.values())
        pins += sum(len(t.device_ids) for t in self._abandoned_stores.values())
        pins += len(self._pending_finish.device_ids) if self._pending_finish is not None else 0
        pins += sum(len(s.device_block_ids) for s in self._loads.values())
        pins += sum(len(s.device_block_ids) for s in self._abandoned_loads.values())
        return pins + len(self._handoffs.waiting)

    def snapshot(self) -> dict:
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
        Step events (from `take_step_events`) are dicts with "type" in: lookup, store, load, handoff (with
        "outcome": stored | pending_retry | a drop/skip counter name), load_declined, load_failed, load_complete,
        store_complete, evict, drop_keys, reset.
        """
        in_flight_cpu = {c for t in self._store_events.values() for c in t.cpu_ids}
        free_order = [b for b in self.cpu.policy.iter_free() if self.cpu.group_of(b) >= 0]
        groups = []
        for group_id, group in enumerate(self.geometry.groups):
            blocks = self.cpu.group_block_ids(group_id)
            groups.append({
                "group_id": group_id, "kind": group.kind.value, "num_used_blocks": len(blocks),
                "lru_block_ids": [b for b in free_order if self.cpu.group_of(b) == group_id],
                "pinned_block_ids": sorted(b for b in blocks if self.cpu.ref_count(b)),
                "in_flight_block_ids": sorted(b for b in blocks if b in in_flight_cpu),
            })
        requests = {}
        for request_id, state in self._store_reqs.items():
            stored = [
                max(n * block, handoff)
                for n, block, handoff in zip(state.num_stored_blocks, self.geometry.group_block_tokens,
                                             state.handoff_boundary_tokens)
            ]
            requests[request_id] = {"stored_tokens": stored, "finished": state.finished,
                                    "num_store_events": len(state.store_event_ids)}
        return {
            "mode": "lazy" if self.config.lazy else "eager",
            "policy": self.cpu.policy.name,
            "num_cpu_blocks": self.cpu.num_blocks,
            "num_free_blocks": self.cpu.num_free_blocks,
            "groups": groups,
            "requests": requests,
            "store_events": sorted(self._store_events),
            "load_events": {str(e): list(r) for e, r in self._load_event_to_reqs.items()},
            "boundary_stats": self.boundary_stats.as_dict(),
            "miss_stats": self.miss_stats.as_dict(),
        }
