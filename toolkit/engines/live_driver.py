"""How the live engine drives vLLM between its steps: who is sent (closed-loop clients, or open-loop arrivals on the
engine's clock), what each step did (the work vLLM's scheduler gave it, for the step log `kvtk calibrate` fits),
when each request's first token came, on the wall or in CPU seconds, and whether steps still make progress
(`ProgressWatch`: no silent hang).

CPU seconds (`time_source="cpu"`): on a shared host the wall clock also counts the time other tenants held the
cores; the process's CPU time counts the engine's own work. It stands still while the engine idles, so the clock
adds the idle time it skips while waiting for the next arrival (the dry engine's clock jumps the same way).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

from toolkit.engines.base import PhaseRequest
from toolkit.engines.step_hook import scheduled_work
from toolkit.perfmodel.step_time import ScheduledWork

TIME_SOURCES = ("wall", "cpu")
StepLog = list[tuple[tuple[ScheduledWork, ...], float]]
# Wall seconds of engine steps in a row that schedule nothing while requests wait before the live run is declared
# stalled: far above a CPU-tier load on this host (milliseconds to a few seconds), so only a scheduler that will
# never schedule again reaches it (a load that never completes; a request larger than the device cache cannot
# occur: vLLM refuses at start a cache that cannot hold max_model_len, and longer prompts are refused in the plan).
LIVE_STALL_S = 60.0
# vLLM's `scheduler_cls` of the live engine: its scheduler with step listeners (`watched_scheduler.py`).
WATCHED_SCHEDULER = "toolkit.engines.watched_scheduler.WatchedScheduler"


class ProgressWatch:
    """The live engine's no-progress watchdog: `step` raises `HarnessStalled` once steps have scheduled nothing for
    `limit_s` seconds in a row while requests were unfinished. Counted in time, not steps (the dry engine's
    `StallWatch`): a live step with nothing to schedule takes microseconds, a real load seconds. A gap with no
    steps at all (between phases) is no stall: a run of empty steps starts at the first one."""

    def __init__(self, limit_s: float = LIVE_STALL_S, who: str = "live engine") -> None:
        self.limit_s, self.who = limit_s, who
        self._since: float | None = None  # when the current run of empty steps began

    def step(self, num_scheduled_tokens: int, num_unfinished: Callable[[], int], now_s: float) -> None:
        if num_scheduled_tokens:
            self._since = None
            return
        waiting = num_unfinished()
        if not waiting:
            self._since = None
            return
        if self._since is None:
            self._since = now_s
            return
        if now_s - self._since >= self.limit_s:
            from toolkit.engines.harness.stall import HarnessStalled

            since, self._since = self._since, None
            raise HarnessStalled(
                f"{self.who}: no step scheduled anything for {now_s - since:.0f} s with {waiting} request(s) "
                "unfinished: vLLM's scheduler is waiting for device blocks or loads that never come"
            )


class EngineClock:
    """Seconds for the live engine's records: `perf_counter`, or process CPU seconds plus the idle time skipped."""

    def __init__(self, source: str) -> None:
        if source not in TIME_SOURCES:
            raise ValueError(f"time_source: must be one of {', '.join(TIME_SOURCES)}, got {source!r}")
        self.source = source
        self._skipped_s = 0.0

    def now(self) -> float:
        if self.source == "cpu":
            return time.process_time() + self._skipped_s
        return time.perf_counter()

    def wait_until(self, at_s: float) -> None:
        """Idle until `at_s` (nothing in flight): sleep on the wall; skip it in CPU time."""
        gap = at_s - self.now()
        if gap <= 0:
            return
        if self.source == "cpu":
            self._skipped_s += gap
        else:
            time.sleep(gap)


class Arrivals:
    """Open loop: each request is sent once the clock reaches `start_s` + its `arrival_s`, in trace order (arrival
    times never decrease along a trace), however many are in flight."""

    def __init__(self, requests: Sequence[PhaseRequest], start_s: float) -> None:
        self._requests = list(requests)
        self._start_s = start_s
        self._cursor = 0
        self._in_flight = 0

    @property
    def done(self) -> bool:
        return self._cursor == len(self._requests) and not self._in_flight

    @property
    def next_arrival_s(self) -> float | None:
        if self._cursor == len(self._requests):
            return None
        return self._start_s + self._requests[self._cursor].arrival_s

    def take(self, now_s: float) -> list[PhaseRequest]:
        out: list[PhaseRequest] = []
        while self._cursor < len(self._requests) and self.arrival_s(self._requests[self._cursor]) <= now_s:
            out.append(self._requests[self._cursor])
            self._cursor += 1
        self._in_flight += len(out)
        return out

    def arrival_s(self, request: PhaseRequest) -> float:
        return self._start_s + request.arrival_s

    def finish(self, request_id: str) -> None:
        self._in_flight -= 1


class StepWatcher:
    """Reads what each step of one engine does, as a listener of its `WatchedScheduler`: its work for the step log
    (steps that load from the CPU tier are left out: `kvtk calibrate` fits their copies apart) and which requests
    sample a token in it."""

    def __init__(self, scheduler: Any, harness_like: Any) -> None:
        if not hasattr(scheduler, "step_listeners"):
            raise TypeError(
                f"scheduler: {type(scheduler).__name__} is not {WATCHED_SCHEDULER} (start_llm's scheduler_cls)"
            )
        self.log: StepLog | None = None
        self.work: tuple[ScheduledWork, ...] | None = None
        self.sampled: list[str] = []
        self.progress = ProgressWatch()  # every step of this engine: generate(), the clients', drains
        self._scheduler = scheduler
        self._harness_like = harness_like
        scheduler.step_listeners.append(self._on_step)

    def _on_step(self, output: Any) -> None:
        from toolkit.engines.harness import loaded_pairs_of

        scheduler = self._scheduler
        self.progress.step(output.total_num_scheduled_tokens, scheduler.get_num_unfinished_requests, time.monotonic())
        work = scheduled_work(output, scheduler.requests)
        self.sampled = [req_id for req_id, w in work if w.samples]
        if self.log is not None:
            meta = output.kv_connector_metadata
            loads = meta is not None and any(loaded_pairs_of(meta, self._harness_like).values())
            self.work = None if loads else tuple(w for _, w in work)

    def step(self, engine: Any, clock: EngineClock, first_token: dict[str, float]) -> list[Any]:
        """One `engine.step()`: logged with its duration, and the clock at its end for each first token sampled."""
        self.work, self.sampled = None, []
        start = clock.now()
        outputs: list[Any] = engine.step()
        end = clock.now()
        if self.log is not None and self.work:
            self.log.append((self.work, end - start))
        for req_id in self.sampled:
            first_token.setdefault(req_id, end)
        return outputs
