"""`kvtk sweep SPEC` writes metrics.json in every finished cell, as `kvtk replay`'s grid does, so `kvtk compare` reads
each cell's serving metrics (TTFT mean/p90, goodput) instead of falling back to the summary's percentiles."""

from __future__ import annotations

import json

import pytest

from toolkit.cli.main import main
from toolkit.experiments.compare import load_rows

SPEC = """name: metrics-per-cell
fixed:
  trace: fewshot-small
  phases: [cold, hot]
  device_blocks: 64
axes:
  eviction: [slru, lru]
"""


@pytest.mark.engine
def test_every_cell_of_a_spec_sweep_has_its_metrics_and_compare_reads_them(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    out = tmp_path / "sweep"
    assert main(["sweep", str(spec), "--serial", "--no-progress", "--no-report", "--out", str(out)]) == 0
    cells = sorted((out / "cells").glob("cell-*"))
    assert len(cells) == 2
    for cell in cells:
        document = json.loads((cell / "metrics.json").read_text())
        summary = json.loads((cell / "summary.json").read_text())
        assert {(m["variant"], m["phase"]) for m in document["phases"]} == {
            (p["variant"], p["phase"]) for p in summary["phases"]
        }
    rows = load_rows([out])
    assert len(rows) == 4 and all(r.metrics for r in rows)  # every (cell, phase) row carries its metrics.json
    assert all("goodput_rps" in r.metrics and "ttft_mean_ms" in r.metrics for r in rows)
    capsys.readouterr()
    assert main(["compare", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "goodput req/s" in printed and "SLO TTFT <= 2,000 ms" in printed
