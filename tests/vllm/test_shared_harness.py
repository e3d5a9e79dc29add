"""The shared store below the CPU tier through the real connector's both roles, engine-less (vLLM's scheduler, the
toolkit's copy worker over host tensors), against a real Mooncake Store on loopback that is too small for what the
prompts write: the writes it refuses travel back to the scheduler, which drops them from its index, so the blocks
its index holds are exactly the ones the store holds, the hot phase reads only blocks that are there (no read
misses), and the tier's numbers (hits, refusals, bytes, read latency) reach the connector's stats and Prometheus.
"""

from __future__ import annotations

import time

import pytest
from vllm_test_utils import random_prompts

from toolkit.core.pool.disk_index import disk_key
from toolkit.engines.harness import SHAPES, Phase, run_phases
from toolkit.tiers.disk.store import Refused
from toolkit.tiers.shared.backend import installed_binaries

needs_store = pytest.mark.skipif(installed_binaries() is None, reason="mooncake_master is not installed (`make setup`)")

HYBRID = "tiny-qwen3-next"
PAGE = SHAPES[HYBRID].attention_page_bytes


def _settle(harness, mover, timeout_s: float = 20.0) -> None:
    """Step until the worker's writes and reads to the store ended and their last report reached the scheduler."""
    harness.run_until_idle()
    deadline = time.monotonic() + timeout_s
    while mover.busy:
        assert time.monotonic() < deadline, "the store's calls did not end"
        time.sleep(0.002)
        harness.step()
    harness.step()


def _in_store(tier, names: list[bytes]) -> tuple[bool, ...]:
    """The store's own answer for each name: one batched existence query (`SharedTier.submit_lookup`)."""
    from toolkit.vllm.disk_store import POOL

    ticket = tier.submit_lookup(POOL, names)
    assert isinstance(ticket, int), ticket
    while (answer := tier.lookup_result(ticket)) is None:
        tier.poll(timeout_s=0.01)
    return answer


def _audit(lookups, index) -> None:
    """Check every key of the index against the store now, and take the answer (`StoreLookups.audit`)."""
    lookups.audit(index, every_key=True)
    while lookups.audit(index):
        time.sleep(0.002)


def _spy(mover) -> tuple[dict[bytes, bool], list[bytes], list[bytes]]:
    """As the real calls pass: each key's last write outcome the worker saw (False: refused or failed), the keys
    it was asked to read, and those among them whose last write the store had refused when the read was asked."""
    last_ok: dict[bytes, bool] = {}
    promoted: list[bytes] = []
    refused_reads: list[bytes] = []
    tier = mover.tier
    submit_write, poll, apply = tier.submit_write, tier.poll, mover.apply

    def spy_submit_write(pool, key, payload):
        ticket = submit_write(pool, key, payload)
        if isinstance(ticket, Refused) and ticket is not Refused.BUSY:
            last_ok[key] = ticket is Refused.PRESENT
        return ticket

    def spy_poll(*args, **kwargs):
        done = poll(*args, **kwargs)
        last_ok.update((c.key, c.ok) for c in done if c.op == "write")
        return done

    def spy_apply(batch):
        promoted.extend(batch.promote_keys)
        refused_reads.extend(key for key in batch.promote_keys if last_ok.get(key) is False)
        apply(batch)

    tier.submit_write, tier.poll, mover.apply = spy_submit_write, spy_poll, spy_apply
    return last_ok, promoted, refused_reads


@needs_store
def test_refused_writes_are_dropped_from_the_index_and_the_tier_numbers_reach_stats(make_harness):
    from toolkit.engines.disk_columns import PhaseDiskColumns
    from toolkit.tiers.shared import StoreServer
    from toolkit.vllm.metrics import COUNTER, GAUGE, HISTOGRAM, stats_delta

    # ~220 CPU blocks written through; the store holds ~110: it refuses writes (16-135 in runs at load 0-4) yet keeps
    # several prompts' prefixes, so the hot phase reads (65-104 blocks; at 16 MiB one run in several read none).
    prompts = random_prompts(16, 7000, seed=23)
    with StoreServer(capacity_bytes=20 << 20) as server:
        extra = {
            "cpu_bytes_to_use": 16 * PAGE,
            "disk_bytes_to_use": 256 << 20,  # the index could track far more than the store holds
            "shared_store_url": f"mooncake://{server.master}",
        }
        harness = make_harness(HYBRID, connector="toolkit", worker="copy", extra_config=extra)
        side, mover = harness.connector.scheduler_side, harness.worker.worker_side.disk
        last_ok, promoted, refused_reads = _spy(mover)
        run_phases(harness, [Phase("cold", {f"c{i}": p for i, p in enumerate(prompts)}, wave=1)])
        _settle(harness, mover)
        cold, refused_cold = side.counts(), {key for key, ok in last_ok.items() if not ok}
        columns = PhaseDiskColumns(side.geometry.block_bytes, 1)  # the live engine's phase rows
        cold_row = columns.take(side.manager.disk, side.lower_tier)
        index = side.manager.disk.index
        _audit(side.store_lookups, index)  # the store evicts by itself: the index follows it
        held = [disk_key(key) for key in index.primary_keys()]
        in_store = _in_store(mover.tier, held)
        audited = side.counts()
        hot = run_phases(harness, [Phase("hot", {f"h{i}": p for i, p in enumerate(prompts)}, reset_before=True)])
        _settle(harness, mover)
        now = side.counts()
        hot_row = columns.take(side.manager.disk, side.lower_tier)
        harness.worker.shutdown()
    tier = now["lower_tier"]
    print(f"cold {cold['lower_tier']}\nhot {tier}\nheld {len(held)}, in store {sum(in_store)}\n{now['counters']}")
    assert cold["lower_tier"].writes_refused_full > 0 and refused_cold  # the store filled up
    # each refusal dropped its slot (a block written through again after its drop may be refused again)
    assert cold["counters"]["disk_unheld_dropped"] == cold["lower_tier"].writes_not_held >= len(refused_cold)
    assert held and all(in_store)  # every block the index holds, the store holds
    assert audited["lower_tier_held_blocks"] == len(held) == sum(in_store)
    assert hot_row["tier_held_by_group"] and sum(int(g.split(":")[1]) for g in hot_row["tier_held_by_group"].split()) \
        == now["lower_tier_held_blocks"]  # fmt: skip
    assert promoted and not refused_reads  # no read asked for a block whose write the store refused
    assert tier.blocks_read > 0 and tier.hits == tier.blocks_read  # the hot phase read blocks from the store
    assert now["counters"].get("shared_lookups_refused", 0) == 0  # 16 queries: none refused as busy
    assert sum(r.external_hit_tokens for r in hot["hot"].values()) > 0
    assert tier.read_latency.count == tier.blocks_read and tier.bytes_read == tier.blocks_read * mover.payload_bytes
    stats = stats_delta(now, audited).data
    assert stats[COUNTER]["tier_blocks"]["shared|read"] == tier.blocks_read
    assert sum(stats[HISTOGRAM]["tier_read_seconds"]["shared"]) == tier.blocks_read
    # the store's own call time: every served read (hits), each call no longer than its step-bound promotion
    assert sum(stats[HISTOGRAM]["tier_call_seconds"]["shared"]) == tier.call_latency.count == tier.hits
    assert 0 < tier.call_latency.max_s <= tier.read_latency.max_s
    assert stats[GAUGE]["tier_write_amplification"]["shared"] == tier.bytes_written / tier.bytes_read
    assert cold_row["tier"] == "shared" and cold_row["tier_refusals"] == cold["lower_tier"].writes_refused_full
    assert hot_row["tier_blocks_read"] == hot_row["tier_hits"] == tier.blocks_read and hot_row["tier_read_p99_ms"] > 0
    assert hot_row["tier_bytes_written"] == tier.bytes_written - cold["lower_tier"].bytes_written
    assert stats_delta(cold, {}).data[COUNTER]["tier_answers"]["shared|refused_full"] > 0
