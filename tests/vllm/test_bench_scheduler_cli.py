"""`kvtk bench scheduler --json` end to end (one short repeat): stdout is one JSON document with both connectors'
numbers and the sweep rows. No timing is asserted here (a benchmark prints numbers; a timed test would flake)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.engine


def test_bench_scheduler_json_is_parseable_and_complete():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "toolkit",
            "bench",
            "scheduler",
            "--json",
            "--repeats",
            "1",
            "--max-tokens",
            "4",
            "--sweep-max-tokens",
            "2",
            "--statistic",
            "median",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    result = json.loads(out.stdout)  # vLLM's own logs went to stderr
    for side in ("toolkit", "vllm_simplecpu"):
        assert result[side]["steps"] > 0 and result[side]["connector_us_per_step"] > 0
    assert result["trace"]["max_tokens"] == 4 and result["trace"]["num_requests"] >= 256
    assert [row["max_tokens"] for row in result["by_output_tokens"]] == [4, 2]
    # Reuse, device and CPU together (what prefill saves); CPU-tier tokens alone can be fewer than vLLM 0.34's
    # (tests/vllm/test_vllm_differential.py says why).
    assert result["toolkit"]["reused_tokens"] >= result["vllm_simplecpu"]["reused_tokens"]
    assert result["toolkit"]["external_hit_tokens"] > 0 and result["vllm_simplecpu"]["external_hit_tokens"] > 0
    assert result["statistic"] == "median" and result["repeats"] == 1
    assert result["meets_time_target"] == (result["time_ratio_toolkit_over_vllm"] <= 0.5)
