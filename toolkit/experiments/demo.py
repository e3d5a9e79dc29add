"""`make demo`'s job: cold / hot / replay on a tiny hybrid model with the live engine; prints the summary and report.

The demo model (`demo-qwen3-next`, data/models/tiny/) is sized so prefill dominates TTFT on a 2-core CPU; the
trace is the committed few-shot workload (prompts of 2100 tokens sharing a 2000-token prefix, longer than the
hybrid block so the CPU tier can serve them).
"""

from __future__ import annotations

import os


def run_demo(*, model: str = "demo-qwen3-next", trace: str = "fewshot-small", out: str | None = None) -> int:
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from toolkit.experiments.results import format_summary
    from toolkit.experiments.runner import ExperimentConfig, run_experiment

    config = ExperimentConfig(engine="live", model=model, trace=trace, phases=("cold", "hot", "replay"),
                              out=out, progress=True)
    result = run_experiment(config)
    print(format_summary(result.summary))
    rows = {(p["variant"], p["phase"]): p for p in result.summary["phases"]}
    cold, hot = rows.get(("toolkit", "cold")), rows.get(("toolkit", "hot"))
    if cold and hot and cold.get("median_ttft_s") and hot.get("median_ttft_s"):
        print(f"hot/cold median TTFT: {hot['median_ttft_s'] / cold['median_ttft_s']:.2f}x")
    for phase in ("hot", "replay"):
        row = rows.get(("toolkit", phase))
        if row:
            print(f"{phase}: outputs identical to cold: {row.get('outputs_identical')} "
                  f"(max |logprob delta| {row.get('max_abs_logprob_delta')})")
    control = rows.get(("corrupted_kv", "hot"))
    if control:
        print(f"negative control (corrupted loads): outputs identical: {control.get('outputs_identical')}, "
              f"max |logprob delta| {control.get('max_abs_logprob_delta')}")
    print(f"report: {result.paths.get('summary')} (run folder {result.run_dir})")
    return 0
