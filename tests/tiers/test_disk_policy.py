"""Write policy, write amplification, capacity per pool and LRU eviction inside the disk tier."""

from __future__ import annotations

import pytest
from disk_rig import PAYLOAD_BYTES, make_config, payload_for

from toolkit.tiers.disk import CpuTierEvent, DiskTier, Refused, WritePolicy
from toolkit.tiers.disk.index import PoolIndex
from toolkit.tiers.disk.policy import should_write

STORED, EVICTED = CpuTierEvent.STORED, CpuTierEvent.EVICTED


@pytest.mark.parametrize(
    ("policy", "event", "hits", "written"),
    [
        (WritePolicy.WRITE_THROUGH, STORED, 0, True),
        (WritePolicy.WRITE_THROUGH, EVICTED, 3, False),  # already on disk since it was stored
        (WritePolicy.WRITE_BACK, STORED, 0, False),
        (WritePolicy.WRITE_BACK, EVICTED, 0, True),
        (WritePolicy.REUSED_ONCE, EVICTED, 0, False),
        (WritePolicy.REUSED_ONCE, EVICTED, 1, True),
        (WritePolicy.REUSED_ONCE, STORED, 5, False),
    ],
)
def test_write_policy(policy, event, hits, written):
    assert should_write(policy, event, hits) is written


def test_offer_applies_the_policy_and_counts_write_amplification(tmp_path):
    with DiskTier.open(make_config(tmp_path / "tier")) as tier:
        for n in range(4):  # four blocks leave the CPU tier; only two were ever reused there
            key = b"k%d" % n
            got = tier.offer("attn", key, payload_for(key), EVICTED, cpu_hits=n % 2, policy=WritePolicy.REUSED_ONCE)
            assert (got is Refused.DECLINED) is (n % 2 == 0)
        tier.wait_all()
        assert tier.stats().write_amplification is None  # nothing loaded yet
        dest = bytearray(PAYLOAD_BYTES)
        tier.submit_read("attn", b"k1", dest)
        tier.wait_all()
        stats = tier.stats()
        assert stats.pools["attn"].declined_by_policy == 2 and stats.pools["attn"].writes_ok == 2
        assert stats.write_amplification == pytest.approx(2.0)  # two blocks written, one loaded
        assert stats.pools["attn"].device_bytes_written == 2 * (PAYLOAD_BYTES + 4096)


def test_lru_eviction_within_a_pool_and_capacity_per_pool(tmp_path):
    # one I/O thread: writes complete (and enter the LRU) in submission order
    with DiskTier.open(make_config(tmp_path / "tier", slots=4, queue_depth=1)) as tier:
        assert tier.stats().occupancy == {"attn": (0, 4), "mamba": (0, 4)}
        for n in range(4):
            tier.submit_write("attn", b"k%d" % n, payload_for(b"k%d" % n))
        tier.wait_all()
        tier.submit_read("attn", b"k0", bytearray(PAYLOAD_BYTES))  # k0 is now the most recently used
        tier.wait_all()
        tier.submit_write("attn", b"k4", payload_for(b"k4"))
        tier.wait_all()
        assert [tier.contains("attn", b"k%d" % n) for n in range(5)] == [True, False, True, True, True]
        assert tier.stats().pools["attn"].evictions == 1
        assert tier.stats().occupancy["mamba"] == (0, 4)  # the other group kind's capacity is untouched


def test_a_pinned_slot_is_never_evicted():
    index = PoolIndex(2)
    for n, key in enumerate((b"a", b"b")):
        slot = index.reserve(key).slot
        index.commit(key, slot, n + 1, 0)
    index.pin(index.slot_of(b"a"))  # a read of the oldest block is in flight
    assert index.reserve(b"c").evicted_key == b"b"
    index.pin(index.slot_of(b"a"))
    assert index.reserve(b"d") is None  # a pinned, c being written: nothing can go
    index.unpin(index.slot_of(b"a"))
    index.unpin(index.slot_of(b"a"))
    index.commit(b"c", 1, 3, 0)
    assert index.reserve(b"d").evicted_key == b"a"


def test_busy_past_max_in_flight_never_blocks(tmp_path):
    with DiskTier.open(make_config(tmp_path / "tier", queue_depth=1, max_in_flight=2)) as tier:
        results = [tier.submit_write("attn", b"k%d" % n, payload_for(b"k%d" % n)) for n in range(3)]
        assert results[2] is Refused.BUSY and tier.stats().pools["attn"].refused_busy == 1
        tier.wait_all()


def test_policy_model_reused_once_writes_least_and_every_policy_is_counted():
    from toolkit.bench.tiers_policy import StreamSpec, policy_table

    spec = StreamSpec(accesses=20_000, universe=2_000, cpu_blocks=200, disk_blocks=1_200)
    rows = {r.policy: r for r in policy_table(spec)}
    assert rows["reused-once"].written < rows["write-back"].written <= rows["write-through"].written
    for r in rows.values():
        assert 0 < r.loaded <= spec.accesses and r.write_amplification == r.written / r.loaded
    no_reuse = StreamSpec(accesses=2_000, one_shot=1.0)
    assert all(r.loaded == 0 and r.write_amplification is None for r in policy_table(no_reuse))
