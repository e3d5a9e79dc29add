"""Connector stats through vLLM's hooks: `KVConnectorStats` (logged, aggregated) and Prometheus metrics.

Wire format (plain dicts, survives IPC): ``{"c": {metric: {label_key: value}}, "g": {metric: {label_key: value}}}``
where ``label_key`` is the label values joined by ``|`` ("" when unlabeled). Counters are summed when aggregated,
gauges keep the latest value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorPromMetrics, KVConnectorStats

PREFIX = "vllm:kvtk_"
# metric -> (kind, label names, help)
METRICS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "external_hit_tokens": ("c", (), "Prompt tokens served from the CPU tier"),
    "lookups": ("c", ("outcome",), "CPU-tier lookups by outcome (hit or the miss reason)"),
    "lookup_misses_by_group": ("c", ("group", "reason"), "Lookups limited by a group, by reason"),
    "store_blocks": ("c", (), "Blocks scheduled for device-to-CPU copies"),
    "boundary_stores": ("c", ("outcome",), "Mamba boundary hand-offs by outcome (stored, dropped or skipped)"),
    "load_blocks": ("c", (), "Blocks scheduled for CPU-to-device copies"),
    "loads_failed": ("c", (), "Requests whose load failed or was declined (recomputed)"),
    "stores_failed": ("c", (), "Store events that failed (their keys never become hits)"),
    "bytes": ("c", ("direction",), "Bytes copied per direction"),
    "copy_seconds": ("c", ("direction",), "Copy wall time per direction (submit to completion seen)"),
    "cpu_used_blocks": ("g", ("group",), "CPU-tier blocks holding each group's data"),
    "cpu_used_bytes": ("g", ("group",), "CPU-tier bytes holding each group's data"),
}


@dataclass
class HybridOffloadStats(KVConnectorStats):
    def __post_init__(self):
        self.data.setdefault("c", {})
        self.data.setdefault("g", {})

    def reset(self):
        self.data = {"c": {}, "g": {}}

    def add(self, metric: str, value: float, *labels: object) -> None:
        if value:
            series = self.data["c"].setdefault(metric, {})
            key = "|".join(str(x) for x in labels)
            series[key] = series.get(key, 0) + value

    def set(self, metric: str, value: float, *labels: object) -> None:
        self.data["g"].setdefault(metric, {})["|".join(str(x) for x in labels)] = value

    def aggregate(self, other: KVConnectorStats) -> KVConnectorStats:
        for metric, series in other.data.get("c", {}).items():
            mine = self.data["c"].setdefault(metric, {})
            for key, value in series.items():
                mine[key] = mine.get(key, 0) + value
        for metric, series in other.data.get("g", {}).items():
            self.data["g"].setdefault(metric, {}).update(series)
        return self

    def reduce(self) -> dict[str, int | float]:
        out: dict[str, int | float] = {}
        for kind in ("c", "g"):
            for metric, series in self.data.get(kind, {}).items():
                for key, value in series.items():
                    out[f"{metric}[{key}]" if key else metric] = value
        return out

    def is_empty(self) -> bool:
        return not any(self.data.get("c", {}).values()) and not any(self.data.get("g", {}).values())


def stats_delta(now: dict, before: dict) -> HybridOffloadStats:
    """Interval stats from two cumulative snapshots of `SchedulerSide.stats_snapshot()`."""
    stats = HybridOffloadStats()
    c_now, c_before = now["counters"], before.get("counters", {})
    for name in ("external_hit_tokens", "store_blocks", "load_blocks", "stores_failed"):
        stats.add(name, c_now.get(name, 0) - c_before.get(name, 0))
    stats.add("loads_failed", (c_now.get("loads_failed", 0) + c_now.get("loads_declined", 0))
              - (c_before.get("loads_failed", 0) + c_before.get("loads_declined", 0)))
    for direction in ("loaded", "stored"):
        key = f"bytes_{direction}"
        stats.add("bytes", c_now.get(key, 0) - c_before.get(key, 0), "load" if direction == "loaded" else "store")
    m_now, m_before = now.get("miss", {}), before.get("miss", {})
    for reason, count in m_now.get("by_reason", {}).items():
        stats.add("lookups", count - m_before.get("by_reason", {}).get(reason, 0), reason)
    for group, reasons in m_now.get("by_group", {}).items():
        for reason, count in reasons.items():
            stats.add("lookup_misses_by_group",
                      count - m_before.get("by_group", {}).get(group, {}).get(reason, 0), group, reason)
    b_now, b_before = now.get("boundary", {}), before.get("boundary", {})
    for outcome, count in b_now.items():
        if outcome not in ("published", "pending_retry"):
            stats.add("boundary_stores", count - b_before.get(outcome, 0), outcome)
    for usage in now.get("usage", ()):
        stats.set("cpu_used_blocks", usage["used_blocks"], usage["group_id"])
        stats.set("cpu_used_bytes", usage["used_bytes"], usage["group_id"])
    return stats


class HybridOffloadPromMetrics(KVConnectorPromMetrics):
    def __init__(self, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        self._metrics: dict[str, Any] = {}
        for name, (kind, labels, doc) in METRICS.items():
            cls = self._counter_cls if kind == "c" else self._gauge_cls
            full = PREFIX + name + ("_total" if kind == "c" and not name.endswith("_total") else "")
            self._metrics[name] = cls(name=full, documentation=doc, labelnames=list(labelnames) + list(labels))

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0):
        base = list(self.per_engine_labelvalues[engine_idx])
        for kind in ("c", "g"):
            for metric, series in transfer_stats_data.get(kind, {}).items():
                prom = self._metrics.get(metric)
                if prom is None:
                    continue
                for key, value in series.items():
                    labels = base + (key.split("|") if key else [])
                    if kind == "c":
                        if value > 0:
                            prom.labels(*labels).inc(value)
                    else:
                        prom.labels(*labels).set(value)
