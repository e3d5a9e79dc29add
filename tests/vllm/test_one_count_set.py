"""One set of counts, three views: after a run of the toolkit connector inside vLLM's real scheduler (engine-less
harness), the connector's cumulative counts (what results and `stats_snapshot` read), the interval stats vLLM's hook
received fed into the Prometheus metrics, and the manager's events as subscribers saw them all agree."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from vllm_test_utils import cpu_vllm_config, random_prompts

from toolkit.core.observer import OffloadObserver, subscribe
from toolkit.engines.harness import SHAPES, Phase, run_phases
from toolkit.vllm.metrics import HybridOffloadPromMetrics

pytestmark = pytest.mark.engine

HYBRID = "tiny-qwen3-next"


class EventCounts(OffloadObserver):
    """A second subscriber next to the experiments' `RequestObservations`: counts what the events carried."""

    def __init__(self) -> None:
        self.lookups = self.load_blocks = self.store_blocks = self.steps = self.external_tokens = 0

    def on_lookup(self, request_id, local_tokens, result) -> None:
        self.lookups += 1

    def on_load_planned(self, request_id, plan) -> None:
        if not plan.declined:
            self.load_blocks += len(plan.device_block_ids)
            self.external_tokens += plan.external_tokens

    def on_store_committed(self, store) -> None:
        self.store_blocks += len(store.device_block_ids)

    def on_step(self, step, meta) -> None:
        self.steps += 1


def _prometheus():
    registry = CollectorRegistry()

    def bind(cls):
        return lambda **kwargs: cls(registry=registry, **kwargs)

    prom = HybridOffloadPromMetrics(
        cpu_vllm_config(),
        {Counter: bind(Counter), Gauge: bind(Gauge), Histogram: bind(Histogram)},
        ["engine"],
        {0: ["0"]},
    )
    return prom, registry


def _prom_total(registry, metric: str, **labels) -> float:
    """Sum of a counter's samples over every value of the labels not given."""
    total = 0.0
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == f"vllm:kvtk_{metric}_total" and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


@pytest.mark.parametrize("interval_s", [0.0, 3600.0])
def test_counts_stats_prometheus_and_events_agree_after_a_run(make_harness, interval_s):
    page = SHAPES[HYBRID].attention_page_bytes
    harness = make_harness(
        HYBRID, connector="toolkit", extra_config={"cpu_bytes_to_use": 200 * page, "stats_interval_s": interval_s}
    )
    connector = harness.connector
    side = connector.scheduler_side
    observations = connector.observe_requests()  # what the experiments' per-request results are built from
    events = subscribe(side.manager, EventCounts())  # two subscribers: the manager fans out
    prom, registry = _prometheus()
    hook = connector.get_kv_connector_stats

    def reporting_hook():  # what vLLM's stats hook hands on: observed into Prometheus as vLLM's logger does
        stats = hook()
        if stats is not None:
            prom.observe(stats.data, engine_idx=0)
        return stats

    connector.get_kv_connector_stats = reporting_hook
    prompts = random_prompts(4, 2000)
    run_phases(
        harness,
        [
            Phase("cold", {f"c{i}": p for i, p in enumerate(prompts)}, max_tokens=2),
            Phase("hot", {f"h{i}": p for i, p in enumerate(prompts)}, max_tokens=2, reset_before=True),
            # A connector reset replaces the manager's hand-off stats: the cumulative counts carry them over.
            Phase(
                "again",
                {f"a{i}": p for i, p in enumerate(prompts)},
                max_tokens=2,
                reset_before=True,
                reset_connector=True,
            ),
            Phase("hot2", {f"b{i}": p for i, p in enumerate(prompts)}, max_tokens=2, reset_before=True),
        ],
    )
    harness.step()  # the step after the last finish: vLLM asks for stats once more, the last interval goes out

    counts = connector.cumulative_stats()
    counters, miss, boundary = counts["counters"], counts["miss"], counts["boundary"]
    assert counters["external_hit_tokens"] > 0 and counters["store_blocks"] > 0
    # Prometheus (through the interval stats) == the cumulative counts.
    assert _prom_total(registry, "external_hit_tokens") == counters["external_hit_tokens"]
    assert _prom_total(registry, "load_blocks") == counters["load_blocks"]
    assert _prom_total(registry, "store_blocks") == counters["store_blocks"]
    assert _prom_total(registry, "bytes", direction="load") == counters.get("bytes_loaded", 0)
    assert _prom_total(registry, "bytes", direction="store") == counters.get("bytes_stored", 0)
    assert _prom_total(registry, "lookups") == miss["num_lookups"] > 0
    for reason, count in miss["by_reason"].items():
        assert _prom_total(registry, "lookups", outcome=reason) == count
    assert _prom_total(registry, "lookup_misses_by_group") == sum(
        n for reasons in miss["by_group"].values() for n in reasons.values()
    )
    assert boundary["published"] > 0  # the hybrid layout hands Mamba boundaries off
    for outcome, count in boundary.items():
        if outcome not in ("published", "pending_retry"):
            assert _prom_total(registry, "boundary_stores", outcome=outcome) == count, outcome
    # The events (two subscribers) == the cumulative counts == what per-request results sum to.
    assert events.lookups == miss["num_lookups"]
    assert events.external_tokens == counters["external_hit_tokens"]
    assert events.load_blocks == counters["load_blocks"] == sum(observations.load_blocks.values())
    assert events.store_blocks == counters["store_blocks"] == sum(observations.store_blocks.values())
    assert events.steps >= len(harness.steps) - 1
