"""`kvtk bench dry --json` end to end on a small crafted Mooncake file: two sizes, each in its own process, with
wall and CPU seconds, peak RSS, hits against the bounds and modelled TTFT. No timing is asserted (a benchmark
prints numbers; a timed test would flake)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.engine


def test_bench_dry_json_reports_both_sizes_and_the_growth(tmp_path):
    trace = tmp_path / "mc.jsonl"
    lines = []
    for i in range(6):
        ids = [0, 1, 2, 10 + i] if i % 2 else [0, 1, 20 + i]
        lines.append(
            json.dumps(
                {"timestamp": 40 * i, "input_length": 512 * (len(ids) - 1) + 100, "output_length": 3, "hash_ids": ids}
            )
        )
    trace.write_text("\n".join(lines) + "\n")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "toolkit",
            "bench",
            "dry",
            "--json",
            "--trace",
            str(trace),
            "--sizes",
            "3,all",
            "--cpu-gib",
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    result = json.loads(out.stdout)
    small, whole = result["runs"]
    assert (small["requests"], whole["requests"]) == (3, 6)
    assert whole["prompt_tokens"] == sum(512 * (3 if i % 2 else 2) + 100 for i in range(6))
    for run, last_arrival_s in ((small, 0.08), (whole, 0.2)):
        assert run["geometry"] == "qwen3-next-80b-a3b" and run["tp"] == 4 and run["scheduler_block_tokens"] == 272
        assert run["steps"] > 0 and run["cpu_s"] > 0 and run["peak_rss_bytes"] > 2**20
        assert run["local_hit_tokens"] + run["external_hit_tokens"] <= run["oracle_reusable_tokens"]
        assert run["ttft_p99_s"] >= run["ttft_p50_s"] > 0 and run["modelled_s"] > last_arrival_s
    assert whole["local_hit_tokens"] + whole["external_hit_tokens"] > 0  # the shared blocks were reused
    assert set(result["growth"]) == {"per_request", "per_prompt_token"}


def test_speed_line_names_the_rate_the_split_and_the_mode():
    from toolkit.bench.dry import speed_line

    row = {
        "requests": 4000,
        "wall_s": 20.0,
        "cpu_s": 19.0,
        "setup_s": 5.0,
        "bounds_s": 3.0,
        "engine_s": 12.0,
        "steps": 450000,
        "skipped_steps": 400000,
        "step_by_step": False,
        "peak_rss_bytes": 2**30,
    }
    line = speed_line(row)
    assert "200 simulated requests/s" in line and "37,500 engine steps/s" in line
    assert "400,000 decode steps skipped" in line and "peak RSS 1.00 GiB" in line
    assert "step by step" in speed_line({**row, "step_by_step": True})
