"""Connector stats and Prometheus metrics through vLLM's hooks (no engine)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from vllm_test_utils import cpu_vllm_config

from toolkit.vllm.metrics import HybridOffloadPromMetrics, HybridOffloadStats, stats_delta


def test_interval_stats_are_deltas_and_aggregate():
    before = {
        "counters": {"external_hit_tokens": 100, "bytes_loaded": 10},
        "miss": {"by_reason": {"none": 1}, "by_group": {0: {"evicted": 1}}},
        "boundary": {"stored": 2},
    }
    now = {
        "counters": {"external_hit_tokens": 1380, "bytes_loaded": 50, "bytes_stored": 7, "loads_failed": 1},
        "miss": {"by_reason": {"none": 3, "evicted": 2}, "by_group": {0: {"evicted": 3}}},
        "boundary": {"stored": 5, "dropped_cpu_full": 1, "published": 6},
        "usage": [{"group_id": 0, "used_blocks": 4, "used_bytes": 4096}],
    }
    stats = stats_delta(now, before)
    reduced = stats.reduce()
    assert reduced["external_hit_tokens"] == 1280
    assert reduced["bytes[load]"] == 40 and reduced["bytes[store]"] == 7
    assert reduced["lookups[none]"] == 2 and reduced["lookups[evicted]"] == 2
    assert reduced["lookup_misses_by_group[0|evicted]"] == 2
    assert reduced["boundary_stores[stored]"] == 3 and reduced["boundary_stores[dropped_cpu_full]"] == 1
    assert reduced["cpu_used_blocks[0]"] == 4 and reduced["loads_failed"] == 1
    merged = HybridOffloadStats(data={"c": {}, "g": {}}).aggregate(stats).aggregate(stats)
    assert merged.reduce()["external_hit_tokens"] == 2560
    assert merged.reduce()["cpu_used_blocks[0]"] == 4  # a gauge keeps the latest value
    assert HybridOffloadStats().is_empty() and not stats.is_empty()


def test_prometheus_metrics_observe_the_stats_payload():
    registry = CollectorRegistry()

    def bind(cls):
        return lambda **kwargs: cls(registry=registry, **kwargs)

    metric_types = {Counter: bind(Counter), Gauge: bind(Gauge), Histogram: bind(Histogram)}
    prom = HybridOffloadPromMetrics(cpu_vllm_config(), metric_types, ["engine"], {0: ["0"]})
    stats = HybridOffloadStats()
    stats.add("external_hit_tokens", 1920)
    stats.add("bytes", 4096, "load")
    stats.add("lookup_misses_by_group", 3, 0, "mamba_state_absent")
    stats.set("cpu_used_blocks", 12, 3)
    prom.observe(stats.data, engine_idx=0)
    value = registry.get_sample_value
    assert value("vllm:kvtk_external_hit_tokens_total", {"engine": "0"}) == 1920
    assert value("vllm:kvtk_bytes_total", {"engine": "0", "direction": "load"}) == 4096
    assert (
        value("vllm:kvtk_lookup_misses_by_group_total", {"engine": "0", "group": "0", "reason": "mamba_state_absent"})
        == 3
    )
    assert value("vllm:kvtk_cpu_used_blocks", {"engine": "0", "group": "3"}) == 12


def test_connector_class_hooks():
    from toolkit.vllm import HybridOffloadConnector

    stats = HybridOffloadConnector.build_kv_connector_stats({"c": {"store_blocks": {"": 5}}, "g": {}})
    assert isinstance(stats, HybridOffloadStats) and stats.reduce() == {"store_blocks": 5}
    assert HybridOffloadConnector.supports_sleep_mode() is False
    assert HybridOffloadConnector.get_required_kvcache_layout(None) is None
