"""Loads, from a lookup's pin to the workers' report: the one owner of every CPU -> device copy's state.

A request's hit is pinned at lookup (so nothing evicts it before the engine allocates), the pin moves to the
load when it is planned, the load joins the next step's load event, and its pins go when the workers report
it done or failed. A reset abandons loads already sent: their pins stay until the workers report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from toolkit.core.event_log import EventLog
from toolkit.core.events import LoadDeclined, LoadDone, LoadFailed, LoadSent
from toolkit.core.geometry import HybridGeometry
from toolkit.core.load.pairing import LoadPlan, LoadState, covering_device_blocks, pair_load_blocks
from toolkit.core.lookup.hybrid import HybridLookup
from toolkit.core.lookup.local_refresh import LocalPrefixRefresh
from toolkit.core.lookup.result import LookupResult
from toolkit.core.metadata import TransferBatch
from toolkit.core.pool.blocks import CpuBlockPool
from toolkit.core.pool.device_pool import DevicePool
from toolkit.core.requests import RequestView

# The CPU blocks per group holding `[local_tokens, end_tokens)` of a request, or None when some group holds no
# data for that boundary (the lookup's `blocks_at`).
BlocksAt = Callable[..., Sequence[Sequence[int]] | None]


@dataclass(frozen=True)
class LoadInfo:
    """A read-only view of one tracked load."""

    request_id: str
    event_id: int | None  # None until a step sent it
    finished: bool  # its request left while the copy was in flight
    abandoned: bool  # a reset happened while it was in flight
    device_block_ids: tuple[int, ...]
    cpu_block_ids: tuple[int, ...]


class LoadTracker:
    def __init__(
        self, cpu: CpuBlockPool, device: DevicePool, log: EventLog, *, lookup: HybridLookup, eager: bool
    ) -> None:
        """`lookup`: the tier's lookup (its geometry, and the blocks of an exact boundary for re-planning); `eager`:
        the tier stores beside the device cache, so a device-local prefix refreshes its CPU copy (vLLM's rule)."""
        self._cpu, self._device, self._log = cpu, device, log
        self._geometry: HybridGeometry = lookup.geometry
        self._blocks_at: BlocksAt = lookup.blocks_at
        self._local_refresh = LocalPrefixRefresh(lookup, cpu) if eager else None
        self._hits: dict[str, tuple[LookupResult, list[int]]] = {}  # lookup result and its pinned CPU blocks
        self._loads: dict[str, LoadState] = {}
        self._abandoned: dict[str, LoadState] = {}
        self._event_to_reqs: dict[int, list[str]] = {}
        self._failures: dict[str, tuple[int, ...]] = {}  # device blocks to recompute, until taken
        self._next_event = 0

    # ----- hits pinned between lookup and allocation --------------------------------------------------------

    def pin_hit(self, request_id: str, result: LookupResult) -> None:
        """Pin `result`'s CPU blocks for `request_id` (an older pin of the request was released before its lookup)."""
        pins = result.real_block_ids()
        self._cpu.touch(pins, hit=True)
        self._hits[request_id] = (result, pins)

    def release_hit(self, request_id: str) -> None:
        pending = self._hits.pop(request_id, None)
        if pending is not None:
            self._cpu.free(pending[1])

    def note_local_prefix(self, request_id: str, local_tokens: int) -> None:
        """The device holds the request's first `local_tokens`: its CPU copy is refreshed when the request is
        admitted (`plan`)."""
        if self._local_refresh is not None:
            self._local_refresh.note(request_id, local_tokens)

    # ----- planned loads ------------------------------------------------------------------------------------

    def plan(self, request: RequestView, block_ids: Sequence[Sequence[int]], external_tokens: int) -> LoadPlan | None:
        """After allocation: plan the load of `external_tokens` accepted tokens into the request's device tables
        (`block_ids[g]`: the whole table of group g), moving the lookup's pins to the load. Partial acceptance is
        re-planned for exactly the accepted boundary in every group, or declined. None: nothing to load."""
        request_id = request.request_id
        if self._local_refresh is not None:  # first, the CPU copy of its device-local prefix becomes the newest
            self._local_refresh.refresh(request_id, request.block_hashes)
        pending = self._hits.pop(request_id, None)
        if external_tokens == 0:
            if pending is not None:
                self._cpu.free(pending[1])
            return None
        geometry = self._geometry
        if external_tokens < 0 or external_tokens % geometry.hash_tokens:
            raise ValueError(
                f"external_tokens: {external_tokens} is not a non-negative multiple of the hash block "
                f"{geometry.hash_tokens}"
            )
        if pending is None:
            return self._decline(request_id, block_ids, 0, external_tokens, "no pending lookup for this request")
        result, pins = pending
        local = result.local_tokens
        if external_tokens > result.hit_tokens:
            self._cpu.free(pins)
            raise ValueError(f"external_tokens: {external_tokens} exceeds the offered hit of {result.hit_tokens}")
        hit_blocks: Sequence[Sequence[int]] = result.block_ids
        if external_tokens < result.hit_tokens:
            # Re-plan for exactly the accepted boundary: window blocks and the Mamba state differ per boundary.
            replanned = self._blocks_at(
                block_hashes=request.block_hashes, local_tokens=local, end_tokens=local + external_tokens
            )
            if replanned is None:
                self._cpu.free(pins)
                return self._decline(
                    request_id,
                    block_ids,
                    local,
                    external_tokens,
                    f"some group holds no data for the accepted boundary {local + external_tokens}",
                )
            hit_blocks = replanned
        device_ids, cpu_ids = pair_load_blocks(
            geometry=geometry,
            hit_block_ids=hit_blocks,
            device_block_ids=block_ids,
            local_tokens=local,
            external_tokens=external_tokens,
            device_null_id=self._device.null_block_id,
        )
        assert request_id not in self._loads, f"request {request_id} already has a pending load"
        self._cpu.touch(cpu_ids)  # the load pin first, then the lookup pin goes: no window for eviction
        self._cpu.free(pins)
        self._device.touch(device_ids)
        self._loads[request_id] = LoadState(request_id, device_ids, cpu_ids)
        return LoadPlan(
            request_id=request_id,
            external_tokens=external_tokens,
            local_tokens=local,
            device_block_ids=tuple(device_ids),
            cpu_block_ids=tuple(cpu_ids),
        )

    def _decline(
        self, request_id: str, block_ids: Sequence[Sequence[int]], local: int, external: int, reason: str
    ) -> LoadPlan:
        """Nothing is loaded: the engine must recompute the blocks covering the accepted range (reported through
        `take_failures`)."""
        failed = tuple(
            covering_device_blocks(
                geometry=self._geometry,
                device_block_ids=block_ids,
                local_tokens=local,
                external_tokens=external,
                device_null_id=self._device.null_block_id,
            )
        )
        self._failures[request_id] = failed
        if self._log.recording:
            self._log.emit(LoadDeclined(request_id=request_id, reason=reason, failed_device_block_ids=failed))
        return LoadPlan(
            request_id=request_id,
            external_tokens=external,
            local_tokens=local,
            declined=True,
            failed_device_block_ids=failed,
            reason=reason,
        )

    def has_loads(self) -> bool:
        return bool(self._loads)

    def is_idle(self) -> bool:
        """No load planned, unsent or in flight."""
        return not self._loads and not self._event_to_reqs

    def assign_event(self) -> TransferBatch | None:
        """Every unsent load joins one new load event (None when all are sent)."""
        unsent = [state for state in self._loads.values() if state.event_id is None]
        if not unsent:
            return None
        event_id = self._next_event
        self._next_event += 1
        device_ids: list[int] = []
        cpu_ids: list[int] = []
        for state in unsent:
            state.event_id = event_id
            device_ids.extend(state.device_block_ids)
            cpu_ids.extend(state.cpu_block_ids)
        self._event_to_reqs[event_id] = [state.request_id for state in unsent]
        if self._log.recording:
            self._log.emit(
                LoadSent(
                    event_id=event_id,
                    request_ids=tuple(s.request_id for s in unsent),
                    device_block_ids=tuple(device_ids),
                    cpu_block_ids=tuple(cpu_ids),
                )
            )
        return TransferBatch(event_id=event_id, device_block_ids=tuple(device_ids), host_block_ids=tuple(cpu_ids))

    # ----- reports from the workers -------------------------------------------------------------------------

    def complete(self, request_ids: Iterable[str]) -> None:
        for request_id in request_ids:
            state = self._untrack(request_id)
            if state is not None:
                self._cpu.free(state.cpu_block_ids)
                self._device.free(state.device_block_ids)
                if self._log.recording:
                    self._log.emit(LoadDone(request_id=request_id))

    def fail(self, request_ids: Iterable[str]) -> tuple[int, ...]:
        """Release pins, drop the CPU blocks' keys (their data is suspect); the device blocks to recompute."""
        failed: list[int] = []
        for request_id in request_ids:
            state = self._untrack(request_id)
            if state is None:
                continue
            for cpu_id in state.cpu_block_ids:
                self._cpu.drop_keys(cpu_id)
            self._cpu.free(state.cpu_block_ids)
            self._device.free(state.device_block_ids)
            failed.extend(state.device_block_ids)
            self._failures[request_id] = tuple(state.device_block_ids)
            self._log.emit(LoadFailed(request_id=request_id, failed_device_block_ids=tuple(state.device_block_ids)))
        self._log.drain_pool()
        return tuple(failed)

    def fail_events(self, event_ids: Iterable[int]) -> tuple[int, ...]:
        failed: list[int] = []
        for event_id in event_ids:
            failed.extend(self.fail(list(self._event_to_reqs.get(event_id, ()))))
        return tuple(failed)

    def take_failures(self) -> dict[str, tuple[int, ...]]:
        failures = self._failures
        if not failures:
            return {}
        self._failures = {}
        return failures

    def _untrack(self, request_id: str) -> LoadState | None:
        state = self._loads.pop(request_id, None) or self._abandoned.pop(request_id, None)
        if state is None:
            return None
        if state.event_id is not None:
            members = self._event_to_reqs.get(state.event_id)
            if members is not None:
                if request_id in members:
                    members.remove(request_id)
                if not members:
                    del self._event_to_reqs[state.event_id]
        return state

    # ----- departures and reset -----------------------------------------------------------------------------

    def request_finished(self, request_id: str) -> None:
        """Its lookup pin goes; an unsent load is dropped, a sent one waits for the workers' report."""
        self.release_hit(request_id)
        if self._local_refresh is not None:
            self._local_refresh.forget(request_id)
        load = self._loads.get(request_id)
        if load is None:
            return
        if load.event_id is None:
            del self._loads[request_id]
            self._cpu.free(load.cpu_block_ids)
            self._device.free(load.device_block_ids)
        else:
            load.finished = True

    def reset(self) -> bool:
        """Release hits and unsent loads; abandon sent ones. True when a sent load was abandoned now."""
        abandoned = False
        for request_id, load in self._loads.items():
            if load.event_id is None:
                self._cpu.free(load.cpu_block_ids)
                self._device.free(load.device_block_ids)
            else:
                self._abandoned[request_id] = load
                abandoned = True
        self._loads.clear()
        for request_id in list(self._hits):
            self.release_hit(request_id)
        if self._local_refresh is not None:
            self._local_refresh.clear()
        return abandoned

    # ----- read-only queries --------------------------------------------------------------------------------

    def has_abandoned(self) -> bool:
        return bool(self._abandoned)

    def pending_hit_ids(self) -> frozenset[str]:
        """Requests whose lookup hit is pinned, waiting for `prepare_load`."""
        return frozenset(self._hits)

    def load_info(self, request_id: str) -> LoadInfo | None:
        state, abandoned = self._loads.get(request_id), False
        if state is None:
            state, abandoned = self._abandoned.get(request_id), True
        if state is None:
            return None
        return LoadInfo(
            request_id,
            state.event_id,
            state.finished,
            abandoned,
            tuple(state.device_block_ids),
            tuple(state.cpu_block_ids),
        )

    def num_tracked(self) -> int:
        """Loads planned, in flight or abandoned."""
        return len(self._loads) + len(self._abandoned)

    def events_in_flight(self) -> dict[int, tuple[str, ...]]:
        """Sent load events not fully reported, with their requests."""
        return {event_id: tuple(reqs) for event_id, reqs in self._event_to_reqs.items()}

    def event_request_ids(self, event_id: int) -> tuple[str, ...]:
        return tuple(self._event_to_reqs.get(event_id, ()))

    def held_cpu_blocks(self) -> list[int]:
        """CPU blocks this tracker pins, once per pin: lookup hits and loads (abandoned included)."""
        held = [b for _, pins in self._hits.values() for b in pins]
        for states in (self._loads, self._abandoned):
            held.extend(b for state in states.values() for b in state.cpu_block_ids)
        return held

    def held_device_blocks(self) -> list[int]:
        """Device blocks this tracker pins, once per pin: loads (abandoned included)."""
        return [
            b for states in (self._loads, self._abandoned) for state in states.values() for b in state.device_block_ids
        ]
