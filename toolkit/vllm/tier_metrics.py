"""The tier below the CPU tier (the disk tier or the shared store) in the connector's stats and Prometheus.

From the scheduler side's cumulative counts (`SchedulerSide.counts()`: `lower_tier`, the workers' summed
`TierCounts`; `lower_tier_held_blocks`, its index; the store-lookup counters), as interval deltas like the rest of
`metrics.stats_delta`. Exported as `vllm:kvtk_tier_*{tier}` (tier = disk or shared; a CPU -> disk -> shared cascade
reports both, each with its own moves and answers, the store's reads being those after a disk miss or failure; the
index's gauges are the disk's) and `vllm:kvtk_shared_*` (the scheduler's existence queries to the shared store).
`vllm:kvtk_tier_read_seconds{tier}` is a histogram of a
promotion's read, submit to the worker step that saw it done, with power-of-two bucket bounds (1 us to 4.2 s):
its observations are each bucket's counts at three quarters of the bucket's top, so its `_sum` is approximate
(within a third); its counts are exact.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from toolkit.tiers.shared.stats import LATENCY_BUCKETS
from toolkit.vllm.tier_counts import TierCounts

# The wire format's kinds (`metrics.py`): one letter each, since the dict crosses the process boundary every step.
COUNTER = "c"
GAUGE = "g"
HISTOGRAM = "h"

# metric -> (kind, label names, help), merged into `metrics.METRICS`
TIER_METRICS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "tier_blocks": (
        COUNTER,
        ("tier", "move"),
        "Blocks between the CPU tier and the tier below (disk or shared), summed over workers, by move: read, "
        "read_from_staging, written, read_failed (recomputed), write_not_held (refused, failed or skipped)",
    ),
    "tier_bytes": (COUNTER, ("tier", "direction"), "Payload bytes read from and written to the tier below"),
    "tier_answers": (
        COUNTER,
        ("tier", "outcome"),
        "The tier's own answers: hit, miss, corrupt, read_error (incl. timeouts), refused_full, write_failed, "
        "refused_busy, refused_unavailable (shared store down or paused)",
    ),
    "tier_read_seconds": (HISTOGRAM, ("tier",), "A promotion's read: submit to the worker step that saw it done"),
    "tier_call_seconds": (HISTOGRAM, ("tier",), "The tier's own served read call: submit to its return (shared)"),
    "tier_write_amplification": (GAUGE, ("tier",), "Bytes written to the tier per byte read back, since start"),
    "tier_held_blocks": (GAUGE, ("tier",), "Blocks the scheduler's index holds as in the tier below"),
    "tier_held_blocks_by_group": (
        GAUGE,
        ("tier", "group"),
        "The index's blocks by the KV cache group of their primary key (past 10,000 blocks: recounted every 10 s)",
    ),
    "tier_unheld_dropped": (
        COUNTER,
        ("tier",),
        "Index slots dropped because the worker reported their write not kept (so never advertised as held)",
    ),
    "shared_lookups": (
        COUNTER,
        ("outcome",),
        "The scheduler's batched existence queries to the shared store: sent, refused (down, paused, busy), waited "
        "(lookups answered 'ask again' while one ran), audit (the index checked against the store)",
    ),
    "shared_lookup_keys": (
        COUNTER,
        ("outcome",),
        "Keys asked of the shared store: asked, found (learnt), audit_dropped (evicted by the store)",
    ),
    "shared_lookup_seconds": (COUNTER, (), "Shared-store queries' time, submit to answer or deadline, summed"),
}

_MOVES = (
    ("read", "blocks_read"),
    ("read_from_staging", "blocks_read_from_staging"),
    ("written", "blocks_written"),
    ("read_failed", "reads_failed"),
    ("write_not_held", "writes_not_held"),
)
_ANSWERS = (
    ("hit", "hits"),
    ("miss", "misses"),
    ("corrupt", "corrupt"),
    ("read_error", "read_errors"),
    ("refused_full", "writes_refused_full"),
    ("write_failed", "writes_failed"),
    ("refused_busy", "refused_busy"),
    ("refused_unavailable", "refused_unavailable"),
)
_LOOKUPS = (
    ("shared_lookups", "sent", "shared_lookups"),
    ("shared_lookups", "refused", "shared_lookups_refused"),
    ("shared_lookups", "waited", "shared_lookups_waited"),
    ("shared_lookup_keys", "asked", "shared_keys_asked"),
    ("shared_lookup_keys", "found", "shared_keys_found"),
    ("shared_lookups", "audit", "shared_audits"),
    ("shared_lookup_keys", "audit_dropped", "shared_audit_dropped"),
)


def add_tier_stats(stats: Any, now: Mapping[str, Any], before: Mapping[str, Any]) -> None:
    """The interval's tier metrics into `stats` (a `HybridOffloadStats`), from two `counts()` snapshots."""
    c_now, c_before = now.get("counters", {}), before.get("counters", {})
    for metric, label, key in _LOOKUPS:
        stats.add(metric, c_now.get(key, 0) - c_before.get(key, 0), label)
    answer_us = c_now.get("shared_answer_us_total", 0) - c_before.get("shared_answer_us_total", 0)
    stats.add("shared_lookup_seconds", answer_us / 1e6)
    counts: TierCounts | None = now.get("lower_tier")
    if counts is None or not counts.tier:
        return
    name = counts.tier
    delta = counts.minus(before.get("lower_tier") or TierCounts())
    _add_tier_counts(stats, counts, delta)
    if counts.below is not None and delta.below is not None:  # CPU -> disk -> shared: the store's own labels
        _add_tier_counts(stats, counts.below, delta.below)
    stats.add("tier_unheld_dropped", c_now.get("disk_unheld_dropped", 0) - c_before.get("disk_unheld_dropped", 0), name)
    held = now.get("lower_tier_held_blocks")
    if held is not None and held != before.get("lower_tier_held_blocks"):
        stats.set("tier_held_blocks", held, name)
    by_group, was = dict(now.get("lower_tier_held_by_group", ())), dict(before.get("lower_tier_held_by_group", ()))
    if by_group != was:  # a group no longer held goes to 0
        for group_id in sorted(by_group.keys() | was.keys()):
            stats.set("tier_held_blocks_by_group", by_group.get(group_id, 0), name, group_id)


def _add_tier_counts(stats: Any, counts: TierCounts, delta: TierCounts) -> None:
    """One tier's moves, bytes, answers and latencies, labelled with its name (`counts`: since start)."""
    name = counts.tier
    for move, field_name in _MOVES:
        stats.add("tier_blocks", getattr(delta, field_name), name, move)
    stats.add("tier_bytes", delta.bytes_read, name, "read")
    stats.add("tier_bytes", delta.bytes_written, name, "written")
    for outcome, field_name in _ANSWERS:
        stats.add("tier_answers", getattr(delta, field_name), name, outcome)
    stats.add_buckets("tier_read_seconds", delta.read_latency.buckets, name)
    if delta.call_latency.count:
        stats.add_buckets("tier_call_seconds", delta.call_latency.buckets, name)
    if delta.bytes_read or delta.bytes_written:
        amplification = counts.write_amplification
        if amplification is not None:
            stats.set("tier_write_amplification", amplification, name)


def prom_buckets_s() -> list[float]:
    """The histogram's bucket bounds: `OpLatency`'s power-of-two buckets' tops, seconds (+Inf is implied)."""
    return [2**n * 1e-6 for n in range(LATENCY_BUCKETS - 1)]


def observe_histogram(child: Any, buckets: Sequence[int]) -> None:
    """Counts per `OpLatency` bucket into a Prometheus histogram child: each at three quarters of its bucket's top
    (inside the bucket, so the counts per bucket are exact)."""
    for n, count in enumerate(buckets):
        value = 0.0 if n == 0 else 0.75 * 2**n * 1e-6
        for _ in range(int(count)):
            child.observe(value)
