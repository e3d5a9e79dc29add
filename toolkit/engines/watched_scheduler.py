"""vLLM's scheduler with listeners on each step's output, for the live engine.

vLLM builds its engine's scheduler from `scheduler_cls` (its own option for a scheduler class), so the live engine
names this one (`live_driver.WATCHED_SCHEDULER`) instead of replacing `schedule` on vLLM's instance. The
engine-less harness builds and steps vLLM's scheduler itself and has its own `step_listeners`.
"""

from __future__ import annotations

from typing import Any, Callable

from vllm.v1.core.sched.scheduler import Scheduler


class WatchedScheduler(Scheduler):  # type: ignore[misc]  # vLLM's base is Any to mypy
    """`Scheduler` whose `schedule()` hands its `SchedulerOutput` to each of `step_listeners`, in order, before
    returning it (what vLLM scheduled is unchanged: a listener only reads)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.step_listeners: list[Callable[[Any], None]] = []

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        output = super().schedule(*args, **kwargs)
        for listener in self.step_listeners:
            listener(output)
        return output
