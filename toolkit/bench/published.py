"""`kvtk bench dry --check-published`: the dry engine against published serving runs of the same shape.

Each case is a closed-loop benchmark as the publication ran it (N concurrent clients, fixed input and output
lengths, random prompts so nothing is reused), replayed by the dry engine (vLLM's scheduler, `--concurrency N`
clients) on the preset's KV layout at the publication's GPU, TP and weight dtype, timed by the roofline step model.
Printed: modelled against published TTFT, TPOT / ITL and output throughput, with the relative error.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from toolkit.workloads.random_prompts import random_prompts


@dataclass(frozen=True)
class PublishedRun:
    name: str
    source: str
    model: str  # the preset whose shapes stand in for the published model
    gpu: str
    tp: int
    weight_dtype: str  # "bfloat16" or "fp8" (weights read and the tensor-core peak)
    input_tokens: int
    output_tokens: int
    concurrency: int
    num_requests: int
    published: dict  # metric -> seconds (or tokens/s)
    notes: str = ""


PUBLISHED = (
    PublishedRun(
        name="vLLM, Qwen3-Next-80B-A3B BF16, 1 x H200, 16 clients",
        source="vLLM issue 36795 (as cited in kvtk issue 22)",
        model="qwen3-next-80b-a3b",
        gpu="h200",
        tp=1,
        weight_dtype="bfloat16",
        input_tokens=228,
        output_tokens=296,
        concurrency=16,
        num_requests=96,
        published={"ttft_mean_s": 0.236, "ttft_p99_s": 0.380, "tpot_mean_s": 0.00987, "output_tokens_per_s": 1505},
        notes="ShareGPT-like prompts (~228 tokens), prefix caching off; the output length is not published: 296 "
        "is what 1,505 tok/s at 16 clients, 236 ms TTFT and 9.87 ms TPOT imply",
    ),
    PublishedRun(
        name="SGLang, Qwen3-Coder-Next-FP8, 2 x H100, 8 clients",
        source="SGLang issue 18195 (as cited in kvtk issue 22)",
        model="qwen3-next-80b-a3b",
        gpu="h100",
        tp=2,
        weight_dtype="fp8",
        input_tokens=1024,
        output_tokens=1024,
        concurrency=8,
        num_requests=24,
        published={"ttft_p50_s": 0.338, "tpot_mean_s": 0.00825},
        notes="Qwen3-Next's architecture (the Coder-Next shapes are taken as Qwen3-Next-80B-A3B's); ITL as TPOT",
    ),
)


def _step_model(run: PublishedRun):
    from toolkit.perfmodel.step_time import StepTimeModel, load_gpu, shape_for_model

    shape = shape_for_model(run.model)
    if run.weight_dtype == "fp8":
        shape = dataclasses.replace(shape, dtype_bytes=1)
    return StepTimeModel(
        shape=shape, gpu=load_gpu(run.gpu), tp=run.tp, compute_dtype="fp8" if run.weight_dtype == "fp8" else "bfloat16"
    )


def model_run(run: PublishedRun, *, device_gib: float = 16.0, seed: int = 0) -> dict:
    """The case through the dry engine: the modelled metrics of `run.published`, plus the run's cost."""
    from toolkit.engines.base import PhaseRequest, VariantSpec
    from toolkit.engines.dry import DryEngine

    prompts = random_prompts(
        num_requests=run.num_requests, prompt_tokens=run.input_tokens, vocab_size=150000, seed=seed
    )
    requests = [PhaseRequest(f"r{i}", tokens, run.output_tokens) for i, tokens in enumerate(prompts)]
    start = time.perf_counter()
    engine = DryEngine(
        VariantSpec(name="no_offload", connector="none"),
        model=run.model,
        cpu_bytes=0,
        num_gpu_blocks=1,
        device_bytes=int(device_gib * 2**30),
        tp=run.tp,
        prefix_match_unit=None,
        max_num_seqs=max(16, run.concurrency),
        max_model_len=run.input_tokens + run.output_tokens + 1,
        step_model=_step_model(run),
    )
    records = engine.run_phase("bench", requests, concurrency=run.concurrency)
    ttft = sorted(r.ttft_s for r in records)
    tpot = [(r.e2e_s - r.ttft_s) / (run.output_tokens - 1) for r in records]
    modelled = {
        "ttft_mean_s": sum(ttft) / len(ttft),
        "ttft_p50_s": ttft[len(ttft) // 2],
        "ttft_p99_s": ttft[min(len(ttft) - 1, int(0.99 * len(ttft)))],
        "tpot_mean_s": sum(tpot) / len(tpot),
        "output_tokens_per_s": run.output_tokens * len(records) / engine.clock.now_s,
    }
    return {
        "name": run.name,
        "source": run.source,
        "notes": run.notes,
        "metrics": {
            k: {"published": v, "modelled": modelled[k], "error": modelled[k] / v - 1} for k, v in run.published.items()
        },
        "engine_steps": engine.clock.num_steps,
        "wall_s": time.perf_counter() - start,
    }


def check_published(*, json_out: bool = False) -> int:
    import json

    rows = [model_run(run) for run in PUBLISHED]
    if json_out:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        print(f"{row['name']} ({row['source']}; {row['engine_steps']:,} engine steps in {row['wall_s']:.1f} s)")
        print(f"  {row['notes']}")
        for metric, m in row["metrics"].items():
            unit, scale = ("tok/s", 1.0) if metric.endswith("_per_s") else ("ms", 1e3)
            print(
                f"  {metric:<20} modelled {m['modelled'] * scale:9.2f} {unit:<5} published "
                f"{m['published'] * scale:9.2f} {unit:<5} error {m['error']:+.0%}"
            )
    return 0
