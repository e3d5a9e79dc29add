"""The finish-time flush: what a leaving request has confirmed but not stored, plus its prompt-tail block.

The engine frees a finishing request's blocks as soon as it is told, so the selection is made and its device
blocks pinned at that moment; CPU blocks are allocated only by the next step's store event (once per step, not
once per finishing request), which is why the selection waits here in between.
"""

from __future__ import annotations

from typing import Sequence

from toolkit.core.geometry import HybridGeometry
from toolkit.core.pool.blocks import CpuBlockPool
from toolkit.core.pool.device_pool import DevicePool
from toolkit.core.pool.in_flight import InFlightStores
from toolkit.core.requests import RequestView
from toolkit.core.store.selection import (
    PositionalLayout,
    StoreBatch,
    find_prompt_tail,
    has_positional_work,
    select_positional,
)


class FinishFlush:
    def __init__(
        self,
        *,
        geometry: HybridGeometry,
        device: DevicePool,
        cpu: CpuBlockPool,
        in_flight: InFlightStores,
        layout: PositionalLayout,
        with_meta: bool,
    ) -> None:
        self._geometry, self._device, self._cpu, self._in_flight = geometry, device, cpu, in_flight
        self._layout = layout
        self._with_meta = with_meta
        # `find_prompt_tail`'s first test, decided once (it runs for every finishing request).
        self._tail_possible = bool(geometry.fine_grained.enabled and geometry.full_attention_group_ids)
        self._pending: StoreBatch | None = None  # selections waiting for the next step's store event
        self.dropped_blocks = 0  # blocks cut because lookups pinned the free CPU blocks first

    def queue(self, request: RequestView, num_stored_blocks: Sequence[int], block_ids: Sequence[Sequence[int]]) -> None:
        """Select what the finishing request has left to store (past `num_stored_blocks`, its store cursors per
        group, read only) and pin those device blocks now."""
        cursors = list(num_stored_blocks)  # advanced by the selection below: a copy, the record is not ours
        confirmed_tokens = request.num_computed_tokens - request.num_output_placeholders
        layout = self._layout
        batch, start = None, 0  # the pending batch, only once there is something to store (most have nothing)
        if has_positional_work(layout, cursors, block_ids, confirmed_tokens):
            batch = self._pending_batch()
            start = len(batch)
            select_positional(
                geometry=self._geometry,
                device=self._device,
                cpu=self._cpu,
                batch=batch,
                num_stored_blocks=cursors,
                block_ids=block_ids,
                request=request,
                confirmed_tokens=confirmed_tokens,
                source="finish",
                with_meta=self._with_meta,
                layout=layout,
            )
        if self._tail_possible:  # after the positional pick, which may have taken the tail block or its key
            tail = find_prompt_tail(
                geometry=self._geometry,
                device=self._device,
                cpu=self._cpu,
                in_flight=self._in_flight,
                block_ids=block_ids,
                request=request,
            )
            if tail is not None:
                if batch is None:
                    batch = self._pending_batch()
                    start = len(batch)
                if batch.has_room():
                    batch.add_keyed(tail[1], tail[0], tail[2], "tail", None, None)
        if batch is not None and len(batch) > start:
            self._device.touch(batch.device_ids[start:])

    def _pending_batch(self) -> StoreBatch:
        batch = self._pending
        if batch is None:
            batch = self._pending = StoreBatch(len(self._cpu.policy), self._in_flight)
        else:
            batch.capacity = len(self._cpu.policy)  # pending entries hold no CPU block yet: all free blocks count
        return batch

    def take(self, capacity: int) -> StoreBatch | None:
        """The pending selections for this step's store event, cut to `capacity` free CPU blocks: lookup hits
        since the finish may have pinned free blocks. Cut entries lose their pin and in-flight mark (not stored)."""
        batch, self._pending = self._pending, None
        if batch is None:
            return None
        if len(batch) > capacity:
            cut_ids, cut_keys = batch.truncate(capacity)
            self._in_flight.remove_event(cut_ids, cut_keys)
            self._device.free(cut_ids)
            self.dropped_blocks += len(cut_ids)
        batch.capacity = capacity
        return batch

    def discard(self) -> None:
        """Drop the pending selections (reset): their device pins go; the caller clears the in-flight set."""
        pending, self._pending = self._pending, None
        if pending is not None:
            self._device.free(pending.device_ids)  # pinned at finish, never copied (no CPU block yet)

    # ----- read-only queries -------------------------------------------------------------------------------

    def has_pending(self) -> bool:
        return self._pending is not None

    def queued_device_blocks(self) -> list[int]:
        """Device blocks pinned for the next step's store event."""
        return list(self._pending.device_ids) if self._pending is not None else []
