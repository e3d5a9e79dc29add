"""The dry engine's virtual clock: arrivals, step durations from the step-time model, and per-request latencies.

Timeline of one step (what the toolkit connector and vLLM's SimpleCPU both do: loads are asynchronous):

- the scheduler picks the step's work; a request with a CPU-tier hit is not computed in the step that loads it,
  it waits (vLLM's WAITING_FOR_REMOTE_KVS) and is computed in a later step, after its load reported completion;
- its load is submitted with the step and runs on the host->device link while the GPU computes: a step's loads
  are one transfer (its fixed `copy_latency_s` once, then each request's bytes in order), and transfers queue on
  the link (one direction, first come first served) at the step-time model's copy rate;
- a step that computes a request whose load has not finished starts when that load finishes (the engine cannot
  attend to KV it does not have). vLLM would run the step without that request instead; stalling the whole step is
  exact when the request is alone and conservative (later for the others) when it is not;
- stores (device->host) use the other link direction, also asynchronously, and never delay a step;
- with a disk tier, a load whose blocks were promoted from disk (`disk_bytes` of `end_step`) is staged disk ->
  host -> device: its link time becomes `staged_load_s(disk_bytes, copy_s)` (the engine's disk model, pipelined
  block by block), taken in the same link order (conservative: a real tier starts the disk read at lookup);
  blocks promoted from a shared store below the disk (`store_bytes`) are read by the same function, its third
  argument.

Per request: `queue_s` = first step that computes or loads it - arrival; `ttft_s` = end of the step that samples
its first token - arrival; `e2e_s` = end of the step it finishes in - arrival. The harness decides what runs in
which step (hits and outputs do not depend on the clock); the clock only times it. What a step did is read from
vLLM's scheduler output by the dry engine (`toolkit/engines/step_hook.py`), so this module stays pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from toolkit.perfmodel.step_time import ScheduledWork, StepModel


@dataclass(frozen=True)
class RequestTimes:
    queue_s: float | None
    ttft_s: float | None
    e2e_s: float | None


class VirtualClock:
    """Seconds on a modelled GPU; one clock per engine, kept across phases."""

    def __init__(self, model: StepModel, *, staged_load_s: Callable[[int, float, int], float] | None = None) -> None:
        """`staged_load_s(disk_bytes, copy_s, store_bytes)`: a load's seconds when `disk_bytes` of it come from a
        disk tier (`store_bytes` from a store below it) and its host -> device copy alone takes `copy_s` (None: no
        disk tier)."""
        self.model = model
        self.staged_load_s = staged_load_s
        self.now_s = 0.0
        self.busy_s = 0.0
        self.num_steps = 0
        self._link_free_s = 0.0
        self._arrival: dict[str, float] = {}
        self._admitted: dict[str, float] = {}
        self._first_token: dict[str, float] = {}
        self._finished: dict[str, float] = {}
        self._load_ready: dict[str, float] = {}

    def arrive(self, req_id: str, at_s: float) -> None:
        self._arrival[req_id] = at_s

    def wait_until(self, at_s: float) -> None:
        self.now_s = max(self.now_s, at_s)

    def end_step(
        self,
        step: tuple[list[tuple[str, ScheduledWork]], dict[str, int]],
        disk_bytes: Mapping[str, int] | None = None,
        store_bytes: Mapping[str, int] | None = None,
    ) -> float:
        """Advance by one step's duration (a stalled start included); returns the step's end time. `disk_bytes`
        (`store_bytes`): per request, the bytes of its load read from the disk tier (the store below it) first."""
        work, loads = step
        start = self.now_s
        for req_id, _ in work:
            ready = self._load_ready.pop(req_id, None)
            if ready is not None and ready > start:
                start = ready
        duration = self.model.step_seconds([w for _, w in work]) if work else 0.0
        end = start + duration
        if loads:
            # The step's loads are one transfer (both connectors submit one batch per step): its fixed cost once,
            # then each request's bytes in order; a request is ready when its own bytes have moved.
            fixed_s = self.model.copy_seconds(0)
            ready = max(start, self._link_free_s) + fixed_s
            for req_id, num_bytes in loads.items():
                self._admitted.setdefault(req_id, start)
                copy_s = self.model.copy_seconds(num_bytes) - fixed_s
                from_disk = disk_bytes.get(req_id, 0) if disk_bytes else 0
                from_store = store_bytes.get(req_id, 0) if store_bytes else 0
                if (from_disk or from_store) and self.staged_load_s is not None:
                    copy_s = self.staged_load_s(from_disk, copy_s, from_store)
                ready += copy_s
                self._load_ready[req_id] = ready
            self._link_free_s = ready
        for req_id, w in work:
            self._admitted.setdefault(req_id, start)
            if w.samples:
                self._first_token.setdefault(req_id, end)
        if work:
            self.num_steps += 1
            self.busy_s += duration
        self.now_s = end
        return end

    def skip_step(self, duration: float) -> None:
        """Advance by one decode step that `decode_stretch.py` performed without the scheduler (no loads, every
        request already admitted and past its first token): the same bookkeeping as `end_step`."""
        self.num_steps += 1
        self.busy_s += duration
        self.now_s += duration

    def finish(self, req_id: str) -> None:
        self._finished[req_id] = self.now_s

    def take(self, req_id: str) -> RequestTimes:
        arrival = self._arrival.pop(req_id, None)
        admitted = self._admitted.pop(req_id, None)
        first = self._first_token.pop(req_id, None)
        done = self._finished.pop(req_id, None)
        self._load_ready.pop(req_id, None)
        if arrival is None:
            return RequestTimes(None, None, None)
        return RequestTimes(
            None if admitted is None else admitted - arrival,
            None if first is None else first - arrival,
            None if done is None else done - arrival,
        )
