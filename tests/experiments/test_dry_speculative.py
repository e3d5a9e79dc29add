"""The dry engine under speculative decoding (`--speculative`): vLLM's scheduler and both connectors apply the
drafter's rules, so an MTP drafter's dropped block shows in the hit counts, the toolkit still serves at least what
SimpleCPU serves, and an ngram drafter (no drop) changes nothing."""

from __future__ import annotations

import pytest

from toolkit.experiments import ExperimentConfig, run_experiment

pytestmark = pytest.mark.engine

TRACE = "fewshot:seed=3,num_requests=6,prefix_tokens=1500,question_tokens=80"


def _tokens(tmp_path, speculative: str) -> dict[tuple[str, str], int]:
    config = ExperimentConfig(
        engine="dry",
        trace=TRACE,
        phases=("cold", "hot"),
        speculative=speculative,
        baselines=("simplecpu",),
        out=str(tmp_path / speculative),
    )
    result = run_experiment(config)
    return {(p["variant"], p["phase"]): p["external_hit_tokens"] for p in result.summary["phases"]}


def test_mtp_drops_a_block_of_each_hit_and_ngram_does_not(tmp_path):
    plain, ngram, mtp = (_tokens(tmp_path, s) for s in ("none", "ngram", "mtp"))
    assert ngram == plain
    for variant in ("toolkit", "simplecpu"):
        assert 0 < mtp[(variant, "hot")] < plain[(variant, "hot")], (variant, mtp, plain)
    assert mtp[("toolkit", "hot")] >= mtp[("simplecpu", "hot")]


def test_a_drafter_the_engine_cannot_model_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="speculative: unknown drafter 'eagle4'"):
        ExperimentConfig(engine="dry", speculative="eagle4")
    with pytest.raises(ValueError, match="speculative: only the dry engine"):
        ExperimentConfig(engine="live", speculative="mtp")
