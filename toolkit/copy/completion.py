"""Completion tracking by event id: one FIFO with a high-water mark per stream (direction).

Copies of one direction finish in submission order (one CUDA stream, or one copy thread), so the tracker only
ever asks the oldest pending copy whether it is done; every event id at or below the high-water mark is settled
(completed or failed). A copy that stays pending past its deadline is settled as failed with `CopyTimeout`, so a
stuck copy never blocks the events behind it and a request never waits forever. Its late completion is ignored.
"""

from __future__ import annotations

import enum
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Protocol

from toolkit.core.metadata import NO_EVENT


class Direction(enum.Enum):
    LOAD = "load"    # host mirror -> device
    STORE = "store"  # device -> host mirror


class CopyTimeout(TimeoutError):
    """A copy did not finish within its deadline; reported as a failed event."""


class CopyHandle(Protocol):
    """What a backend returns for one submitted batch."""

    def done(self) -> bool:
        """True once the copy finished, successfully or not. Must not block."""

    def wait(self, timeout_s: float | None) -> bool:
        """Block until done or `timeout_s` passed; return `done()`."""

    def error(self) -> BaseException | None:
        """Why the copy failed (valid once `done()`), or None."""


@dataclass(frozen=True)
class ReadyHandle:
    """A copy that finished during submission (synchronous backends, or a failure known at launch)."""

    failure: BaseException | None = None

    def done(self) -> bool:
        return True

    def wait(self, timeout_s: float | None) -> bool:
        return True

    def error(self) -> BaseException | None:
        return self.failure


@dataclass(frozen=True, kw_only=True)
class CopyOutcome:
    event_id: int
    direction: Direction
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class _Pending:
    event_id: int
    handle: CopyHandle
    deadline: float | None


class CompletionTracker:
    """FIFO of in-flight copies of one direction, settled in order."""

    def __init__(self, *, direction: Direction, timeout_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if timeout_s is not None and timeout_s <= 0:
            raise ValueError(f"timeout_s: must be > 0 or None, got {timeout_s}")
        self.direction = direction
        self.timeout_s = timeout_s
        self.high_water_mark = NO_EVENT
        self._clock = clock
        self._pending: deque[_Pending] = deque()
        self._last_pushed = NO_EVENT

    def __len__(self) -> int:
        return len(self._pending)

    def check_next(self, event_id: int) -> None:
        # Monotonic ids are what make "everything <= high-water mark is settled" true.
        if event_id <= self._last_pushed:
            raise ValueError(
                f"event_id: {self.direction.value} events must increase, got {event_id} after {self._last_pushed}"
            )

    def push(self, event_id: int, handle: CopyHandle) -> None:
        self.check_next(event_id)
        self._last_pushed = event_id
        deadline = None if self.timeout_s is None else self._clock() + self.timeout_s
        self._pending.append(_Pending(event_id, handle, deadline))

    def is_settled(self, event_id: int) -> bool:
        return event_id <= self.high_water_mark

    def poll(self) -> list[CopyOutcome]:
        """Settle the finished (or expired) copies at the front; never blocks."""
        outcomes = []
        now = None
        while self._pending:
            head = self._pending[0]
            if head.handle.done():
                error = _safe_error(head.handle)
            else:
                now = self._clock() if now is None else now
                if head.deadline is None or now < head.deadline:
                    break
                error = CopyTimeout(f"{self.direction.value} event {head.event_id} still running after {self.timeout_s} s")
            self._pending.popleft()
            self.high_water_mark = head.event_id
            outcomes.append(CopyOutcome(event_id=head.event_id, direction=self.direction, error=error))
        return outcomes

    def wait_all(self, timeout_s: float | None) -> list[CopyOutcome]:
        """Block until every pending copy finished or the shared `timeout_s` ran out; settle them all.

        Copies still running at the end are settled as `CopyTimeout` failures (the preemption flush must return).
        """
        end = None if timeout_s is None else self._clock() + timeout_s
        outcomes = []
        while self._pending:
            head = self._pending.popleft()
            left = None if end is None else max(0.0, end - self._clock())
            try:
                finished = head.handle.wait(left)
            except Exception as exc:  # a handle whose wait raises reports a failed copy, never a crash
                finished, error = True, exc
            else:
                error = _safe_error(head.handle) if finished else CopyTimeout(
                    f"{self.direction.value} event {head.event_id} still running at flush after {timeout_s} s")
            self.high_water_mark = head.event_id
            outcomes.append(CopyOutcome(event_id=head.event_id, direction=self.direction, error=error))
        return outcomes


def _safe_error(handle: CopyHandle) -> BaseException | None:
    try:
        return handle.error()
    except Exception as exc:  # e.g. a CUDA event query that raises an async error
        return exc
