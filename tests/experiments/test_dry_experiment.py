"""The dry engine (real vLLM scheduler + KV cache manager, fabricated outputs) through every phase and baseline."""

from __future__ import annotations

import json
import os
import stat

import polars as pl
import pytest

from toolkit.experiments import ExperimentConfig, load_run, run_experiment

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def fewshot_run(tmp_path_factory, connector):
    out = tmp_path_factory.mktemp("runs") / "dry-fewshot"
    config = ExperimentConfig(
        engine="dry",
        trace="fewshot-small",
        connector=connector,
        out=str(out),
        baselines=("no_offload", "simplecpu", "no_fine_grained", "lazy"),
    )
    return run_experiment(config)


def _row(result, variant, phase):
    return next(p for p in result.summary["phases"] if p["variant"] == variant and p["phase"] == phase)


def test_every_variant_runs_every_phase(fewshot_run, connector):
    variants = {p["variant"] for p in fewshot_run.summary["phases"]}
    assert {"no_offload", "simplecpu", "no_fine_grained", "lazy"} <= variants
    assert fewshot_run.phases.height == len(variants) * 4
    for p in fewshot_run.summary["phases"]:
        assert p["prompt_tokens"] == p["local_hit_tokens"] + p["external_hit_tokens"] + p["recomputed_tokens"]


def test_hot_phase_is_served_by_the_cpu_tier_not_the_device(fewshot_run, connector):
    main = fewshot_run.summary["phases"][0]["variant"]
    hot = _row(fewshot_run, main, "hot")
    assert hot["local_hit_tokens"] == 0  # the reset really happened
    assert hot["external_hit_tokens"] >= 0.98 * fewshot_run.summary["oracle_reusable_tokens"]["hot"]
    assert _row(fewshot_run, "no_offload", "hot")["external_hit_tokens"] == 0


def test_fine_grained_beats_block_aligned_on_few_shot(fewshot_run, connector):
    if connector != "toolkit":
        pytest.skip("fine-grained on/off is a toolkit connector switch (toolkit.vllm not exported yet)")
    main = fewshot_run.summary["phases"][0]["variant"]
    assert (
        _row(fewshot_run, main, "hot")["external_hit_tokens"]
        > _row(fewshot_run, "no_fine_grained", "hot")["external_hit_tokens"]
    )


def test_run_folder_is_private_and_complete(fewshot_run):
    folder = fewshot_run.run_dir
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    for name in ("params.json", "summary.json", "requests.parquet", "phases.parquet"):
        assert stat.S_IMODE(os.stat(folder / name).st_mode) == 0o600
    params = json.loads((folder / "params.json").read_text())
    from toolkit.vllm.version import installed_distribution

    dist, version = installed_distribution()  # the build that ran it, on each row of the version matrix
    assert params["engine"]["prefix_match_unit"] == 128 and params["versions"][dist] == version
    frame = pl.read_parquet(folder / "requests.parquet")
    assert {"hit_boundary_per_group", "miss_reason", "load_bytes", "oracle_reusable_tokens"} <= set(frame.columns)
    assert load_run(folder)["summary"]["phases"] == fewshot_run.summary["phases"]


def test_a_run_stopped_half_way_keeps_its_finished_phases(tmp_path, connector, monkeypatch):
    from toolkit.engines import dry

    calls = {"n": 0}
    original = dry.DryEngine.run_phase

    def dying(self, phase, requests, **kw):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt("killed half-way")
        return original(self, phase, requests, **kw)

    monkeypatch.setattr(dry.DryEngine, "run_phase", dying)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(
            ExperimentConfig(engine="dry", trace="agentic-small", connector=connector, out=str(tmp_path / "half"))
        )
    run = load_run(tmp_path / "half")
    assert run["summary"] is None and run["progress"]["status"] == "running"
    assert sorted(run["requests"]["phase"].unique().to_list()) == ["cold", "hot"]


@pytest.mark.parametrize("trace", ["agentic-small", "longdoc-small"])
def test_other_workloads_reach_the_oracle_when_hot(trace, tmp_path, connector):
    result = run_experiment(
        ExperimentConfig(
            engine="dry", trace=trace, connector=connector, phases=("cold", "hot"), out=str(tmp_path / trace)
        )
    )
    hot = result.summary["phases"][1]
    oracle = result.summary["oracle_reusable_tokens"]["hot"]
    assert hot["local_hit_tokens"] + hot["external_hit_tokens"] >= 0.98 * oracle


def test_per_request_columns_come_from_the_connector(fewshot_run, connector):
    if connector != "toolkit":
        pytest.skip("per-request lookups, loads and stores are observed on the toolkit connector")
    frame = fewshot_run.requests
    main = frame.filter(pl.col("variant") == fewshot_run.summary["phases"][0]["variant"])
    geometry = fewshot_run.summary
    cold, hot = main.filter(pl.col("phase") == "cold"), main.filter(pl.col("phase") == "hot")
    # Cold: every block is stored once; the first request found nothing (the core's own miss reason).
    assert cold["store_bytes"].sum() > 0 and cold["load_bytes"].sum() == 0
    assert cold["miss_reason"][0] not in (None, "below_oracle")
    # Hot: every hit is loaded (bytes = loaded blocks x block bytes) and its per-group boundary covers the hit.
    assert (hot["load_bytes"] > 0).all()
    for row in hot.iter_rows(named=True):
        assert len(row["hit_boundary_per_group"]) == 4  # 3 GDN groups + 1 full attention
        assert min(row["hit_boundary_per_group"]) >= row["local_hit_tokens"] + row["external_hit_tokens"]
        assert len(row["group_miss_reasons"]) == 4
    block_bytes = fewshot_run.summary.get("cpu_bytes") // max(1, geometry["cpu_blocks"])
    assert all(b % block_bytes == 0 for b in main["load_bytes"].to_list() + main["store_bytes"].to_list())
    # The phase sums are the request sums.
    row = _row(fewshot_run, fewshot_run.summary["phases"][0]["variant"], "hot")
    assert row["load_bytes"] == hot["load_bytes"].sum()


def test_experiments_default_eviction_is_the_connectors():
    from toolkit.engines.base import VariantSpec
    from toolkit.vllm.config import DEFAULT_EVICTION_POLICY, parse_config

    assert DEFAULT_EVICTION_POLICY == "slru" == parse_config({}).eviction_policy
    assert ExperimentConfig().variant.eviction == VariantSpec(name="x").eviction == DEFAULT_EVICTION_POLICY


def test_run_folder_parents_it_creates_are_private(tmp_path):
    from toolkit.experiments.results import RunFolder

    RunFolder(tmp_path / "a" / "b" / "run")
    for folder in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "run"):
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700, folder
