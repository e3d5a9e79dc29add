"""Connector stats through vLLM's hooks: `KVConnectorStats` (logged, aggregated) and Prometheus metrics.

Wire format (plain dicts, survives IPC): ``{COUNTER: {metric: {label_key: value}}, GAUGE: {metric: {label_key:
value}}, HISTOGRAM: {metric: {label_key: [count per bucket]}}}`` where ``label_key`` is the label values joined by
``|`` ("" when unlabeled). Counters and histogram buckets are summed when aggregated, gauges keep the latest value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorPromMetrics, KVConnectorStats

from toolkit.vllm.hints import add_hint_stats
from toolkit.vllm.tier_metrics import (  # the wire format's kinds are defined there (it cannot import this module)
    COUNTER,
    GAUGE,
    HISTOGRAM,
    TIER_METRICS,
    add_tier_stats,
    observe_histogram,
    prom_buckets_s,
)

if TYPE_CHECKING:
    from vllm.config import VllmConfig  # Any to mypy: vLLM is not analysed

PREFIX = "vllm:kvtk_"
# metric -> (kind, label names, help)
METRICS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "external_hit_tokens": (COUNTER, (), "Prompt tokens served from the CPU tier"),
    "lookups": (COUNTER, ("outcome",), "CPU-tier lookups by outcome (hit or the miss reason)"),
    "lookup_misses_by_group": (COUNTER, ("group", "reason"), "Lookups limited by a group, by reason"),
    "store_blocks": (COUNTER, (), "Blocks scheduled for device-to-CPU copies"),
    "boundary_stores": (COUNTER, ("outcome",), "Mamba boundary hand-offs by outcome (stored, dropped or skipped)"),
    "load_blocks": (COUNTER, (), "Blocks scheduled for CPU-to-device copies"),
    "stored_blocks": (
        COUNTER,
        ("source",),
        "Blocks cached in the CPU tier by what stored them (positional, finish, tail, handoff, handoff_fine, lazy)",
    ),
    "fine_only_blocks": (
        COUNTER,
        ("outcome",),
        "Blocks stored only for fine-grained hits, kept at low priority: stored, promoted (hit), evicted_unused",
    ),
    "fine_grained_hit_tokens": (
        COUNTER,
        (),
        "CPU-tier hit tokens past the last scheduler-block boundary (what "
        "fine-grained hits add over block-aligned ones)",
    ),
    "loads_deferred": (COUNTER, (), "Lookups answered 'ask again': the device pool could not park the load yet"),
    "loads_failed": (COUNTER, (), "Requests whose load failed or was declined (recomputed)"),
    "stores_failed": (COUNTER, (), "Store events that failed (their keys never become hits)"),
    "bytes": (COUNTER, ("direction",), "Bytes copied per direction"),
    "disk_blocks": (
        COUNTER,
        ("move",),
        "Disk tier below the CPU tier, blocks by move: demoted (written), promoted (read back), read_failed, "
        "restored (held at start)",
    ),
    "copy_seconds": (COUNTER, ("direction",), "Copy wall time per direction (submit to completion seen)"),
    "tier_geometry": (
        GAUGE,
        ("fact",),
        "The connector's geometry, for clients over HTTP (kvtk replay --engine "
        "server): hash_block_tokens, scheduler_block_tokens, "
        "blocks_per_scheduler_block, cpu_blocks, cpu_block_bytes, device_blocks",
    ),
    "cpu_used_blocks": (GAUGE, ("group",), "CPU-tier blocks holding each group's data"),
    "hints": (COUNTER, ("outcome",), "KV hint actions: received, accepted, and what they did (toolkit/vllm/hints.py)"),
    "hints_rejected": (COUNTER, ("reason",), "KV hint actions ignored, by reason (toolkit/core/hints/schema.py)"),
    "hint_tier": (GAUGE, ("fact",), "Hint segments now: sessions and blocks/bytes retained, the budget in blocks"),
    "cpu_used_bytes": (GAUGE, ("group",), "CPU-tier bytes holding each group's data"),
    **TIER_METRICS,  # the tier below the CPU tier (disk or shared store): tier_*, shared_* (tier_metrics.py)
}


StatsData = dict[str, dict[str, dict[str, Any]]]
"""The wire format above: kind (`COUNTER`, `GAUGE`, `HISTOGRAM`) -> metric -> label key -> value (a histogram's: a
list of counts per bucket)."""


@dataclass
class HybridOffloadStats(KVConnectorStats):  # type: ignore[misc]  # vLLM is not analysed: its base is Any
    def __post_init__(self) -> None:
        self.data.setdefault(COUNTER, {})
        self.data.setdefault(GAUGE, {})

    def reset(self) -> None:
        self.data: StatsData = {COUNTER: {}, GAUGE: {}}

    def add_buckets(self, metric: str, buckets: Sequence[int], *labels: object) -> None:
        """Histogram observations as counts per bucket (`tier_metrics.prom_buckets_s`' buckets, then +Inf)."""
        if any(buckets):
            series = self.data.setdefault(HISTOGRAM, {}).setdefault(metric, {})
            key = "|".join(map(str, labels))
            mine = series.get(key)
            series[key] = list(buckets) if mine is None else [a + b for a, b in zip(mine, buckets)]

    def add(self, metric: str, value: float, *labels: object) -> None:
        if value:
            series = self.data[COUNTER].setdefault(metric, {})
            key = "|".join(map(str, labels))  # the same key as a generator of str(x), without its frames
            series[key] = series.get(key, 0) + value

    def set(self, metric: str, value: float, *labels: object) -> None:
        self.data[GAUGE].setdefault(metric, {})["|".join(map(str, labels))] = value

    def aggregate(self, other: KVConnectorStats) -> KVConnectorStats:
        for metric, series in other.data.get(COUNTER, {}).items():
            mine = self.data[COUNTER].setdefault(metric, {})
            for key, value in series.items():
                mine[key] = mine.get(key, 0) + value
        for metric, series in other.data.get(GAUGE, {}).items():
            self.data[GAUGE].setdefault(metric, {}).update(series)
        for metric, series in other.data.get(HISTOGRAM, {}).items():
            for key, buckets in series.items():
                self.add_buckets(metric, buckets, *(key.split("|") if key else ()))
        return self

    def reduce(self) -> dict[str, int | float]:
        out: dict[str, int | float] = {}
        for kind in (COUNTER, GAUGE):
            for metric, series in self.data.get(kind, {}).items():
                for key, value in series.items():
                    out[f"{metric}[{key}]" if key else metric] = value
        for metric, series in self.data.get(HISTOGRAM, {}).items():
            for key, buckets in series.items():
                out[f"{metric}_count[{key}]" if key else f"{metric}_count"] = sum(buckets)
        return out

    def is_empty(self) -> bool:
        return not any(self.data.get(kind, {}).values() for kind in (COUNTER, GAUGE, HISTOGRAM))


_DISK_MOVES = (
    ("demoted", "disk_demote_blocks"),
    ("promoted", "disk_promote_blocks"),
    ("read_failed", "disk_reads_failed"),
    ("restored", "disk_blocks_restored"),
)


def stats_delta(now: dict[str, Any], before: dict[str, Any]) -> HybridOffloadStats:
    """Interval stats from two cumulative snapshots of `SchedulerSide.counts()` (or `stats_snapshot()`, which adds
    the usage gauges): the connector keeps one set of counts, and what vLLM logs and Prometheus exports are their
    deltas between reports."""
    stats = HybridOffloadStats()
    c_now, c_before = now["counters"], before.get("counters", {})
    for name in ("external_hit_tokens", "store_blocks", "load_blocks", "stores_failed"):
        stats.add(name, c_now.get(name, 0) - c_before.get(name, 0))
    stats.add(
        "loads_failed",
        (c_now.get("loads_failed", 0) + c_now.get("loads_declined", 0))
        - (c_before.get("loads_failed", 0) + c_before.get("loads_declined", 0)),
    )
    stats.add(
        "fine_grained_hit_tokens", c_now.get("fine_grained_hit_tokens", 0) - c_before.get("fine_grained_hit_tokens", 0)
    )
    stats.add(
        "loads_deferred",
        c_now.get("lookups_deferred_device_pool_tight", 0) - c_before.get("lookups_deferred_device_pool_tight", 0),
    )
    t_now, t_before = now.get("tier", {}), before.get("tier", {})
    for source, count in t_now.get("stored_blocks_by_source", {}).items():
        stats.add("stored_blocks", count - t_before.get("stored_blocks_by_source", {}).get(source, 0), source)
    for outcome, count in t_now.get("fine_only_blocks", {}).items():
        stats.add("fine_only_blocks", count - t_before.get("fine_only_blocks", {}).get(outcome, 0), outcome)
    for move, key in _DISK_MOVES:
        stats.add("disk_blocks", c_now.get(key, 0) - c_before.get(key, 0), move)
    for direction in ("loaded", "stored"):
        key = f"bytes_{direction}"
        stats.add("bytes", c_now.get(key, 0) - c_before.get(key, 0), "load" if direction == "loaded" else "store")
    m_now, m_before = now.get("miss", {}), before.get("miss", {})
    for reason, count in m_now.get("by_reason", {}).items():
        stats.add("lookups", count - m_before.get("by_reason", {}).get(reason, 0), reason)
    for group, reasons in m_now.get("by_group", {}).items():
        for reason, count in reasons.items():
            stats.add(
                "lookup_misses_by_group",
                count - m_before.get("by_group", {}).get(group, {}).get(reason, 0),
                group,
                reason,
            )
    b_now, b_before = now.get("boundary", {}), before.get("boundary", {})
    for outcome, count in b_now.items():
        if outcome not in ("published", "pending_retry"):
            stats.add("boundary_stores", count - b_before.get(outcome, 0), outcome)
    add_hint_stats(stats, now, before)
    add_tier_stats(stats, now, before)
    for usage in now.get("usage", ()):
        stats.set("cpu_used_blocks", usage["used_blocks"], usage["group_id"])
        stats.set("cpu_used_bytes", usage["used_bytes"], usage["group_id"])
    return stats


class HybridOffloadPromMetrics(KVConnectorPromMetrics):  # type: ignore[misc]  # vLLM is not analysed: its base is Any
    def __init__(
        self,
        vllm_config: VllmConfig,
        metric_types: dict[type, type],
        labelnames: Sequence[str],
        per_engine_labelvalues: dict[int, list[object]],
    ) -> None:
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        self._metrics: dict[str, Any] = {}
        for name, (kind, labels, doc) in METRICS.items():
            full = PREFIX + name + ("_total" if kind == COUNTER and not name.endswith("_total") else "")
            names = list(labelnames) + list(labels)
            if kind == HISTOGRAM:
                self._metrics[name] = self._histogram_cls(
                    name=full, documentation=doc, labelnames=names, buckets=prom_buckets_s()
                )
                continue
            cls = self._counter_cls if kind == COUNTER else self._gauge_cls
            self._metrics[name] = cls(name=full, documentation=doc, labelnames=names)

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0) -> None:
        base = list(self.per_engine_labelvalues[engine_idx])
        for metric, histogram in transfer_stats_data.get(HISTOGRAM, {}).items():
            prom = self._metrics.get(metric)
            if prom is None:
                continue
            for key, buckets in histogram.items():
                observe_histogram(prom.labels(*(base + (key.split("|") if key else []))), buckets)
        for kind in (COUNTER, GAUGE):
            for metric, series in transfer_stats_data.get(kind, {}).items():
                prom = self._metrics.get(metric)
                if prom is None:
                    continue
                for key, value in series.items():
                    labels = base + (key.split("|") if key else [])
                    if kind == COUNTER:
                        if value > 0:
                            prom.labels(*labels).inc(value)
                    else:
                        prom.labels(*labels).set(value)
