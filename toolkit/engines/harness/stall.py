"""A scheduler that stopped scheduling: with every transfer instant, steps that schedule nothing while requests
wait can only be a scheduler waiting for device blocks or loads that never come. The harness's `run_until_idle`
and the dry engine's step loop both watch for it (`StallWatch`) and end with one line (`HarnessStalled`)."""

from __future__ import annotations

from typing import Callable

from toolkit.errors import RunFailed


class HarnessStalled(RuntimeError, RunFailed):
    """The scheduler stopped scheduling while requests wait (`StallWatch`)."""


class StallWatch:
    """Counts consecutive steps that scheduled nothing while requests were unfinished; `step` raises
    `HarnessStalled` once there were `limit` of them in a row. `who` starts the line ("harness", "dry engine")."""

    def __init__(self, limit: int, who: str) -> None:
        self.limit, self.who = limit, who
        self.idle_steps = 0

    def step(self, num_scheduled_tokens: int, num_unfinished: Callable[[], int]) -> None:
        """After a step; `num_unfinished` is asked only after a step that scheduled nothing (most steps schedule)."""
        if num_scheduled_tokens:
            self.idle_steps = 0
            return
        waiting = num_unfinished()
        if not waiting:
            self.idle_steps = 0  # only connector work left: not a stall
            return
        self.idle_steps += 1
        if self.idle_steps >= self.limit:
            raise HarnessStalled(
                f"{self.who}: {self.idle_steps} steps in a row scheduled nothing with {waiting} request(s) "
                f"unfinished: vLLM's scheduler is waiting for device blocks or loads that never come"
            )
