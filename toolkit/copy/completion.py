"""Completion tracking by event id: one FIFO with a high-water mark per stream (direction).

Copies of one direction finish in submission order (one CUDA stream, or one copy thread), so the tracker only
ever asks the oldest pending copy whether it is done; every event id at or below the high-water mark is settled
(completed or failed).

A settled event releases its blocks (the scheduler unpins them and may reuse them at once), so an event is settled
only once its copy can no longer touch them: a copy past its deadline is marked overdue (it will be reported failed
with `CopyTimeout`, even if it finishes well) but stays in flight until its handle says done, and a flush that runs
out of time leaves unfinished copies in flight too. A handle whose `done()` raises (a CUDA event query reporting an
asynchronous error) is settled as failed with that error: nothing on a broken stream copies any more.
"""

from __future__ import annotations

import enum
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Protocol

from toolkit.core.metadata import NO_EVENT


class Direction(enum.Enum):
    LOAD = "load"  # host mirror -> device
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
    overdue: bool = False


class CompletionTracker:
    """FIFO of in-flight copies of one direction, settled in order."""

    def __init__(
        self, *, direction: Direction, timeout_s: float | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if timeout_s is not None and timeout_s <= 0:
            raise ValueError(f"timeout_s: must be > 0 or None, got {timeout_s}")
        self.direction = direction
        self.timeout_s = timeout_s
        self.high_water_mark = NO_EVENT
        self._clock = clock
        self._pending: deque[_Pending] = deque()
        self._newly_overdue: list[int] = []
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
        """Settle the finished copies at the front, marking the ones past their deadline overdue; never blocks."""
        outcomes = []
        while self._pending:
            head = self._pending[0]
            try:
                finished, error = head.handle.done(), None
            except Exception as exc:
                finished, error = True, exc
            if not finished:
                break
            outcomes.append(self._settle(error if error is not None else _safe_error(head.handle)))
        self._mark_overdue()
        return outcomes

    def take_overdue(self) -> list[int]:
        """Event ids found past their deadline by `poll`/`wait_all` since the last call (for a one-time warning)."""
        newly, self._newly_overdue = self._newly_overdue, []
        return newly

    def wait_all(self, timeout_s: float | None) -> list[CopyOutcome]:
        """Block until every pending copy finished or the shared `timeout_s` ran out; settle the finished ones.

        Copies still running at the end stay in flight (module docstring): the next `poll` settles them.
        """
        end = None if timeout_s is None else self._clock() + timeout_s
        outcomes = []
        while self._pending:
            head = self._pending[0]
            left = None if end is None else max(0.0, end - self._clock())
            try:
                finished, error = head.handle.wait(left), None
            except Exception as exc:  # a handle whose wait raises reports a failed copy, never a crash
                finished, error = True, exc
            if not finished:
                break
            outcomes.append(self._settle(error if error is not None else _safe_error(head.handle)))
        self._mark_overdue()
        return outcomes

    def _settle(self, error: BaseException | None) -> CopyOutcome:
        head = self._pending.popleft()
        if head.overdue:  # seen unfinished past its deadline: failed, however it ended
            error = error or CopyTimeout(
                f"{self.direction.value} event {head.event_id} finished after its {self.timeout_s} s deadline"
            )
        self.high_water_mark = head.event_id
        return CopyOutcome(event_id=head.event_id, direction=self.direction, error=error)

    def _mark_overdue(self) -> None:
        if self.timeout_s is None or not self._pending:
            return
        now = self._clock()
        # Deadlines grow with submission order: stop at the first one not passed.
        for item in self._pending:
            if item.deadline is None or now < item.deadline:
                break
            if not item.overdue and not _finished(item.handle):
                item.overdue = True
                self._newly_overdue.append(item.event_id)


def _finished(handle: CopyHandle) -> bool:
    try:
        return handle.done()
    except Exception:  # settled as failed when it reaches the head
        return True


def _safe_error(handle: CopyHandle) -> BaseException | None:
    try:
        return handle.error()
    except Exception as exc:  # e.g. a CUDA event query that raises an async error
        return exc
