"""`kvtk replay` with lists: a tier-size x seed grid on a Mooncake-format slice prints one comparison table and
writes one report with the capacity curve; bad list input is one line, exit 2, nothing created.

The slice is written here (Mooncake's format: 512-token blocks named by `hash_ids`), so the test runs where the
shared Mooncake trace is absent; the tiny model and a 16-block device cache make small tiers matter."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from toolkit.cli.main import main

TIERS_GIB = ("0.01", "0.05")


def write_mooncake_slice(path: Path) -> Path:
    """12 requests, two families of shared prefix blocks, two own blocks each; arrivals 200 ms apart."""
    lines, own = [], 100
    for i in range(12):
        prefix = ([0, 1, 2] if i % 2 == 0 else [0, 1]) if i < 6 else [10 + i % 3, 11 + i % 3]
        ids = [*prefix, own, own + 1]
        own += 2
        lines.append({"timestamp": i * 200, "input_length": len(ids) * 512 - 100, "output_length": 4, "hash_ids": ids})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    root = tmp_path_factory.mktemp("grid")
    trace = write_mooncake_slice(root / "slice.jsonl")
    out = root / "sweep"
    argv = ["replay", "--trace", str(trace), "--phases", "cold,hot", "--device-blocks", "16"]
    argv += ["--cpu-gib", ",".join(TIERS_GIB), "--seeds", "1,2", "--baseline", "simplecpu", "--out", str(out)]
    return argv, out


@pytest.mark.engine
def test_a_tier_by_seed_grid_prints_one_table_and_writes_one_report(grid, capsys):
    argv, out = grid
    assert main(argv) == 0
    captured = capsys.readouterr()
    printed = captured.out
    assert "every seed gives the same numbers" in captured.err  # no pressure phase, a trace that is not drawn
    headers = [line for line in printed.splitlines() if line.startswith("tier GiB")]
    assert len(headers) == 1 and "CPU-tier tokens" in headers[0] and "TTFT p50 ms" in headers[0]
    assert "seeds folded: mean ± 95% interval" in printed and "SLO TTFT <= 2,000 ms" in printed
    cells = sorted((out / "cells").glob("cell-*"))
    assert len(cells) == len(TIERS_GIB) * 2  # one run per (tier, seed)
    # Every cell is a run folder with its serving metrics; the table's numbers are the cells' own.
    seen: dict[tuple[float, str], set[int]] = {}
    for cell in cells:
        summary = json.loads((cell / "summary.json").read_text())
        params = json.loads((cell / "params.json").read_text())["config"]
        assert (cell / "metrics.json").is_file()
        for p in summary["phases"]:
            if p["phase"] == "hot":
                seen.setdefault((params["cpu_gib"], p["variant"]), set()).add(p["external_hit_tokens"])
    assert all(len(v) == 1 for v in seen.values())  # the seeds vary only the pressure traffic, not run here
    hot = {key: values.pop() for key, values in seen.items()}
    small, large = (float(t) for t in TIERS_GIB)
    assert hot[(large, "toolkit")] >= hot[(small, "toolkit")]  # a larger tier never holds less
    with (out / "compare.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(TIERS_GIB) * 2 * 2  # tier x variant x phase, seeds folded
    row = next(r for r in rows if r["cpu_gib"] == TIERS_GIB[1] and r["variant"] == "toolkit" and r["phase"] == "hot")
    assert row["runs"] == "2" and float(row["cpu_tier_tokens"]) == hot[(large, "toolkit")]
    assert "config.model" in row and row["config.trace"].endswith("slice.jsonl")
    report = (out / "report.html").read_text()
    assert "Plotly.newPlot" in report and 'src="http' not in report  # plotly.js inlined: it renders offline
    assert "Tier size against CPU-tier tokens (hot phase)" in report and "CPU tier (GiB)" in report
    assert "CPU tier 0.01, 0.05 GiB" in report and "hash unit 128" in report and "GPU profile h200" in report
    assert f"at {large:g} GiB the CPU tier serves {float(row['cpu_tier_tokens']):,.0f} tokens" in report


BAD_LISTS = [
    (["--cpu-gib", "64,abc"], "--cpu-gib: invalid float value 'abc' in the list '64,abc'"),
    (["--cpu-gib", "64,64"], "--cpu-gib: a value repeats in the list '64,64'"),
    (["--cpu-gib", "1,-1"], "--cpu-gib=-1: cpu_gib: must be"),
    (["--tp", "1,two"], "--tp: invalid int value 'two'"),
    (["--seeds", "1,x"], "--seeds: invalid int value 'x'"),
    (["--engine", "live", "--cpu-gib", "1,2"], "a list of values sweeps dry runs only"),
]


@pytest.mark.parametrize(("options", "message"), BAD_LISTS)
def test_bad_list_input_is_one_line_exit_2_and_no_folder(tmp_path, monkeypatch, capsys, options, message):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "never"
    assert main(["replay", "--phases", "cold", *options, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no --out, no runs/
