"""The copy backend contract, documented once here; implementations stay bare and swappable.

A backend moves rows between the device regions and their host mirrors, in batches:

- `submit(direction=, event_id=, src_block_ids=, dst_block_ids=)`: start copying row `src_block_ids[i]` of every
  source view to row `dst_block_ids[i]` of the matching destination view (LOAD: host -> device, STORE: device ->
  host). Returns without waiting for the copy. Ids are validated (bounds, pairing, no repeated destination) and
  misuse raises `ValueError`; a launch failure raises too. The worker catches both at its boundary.
- `poll()`: the outcomes (completed or failed, with the error) of batches that settled since the last poll, in
  submission order per direction. Never blocks. Each submitted event is settled exactly once.
- `flush(timeout_s)`: block until every in-flight batch settled or the timeout passed. Used on preemption, before
  device blocks are reused. Its outcomes come out of the next `poll()`. A copy still running then stays in flight
  (its blocks stay pinned) until its stream or thread really finished it (completion.py).
- `close()`: flush, then release threads/streams. The views stay owned by the caller.

`take_overdue()`: (direction, event id) of batches newly found past their deadline (still in flight; they will be
reported failed), for a warning. Event ids must increase per direction. `inject_fault=True` makes that batch fail the way a real copy fails on
this backend (inside the copy thread or at launch), for tests and for users checking their setup.
`inject_delay_s > 0` makes it start that late on its copy thread (backends with `supports_delay` only).
"""

from __future__ import annotations

import abc
from typing import ClassVar, Sequence

import torch

from toolkit.copy.completion import CompletionTracker, CopyHandle, CopyOutcome, Direction
from toolkit.copy.descriptors import RegionPair, as_ids, check_ids


class InjectedCopyFault(RuntimeError):
    """A copy failure made on purpose by the fault-injection switch."""


class CopyBackend(abc.ABC):
    name: ClassVar[str]
    supports_delay: ClassVar[bool] = False  # `_launch` takes `delay_s` (late-copy fault injection)

    def __init__(self, *, store_pairs: Sequence[RegionPair], copy_timeout_s: float | None = None) -> None:
        """`store_pairs`: per region, src = device view, dst = host mirror; loads use the same pairs reversed."""
        if not store_pairs:
            raise ValueError("store_pairs: at least one region is needed")
        self._pairs = {Direction.STORE: tuple(store_pairs), Direction.LOAD: tuple(p.reversed() for p in store_pairs)}
        self._trackers = {d: CompletionTracker(direction=d, timeout_s=copy_timeout_s) for d in Direction}
        self._settled: list[CopyOutcome] = []
        self._closed = False

    @property
    def num_device_blocks(self) -> int:
        return self._pairs[Direction.STORE][0].src.shape[0]

    @property
    def num_host_blocks(self) -> int:
        return self._pairs[Direction.STORE][0].dst.shape[0]

    @property
    def num_in_flight(self) -> int:
        return sum(len(t) for t in self._trackers.values())

    def high_water_mark(self, direction: Direction) -> int:
        return self._trackers[direction].high_water_mark

    def submit(
        self,
        *,
        direction: Direction,
        event_id: int,
        src_block_ids: Sequence[int] | torch.Tensor,
        dst_block_ids: Sequence[int] | torch.Tensor,
        inject_fault: bool = False,
        after: object | None = None,
        inject_delay_s: float = 0.0,
    ) -> None:
        """See the module docstring. `after`: a backend-specific event the copy must wait for (CUDA stores)."""
        if self._closed:
            raise RuntimeError(f"{self.name} backend is closed")
        src = as_ids("src_block_ids", src_block_ids)
        dst = as_ids("dst_block_ids", dst_block_ids)
        store = direction is Direction.STORE
        check_ids(
            src,
            dst,
            num_src_blocks=self.num_device_blocks if store else self.num_host_blocks,
            num_dst_blocks=self.num_host_blocks if store else self.num_device_blocks,
        )
        fault = InjectedCopyFault(f"injected {direction.value} failure, event {event_id}") if inject_fault else None
        if inject_delay_s and not self.supports_delay:
            raise ValueError(f"inject_delay_s: the {self.name} backend cannot delay a copy, got {inject_delay_s}")
        tracker = self._trackers[direction]
        tracker.check_next(event_id)  # before launching anything
        late = {"delay_s": inject_delay_s} if inject_delay_s else {}
        handle = self._launch(
            direction=direction,
            pairs=self._pairs[direction],
            src_ids=src,
            dst_ids=dst,
            fault=fault,
            after=after,
            **late,
        )
        tracker.push(event_id, handle)

    def poll(self) -> list[CopyOutcome]:
        outcomes, self._settled = self._settled, []
        for tracker in self._trackers.values():
            outcomes.extend(tracker.poll())
        return outcomes

    def take_overdue(self) -> list[tuple[Direction, int]]:
        return [(d, e) for d, tracker in self._trackers.items() for e in tracker.take_overdue()]

    def flush(self, timeout_s: float | None = None) -> None:
        for tracker in self._trackers.values():
            self._settled.extend(tracker.wait_all(timeout_s))

    def close(self, timeout_s: float | None = 10.0) -> None:
        if self._closed:
            return
        self.flush(timeout_s)
        self._closed = True
        self._release()

    @abc.abstractmethod
    def _launch(
        self,
        *,
        direction: Direction,
        pairs: Sequence[RegionPair],
        src_ids: torch.Tensor,
        dst_ids: torch.Tensor,
        fault: BaseException | None,
        after: object | None,
    ) -> CopyHandle:
        """Start the copy (ids already checked) and return its handle; raise `fault` the backend's way."""

    def _release(self) -> None:  # noqa: B027 (an optional hook: most backends hold nothing to free)
        """Free threads/streams; called once by `close()` after the final flush."""
