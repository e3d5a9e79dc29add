"""`kvtk compare` on two earlier `kvtk replay` runs prints their deltas; each run wrote report.html and
metrics.json; the report answers in numbers, shows no column the dry engine leaves empty and no raw JSON."""

from __future__ import annotations

import csv
import json

import pytest
from test_cli_sweep import write_mooncake_slice

from toolkit.cli.main import main

TIERS_GIB = ("0.01", "0.05")


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    trace = write_mooncake_slice(root / "slice.jsonl")
    runs = []
    for tier in TIERS_GIB:
        out = root / f"run-{tier}"
        argv = ["replay", "--trace", str(trace), "--phases", "cold,hot", "--device-blocks", "16", "--cpu-gib", tier]
        assert main([*argv, "--baseline", "simplecpu,no_offload", "--out", str(out)]) == 0
        runs.append(out)
    return runs


def _hot(run, variant):
    summary = json.loads((run / "summary.json").read_text())
    return next(p for p in summary["phases"] if p["variant"] == variant and p["phase"] == "hot")


@pytest.mark.engine
def test_compare_prints_each_run_against_simplecpu_and_no_offload(two_runs, tmp_path, capsys):
    capsys.readouterr()
    assert main(["compare", *map(str, two_runs), "--out", str(tmp_path / "both")]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("tier GiB"))
    columns = [c.strip() for c in header.split("  ") if c.strip()]
    for tier, run in zip(TIERS_GIB, two_runs):
        row = next(line for line in lines if line.split()[:3] == [tier, "toolkit", "hot"])
        mine, theirs = _hot(run, "toolkit"), _hot(run, "simplecpu")
        delta = mine["external_hit_tokens"] - theirs["external_hit_tokens"]
        cells = dict(zip(columns, [c.strip() for c in row.split("  ") if c.strip()]))
        assert cells["CPU-tier tokens"] == f"{mine['external_hit_tokens']:,}"
        assert cells["CPU-tier vs SimpleCPU tokens"] == f"{delta:,}"
        saved = mine["recomputed_tokens"] - _hot(run, "no_offload")["recomputed_tokens"]
        assert cells["recomputed vs no offload tokens"] == f"{saved:,}"
    with (tmp_path / "both.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 2 * 3 * 2 and {r["config.cpu_gib"] for r in rows} == {"0.01", "0.05"}
    assert (tmp_path / "both.parquet").is_file()


@pytest.mark.engine
def test_each_run_has_a_report_that_answers_in_numbers(two_runs):
    run = two_runs[0]
    text = (run / "report.html").read_text()
    mine, theirs = _hot(run, "toolkit"), _hot(run, "simplecpu")
    assert f"{mine['external_hit_tokens']:,} of {mine['prompt_tokens']:,} prompt tokens" in text
    assert f"SimpleCPU {theirs['external_hit_tokens']:,}" in text
    assert "tiny-qwen3-next, TP1/DCP1, device 16 blocks" in text and "CPU tier 0.01 GiB" in text
    assert "outputs identical" not in text  # the dry engine has no outputs: no empty column for them
    assert "{&quot;" not in text and '{"mamba' not in text  # miss reasons as a table, not JSON
    assert "Why hits stopped" in text and "CPU-tier hit tokens per variant and phase" in text
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["slo"] == {"ttft_ms": 2000.0, "tpot_ms": 100.0}
    hot = next(m for m in metrics["phases"] if m["variant"] == "toolkit" and m["phase"] == "hot")
    # The dry engine's decode steps are on its virtual clock: TPOT modelled (4 output tokens a request); no ITL.
    assert hot["output_tokens"] == 4 * hot["requests"] and hot["tpot_p50_ms"] > 0 and hot["itl_p50_ms"] is None
    assert "TPOT p50 ms" in text and "not measured by this engine (dry): ITL" in text
    assert hot["load_bytes"] == mine["load_bytes"] and hot["ttft_p99_ms"] == pytest.approx(mine["ttft_p99_s"] * 1e3)


def test_compare_refuses_a_folder_that_is_not_a_run(tmp_path, capsys):
    (tmp_path / "summary.json").write_text('{"phases": 1, "phases": 2}')
    assert main(["compare", str(tmp_path)]) == 2
    assert "duplicate key 'phases'" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "nothing")]) == 2
