"""Decode stretches: the dry engine's fast path over engine steps in which nothing can change vLLM's decisions.

Most steps of a serving trace are decode steps of the same few requests: each schedules one token per running
request, and between block boundaries such a step allocates no block, caches none, stores and loads nothing and
finishes nobody. `DecodeStretch.advance` performs a run of them at once, with the effects vLLM's scheduler would
have had (per request: `num_computed_tokens` + n, the n sampled tokens appended, so the request's block hashes
advance as they would) and the clock's n step times (`StepTimeModel.decode_stretch_seconds`), without calling
`schedule()` / `update_from_output()`.

A stretch starts only after a *quiet* real step (`step_hook.StepHook.quiet`): every scheduled request was a decode request,
the step carried no load, store or decline, nothing finished, every running request was scheduled and nothing
waits, and the connector has no pending work. It covers, per request, only positions at least one token away from
every block boundary that can matter (each KV group's block, the hash block, the scheduler block, and a sliding
window's trailing edge), stops before a request's last output token (its finishing step is real) and before the
virtual clock reaches the next arrival the engine would admit. The step that ends a stretch is a real step, so
every event happens in vLLM's own code. `DryEngine(step_by_step=True)` is the reference that never skips;
`tests/experiments/test_dry_fast.py` compares the two per request.
"""

from __future__ import annotations

from math import gcd
from typing import TYPE_CHECKING, Callable, Iterator

from toolkit.perfmodel.step_time import StepModel, StepTimeModel

if TYPE_CHECKING:
    from toolkit.engines.harness import Harness
    from toolkit.engines.step_hook import StepHook
    from toolkit.perfmodel.clock import VirtualClock


class DecodeStretch:
    """Skips runs of quiet decode steps on one harness (see the module docstring)."""

    def __init__(self, harness: Harness, model: StepModel) -> None:
        self._harness = harness
        self._scheduler = harness.scheduler
        self._model = model
        # A step model without a stretch series (none but the roofline has one) gets no stretches.
        self._stretch_seconds: Callable[[list[int], int], Iterator[float]] | None = (
            model.decode_stretch_seconds if isinstance(model, StepTimeModel) else None
        )
        units = {harness.scheduler_block_tokens}
        windows: set[int] = set()
        for group in harness.kv_cache_config.kv_cache_groups:
            spec = group.kv_cache_spec
            units.add(spec.block_size)
            window = getattr(spec, "sliding_window", None)
            if window:
                windows.add(window)
        # One period holds every unit's boundaries: a position is safe iff it is safe modulo the lcm.
        period = 1
        for u in units:
            period = period * u // gcd(period, u)
        self._units = tuple(sorted(units))
        self._windows = tuple(sorted(windows))
        self._period = period
        self._safe_run = self._safe_runs(period) if period <= 1 << 16 else None
        self.num_skipped_steps = 0

    def _eventful(self, p: int) -> bool:
        """True where the step computing token `p` (0-based) may allocate, fill or drop a block of some unit."""
        for u in self._units:
            # A new block at 0, a full one at u - 1 (what is computed decides; num_tokens is one ahead but only
            # lookups of new requests read it).
            if p % u in (0, u - 1):
                return True
            for w in self._windows:
                if (p - w) % u in (0, u - 1) or (p + 1 - w) % u in (0, u - 1):
                    return True
        return False

    def _safe_runs(self, period: int) -> list[int] | None:
        """For each position modulo `period`, how many consecutive positions from it are not eventful."""
        if self._windows:
            return None  # windows shift the boundaries off the period's grid: computed per position instead
        eventful = [self._eventful(p) for p in range(period)]
        runs = [0] * period
        # Two passes around the circle so a run that wraps past the period's end is counted whole.
        nxt = 0
        for p in range(2 * period - 1, -1, -1):
            q = p % period
            nxt = 0 if eventful[q] else nxt + 1
            if p < period:
                runs[q] = min(nxt, period)
        return runs

    def _run_from(self, p: int, limit: int) -> int:
        if self._safe_run is not None:
            return min(self._safe_run[p % self._period], limit)
        n = 0
        while n < limit and not self._eventful(p + n):
            n += 1
        return n

    def steps_possible(self, hook: StepHook) -> int:
        """How many decode steps can be skipped now (0 when the last real step was not quiet)."""
        if not hook.quiet or self._stretch_seconds is None:
            return 0
        harness, scheduler = self._harness, self._scheduler
        running = scheduler.running
        if len(running) != hook.num_scheduled or scheduler.get_num_unfinished_requests() != len(running):
            return 0
        if scheduler.finished_req_ids or (harness.connector is not None and harness.connector.has_pending_push_work()):
            return 0
        max_model_len = scheduler.max_model_len
        n = 1 << 30
        for request in running:
            computed = request.num_computed_tokens
            if computed != request.num_tokens - 1 or request.num_output_placeholders or request.spec_token_ids:
                return 0
            # The step that samples the last token (max_tokens or max_model_len) is real: it finishes the request.
            left = min(request.max_tokens - request.num_output_tokens, max_model_len - request.num_tokens) - 1
            n = min(n, self._run_from(computed, left))
            if n <= 0:
                return 0
        return n

    def advance(self, clock: VirtualClock, n: int, arrival_limit_s: float | None) -> int:
        """Run up to `n` skipped decode steps on `clock`, stopping before a step that would start at or after
        `arrival_limit_s` (the engine admits a request then). Returns the steps skipped."""
        if self._stretch_seconds is None:  # `steps_possible` offered none
            return 0
        running = list(self._scheduler.running)
        durations = self._stretch_seconds([r.num_computed_tokens for r in running], n)
        done = 0
        for duration in durations:
            if arrival_limit_s is not None and clock.now_s >= arrival_limit_s:
                break
            clock.skip_step(duration)
            done += 1
        if not done:
            return 0
        harness, records = self._harness, self._harness.requests
        for request in running:
            req_id = request.request_id
            tokens = harness.sample_tokens(req_id, request.num_output_tokens, done)
            request.num_computed_tokens += done
            # The hasher hashes whatever full blocks the tokens complete: at once or one by one alike.
            request.append_output_token_ids(tokens)
            record = records.get(req_id)
            if record is not None:
                record.output_tokens.extend(tokens)
        self.num_skipped_steps += done
        return done
