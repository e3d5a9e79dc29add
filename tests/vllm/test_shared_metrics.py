"""The tier below the CPU tier (disk or shared store) in numbers, engine-less: the workers' typed reports summed
across workers, their interval deltas in the connector's stats, Prometheus (`vllm:kvtk_tier_*`, the
`tier_read_seconds` histogram with exact bucket counts, `vllm:kvtk_shared_*`), the report's tier table, and the
index dropping writes the tier did not keep."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from vllm_test_utils import cpu_vllm_config

from toolkit.core.pool.disk_index import DiskIndex, disk_key
from toolkit.core.pool.keys import BlockKey
from toolkit.experiments.report_tiers import tier_table
from toolkit.vllm.messages import HybridWorkerMetadata
from toolkit.vllm.metrics import COUNTER, GAUGE, HISTOGRAM, HybridOffloadPromMetrics, HybridOffloadStats, stats_delta
from toolkit.vllm.tier_counts import TierCounts


def _counts(tier: str, reads_s: list[float], **fields: int) -> TierCounts:
    counts = TierCounts(tier=tier, **fields)
    for seconds in reads_s:
        counts.read_latency.add(seconds)
    return counts


def test_workers_reports_sum_and_their_interval_deltas_reach_the_stats():
    a = HybridWorkerMetadata(lower_tier=_counts("disk", [1e-4], blocks_read=1, bytes_read=10), unheld_keys={b"x"})
    b = HybridWorkerMetadata(lower_tier=_counts("disk", [3e-3], blocks_read=1, bytes_read=10, writes_refused_full=2),
                             unheld_keys={b"y"})  # fmt: skip
    both = a.aggregate(b)
    assert both.unheld_keys == {b"x", b"y"} and a.lower_tier.blocks_read == 1  # the operands are left as they were
    assert (both.lower_tier.blocks_read, both.lower_tier.read_latency.count, both.lower_tier.writes_refused_full) == (
        2, 2, 2)  # fmt: skip
    before = {"counters": {"shared_lookups": 2}, "lower_tier": _counts("disk", [], bytes_written=40),
              "lower_tier_held_by_group": ((0, 2), (1, 1))}  # fmt: skip
    total = before["lower_tier"].copy()
    total.add(both.lower_tier)
    now = {"counters": {"shared_lookups": 5, "shared_keys_found": 7, "disk_unheld_dropped": 2}, "lower_tier": total,
           "lower_tier_held_blocks": 9, "lower_tier_held_by_group": ((0, 5), (3, 4))}  # fmt: skip
    data = stats_delta(now, before).data
    assert data[COUNTER]["tier_blocks"] == {"disk|read": 2}
    assert data[COUNTER]["tier_bytes"] == {"disk|read": 20}  # nothing written in the interval
    assert data[COUNTER]["tier_answers"] == {"disk|refused_full": 2}
    assert data[COUNTER]["tier_unheld_dropped"] == {"disk": 2}
    assert data[COUNTER]["shared_lookups"] == {"sent": 3} and data[COUNTER]["shared_lookup_keys"] == {"found": 7}
    assert data[GAUGE]["tier_write_amplification"] == {"disk": 2.0} and data[GAUGE]["tier_held_blocks"] == {"disk": 9}
    assert sum(data[HISTOGRAM]["tier_read_seconds"]["disk"]) == 2
    assert data[GAUGE]["tier_held_blocks_by_group"] == {"disk|0": 5, "disk|1": 0, "disk|3": 4}  # group 1 emptied
    merged = HybridOffloadStats().aggregate(stats_delta(now, before)).aggregate(stats_delta(now, before))
    assert merged.reduce()["tier_read_seconds_count[disk]"] == 4 and not merged.is_empty()
    assert stats_delta(now, now).data.get(HISTOGRAM) is None  # no read in the interval: no histogram series


def test_the_read_histogram_reaches_prometheus_with_exact_bucket_counts():
    registry = CollectorRegistry()

    def bind(cls):
        return lambda **kwargs: cls(registry=registry, **kwargs)

    prom = HybridOffloadPromMetrics(
        cpu_vllm_config(), {Counter: bind(Counter), Gauge: bind(Gauge), Histogram: bind(Histogram)}, ["engine"],
        {0: ["0"]},
    )  # fmt: skip
    reads_s = [100e-6, 120e-6, 900e-6, 3e-3, 10.0]
    now = {"counters": {}, "lower_tier": _counts("shared", reads_s, blocks_read=5, hits=5)}
    prom.observe(stats_delta(now, {}).data, engine_idx=0)
    value = registry.get_sample_value
    labels = {"engine": "0", "tier": "shared"}

    def under(le: float) -> float | None:
        return value("vllm:kvtk_tier_read_seconds_bucket", {**labels, "le": repr(le)})

    assert value("vllm:kvtk_tier_read_seconds_count", labels) == 5
    assert under(128e-6) == 2 and under(1024e-6) == 3 and under(4096e-6) == 4  # 2**n microsecond bounds
    assert under(2**22 * 1e-6) == 4  # 10 s is past the last bound: +Inf only
    assert value("vllm:kvtk_tier_blocks_total", {**labels, "move": "read"}) == 5
    assert value("vllm:kvtk_tier_answers_total", {**labels, "outcome": "hit"}) == 5


def test_the_report_tabulates_the_tier_below_per_phase():
    live = {"variant": "main", "phase": "hot", "tier": "shared", "tier_blocks_read": 4, "tier_bytes_read": 400,
            "tier_hits": 4, "tier_read_p50_ms": 0.5, "tier_write_amplification": 2.5, "disk_blocks_held": 8}  # fmt: skip
    dry = {"variant": "main", "phase": "cold", "disk_bytes_written": 800, "disk_write_amplification": None,
           "disk_blocks_held": 3}  # fmt: skip
    table = tier_table([dry, live, {"variant": "main", "phase": "warm"}])
    assert table is not None and [row[:3] for row in table.rows] == [
        ["main", "cold", "disk (scheduler's index)"], ["main", "hot", "shared"]]  # fmt: skip
    column = {header: k for k, header in enumerate(table.headers)}
    assert table.rows[1][column["hits"]] == 4 and table.rows[0][column["hits"]] is None
    assert table.rows[0][column["bytes written"]] == 800 and table.rows[1][column["write amplification"]] == 2.5
    assert table.rows[0][column["held blocks"]] == 3 and "failures" not in column  # no row fills it
    assert tier_table([{"variant": "main", "phase": "hot"}]) is None


def test_writes_the_tier_did_not_keep_leave_the_index():
    index = DiskIndex(8)
    kept, refused = BlockKey(0, b"kept"), BlockKey(1, b"refused")
    index.demote([kept])
    index.demote([refused, BlockKey(2, b"alias")])
    assert index.forget([disk_key(refused), disk_key(BlockKey(0, b"never")), b"garbage"]) == 1
    assert kept in index and refused not in index and BlockKey(2, b"alias") not in index
    assert index.primary_keys() == [kept]
