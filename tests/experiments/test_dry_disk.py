"""The dry engine with a disk tier below a CPU tier too small for the trace (`--disk-gib`): the hot phase hits from
disk what the CPU tier evicted, the summary row says how much, and the disk read is on the modelled clock."""

from __future__ import annotations

import pytest

from toolkit.errors import BadInput
from toolkit.experiments import ExperimentConfig, run_experiment

pytestmark = pytest.mark.engine


def _hot(tmp_path, disk_gib: float, rule: str = "always", policy: str = "write-back", phase: str = "hot") -> dict:
    config = ExperimentConfig(
        engine="dry",
        trace="longdoc-small",
        cpu_gib=0.004,  # 26 blocks per rank: the cold phase's prompts evict each other
        disk_gib=disk_gib,
        disk_load_rule=rule,
        disk_write_policy=policy,
        phases=("cold", "hot"),
        out=str(tmp_path / f"disk-{disk_gib}-{rule}-{policy}-{phase}"),
    )
    result = run_experiment(config)
    summary = next(p for p in result.summary["phases"] if p["phase"] == phase)  # summary.json's row
    row = next(row for row in result.phases.to_dicts() if row["phase"] == phase)  # phases.parquet's, every column
    assert ("disk_hit_tokens" in summary) == bool(disk_gib)
    if disk_gib:
        assert summary["disk_hit_tokens"] == row["disk_hit_tokens"]
    return row


def test_a_cpu_tier_too_small_hits_from_disk(tmp_path):
    cpu_only, cascade = _hot(tmp_path, 0.0), _hot(tmp_path, 1.0)
    assert "disk_hit_tokens" not in cpu_only  # no disk tier: the row has no disk columns
    hashed = cascade["prompt_tokens"] - cascade["recomputed_tokens"]
    assert cascade["external_hit_tokens"] > cpu_only["external_hit_tokens"]
    assert cascade["external_hit_tokens"] == hashed  # every hit of the hot phase through the tiers
    assert 0 < cascade["disk_hit_tokens"] <= cascade["external_hit_tokens"]
    assert cascade["disk_blocks_demoted"] > 0 and cascade["disk_bytes_loaded"] > 0
    assert cascade["disk_bytes_read"] >= cascade["disk_bytes_loaded"]
    assert cascade["disk_write_amplification"] == cascade["disk_bytes_written"] / cascade["disk_bytes_read"]
    # The disk read is on the clock: this host's modelled disk is far slower than the host -> device link.
    assert cascade["ttft_p50_s"] > cpu_only["ttft_p50_s"]
    assert cascade["disk_hits_declined_slow"] == 0  # "always": every disk hit loaded
    # The default rule weighs each disk hit: the tiny model recomputes faster than this host's disk reads, so
    # every hit is cut to the CPU tier's own (the CPU tier alone's hits) and nothing is loaded from disk.
    weighed = _hot(tmp_path, 1.0, rule="cost")
    assert weighed["external_hit_tokens"] == cpu_only["external_hit_tokens"] < cascade["external_hit_tokens"]
    assert weighed["disk_hits_declined_slow"] > 0 and weighed["disk_bytes_loaded"] == 0
    assert weighed["disk_tokens_declined_slow"] > 0


def test_write_through_writes_what_the_cold_phase_stores_and_serves_the_same_hits(tmp_path):
    back, through = _hot(tmp_path, 1.0, phase="cold"), _hot(tmp_path, 1.0, policy="write-through", phase="cold")
    assert through["disk_blocks_demoted"] > back["disk_blocks_demoted"] > 0  # also what the CPU tier still holds
    hot = _hot(tmp_path, 1.0, policy="write-through")
    assert hot["external_hit_tokens"] == hot["prompt_tokens"] - hot["recomputed_tokens"] and hot["disk_hit_tokens"] > 0


def test_a_shared_store_below_the_cpu_tier_is_timed_by_its_own_profile(tmp_path):
    """The same hits through a lower tier timed as this host's disk, Mooncake over loopback TCP (slower, measured)
    and Mooncake on 4x200 Gbps RDMA (published): only the clock differs, in that order."""
    rows = {}
    for profile in ("this-host", "mooncake-tcp-this-host", "mooncake-rdma-4x200g"):
        config = ExperimentConfig(
            engine="dry",
            trace="longdoc-small",
            cpu_gib=0.004,
            disk_gib=1.0,
            disk_profile=profile,
            disk_load_rule="always",
            phases=("cold", "hot"),
            out=str(tmp_path / profile),
        )
        rows[profile] = next(r for r in run_experiment(config).phases.to_dicts() if r["phase"] == "hot")
    tokens = {p: (r["external_hit_tokens"], r["disk_hit_tokens"]) for p, r in rows.items()}
    assert len(set(tokens.values())) == 1 and tokens["this-host"][1] > 0
    ttft = {p: r["ttft_p50_s"] for p, r in rows.items()}
    assert ttft["mooncake-rdma-4x200g"] < ttft["this-host"] < ttft["mooncake-tcp-this-host"]


def test_the_shared_store_profiles_reproduce_what_they_were_fitted_to():
    from toolkit.tiers.disk.model import load_s, store_s
    from toolkit.tiers.shared.model import MOONCAKE_TCP_THIS_HOST as tcp

    for seconds, measured in (
        (load_s(tcp, 256 << 10, 256 << 10, 1), 0.45e-3),  # p50 get, 256 KiB, queue depth one
        (load_s(tcp, 1 << 20, 1 << 20, 1), 1.40e-3),
        (store_s(tcp, 256 << 10, 256 << 10, 1), 0.71e-3),
    ):
        assert seconds == pytest.approx(measured, rel=0.05)
    assert load_s(tcp, 64 << 20, 1 << 20, 16) == pytest.approx((64 << 20) / 0.74e9)  # saturated


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"disk_gib": -1.0}, "disk_gib"),
        ({"disk_gib": 1.0, "disk_profile": "floppy"}, "disk_profile"),
        ({"disk_gib": 1.0, "disk_load_rule": "never"}, "disk_load_rule"),
        ({"disk_gib": 1.0, "disk_write_policy": "sometimes"}, "disk_write_policy"),
    ],
)
def test_bad_disk_options_are_refused_by_name(tmp_path, options, field):
    with pytest.raises(BadInput, match=field):
        run_experiment(ExperimentConfig(engine="dry", trace="longdoc-small", out=str(tmp_path / "x"), **options))
    assert not (tmp_path / "x").exists()


def test_the_connector_key_splits_the_disk_over_the_ranks_and_refuses_bad_sizes():
    from toolkit.vllm.config import parse_config

    assert parse_config({}).disk_bytes_per_rank == 0  # no disk tier unless asked for
    assert parse_config({"disk_bytes_to_use": 8 << 30}, world_size=4).disk_bytes_per_rank == 2 << 30
    for bad in (-1, "lots", True, 1.5):
        with pytest.raises(BadInput, match="disk_bytes_to_use"):
            parse_config({"disk_bytes_to_use": bad})


def test_a_worker_refuses_a_disk_tier_without_a_folder():
    """A worker moves the disk tier's bytes, so it needs `disk_path`: refused in one line naming the key."""
    from toolkit.engines.harness import Harness

    extra = {"cpu_bytes_to_use": 64 << 20, "disk_bytes_to_use": 1 << 30}
    with pytest.raises(BadInput, match="disk_path: required with disk_bytes_to_use"):
        Harness("tiny-qwen3-next", connector="toolkit", extra_config=extra, num_gpu_blocks=64, worker="copy")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"engine": "dry", "store": "local"}, "store: only the toolkit connector of the live engine"),
        ({"engine": "live", "store": "redis://127.0.0.1:6379"}, "store: give mooncake://HOST:PORT or local"),
        ({"engine": "live", "store": "local", "store_gib": 0.0}, "store_gib"),
        # An external master sizes its own store: a size given here would be silently ignored.
        (
            {"engine": "live", "store": "mooncake://127.0.0.1:50051", "store_gib": 4.0},
            "store_gib: 4.0 sizes only a store started for the run",
        ),
        ({"engine": "live", "store": "local", "connector": "simplecpu"}, "store: only"),
    ],
)
def test_bad_store_options_are_refused_by_name_before_anything_starts(tmp_path, options, message):
    with pytest.raises(BadInput, match=message):
        run_experiment(ExperimentConfig(trace="longdoc-small", out=str(tmp_path / "x"), **options))
    assert not (tmp_path / "x").exists()
