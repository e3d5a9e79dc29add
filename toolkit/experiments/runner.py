"""Cold / hot / pressure / replay on one trace, for the toolkit and its baselines, with bounds and tidy results.

    result = run_experiment(ExperimentConfig(engine="dry", trace="fewshot-small", baselines=("no_offload",)))
    result.phases      # polars: one row per (variant, phase)
    result.requests    # polars: one row per (variant, phase, request)
    result.summary     # the JSON the CLI prints

`run_experiment(config)` is `execute(plan(config))`: `plan.py` decides everything that can be decided (and refused)
before the run folder exists; `execute` starts the engines, runs the phases and writes the run folder.

Phases: `cold` (empty caches), `hot` (the same prompts after the device prefix cache is drained and reset),
`pressure` (unrelated prompts sized to evict the device cache and `pressure_evict_fraction` of the trace's
CPU-tier footprint), `replay` (the original prompts again, after a reset). Every variant runs on a fresh engine,
except the live negative control (`corrupted_kv`: hot with corrupted loads), which follows the main variant on its
engine and CPU tier instead of filling a second one.
The oracle (infinite tier) and Belady (offline furthest-next-use at the CPU tier's capacity) are computed in pure
Python over the same prompt sequence (`phases.request_bounds`); see `oracle.py` for the cost model.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from toolkit import limits
from toolkit.engines.base import Engine, PhaseRequest, VariantSpec
from toolkit.engines.facts import EngineFacts
from toolkit.engines.records import RequestRecord
from toolkit.engines.vllm_log import VLLM_LOG_NAME, VllmLogCapture
from toolkit.experiments.cache_state import start_recording
from toolkit.experiments.capacity import check_cpu_budget
from toolkit.experiments.config import ENGINES, PHASES, ExperimentConfig
from toolkit.experiments.oracle import PhaseBounds
from toolkit.experiments.phases import phase_prompts, phase_sequence, request_bounds
from toolkit.experiments.plan import Plan, make_engine, plan
from toolkit.experiments.results import RunFolder, phases_frame, records_frame, summarize_phase
from toolkit.experiments.run_store import StoreTier, run_store
from toolkit.host_cpu import host_summary
from toolkit.private_fs import unique_dir
from toolkit.workloads.traces import Trace

__all__ = [
    "ENGINES",
    "PHASES",
    "ExperimentConfig",
    "ExperimentResult",
    "execute",
    "phase_prompts",
    "plan",
    "run_experiment",
]


@dataclass
class ExperimentResult:
    summary: dict[str, Any]
    requests: Any  # polars.DataFrame
    phases: Any  # polars.DataFrame
    run_dir: Path
    paths: dict[str, Path] = field(default_factory=dict)


def run_experiment(config: ExperimentConfig) -> ExperimentResult:
    return execute(plan(config))


def execute(p: Plan) -> ExperimentResult:
    """Run a plan: a run folder (status.json says running, failed, interrupted or complete), then every variant."""
    c = p.config
    run_dir = (
        Path(c.out)
        if c.out
        else unique_dir("runs", f"{time.strftime('%Y%m%d-%H%M%S')}-{c.engine}-{limits.path_component(p.trace.name)}")
    )
    folder = RunFolder(run_dir)
    folder.mark("running")  # with the pid and a heartbeat: a run killed outright reads as dead, not running
    try:
        return _run_variants(p, folder)
    except BaseException as exc:
        status = "failed" if isinstance(exc, Exception) else "interrupted"  # Ctrl-C is not the run's fault
        folder.mark(status, error=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        folder.status.stop_heartbeat()


@dataclass
class _Run:
    """What one execution has gathered so far; the bounds and the phase sequence come with the first engine."""

    plan: Plan
    folder: RunFolder
    rows: list[dict[str, Any]] = field(default_factory=list)
    records: list[RequestRecord] = field(default_factory=list)
    bounds: dict[str, PhaseBounds] = field(default_factory=dict)
    sequence: dict[str, list[PhaseRequest]] = field(default_factory=dict)
    reference: dict[str, RequestRecord] = field(default_factory=dict)  # the main variant's cold outputs
    described: EngineFacts | None = None
    warmups: dict[str, float | None] = field(default_factory=dict)  # variant -> warm-up TTFT (first-call costs)
    recorder: Any = None  # the main variant's cache-state recorder (`--record-cache-state`, `cache_state.py`)


def _run_variants(p: Plan, folder: RunFolder) -> ExperimentResult:
    with run_store(p.config, folder.path) as store:  # `--store`: up before the first engine, down after the last
        return _run_variants_on(p, folder, store)


def _run_variants_on(p: Plan, folder: RunFolder, store: StoreTier | None) -> ExperimentResult:
    run = _Run(p, folder)
    started = time.time()
    vllm_log = folder.path / VLLM_LOG_NAME
    capture = VllmLogCapture(vllm_log)  # vLLM's INFO lines to the run folder, its warnings to the console once
    kept: Engine | None = None  # the main live engine, kept for the negative control
    for spec in p.variants:
        capture.start()
        engine, kept = kept, None
        fresh = engine is None
        try:
            if engine is None:
                engine = make_engine(p, spec, disk_path=str(folder.path / "disk"), store=store)
            else:
                engine.switch_to(spec)
            _describe(run, engine)
            if fresh:
                _warm_up(run, engine, spec)
            if spec is p.variants[0]:
                run.recorder = start_recording(p.config, engine, spec, folder.path)
            for phase in p.config.workload.phases if fresh else ("hot",):  # the control: corrupted loads, hot only
                _run_phase(run, engine, spec, phase)
            if spec is p.variants[0] and p.has_control:
                kept = engine
        finally:
            if run.recorder is not None:  # what was recorded is written, a failed run's too
                run.recorder.close()
                run.recorder = None
            if engine is not None and engine is not kept:
                engine.close()
            capture.stop()
    summary = build_summary(p.config, p.trace, run.described, run.rows, run.bounds, time.time() - started)
    summary["warmup_ttft_s"] = run.warmups
    summary["run_dir"] = str(folder.path)
    summary["vllm_log"] = str(vllm_log)
    paths = folder.finish(summary)
    paths["vllm_log"] = vllm_log
    return ExperimentResult(summary, records_frame(run.records), phases_frame(run.rows), folder.path, paths)


def _describe(run: _Run, engine: Engine) -> None:
    """The engine's geometry; from the first engine also params.json, the phase sequence and the bounds."""
    p = run.plan
    desc = engine.describe()
    if p.config.engine != "server":  # a server's tier is its own
        check_cpu_budget(p.cpu_bytes, desc.cpu_block_bytes)
    if run.described is not None:
        return
    run.described = desc
    trace = p.trace
    run.folder.write_params(
        {
            "config": p.config.to_params(),
            "trace": {
                "name": trace.name,
                "workload": trace.workload,
                "requests": len(trace.requests),
                "prompt_tokens": trace.total_prompt_tokens(),
                "params": trace.params,
            },
            "engine": desc.to_json(),
            "variants": [v.describe() for v in p.variants],
            "host": host_summary(),
        }
    )
    run.sequence = phase_sequence(p.config, p.requests, desc, trace)
    run.bounds = request_bounds(p.config, run.sequence, desc)


def _warm_up(run: _Run, engine: Engine, spec: VariantSpec) -> None:
    if not run.plan.config.live.warmup:
        return
    warm = engine.warm_up(max(len(r.prompt_token_ids) for r in run.plan.requests))
    if warm is not None:  # kept in requests.parquet (phase "warmup"), out of every phase's statistics
        run.folder.add_warmup(warm)
        run.records.append(warm)
        run.warmups[spec.name] = warm.ttft_s


def _run_phase(run: _Run, engine: Engine, spec: VariantSpec, phase: str) -> None:
    p, c = run.plan, run.plan.config
    requests = run.sequence["pressure"] if phase == "pressure" else p.requests
    if run.recorder is not None:
        run.recorder.phase = phase
    if phase in c.workload.reset_before:
        engine.reset_device_cache()
    t0, v0 = time.perf_counter(), engine.virtual_now_s()
    records = engine.run_phase(phase, requests, progress=c.progress, concurrency=c.workload.concurrency, after=p.after)
    wall = time.perf_counter() - t0
    v1 = engine.virtual_now_s()
    bounds = run.bounds[phase]
    for rec, o in zip(records, bounds.oracle_per_request):
        rec.oracle_reusable_tokens = o
        if rec.miss_reason is None and rec.local_hit_tokens + rec.external_hit_tokens < o:
            rec.miss_reason = "below_oracle"
    extra = {
        "wall_s": wall,
        "modelled_s": v1 - v0 if c.engine == "dry" and v0 is not None and v1 is not None else None,
        "belady_hit_tokens": bounds.belady,
        "lru_sim_hit_tokens": bounds.lru,
    }
    extra.update(_output_check(c, spec is p.variants[0], phase, records, run.reference))
    extra.update(engine.phase_extra(phase))  # the server engine's per-phase hit split
    row = summarize_phase(records, **extra)
    run.folder.add_phase(records, row)
    run.rows.append(row)
    run.records.extend(records)


def _output_check(
    config: ExperimentConfig,
    is_main: bool,
    phase: str,
    records: list[RequestRecord],
    reference: dict[str, RequestRecord],
) -> dict[str, Any]:
    if config.engine not in ("live", "server"):  # the dry engine has no outputs
        return {}
    if is_main and phase == "cold":
        reference.update({r.request_id: r for r in records})
        return {"outputs_identical": True, "max_abs_logprob_delta": 0.0, "tokens_identical": True}
    if phase == "pressure" or not reference:
        return {}
    from toolkit.engines.outputs import compare_outputs

    return compare_outputs(records, reference, tolerance=config.live.logprob_tolerance)


SUMMARY_PHASE_KEYS = (
    "variant",
    "phase",
    "requests",
    "prompt_tokens",
    "local_hit_tokens",
    "external_hit_tokens",
    "recomputed_tokens",
    "oracle_reusable_tokens",
    "hit_fraction_of_oracle",
    "belady_hit_tokens",
    "lru_sim_hit_tokens",
    "load_bytes",
    "store_bytes",
    "median_ttft_s",
    "mean_ttft_s",
    "wall_s",
    "modelled_s",
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "queue_p50_s",
    "queue_p90_s",
    "queue_p99_s",
    "e2e_p50_s",
    "e2e_p90_s",
    "e2e_p99_s",
    "miss_reasons",
    "outputs_identical",
    "tokens_identical",
    "max_abs_logprob_delta",
    "within_tolerance",
    "differing_output_tokens",
    "output_tokens",
    # the dry engine's disk tier, where one runs (`engines/disk_columns.py`)
    "disk_hit_tokens",
    "disk_bytes_written",
    "disk_bytes_loaded",
    "disk_write_amplification",
)


def build_summary(
    config: ExperimentConfig,
    trace: Trace,
    desc: EngineFacts | None,
    rows: list[dict[str, Any]],
    bounds: Mapping[str, PhaseBounds],
    elapsed_s: float,
) -> dict[str, Any]:
    phases = [{k: row[k] for k in SUMMARY_PHASE_KEYS if k in row} for row in rows]
    # The main variant as its connector runs it (`VariantSpec.describe`): SimpleCPU as main is not "fine-grained".
    main = desc.variant if desc is not None else {}
    return {
        "engine": config.engine,
        "model": config.model,
        "trace": trace.name,
        "workload": trace.workload,
        "policy": main.get("policy", config.variant.policy),
        "fine_grained": main.get("fine_grained", config.variant.fine_grained),
        "eviction": main.get("eviction", config.variant.eviction),
        "concurrency": config.workload.concurrency,
        "prefix_match_unit": desc.prefix_match_unit if desc is not None else None,
        "hash_block_tokens": desc.hash_block_tokens if desc is not None else None,
        "scheduler_block_tokens": desc.scheduler_block_tokens if desc is not None else None,
        "cpu_bytes": desc.cpu_bytes if desc is not None else None,
        "cpu_blocks": desc.cpu_blocks if desc is not None else None,
        "device_blocks": desc.device_blocks if desc is not None else None,
        "logprob_tolerance": config.live.logprob_tolerance if config.engine in ("live", "server") else None,
        "phases": phases,
        "oracle_reusable_tokens": {p: b.oracle for p, b in bounds.items()},
        "belady_hit_tokens": {p: b.belady for p, b in bounds.items()},
        # Belady and LRU-sim keys: the hash unit
        "belady_unit_tokens": desc.hash_block_tokens if desc is not None else None,
        "elapsed_s": round(elapsed_s, 3),
    }
