"""The dry engine's shared store below its disk tier (`--store-gib`, `--store-profile`): with a disk too small for
the trace, the store serves what the disk dropped, reads are split between the two and timed by their own profiles;
`--store-gib` without a disk is refused by name."""

from __future__ import annotations

import pytest

from toolkit.errors import BadInput
from toolkit.experiments import ExperimentConfig, run_experiment
from toolkit.experiments.report_tiers import tier_table

pytestmark = pytest.mark.engine

SMALL_DISK_GIB = 0.004  # 26 blocks per rank: the trace's 38 do not fit


def _hot(tmp_path, name: str, disk_gib: float, **store: object) -> dict:
    config = ExperimentConfig(
        engine="dry",
        trace="longdoc-small",
        cpu_gib=0.004,  # 26 blocks per rank: the cold phase's prompts evict each other
        disk_gib=disk_gib,
        disk_load_rule="always",
        phases=("cold", "hot"),
        out=str(tmp_path / name),
        **store,
    )
    return next(row for row in run_experiment(config).phases.to_dicts() if row["phase"] == "hot")


def test_a_store_below_a_small_disk_adds_hits_and_reads_split_by_tier_and_profile(tmp_path):
    alone = _hot(tmp_path, "alone", SMALL_DISK_GIB)
    rdma = _hot(tmp_path, "rdma", SMALL_DISK_GIB, store_gib=1.0, store_profile="mooncake-rdma-4x200g")
    tcp = _hot(tmp_path, "tcp", SMALL_DISK_GIB, store_gib=1.0, store_profile="mooncake-tcp-this-host")
    one_tier = _hot(tmp_path, "one-tier", 1.0)  # a single lower tier of the store's size
    assert "shared_store_hit_tokens" not in alone and "shared_store_hit_tokens" not in one_tier
    # The store holds what the small disk dropped; a single tier that holds everything hits at least as much.
    assert alone["external_hit_tokens"] < rdma["external_hit_tokens"] <= one_tier["external_hit_tokens"]
    assert rdma["disk_hit_tokens"] > 0 and rdma["shared_store_hit_tokens"] > 0  # reads from both tiers
    assert rdma["disk_bytes_read"] > 0 and rdma["shared_store_bytes_read"] == rdma["shared_store_bytes_loaded"] > 0
    assert rdma["shared_store_blocks_held"] >= rdma["disk_blocks_held"]  # inclusive, and larger
    # Only the store's model differs: the same hits, a slower clock on the measured loopback TCP store.
    columns = ("external_hit_tokens", "disk_hit_tokens", "shared_store_hit_tokens", "shared_store_bytes_read")
    assert all(rdma[c] == tcp[c] for c in columns)
    assert rdma["ttft_p50_s"] < tcp["ttft_p50_s"]
    table = tier_table([rdma])
    assert table is not None and [row[2] for row in table.rows] == [
        "disk (scheduler's index)",
        "store (scheduler's index)",
    ]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"engine": "dry", "store_gib": 64.0}, "store_gib: 64.0 models a shared store below the dry engine's disk"),
        ({"engine": "live", "store_gib": 64.0}, "store_gib: 64.0"),
        ({"engine": "dry", "disk_gib": 1.0, "store_gib": 0.0001}, "store_gib"),
        ({"engine": "dry", "disk_gib": 1.0, "store_gib": 1.0, "store_profile": "floppy"}, "store_profile"),
    ],
)
def test_bad_dry_store_options_are_refused_by_name(tmp_path, options, message):
    with pytest.raises(BadInput, match=message) as refused:
        run_experiment(ExperimentConfig(trace="longdoc-small", out=str(tmp_path / "x"), **options))
    assert "\n" not in str(refused.value) and not (tmp_path / "x").exists()
