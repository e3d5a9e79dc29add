"""`kvtk bench dry --check-published`: the dry engine against published serving runs of the same shape.

Each case is a closed-loop benchmark as the publication ran it (N concurrent clients, its number of requests, its
input and output lengths: fixed, or uniform as SGLang's random dataset draws them; random prompts so nothing is
reused), replayed by the dry engine (vLLM's scheduler, `--concurrency N`
clients) on the preset's KV layout at the publication's GPU, TP and weight dtype, timed by the roofline step model.
Printed: modelled against published TTFT, TPOT / ITL and output throughput, with the relative error.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from toolkit.experiments.results import percentiles

VOCAB = 150000  # prompt token ids in [3, VOCAB): unrelated random prompts, nothing reused (prefix caching off)


@dataclass(frozen=True)
class PublishedRun:
    name: str
    source: str
    model: str  # the preset whose shapes stand in for the published model
    gpu: str
    tp: int
    weight_dtype: str  # "bfloat16" or "fp8" (weights read and the tensor-core peak)
    input_tokens: tuple[int, int]  # per request, uniform in [low, high] (seeded); (n, n) for a fixed length
    output_tokens: tuple[int, int]
    concurrency: int
    num_requests: int
    published: dict  # metric -> seconds (or tokens/s)
    notes: str = ""


_VLLM_METRICS = ("ttft_mean_s", "ttft_p50_s", "ttft_p99_s", "tpot_mean_s", "tpot_p50_s", "output_tokens_per_s")


def _vllm_qwen3_next_h200(
    name: str, source: str, prompt_tokens: int, clients: int, requests: int, published: list[float], notes: str
) -> PublishedRun:
    """A `vllm bench serve` run of Qwen3-Next-80B-A3B BF16 on H200 with fixed lengths and 300 output tokens (both
    vLLM PRs' set-up); `published`: TTFT mean, p50, p99, TPOT mean, p50 (seconds) and output tokens/s."""
    return PublishedRun(
        name=name,
        source=source,
        model="qwen3-next-80b-a3b",
        gpu="h200",
        tp=1,
        weight_dtype="bfloat16",
        input_tokens=(prompt_tokens, prompt_tokens),
        output_tokens=(300, 300),
        concurrency=clients,
        num_requests=requests,
        published=dict(zip(_VLLM_METRICS, published)),
        notes=notes,
    )


PUBLISHED = (
    _vllm_qwen3_next_h200(
        "vLLM, Qwen3-Next-80B-A3B BF16, 1 x H200, 16 clients",
        "vLLM PR 36795 (cited in kvtk issue 22 as issue 36795)",
        prompt_tokens=228,
        clients=16,
        requests=960,
        published=[0.23609, 0.23695, 0.38030, 0.00987, 0.00983, 1505.38],
        notes="vllm bench serve, ShareGPT prompts (219,140 input tokens over 960: 228 each here; the real lengths "
        "vary), --sharegpt-output-len 300 --ignore-eos, --max-num-seqs 16, prefix caching off",
    ),
    _vllm_qwen3_next_h200(
        "vLLM, Qwen3-Next-80B-A3B BF16, H200, 8 clients",
        "vLLM PR 35777 (its baseline run, before the fused GDN kernel); not in kvtk issue 22",
        prompt_tokens=237,
        clients=8,
        requests=1000,
        published=[0.14837, 0.15186, 0.19213, 0.00985, 0.00984, 775.71],
        notes="vllm bench serve, 1,000 prompts (237,165 input tokens: 237 each here), 300 output tokens each, "
        "--max-concurrency 8, 'benchmarked on H200' (its TP is not given: taken as PR 36795's). The same model, "
        "engine and GPU at half the clients: how TTFT and TPOT scale with the batch, which one run cannot show",
    ),
    PublishedRun(
        name="SGLang, Qwen3-Coder-Next-FP8, 2 x H100, 8 clients",
        source="SGLang PR 18195 (cited in kvtk issue 22 as issue 18195), after the tuned MoE config",
        model="qwen3-next-80b-a3b",
        gpu="h100",
        tp=2,
        weight_dtype="fp8",
        input_tokens=(1, 1024),
        output_tokens=(1, 1024),
        concurrency=8,
        num_requests=100,
        published={"ttft_p50_s": 0.33833, "itl_p50_s": 0.00825, "output_tokens_per_s": 390.63},
        notes="sglang.bench_serving --dataset-name random --random-input-len 1024 --random-output-len 1024 "
        "--num-prompts 100: lengths uniform in [1, 1024] (50,561 input tokens over 100); the Coder-Next shapes are "
        "taken as Qwen3-Next-80B-A3B's; ITL compared with the median per-request TPOT",
    ),
)


def request_lengths(bounds: tuple[int, int], count: int, rng) -> list[int]:
    low, high = bounds
    return [low if low == high else rng.randint(low, high) for _ in range(count)]


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
    import random

    from toolkit.engines.base import PhaseRequest, VariantSpec
    from toolkit.engines.dry import DryEngine

    rng = random.Random(seed)
    inputs = request_lengths(run.input_tokens, run.num_requests, rng)
    outputs = request_lengths(run.output_tokens, run.num_requests, rng)
    requests = [
        PhaseRequest(f"r{i}", [rng.randrange(3, VOCAB) for _ in range(n)], m)
        for i, (n, m) in enumerate(zip(inputs, outputs))
    ]
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
        max_model_len=run.input_tokens[1] + run.output_tokens[1] + 1,
        step_model=_step_model(run),
    )
    records = engine.run_phase("bench", requests, concurrency=run.concurrency)
    ttft = [r.ttft_s for r in records]
    # Per request: its decode time per token after the first (requests of one output token have none).
    tpot = [(r.e2e_s - r.ttft_s) / (m - 1) for r, m in zip(records, outputs) if m > 1]
    modelled = {
        "ttft_mean_s": sum(ttft) / len(ttft),
        "tpot_mean_s": sum(tpot) / len(tpot),
        "output_tokens_per_s": sum(outputs) / engine.clock.now_s,
        **percentiles("ttft_s", ttft),  # nearest rank, as every phase table reports them
        **percentiles("tpot_s", tpot),
    }
    modelled["itl_p50_s"] = modelled["tpot_p50_s"]
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
