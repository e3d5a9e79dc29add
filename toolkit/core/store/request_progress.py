"""Per-request store progress in eager mode: each request's device tables, how much of them is stored, and the
store events still carrying its blocks.

The positional scan runs here for every scheduled request of every step, so it is written for the common case
(no new block, no block end reached: two dict probes and one comparison per running request). A request that
leaves while one of its store events is in flight is kept, marked finished, until the event is done.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import AbstractSet, Mapping, Sequence

from toolkit.core.events import ManagerEvent
from toolkit.core.geometry import HybridGeometry
from toolkit.core.pool.blocks import CpuBlockPool
from toolkit.core.pool.device_pool import DevicePool
from toolkit.core.requests import HandoffEntry, RequestView, StepInput
from toolkit.core.stats import BoundaryStoreStats
from toolkit.core.store.decode_skip import CANNOT_SKIP, DecodeSkip
from toolkit.core.store.finish_flush import FinishFlush
from toolkit.core.store.handoffs import HandoffIntake
from toolkit.core.store.selection import (
    NO_WORK,
    PositionalLayout,
    StoreBatch,
    StoreState,
    next_work_tokens,
    select_positional,
)


@dataclass(frozen=True)
class StoreProgress:
    """A read-only view of one request's store progress."""

    request_id: str
    num_stored_blocks: tuple[int, ...]  # leading blocks handled per group (stored, in flight or skipped)
    handoff_boundary_tokens: tuple[int, ...]  # per group: the last hand-off boundary stored
    store_event_ids: frozenset[int]  # store events still carrying its blocks
    finished: bool  # the request left; kept until its store events are done


class RequestStores:
    def __init__(
        self,
        *,
        geometry: HybridGeometry,
        device: DevicePool,
        cpu: CpuBlockPool,
        layout: PositionalLayout,
        with_meta: bool,
    ) -> None:
        self._geometry, self._device, self._cpu = geometry, device, cpu
        self._layout = layout
        self._with_meta = with_meta
        self._num_groups = geometry.num_groups
        self._states: dict[str, StoreState] = {}
        self.decode_skip = DecodeSkip()  # the running requests' scan skipped on decode steps (`decode_skip.py`)

    def track(self, request_id: str) -> None:
        """Start tracking a request (at its first allocation); a tracked one is left as it is."""
        if request_id not in self._states:
            self._states[request_id] = StoreState.empty(self._num_groups)

    def take_handoffs(
        self,
        intake: HandoffIntake,
        *,
        handoffs: Mapping[str, Sequence[HandoffEntry]],
        gone_request_ids: AbstractSet[str],
        batch: StoreBatch,
        stats: BoundaryStoreStats,
        events: list[ManagerEvent] | None,
        fine_room: bool = True,
    ) -> list[int]:
        """This step's hand-offs into `batch`, checked against the requests' progress; returns the device blocks
        the intake pinned for its waiting room (`fine_room`: `HandoffIntake.take`). The boundaries the intake
        accepted are recorded here, by the records' one writer."""
        pinned, accepted = intake.take(
            handoffs=handoffs,
            states=self._states,
            gone_request_ids=gone_request_ids,
            device=self._device,
            cpu=self._cpu,
            batch=batch,
            stats=stats,
            events=events,
            fine_room=fine_room,
        )
        states = self._states
        for request_id, group_id, boundary_tokens in accepted:
            bounds = states[request_id].handoff_boundary_tokens
            if boundary_tokens > bounds[group_id]:
                bounds[group_id] = boundary_tokens
        return pinned

    def select(self, step: StepInput, batch: StoreBatch) -> None:
        """Positional stores of this step's scheduled requests into `batch`."""
        states = self._states
        running = step.running
        decode_skip = self.decode_skip
        advance = decode_skip.skippable_advance(running) if running is not None else CANNOT_SKIP
        skip = advance != CANNOT_SKIP
        if skip:
            decode_skip.spend(advance)
        else:
            decode_skip.scanned_step(running)
            if not states or running is None:
                decode_skip.forget()
        if not states:
            return
        for scheduled in step.scheduled:
            request = scheduled.request
            state = states.get(request.request_id)
            if state is None or state.finished:
                continue
            self._positional_one(
                state, request, scheduled.new_block_ids, scheduled.num_scheduled_tokens, scheduled.resumed, batch
            )
        if skip or running is None:
            return
        req_ids, new_block_ids, counts = running.req_ids, running.new_block_ids, running.num_scheduled_tokens
        # Column layout: most running requests get no new block and have not reached their next block end, so
        # they cost two dict probes and one comparison here (no per-request object, no call).
        requests, resumed_ids = running.requests, running.resumed_ids
        positional_one = self._positional_one
        slack = NO_WORK
        for req_id, new_ids in zip(req_ids, new_block_ids):
            state = states.get(req_id)
            if state is None or state.finished:
                continue
            view = requests.get(req_id)
            if view is None:
                continue
            computed = view.num_computed_tokens
            if new_ids is not None or computed - view.num_output_placeholders >= state.next_work_tokens:
                positional_one(
                    state, view, () if new_ids is None else new_ids, counts.get(req_id, 0), req_id in resumed_ids, batch
                )
            gap = state.next_work_tokens - computed  # confirmed tokens never exceed computed ones: a lower bound
            if gap < slack:
                slack = gap
        decode_skip.rescanned(req_ids, slack)

    def _positional_one(
        self,
        state: StoreState,
        request: RequestView,
        new_block_ids: Sequence[Sequence[int]],
        num_scheduled_tokens: int,
        resumed: bool,
        batch: StoreBatch,
    ) -> None:
        """One scheduled request: append this step's new blocks, then store what is confirmed (eager)."""
        layout = self._layout
        if resumed:
            state.block_ids = [[] for _ in range(self._num_groups)]
            state.num_stored_blocks = [0] * self._num_groups
        # Incremental: only this step's new block ids are appended, tables are never rebuilt.
        tables = state.block_ids
        if resumed or any(new_block_ids):
            for table, new_ids in zip(tables, new_block_ids):
                if new_ids:
                    table.extend(new_ids)
            state.next_work_tokens = next_work_tokens(layout, state.num_stored_blocks, tables)
        if num_scheduled_tokens == 0:
            return
        confirmed_tokens = request.num_computed_tokens - request.num_output_placeholders
        if confirmed_tokens >= state.next_work_tokens:
            select_positional(
                geometry=self._geometry,
                device=self._device,
                cpu=self._cpu,
                batch=batch,
                num_stored_blocks=state.num_stored_blocks,
                block_ids=tables,
                request=request,
                confirmed_tokens=confirmed_tokens,
                source="positional",
                with_meta=self._with_meta,
                layout=layout,
            )
            state.next_work_tokens = next_work_tokens(layout, state.num_stored_blocks, tables)

    # ----- store events ------------------------------------------------------------------------------------

    def attach(self, event_id: int, request_ids: Sequence[str]) -> None:
        """A committed store event carries blocks of these requests."""
        states = self._states
        for request_id in request_ids:
            state = states.get(request_id)
            if state is not None:
                state.store_event_ids.add(event_id)

    def detach(self, event_id: int, request_ids: Sequence[str]) -> None:
        """The event is done: a finished request with no other event in flight goes."""
        states = self._states
        for request_id in request_ids:
            state = states.get(request_id)
            if state is None:
                continue
            state.store_event_ids.discard(event_id)
            if state.finished and not state.store_event_ids:
                del states[request_id]

    # ----- departures and reset ----------------------------------------------------------------------------

    def finish(self, request: RequestView, block_ids: Sequence[Sequence[int]] | None, flush: FinishFlush) -> None:
        """The request leaves (`block_ids[g]`: its final table of group g, default the tracked one): queue what it
        has left to store into `flush`, then forget it now, or once its store events are done."""
        request_id = request.request_id
        state = self._states.get(request_id)
        if state is None:
            return
        if not state.finished:
            # The flush selects from its own copy of the cursors: this record is written here only.
            flush.queue(request, state.num_stored_blocks, block_ids if block_ids is not None else state.block_ids)
        if state.store_event_ids:
            state.finished = True
        else:
            del self._states[request_id]

    def clear(self) -> None:
        self._states.clear()
        self.decode_skip.forget()

    # ----- read-only queries -------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._states)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._states

    def progress(self, request_id: str) -> StoreProgress | None:
        state = self._states.get(request_id)
        if state is None:
            return None
        return StoreProgress(
            request_id,
            tuple(state.num_stored_blocks),
            tuple(state.handoff_boundary_tokens),
            frozenset(state.store_event_ids),
            state.finished,
        )

    def all_progress(self) -> list[StoreProgress]:
        return [progress for request_id in self._states if (progress := self.progress(request_id)) is not None]
