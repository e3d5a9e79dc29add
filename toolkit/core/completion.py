"""Completions reported by the workers: stores (counted across workers), loads, and their failures.

Part of `OffloadManager` (a mixin, kept apart for size); reads the manager's state directly.
"""

from __future__ import annotations

from typing import Iterable, Mapping



class CompletionMixin:
    def complete_stores(self, event_counts: Mapping[int, int]) -> None:
        """Count store completions per event (`{event_id: number of workers reporting}`); once `world_size`
        workers reported, register the device blocks' keys *as they are now* on the CPU blocks and release pins.
        Unknown event ids (e.g. stale after a reset) are ignored."""
        for event_id, count in event_counts.items():
            if event_id not in self._store_events and event_id not in self._abandoned_stores:
                continue
            total = self._store_pending_counts.get(event_id, 0) + count
            if total < self.config.world_size:
                self._store_pending_counts[event_id] = total
                continue
            self._store_pending_counts.pop(event_id, None)
            self._finalize_store(event_id, cache=True)

    def fail_stores(self, event_ids: Iterable[int]) -> None:
        """A worker failed a store: release its pins now and never let its keys become hits."""
        for event_id in event_ids:
            if event_id in self._store_events or event_id in self._abandoned_stores:
                self._store_pending_counts.pop(event_id, None)
                self._finalize_store(event_id, cache=False)

    def _finalize_store(self, event_id: int, *, cache: bool) -> None:
        abandoned = event_id in self._abandoned_stores
        transfer = self._abandoned_stores.pop(event_id) if abandoned else self._store_events.pop(event_id)
        if not abandoned:
            # Abandoned events left the in-flight set at reset; new stores may reuse those device ids since.
            self.in_flight.remove_event(transfer.device_ids, transfer.keys)
        emit = self.config.enable_kv_events
        stored = 0
        device_ids, cpu_ids = transfer.device_ids, transfer.cpu_ids
        if cache and not abandoned:
            # Keys read *now* (not the ones captured at scheduling): what the device block holds when the copy landed
            # (a pinned block keeps its hash; aliases may have been added since).
            primary_key, alias_keys = self.device.primary_key, self.device.alias_keys
            primaries = [primary_key(device_id) for device_id in device_ids]
            aliases = [alias_keys(device_id) for device_id in device_ids]
            self.cpu.cache_and_free(cpu_ids, primaries, aliases)  # one pass for the event, not one call per block
            if emit or self._record_step_events:
                cached = [index for index, cpu_id in enumerate(cpu_ids) if self.cpu.keys_of(cpu_id)]
                stored = len(cached)
                if emit:  # after caching: an event carries the keys the CPU block holds
                    for index in cached:
                        self._kv_events.append(self._stored_event(cpu_ids[index], transfer, index))
        else:
            self.cpu.free(cpu_ids)
        self.device.free(device_ids)
        request_ids = self._store_event_to_reqs.pop(event_id, None)
        if request_ids:
            states = self._store_reqs
            for request_id in request_ids:
                state = states.get(request_id)
                if state is None:
                    continue
                state.store_event_ids.discard(event_id)
                if state.finished and not state.store_event_ids:
                    del states[request_id]
        if self._record_step_events:
            self._step_events.append({"type": "store_complete", "event_id": event_id,
                                      "num_blocks": len(transfer.cpu_ids), "num_cached_blocks": stored,
                                      "abandoned": abandoned, "failed": not cache})

    def complete_loads(self, request_ids: Iterable[str]) -> None:
        """Loads that landed on the device (the engine's `finished_recving`): release their pins."""
        for request_id in request_ids:
            state = self._finish_load(request_id)
            if state is not None:
                self.cpu.free(state.cpu_block_ids)
                self.device.free(state.device_block_ids)
                if self._record_step_events:
                    self._step_events.append({"type": "load_complete", "request_id": request_id})

    def fail_loads(self, request_ids: Iterable[str]) -> tuple[int, ...]:
        """Loads that failed: release pins, drop the CPU blocks' keys (their data is suspect) and return the
        device block ids the engine must recompute (also kept for `take_load_failures`)."""
        failed: list[int] = []
        for request_id in request_ids:
            state = self._finish_load(request_id)
            if state is None:
                continue
            for cpu_id in state.cpu_block_ids:
                self.cpu.drop_keys(cpu_id)
            self.cpu.free(state.cpu_block_ids)
            self.device.free(state.device_block_ids)
            failed.extend(state.device_block_ids)
            self._failed_loads[request_id] = tuple(state.device_block_ids)
            self._step_events.append({"type": "load_failed", "request_id": request_id,
                                      "failed_device_block_ids": list(state.device_block_ids)})
        self._drain_pool_events()
        return tuple(failed)

    def fail_load_events(self, event_ids: Iterable[int]) -> tuple[int, ...]:
        failed: list[int] = []
        for event_id in event_ids:
            failed.extend(self.fail_loads(list(self._load_event_to_reqs.get(event_id, ()))))
        return tuple(failed)

    def take_load_failures(self) -> dict[str, tuple[int, ...]]:
        """Requests whose load failed or was declined since the last call, with the device blocks to recompute."""
        failures = self._failed_loads
        if not failures:
            return {}
        self._failed_loads = {}
        return failures

    def _finish_load(self, request_id: str):
        state = self._loads.pop(request_id, None) or self._abandoned_loads.pop(request_id, None)
        if state is None:
            return None
        if state.event_id is not None:
            members = self._load_event_to_reqs.get(state.event_id)
            if members is not None:
                if request_id in members:
                    members.remove(request_id)
                if not members:
                    del self._load_event_to_reqs[state.event_id]
        return state
