"""The dry engine's virtual clock: arrivals, step durations from the step-time model, and per-request latencies.

Timeline of one step (what the toolkit connector and vLLM's SimpleCPU both do: loads are asynchronous):

- the scheduler picks the step's work; a request with a CPU-tier hit is not computed in the step that loads it,
  it waits (vLLM's WAITING_FOR_REMOTE_KVS) and is computed in a later step, after its load reported completion;
- its load is submitted with the step and runs on the host->device link while the GPU computes: loads queue on
  the link (one direction, first come first served) at the step-time model's copy rate;
- a step that computes a request whose load has not finished starts when that load finishes (the engine cannot
  attend to KV it does not have). vLLM would run the step without that request instead; stalling the whole step is
  exact when the request is alone and conservative (later for the others) when it is not;
- stores (device->host) use the other link direction, also asynchronously, and never delay a step.

Per request: `queue_s` = first step that computes or loads it - arrival; `ttft_s` = end of the step that samples
its first token - arrival; `e2e_s` = end of the step it finishes in - arrival. The harness decides what runs in
which step (hits and outputs do not depend on the clock); the clock only times it.
"""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.perfmodel.step_time import ScheduledWork, StepTimeModel


@dataclass(frozen=True)
class RequestTimes:
    queue_s: float | None
    ttft_s: float | None
    e2e_s: float | None


class StepHook:
    """Records each step's work (tokens, context, sampling, loads) from the harness's step listener, called with
    the step's `SchedulerOutput` right after `schedule()`."""

    def __init__(self, harness, block_bytes: int) -> None:
        from toolkit.engines.harness import loaded_pairs_of

        self._loaded_pairs_of = loaded_pairs_of
        self._harness = harness
        self._block_bytes = block_bytes
        self._last: tuple[list[tuple[str, ScheduledWork]], dict[str, int]] = ([], {})
        # The last step was decode only and moved nothing (`decode_stretch.py` may skip the next ones).
        self.quiet = False
        self.num_scheduled = 0
        harness.step_listeners.append(self.on_scheduled)

    def on_scheduled(self, output) -> None:
        harness = self._harness
        requests = harness.scheduler.requests
        work = []
        decode_only = True
        for req_id, num_new in output.num_scheduled_tokens.items():
            request = requests[req_id]
            # schedule() has already advanced num_computed_tokens by the step's tokens.
            computed = request.num_computed_tokens
            samples = computed >= request.num_tokens
            decode_only = decode_only and num_new == 1 and samples
            work.append((req_id, ScheduledWork(num_new, computed - num_new, samples)))
        meta = output.kv_connector_metadata
        loads = {}
        if meta is not None:
            block_bytes = self._block_bytes
            loads = {r: len(pairs) * block_bytes for r, pairs in self._loaded_pairs_of(meta, harness).items() if pairs}
        self.quiet = (
            bool(work)
            and decode_only
            and not loads
            and _moves_nothing(meta)
            and not output.finished_req_ids
            and not output.preempted_req_ids
        )
        self.num_scheduled = len(work)
        self._last = (work, loads)

    def take(self) -> tuple[list[tuple[str, ScheduledWork]], dict[str, int]]:
        last, self._last = self._last, ([], {})
        return last


def _moves_nothing(meta) -> bool:
    """True when a step's connector metadata carries no load, store, decline or flush (either connector)."""
    if meta is None:
        return True
    step = getattr(meta, "step", None)
    if step is not None:  # the toolkit's HybridConnectorMetadata
        return (
            step.load is None
            and step.store is None
            and not step.load_event_to_req_ids
            and not step.need_flush
            and not meta.declined_req_ids
        )
    load_event, store_event = getattr(meta, "load_event", None), getattr(meta, "store_event", None)
    if load_event is None or store_event is None:
        return False  # a connector this check does not know: never skip
    return load_event < 0 and store_event < 0


class VirtualClock:
    """Seconds on a modelled GPU; one clock per engine, kept across phases."""

    def __init__(self, model: StepTimeModel) -> None:
        self.model = model
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

    def end_step(self, step: tuple[list[tuple[str, ScheduledWork]], dict[str, int]]) -> float:
        """Advance by one step's duration (a stalled start included); returns the step's end time."""
        work, loads = step
        start = self.now_s
        for req_id, _ in work:
            ready = self._load_ready.pop(req_id, None)
            if ready is not None and ready > start:
                start = ready
        duration = self.model.step_seconds([w for _, w in work]) if work else 0.0
        end = start + duration
        for req_id, num_bytes in loads.items():
            self._admitted.setdefault(req_id, start)
            begin = max(start, self._link_free_s)
            self._link_free_s = begin + self.model.copy_seconds(num_bytes)
            self._load_ready[req_id] = self._link_free_s
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
