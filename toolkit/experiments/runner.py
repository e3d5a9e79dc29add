"""Cold / hot / pressure / replay on one trace, for the toolkit and its baselines, with bounds and tidy results.

    result = run_experiment(ExperimentConfig(engine="dry", trace="fewshot-small", baselines=("no_offload",)))
    result.phases      # polars: one row per (variant, phase)
    result.requests    # polars: one row per (variant, phase, request)
    result.summary     # the JSON the CLI prints

Phases: `cold` (empty caches), `hot` (the same prompts after the device prefix cache is drained and reset),
`pressure` (unrelated prompts sized to evict the device cache and `pressure_evict_fraction` of the trace's
CPU-tier footprint), `replay` (the original prompts again, after a reset). Every variant runs on a fresh engine,
except the live negative control (`corrupted_kv`: hot with corrupted loads), which follows the main variant on its
engine and CPU tier instead of filling a second one.
The oracle (infinite tier) and Belady (offline furthest-next-use at the CPU tier's capacity) are computed in pure
Python over the same prompt sequence; see `oracle.py` for the cost model.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from toolkit import limits
from toolkit.engines.base import LazyPrompt, PhaseRequest, VariantSpec, variants_for
from toolkit.engines.vllm_log import VLLM_LOG_NAME, VllmLogCapture
from toolkit.experiments import oracle as orc
from toolkit.experiments.capacity import check_cpu_budget, probe_geometry
from toolkit.experiments.results import RequestRecord, RunFolder, phases_frame, records_frame, summarize_phase
from toolkit.host_cpu import MODEL_DTYPES, host_summary
from toolkit.private_fs import unique_dir
from toolkit.workloads.clients import previous_turns
from toolkit.workloads.generators import pressure as pressure_trace
from toolkit.workloads.resolve import resolve_trace
from toolkit.workloads.traces import Trace

PHASES = ("cold", "hot", "pressure", "replay")
ENGINES = ("dry", "live", "server")


@dataclass(frozen=True, kw_only=True)
class ExperimentConfig:
    engine: str = "dry"
    model: str = "tiny-qwen3-next"
    trace: str = "fewshot-small"
    max_requests: int | None = None  # the trace's first N requests (None: all)
    time_scale: float = 1.0  # arrival times divided by this (2: requests arrive twice as fast)
    gpu: str = "h200"  # dry: the step-time model's GPU profile (data/gpus/)
    compute_efficiency: float = 0.5  # dry: achieved / peak FLOP/s in the step-time model
    copy_gbps: float | None = None  # dry: host<->device copy rate, GB/s (None: the profile's PCIe x 0.8)
    window: int | None = None  # dry: requests in flight at most (None: the engine's default)
    concurrency: int | None = None  # closed loop: N clients, each turn after its previous (clients.py)
    phases: tuple[str, ...] = PHASES
    cpu_gib: float | None = None  # None: enough for every prompt block of the trace, twice over
    policy: str = "eager"
    fine_grained: bool = True
    eviction: str = "slru"  # the connector's default (toolkit/vllm/config.py DEFAULT_EVICTION_POLICY)
    connector: str = "toolkit"  # the main variant's connector ("simplecpu" runs vLLM's own as main)
    baselines: tuple[str, ...] = ()
    prefix_match_unit: int | None = 128  # vLLM's hash unit; None = its default (the whole hybrid block)
    device_blocks: int | None = None  # device KV cache blocks (None: the engine's default)
    device_gib: float | None = None  # dry, model presets: KV-cache GiB per rank (sets the device blocks)
    tp: int = 1  # dry, model presets: tensor-parallel size (page bytes, CPU split)
    dcp: int = 1  # dry, model presets: decode-context-parallel size
    max_num_seqs: int = 16
    reset_before: tuple[str, ...] = ("hot", "replay")
    pressure_evict_fraction: float = 0.5  # share of the trace's CPU footprint the pressure traffic displaces
    pressure_prompt_tokens: int | None = None
    negative_control: bool = True  # live: also run hot with corrupted loads
    warmup: bool = True  # live: one unrelated prompt (longest trace length) before the phases
    dtype: str = "auto"  # tiny models' dtype (live; dry page sizes); auto = host_cpu.live_model_dtype
    logprob_tolerance: float = 1e-2  # live: stated tolerance where bit-exactness does not hold
    url: str | None = None  # server: a running vLLM server's base URL (http://HOST:PORT)
    out: str | None = None  # run folder (None: runs/<time>-<engine>-<trace>)
    progress: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"engine: unknown engine {self.engine!r}; valid: {', '.join(ENGINES)}")
        if (self.engine == "server") != (self.url is not None):
            raise ValueError(
                f"url: the server engine needs --url http://HOST:PORT and only it takes one "
                f"(engine {self.engine!r}, url {self.url!r})"
            )
        if self.url is not None and not (
            isinstance(self.url, str) and self.url.startswith(("http://", "https://")) and len(self.url) <= 2048
        ):
            raise ValueError(f"url: an http:// or https:// base URL is needed, got {self.url!r}")
        if self.engine == "server" and self.baselines:
            raise ValueError(
                f"baselines: a server is one variant (its own connector); start one server per "
                f"variant and run each (got baselines {list(self.baselines)})"
            )
        bad = [p for p in self.phases if p not in PHASES]
        if bad or not self.phases:
            raise ValueError(f"phases: unknown phase(s) {bad}; valid phases: {', '.join(PHASES)}")
        if self.device_gib is not None and self.device_gib <= 0:
            raise ValueError(f"device_gib: must be positive, got {self.device_gib}")
        if self.cpu_gib is not None and self.cpu_gib <= 0:
            raise ValueError(f"cpu_gib: must be positive, got {self.cpu_gib}")
        if self.window is not None and self.window < 1:
            raise ValueError(f"window: must be >= 1 request in flight, got {self.window}")
        if self.concurrency is not None and not (type(self.concurrency) is int and 1 <= self.concurrency <= 4096):
            raise ValueError(f"concurrency: must be 1..4096 clients, got {self.concurrency!r}")
        if self.concurrency is not None and self.window is not None:
            raise ValueError(
                f"window/concurrency: the open-loop window ({self.window}) and closed-loop clients "
                f"({self.concurrency}) exclude each other; give one"
            )
        if not 0 < self.compute_efficiency <= 1:
            raise ValueError(f"compute_efficiency: must be in (0, 1], got {self.compute_efficiency}")
        if self.copy_gbps is not None and self.copy_gbps <= 0:
            raise ValueError(f"copy_gbps: must be positive, got {self.copy_gbps}")
        if self.dtype not in MODEL_DTYPES:
            raise ValueError(f"dtype: unknown model dtype {self.dtype!r}; valid: {', '.join(MODEL_DTYPES)}")
        limits.check_experiment_config(self)  # finite sizes within the caps, counts >= 1


@dataclass
class ExperimentResult:
    summary: dict[str, Any]
    requests: Any  # polars.DataFrame
    phases: Any  # polars.DataFrame
    run_dir: Path
    paths: dict[str, Path] = field(default_factory=dict)


def phase_prompts(trace: Trace) -> list[PhaseRequest]:
    """One request per trace request; token ids are made when an engine reads them (memory stays bounded)."""
    return [
        PhaseRequest(
            r.request_id, LazyPrompt(partial(trace.prompt_token_ids, r), trace.prompt_len(r)), r.max_tokens, r.arrival_s
        )
        for r in trace.requests
    ]


def _keyed(requests: list[PhaseRequest], unit: int) -> list[tuple[list[int], int]]:
    # list() first: a lazy prompt builds its tokens once per request, not once per slice.
    return [(orc.prefix_keys(list(r.prompt_token_ids), unit), len(r.prompt_token_ids)) for r in requests]


def make_engine(config: ExperimentConfig, spec: VariantSpec, cpu_bytes: int, *, max_model_len: int = 8192):
    if config.engine == "dry":
        from toolkit.engines.dry import DryEngine

        return DryEngine(
            spec,
            model=config.model,
            cpu_bytes=cpu_bytes,
            max_model_len=max_model_len,
            num_gpu_blocks=config.device_blocks or 256,
            prefix_match_unit=config.prefix_match_unit,
            max_num_seqs=_max_num_seqs(config),
            tp=config.tp,
            dcp=config.dcp,
            dtype=config.dtype,
            device_bytes=None if config.device_gib is None else int(config.device_gib * 2**30),
        )
    if config.engine == "server":
        from toolkit.engines.server import ServerEngine

        # The server's own options (connector, tier size, blocks) hold; the config names the variant only.
        return ServerEngine(spec, url=config.url)
    from toolkit.engines.live import LiveEngine

    return LiveEngine(
        spec,
        model=config.model,
        cpu_bytes=cpu_bytes,
        num_gpu_blocks=config.device_blocks,
        prefix_match_unit=config.prefix_match_unit,
        max_num_seqs=_max_num_seqs(config),
        dtype=config.dtype,
    )


def _max_num_seqs(config: ExperimentConfig) -> int:
    # N closed-loop clients are N requests the engine may run at once, not a queue in front of max_num_seqs.
    return max(config.max_num_seqs, config.concurrency or 0)


def configure_dry_clock(engine, config: ExperimentConfig) -> None:
    """The dry engine's step-time model (GPU profile, TP, efficiency, copy rate) and window, from the config."""
    if config.engine != "dry":
        return
    from toolkit.perfmodel.step_time import build_clock_model

    engine.step_model = build_clock_model(
        config.model,
        gpu=config.gpu,
        tp=getattr(config, "tp", 1),
        compute_efficiency=config.compute_efficiency,
        copy_bytes_per_s=config.copy_gbps * 1e9 if config.copy_gbps else None,
    )
    if config.window:
        engine.window = config.window


def _virtual_now(engine) -> float:
    clock = getattr(engine, "clock", None)
    return clock.now_s if clock is not None else 0.0


def default_cpu_bytes(trace: Trace, block_tokens: int, blocks_per_block: int, block_bytes: int) -> int:
    blocks = sum(-(-trace.prompt_len(r) // block_tokens) for r in trace.requests) * blocks_per_block
    return 2 * max(blocks, 1) * block_bytes


def _pressure_requests(config: ExperimentConfig, desc: dict, footprint_blocks: int, trace: Trace) -> list[PhaseRequest]:
    sched = desc["scheduler_block_tokens"]
    per = desc["blocks_per_scheduler_block"]
    free_blocks = max(0, desc["cpu_blocks"] - footprint_blocks)
    cpu_blocks = free_blocks + int(config.pressure_evict_fraction * footprint_blocks)
    tokens = max(int(desc["device_tokens"] * 1.2), cpu_blocks // per * sched)
    prompt = config.pressure_prompt_tokens or max(trace.prompt_len(r) for r in trace.requests)
    num = max(1, -(-tokens // prompt))
    t = pressure_trace(num_requests=num, prompt_tokens=prompt, seed=config.seed, vocab_size=trace.vocab_size)
    return phase_prompts(t)


def run_experiment(config: ExperimentConfig) -> ExperimentResult:
    trace = resolve_trace(config.trace, max_requests=config.max_requests, time_scale=config.time_scale)
    variants = variants_for(
        policy=config.policy,
        fine_grained=config.fine_grained,
        eviction=config.eviction,
        baselines=config.baselines,
        connector=config.connector,
    )
    if config.engine == "live" and config.negative_control and "hot" in config.phases:
        from dataclasses import replace

        # Right after the main variant: it reuses that engine and its filled CPU tier (`LiveEngine.switch_to`).
        variants.insert(1, replace(variants[0], name="corrupted_kv", corrupt_loads=True))
    limits.check_before_start(config, trace)  # every check that can fail runs before the folder exists
    if config.concurrency and any(r.arrival_s for r in trace.requests):
        raise ValueError(
            f"concurrency: trace {trace.name!r} has arrival times (open loop); closed-loop clients "
            "are for traces without them (drop --concurrency to replay its arrivals)"
        )
    run_dir = (
        Path(config.out)
        if config.out
        else unique_dir("runs", f"{time.strftime('%Y%m%d-%H%M%S')}-{config.engine}-{limits.path_component(trace.name)}")
    )
    folder = RunFolder(run_dir)
    folder.mark("running")
    try:
        return _run_variants(config, trace, variants, folder, run_dir)
    except BaseException as exc:
        status = "failed" if isinstance(exc, Exception) else "interrupted"  # Ctrl-C is not the run's fault
        folder.mark(status, error=f"{type(exc).__name__}: {exc}")
        raise


def _run_variants(config, trace, variants, folder, run_dir) -> ExperimentResult:
    original = phase_prompts(trace)
    after = previous_turns(trace)
    cpu_bytes = None if config.cpu_gib is None else int(config.cpu_gib * 2**30)
    phase_rows: list[dict] = []
    all_records: list[RequestRecord] = []
    bounds: dict[str, dict[str, int]] = {}
    reference_outputs: dict[str, RequestRecord] = {}
    described: dict | None = None
    pressure: list[PhaseRequest] | None = None
    started = time.time()
    vllm_log = folder.path / VLLM_LOG_NAME
    capture = VllmLogCapture(vllm_log)  # vLLM's INFO lines to the run folder, its warnings to the console once
    kept = None  # the main live engine, kept for the negative control
    warmups: dict[str, float | None] = {}  # variant -> the warm-up request's TTFT (first-call costs, apart)
    for spec in variants:
        capture.start()
        engine, kept = kept, None
        fresh = engine is None
        try:
            if not fresh:
                engine.switch_to(spec)
            if fresh and (cpu_bytes is None or described is None):
                geo = probe_geometry(config)
                if cpu_bytes is None:
                    cpu_bytes = geo.get("fixed_cpu_bytes") or default_cpu_bytes(
                        trace, geo["scheduler_block_tokens"], geo["blocks_per_scheduler_block"], geo["cpu_block_bytes"]
                    )
                check_cpu_budget(cpu_bytes, geo["cpu_block_bytes"])
            engine = engine or make_engine(
                config,
                spec,
                cpu_bytes,
                max_model_len=max(8192, max(trace.prompt_len(r) + r.max_tokens for r in trace.requests) + 1),
            )
            configure_dry_clock(engine, config)
            desc = engine.describe()
            if config.engine != "server":  # a server's tier is its own
                check_cpu_budget(cpu_bytes, desc["cpu_block_bytes"])
            if described is None:
                described = desc
                folder.write_params(
                    {
                        "config": asdict(config),
                        "trace": {
                            "name": trace.name,
                            "workload": trace.workload,
                            "requests": len(trace.requests),
                            "prompt_tokens": trace.total_prompt_tokens(),
                            "params": trace.params,
                        },
                        "engine": desc,
                        "variants": [v.describe() for v in variants],
                        "host": host_summary(),
                    }
                )
                sequence = _phase_sequence(config, original, desc, trace)
                pressure = sequence.get("pressure")
                bounds = _bounds(config, sequence, desc)
            if fresh and config.warmup and hasattr(engine, "warm_up"):
                warm = engine.warm_up(max(len(r.prompt_token_ids) for r in original))
                if warm is not None:  # kept in requests.parquet (phase "warmup"), out of every phase's statistics
                    folder.add_warmup(warm)
                    all_records.append(warm)
                    warmups[spec.name] = warm.ttft_s
            for phase in config.phases if fresh else ("hot",):  # the control: corrupted loads, hot only
                requests = pressure if phase == "pressure" else original
                if phase in config.reset_before:
                    engine.reset_device_cache()
                t0, v0 = time.perf_counter(), _virtual_now(engine)
                records = engine.run_phase(
                    phase, requests, progress=config.progress, concurrency=config.concurrency, after=after
                )
                wall = time.perf_counter() - t0
                oracle = bounds[phase]["oracle_per_request"]
                for rec, o in zip(records, oracle):
                    rec.oracle_reusable_tokens = o
                    if rec.miss_reason is None and rec.local_hit_tokens + rec.external_hit_tokens < o:
                        rec.miss_reason = "below_oracle"
                extra = {
                    "wall_s": wall,
                    "modelled_s": _virtual_now(engine) - v0 if config.engine == "dry" else None,
                    "belady_hit_tokens": bounds[phase]["belady"],
                    "lru_sim_hit_tokens": bounds[phase]["lru"],
                }
                extra.update(_output_check(config, spec is variants[0], phase, records, reference_outputs))
                phase_extra = getattr(engine, "phase_extra", None)  # the server engine's per-phase hit split
                if phase_extra is not None:
                    extra.update(phase_extra(phase))
                row = summarize_phase(records, **extra)
                folder.add_phase(records, row)
                phase_rows.append(row)
                all_records.extend(records)
            if spec is variants[0] and len(variants) > 1 and variants[1].corrupt_loads:
                kept = engine
        finally:
            if engine is not None and engine is not kept:
                engine.close()
            capture.stop()
    summary = build_summary(config, trace, described or {}, phase_rows, bounds, time.time() - started)
    summary["warmup_ttft_s"] = warmups
    summary["run_dir"] = str(run_dir)
    summary["vllm_log"] = str(vllm_log)
    paths = folder.finish(summary)
    paths["vllm_log"] = vllm_log
    return ExperimentResult(summary, records_frame(all_records), phases_frame(phase_rows), run_dir, paths)


def _phase_sequence(config, original, desc, trace) -> dict[str, list[PhaseRequest]]:
    seq: dict[str, list[PhaseRequest]] = {}
    for phase in config.phases:
        if phase == "pressure":
            if desc.get("cpu_blocks") is None or desc.get("device_tokens") is None:
                raise ValueError(
                    "phases: pressure needs the CPU tier's and device cache's size; this server does "
                    "not report them (no vllm:kvtk_tier_geometry: not the toolkit's connector); "
                    "drop pressure from --phases"
                )
            unit = desc["scheduler_block_tokens"]
            footprint = (
                len({k for keys, _ in _keyed(original, unit) for k in keys}) * desc["blocks_per_scheduler_block"]
            )
            seq[phase] = _pressure_requests(config, desc, footprint, trace)
        else:
            seq[phase] = original
    return seq


def _bounds(config, sequence: dict[str, list[PhaseRequest]], desc: dict) -> dict[str, dict[str, Any]]:
    """Per request the oracle, per phase Belady and LRU-sim CPU-tier hit tokens: all at the hash unit, where the
    tier's hits end (fine-grained hits inside a scheduler block), so no achieved hit exceeds its bound."""
    unit = desc["hash_block_tokens"]
    seen: set[int] = set()
    out: dict[str, dict[str, Any]] = {}
    keyed: dict[str, list[tuple[list[int], int]]] = {}
    by_list: dict[int, list[tuple[list[int], int]]] = {}  # cold, hot and replay send the same list: key it once
    for phase in config.phases:
        # A lazy prompt's tokens are built, keyed and dropped; the keys serve the oracle and the simulations.
        requests = sequence[phase]
        if id(requests) not in by_list:  # `sequence` keeps every list alive, so ids are not reused meanwhile
            by_list[id(requests)] = _keyed(requests, unit)
        keyed[phase] = by_list[id(requests)]
        out[phase] = {"oracle_per_request": orc.oracle_reusable_tokens(keyed[phase], unit, seen)}
        out[phase]["oracle"] = sum(out[phase]["oracle_per_request"])
    if desc.get("cpu_blocks") is None:  # a server without the toolkit's connector: its tier size is unknown
        sims = {phase: {"belady": None, "lru": None} for phase in config.phases}
    else:
        sims = orc.keyed_phase_bounds(
            config.phases, keyed, hash_unit=unit, capacity_tokens=orc.tier_capacity_tokens(desc)
        )
    for phase in config.phases:
        out[phase]["belady"] = sims[phase]["belady"]
        out[phase]["lru"] = sims[phase]["lru"]
    return out


def _output_check(config, is_main, phase, records, reference) -> dict[str, Any]:
    if config.engine not in ("live", "server"):  # the dry engine has no outputs
        return {}
    if is_main and phase == "cold":
        reference.update({r.request_id: r for r in records})
        return {"outputs_identical": True, "max_abs_logprob_delta": 0.0, "tokens_identical": True}
    if phase == "pressure" or not reference:
        return {}
    from toolkit.engines.live import compare_outputs

    return compare_outputs(records, reference, tolerance=config.logprob_tolerance)


def build_summary(config, trace, desc, rows, bounds, elapsed_s) -> dict[str, Any]:
    keep = (
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
    )
    phases = [{k: row[k] for k in keep if k in row} for row in rows]
    return {
        "engine": config.engine,
        "model": config.model,
        "trace": trace.name,
        "workload": trace.workload,
        "policy": config.policy,
        "fine_grained": config.fine_grained,
        "eviction": config.eviction,
        "concurrency": config.concurrency,
        "prefix_match_unit": desc.get("prefix_match_unit"),
        "hash_block_tokens": desc.get("hash_block_tokens"),
        "scheduler_block_tokens": desc.get("scheduler_block_tokens"),
        "cpu_bytes": desc.get("cpu_bytes"),
        "cpu_blocks": desc.get("cpu_blocks"),
        "device_blocks": desc.get("device_blocks"),
        "logprob_tolerance": config.logprob_tolerance if config.engine in ("live", "server") else None,
        "phases": phases,
        "oracle_reusable_tokens": {p: b["oracle"] for p, b in bounds.items()},
        "belady_hit_tokens": {p: b["belady"] for p, b in bounds.items()},
        "belady_unit_tokens": desc.get("hash_block_tokens"),  # Belady and LRU-sim keys: the hash unit
        "elapsed_s": round(elapsed_s, 3),
    }
