"""The toolkit connector inside vLLM's real scheduler and KV cache manager, without a model (engine-less harness).

Each test narrates one behaviour on a tiny full-attention (Qwen2) or hybrid (Qwen3-Next: 3 GDN groups in Mamba
align mode + 1 full-attention group, 640-token blocks) layout. Workers are the connector's real worker role
("copy": torch copies over a fake KV allocation) unless the test only needs scheduling ("instant").
"""

from __future__ import annotations

import pytest
from vllm_test_utils import random_prompts, vllm_release

from toolkit.engines.harness import SHAPES, Phase, run_phases

pytestmark = pytest.mark.engine

HYBRID = "tiny-qwen3-next"
PAGE = SHAPES[HYBRID].attention_page_bytes


def cpu_bytes(blocks: int, shape: str = HYBRID) -> int:
    return blocks * SHAPES[shape].attention_page_bytes


def assert_no_leaks(harness) -> None:
    """Idle: no device block pinned by the connector, every device block back in the free queue."""
    assert not harness.busy
    assert harness.connector.scheduler_side.manager.num_pinned_device_blocks() == 0
    pool = harness.scheduler.kv_cache_manager.block_pool
    assert pool.get_num_free_blocks() == pool.num_gpu_blocks - 1


def cold_hot(prompts: list[list[int]], max_tokens: int = 2) -> list[Phase]:
    return [
        Phase("cold", {f"c{i}": p for i, p in enumerate(prompts)}, max_tokens=max_tokens),
        Phase("hot", {f"h{i}": p for i, p in enumerate(prompts)}, max_tokens=max_tokens, reset_before=True),
    ]


@pytest.mark.parametrize(
    "shape, unit, expected",
    [
        ("tiny-qwen2", None, 1920),  # 15 full 128-token blocks of a 2000-token prompt
        (HYBRID, None, 1920),  # 3 hybrid blocks of 640 tokens
        (HYBRID, 128, 1920),  # fine-grained: the last 128-token boundary with a Mamba state is 1920
    ],
)
def test_cold_then_hot_serves_prompts_from_cpu(make_harness, shape, unit, expected):
    harness = make_harness(
        shape,
        connector="toolkit",
        worker="copy",
        prefix_match_unit=unit,
        extra_config={"cpu_bytes_to_use": cpu_bytes(200, shape)},
    )
    results = run_phases(harness, cold_hot(random_prompts(4, 2000)))
    assert all(r.external_hit_tokens == 0 for r in results["cold"].values())
    assert [r.external_hit_tokens for r in results["hot"].values()] == [expected] * 4
    assert all(r.local_hit_tokens == 0 for r in results["hot"].values())  # the device cache really was reset
    stats = harness.connector.cumulative_stats()["counters"]
    assert stats["bytes_loaded"] > 0 and stats["bytes_stored"] >= stats["bytes_loaded"]
    assert_no_leaks(harness)


def test_loaded_bytes_are_the_stored_bytes(make_harness):
    """Tag every device row, store, reset, scribble over the device, load: the loaded rows carry the tags."""
    import torch

    harness = make_harness(
        HYBRID, connector="toolkit", worker="copy", extra_config={"cpu_bytes_to_use": cpu_bytes(200)}
    )
    (prompt,) = random_prompts(1, 2000, seed=3)
    rows = next(iter(harness.device_kv.values()))  # every group aliases this one region
    rows.copy_((torch.arange(rows.shape[0], dtype=torch.int64) % 127 + 1).to(torch.int8)[:, None].expand_as(rows))
    run_phases(harness, [Phase("cold", {"a": prompt})])
    tags = {}
    worker = harness.worker.worker_side.worker
    host = worker.host.mirrors[0].view
    harness.run_until_idle()
    for cpu_id in range(1, host.shape[0]):
        if host[cpu_id, 0].item():
            tags[cpu_id] = int(host[cpu_id, 0].item())
    assert tags, "nothing was stored"
    rows.zero_()
    results = run_phases(harness, [Phase("hot", {"b": prompt}, reset_before=True)])
    assert results["hot"]["b"].external_hit_tokens == 1920
    loaded = [block for _, block in results["hot"]["b"].loaded_pairs]
    assert loaded and all(rows[b, 0].item() != 0 for b in loaded)
    assert {int(rows[b, 0].item()) for b in loaded} <= set(tags.values())


@pytest.mark.parametrize("retention_tokens, hit_tokens", [(640, 1280), (None, 0)])
def test_shared_prefix_hits_stop_at_the_last_common_boundary(make_harness, retention_tokens, hit_tokens):
    """A Mamba state is kept (and so handed off and stored) only where vLLM's retention keeps one. With one per 640
    tokens, `a`'s chunks leave states at 640, 1280 and 1920, and `b`, sharing 1,300 tokens, hits at 1280. With the
    engine's default (0: the replay boundary, 1920, and shared-prefix junctions, none yet) nothing inside the shared
    prefix was kept: `b` recomputes it, as vLLM itself would."""
    harness = make_harness(
        HYBRID,
        connector="toolkit",
        prefix_match_unit=128,
        max_num_batched_tokens=640,
        extra_config={"cpu_bytes_to_use": cpu_bytes(200)},
        retention_interval_tokens=retention_tokens,
    )
    assert harness.kv_cache_config.prefix_cache_retention_interval == (retention_tokens or 0)
    prefix = random_prompts(1, 1300, seed=7)[0]
    first, second = random_prompts(2, 2000, seed=8, prefix=prefix)
    results = run_phases(harness, [Phase("a", {"a": first}), Phase("b", {"b": second}, reset_before=True)])
    assert results["b"]["b"].external_hit_tokens == hit_tokens


def test_chunked_prefill_stores_as_it_goes(make_harness):
    harness = make_harness(
        HYBRID,
        connector="toolkit",
        worker="copy",
        max_num_batched_tokens=512,
        prefix_match_unit=128,
        extra_config={"cpu_bytes_to_use": cpu_bytes(200)},
    )
    results = run_phases(harness, cold_hot(random_prompts(2, 2000, seed=11)))
    assert len(harness.steps) > 8  # really chunked: 2 x 2000 tokens at 512 per step
    assert [r.external_hit_tokens for r in results["hot"].values()] == [1920, 1920]
    assert_no_leaks(harness)


def _preempting_harness(make_harness):
    """A device pool too small for four long prompts with long outputs: vLLM preempts; returns the harness and the
    list the preempted request ids are appended to."""
    harness = make_harness(
        HYBRID,
        connector="toolkit",
        worker="copy",
        num_gpu_blocks=22,
        max_num_batched_tokens=1024,
        extra_config={"cpu_bytes_to_use": cpu_bytes(300)},
    )
    preempted: list[str] = []
    original = harness.scheduler._preempt_request

    def spy(request, *args, **kwargs):
        preempted.append(request.request_id)
        return original(request, *args, **kwargs)

    harness.scheduler._preempt_request = spy
    return harness, preempted


def test_preempted_requests_resume_from_the_cpu_tier(make_harness):
    harness, preempted = _preempting_harness(make_harness)
    results = run_phases(
        harness, [Phase("cold", {f"p{i}": p for i, p in enumerate(random_prompts(4, 1900))}, max_tokens=700)]
    )
    assert preempted
    assert all(len(r.output_tokens) == 700 for r in results["cold"].values())
    assert any(r.readmission_external_tokens for r in results["cold"].values())
    assert_no_leaks(harness)


def _store_in_flight(make_harness, *, seed: int, max_tokens: int):
    """A hybrid harness stepped until request "a" has a store event in flight; returns it and a's prompt."""
    harness = make_harness(
        HYBRID, connector="toolkit", worker="copy", extra_config={"cpu_bytes_to_use": cpu_bytes(200)}
    )
    (prompt,) = random_prompts(1, 2000, seed=seed)
    harness.add("a", prompt, max_tokens=max_tokens)
    while not harness.connector.scheduler_side.manager.stores.stores_in_flight():
        harness.step()
    return harness, prompt


def test_request_aborted_while_its_store_is_in_flight(make_harness):
    harness, prompt = _store_in_flight(make_harness, seed=5, max_tokens=50)
    harness.abort(["a"])
    assert harness.connector.has_pending_push_work()
    harness.run_until_idle()
    assert_no_leaks(harness)
    results = run_phases(harness, [Phase("hot", {"b": prompt}, reset_before=True)])
    assert results["hot"]["b"].external_hit_tokens > 0


def test_reset_refused_in_flight_then_clears_the_cpu_tier(make_harness):
    harness, prompt = _store_in_flight(make_harness, seed=6, max_tokens=1)
    assert harness.connector.reset_cache() is False  # stores in flight: abandoned, not reported done
    harness.run_until_idle()
    assert harness.reset_prefix_cache(reset_connector=True)
    results = run_phases(harness, [Phase("after-reset", {"b": prompt})])
    assert results["after-reset"]["b"].external_hit_tokens == 0
    assert_no_leaks(harness)


def test_failed_loads_are_recomputed_and_counted(make_harness):
    harness = make_harness(
        HYBRID,
        connector="toolkit",
        worker="copy",
        extra_config={"cpu_bytes_to_use": cpu_bytes(200), "fault_injection": "load:every=1"},
    )
    results = run_phases(harness, cold_hot(random_prompts(2, 2000, seed=9), max_tokens=3))
    assert all(r.external_hit_tokens == 1920 for r in results["hot"].values())  # offered and accepted...
    assert all(len(r.output_tokens) == 3 for r in results["hot"].values())  # ...failed, recomputed, finished
    counters = harness.connector.cumulative_stats()["counters"]
    assert counters["loads_failed"] == 2
    assert_no_leaks(harness)


def test_full_attention_failed_loads_use_block_level_errors(make_harness):
    harness = make_harness(
        "tiny-qwen2",
        connector="toolkit",
        worker="copy",
        extra_config={"cpu_bytes_to_use": cpu_bytes(200, "tiny-qwen2"), "fault_injection": "load:every=1"},
    )
    results = run_phases(harness, cold_hot(random_prompts(2, 1000, seed=10), max_tokens=2))
    assert all(len(r.output_tokens) == 2 for r in results["hot"].values())
    assert harness.connector.cumulative_stats()["counters"]["load_events_failed"] >= 1
    assert_no_leaks(harness)


def test_lazy_policy_and_block_aligned_mode(make_harness):
    prompts = random_prompts(4, 2000, seed=12)
    lazy = make_harness(
        HYBRID,
        connector="toolkit",
        prefix_match_unit=128,
        num_gpu_blocks=24,
        extra_config={"cpu_bytes_to_use": cpu_bytes(200), "store_policy": "lazy"},
    )
    results = run_phases(lazy, cold_hot(prompts))
    assert lazy.connector.scheduler_side.geometry.fine_grained.enabled is False
    assert all(r.external_hit_tokens % 640 == 0 for r in results["hot"].values())
    coarse = make_harness(
        HYBRID,
        connector="toolkit",
        prefix_match_unit=128,
        extra_config={"cpu_bytes_to_use": cpu_bytes(200), "fine_grained": "off"},
    )
    results = run_phases(coarse, cold_hot(prompts))
    assert [r.external_hit_tokens for r in results["hot"].values()] == [1920] * 4


def test_bad_config_is_refused_with_the_valid_keys(make_harness):
    with pytest.raises(ValueError, match="valid keys: cpu_bytes_to_use"):
        make_harness(HYBRID, connector="toolkit", extra_config={"cpu_gib": 1})
    with pytest.raises(ValueError, match="store_policy: 'sometimes'"):
        make_harness(HYBRID, connector="toolkit", extra_config={"store_policy": "sometimes"})
    with pytest.raises(ValueError, match="minimum is"):
        make_harness(HYBRID, connector="toolkit", extra_config={"cpu_bytes_to_use": PAGE})


def test_kv_events_report_cpu_stores_and_evictions(base_configs):
    import copy

    from vllm.config import KVEventsConfig
    from vllm.distributed.kv_events import MEDIUM_CPU, BlockRemoved, BlockStored

    from toolkit.engines.harness import Harness

    config = copy.deepcopy(base_configs(HYBRID))
    config.kv_events_config = KVEventsConfig(enable_kv_cache_events=True, publisher="null")
    harness = Harness(
        HYBRID,
        base_config=config,
        connector="toolkit",
        prefix_match_unit=128,
        extra_config={"cpu_bytes_to_use": cpu_bytes(12)},
    )  # tiny tier: stores evict
    events = []
    take = harness.connector.take_events

    def record():
        batch = list(take())
        events.extend(batch)
        return batch

    harness.connector.take_events = record
    run_phases(harness, [Phase("a", {f"a{i}": p for i, p in enumerate(random_prompts(4, 2000))}, wave=1)])
    stored = [e for e in events if isinstance(e, BlockStored)]
    removed = [e for e in events if isinstance(e, BlockRemoved)]
    assert stored and removed
    assert {e.medium for e in stored + removed} == {MEDIUM_CPU}
    assert {e.block_size for e in stored} == {640}


@pytest.mark.parametrize("interval_s", [0.0, 3600.0])
def test_connector_stats_are_batched_and_nothing_is_lost(make_harness, interval_s):
    """`stats_interval_s` batches what vLLM's per-step stats hook receives; the sums of what it received equal the
    connector's cumulative counters either way (the last interval goes out once the last request finished)."""
    harness = make_harness(
        HYBRID, connector="toolkit", extra_config={"cpu_bytes_to_use": cpu_bytes(200), "stats_interval_s": interval_s}
    )
    connector = harness.connector
    reported, calls = [], []
    hook = connector.get_kv_connector_stats

    def recording_hook():
        stats = hook()
        calls.append(stats)
        if stats is not None:
            reported.append(stats)
        return stats

    connector.get_kv_connector_stats = recording_hook
    run_phases(harness, cold_hot(random_prompts(4, 2000)))
    harness.step()  # the step after the last finish: vLLM asks for stats once more
    counters = connector.scheduler_side.counters
    summed = {}
    for stats in reported:
        for metric, series in stats.data["c"].items():
            summed[metric] = summed.get(metric, 0) + sum(series.values())
    assert counters["external_hit_tokens"] > 0
    assert summed.get("external_hit_tokens") == counters["external_hit_tokens"]
    assert summed.get("store_blocks") == counters["store_blocks"]
    assert summed.get("lookups") == connector.scheduler_side.manager.miss_stats.num_lookups
    if interval_s:
        assert len(reported) <= 4 < len(calls)  # first call, each drained phase, and the last finish


@pytest.mark.parametrize(
    "num_gpu_blocks, state",
    [
        (16, "looked up, no device room yet"),  # the lookup pinned CPU blocks; allocation failed, the request waits
        (20, "load in flight"),  # allocated, its load submitted
    ],
)
def test_request_aborted_between_lookup_and_load_leaves_nothing_pinned(make_harness, num_gpu_blocks, state):
    extra = {"cpu_bytes_to_use": cpu_bytes(200)}
    if state == "load in flight":
        # A real copy of a few blocks can finish inside the step that submitted it; a late load keeps it in flight
        # when the test looks (the copy thread starts it 0.5 s late), so the abort really meets a running load.
        extra["fault_injection"] = "late_load:every=1,delay_s=0.5"
    harness = make_harness(
        HYBRID, connector="toolkit", worker="copy", num_gpu_blocks=num_gpu_blocks, extra_config=extra
    )
    (prompt,) = random_prompts(1, 2000, seed=41)
    (filler,) = random_prompts(1, 3800, seed=42)
    run_phases(harness, [Phase("cold", {"c": prompt})])
    harness.run_until_idle()
    assert harness.reset_prefix_cache()
    harness.add("filler", filler, 3)  # scheduled first: takes most of the device pool
    harness.add("b", prompt, 3)
    harness.step()
    manager = harness.connector.scheduler_side.manager
    if state == "load in flight":
        assert manager.loads.load_info("b") is not None and not manager.loads.pending_hit_ids()
    else:
        assert "b" in manager.loads.pending_hit_ids() and manager.loads.load_info("b") is None
    assert manager.cpu.num_pinned_blocks() > 0
    harness.abort(["b"])
    harness.run_until_idle()
    assert manager.cpu.num_pinned_blocks() == 0
    assert not manager.loads.pending_hit_ids() and not manager.loads.num_tracked()
    assert_no_leaks(harness)
    again = run_phases(harness, [Phase("again", {"b2": prompt}, reset_before=True)])["again"]["b2"]
    assert again.external_hit_tokens > 0 and len(again.output_tokens) == 1


def test_cpu_budget_beyond_host_memory_is_refused_at_start(make_harness):
    from toolkit.vllm.config import GIB, available_host_bytes

    available = available_host_bytes()
    if available is None:
        pytest.skip("no /proc/meminfo here")
    too_much = available + 4 * GIB
    with pytest.raises(ValueError, match=rf"cpu_bytes_to_use: {too_much} bytes per rank x 1 rank\(s\).*MemAvailable"):
        make_harness(HYBRID, connector="toolkit", worker="copy", extra_config={"cpu_bytes_to_use": too_much})


def test_run_until_idle_waits_for_late_copies_by_time_and_names_them(make_harness):
    harness = make_harness(
        HYBRID,
        connector="toolkit",
        worker="copy",
        extra_config={"cpu_bytes_to_use": cpu_bytes(200), "fault_injection": "late_store:every=1,delay_s=0.4"},
    )
    (prompt,) = random_prompts(1, 2000, seed=43)
    harness.add("a", prompt, 1)
    with pytest.raises(RuntimeError, match=r"0\.05 s: .*'store_events_in_flight': [1-9]"):
        harness.run_until_idle(timeout_s=0.05)
    assert harness.run_until_idle() > 0  # each late store holds its thread 0.4 s: thousands of idle steps would not
    assert_no_leaks(harness)


@pytest.mark.parametrize("length, expected", [(896, 768), (1024, 896), (900, 896), (1408, 1280)])
def test_a_prompt_ending_on_a_hash_boundary_replays_to_the_boundary_before_its_last_token(
    make_harness, length, expected
):
    """A hit stops one token short of the prompt, so an identical replay of a prompt that ends exactly on a hash
    boundary can reach the boundary before. The finish-time tail store keeps that boundary's key when the device
    registered only it (vLLM's SimpleCPU, keyed by the last boundary alone, replays 896 and 1024 to 640)."""
    prompt = random_prompts(1, length, seed=5)[0]
    harness = make_harness("tiny-qwen3-next", prefix_match_unit=128, extra_config={"cpu_bytes_to_use": 1 << 28})
    out = run_phases(
        harness,
        [Phase("cold", {"c": prompt}, max_tokens=2), Phase("hot", {"h": prompt}, max_tokens=2, reset_before=True)],
    )
    assert out["hot"]["h"].external_hit_tokens == expected


@pytest.mark.parametrize("runner", ["v1", "v2"])
def test_a_resumed_request_is_tracked_on_its_new_table_under_either_model_runner(make_harness, monkeypatch, runner):
    """Model Runner V2 (official vLLM's default, the only runner of 0.34) re-sends a preempted request as a new one
    with its whole new table; V1 lists it in `resumed_req_ids`. Either way the core's view of the request's
    attention table is vLLM's own at every step: a stale table would store freed device blocks (now another
    request's) and skip the new ones. Stores read only the attention group positionally; Mamba groups only from
    vLLM's exact hand-offs."""
    if runner == "v1" and vllm_release()[:2] >= (0, 34):
        pytest.skip("vLLM 0.34 has only Model Runner V2")
    if vllm_release()[:2] < (0, 34):
        monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1" if runner == "v2" else "0")
    harness, preempted = _preempting_harness(make_harness)
    if vllm_release()[:2] < (0, 34):
        assert harness.vllm_config.use_v2_model_runner == (runner == "v2")
    side = harness.connector.scheduler_side
    stable = [g for g, group in enumerate(side.geometry.groups) if group.kind.positionally_stable]
    assert stable  # the attention group
    mismatched, checked = [], []

    def compare(output) -> None:
        states = side.manager.request_stores._states
        for req_id in output.num_scheduled_tokens:
            state = states.get(req_id)
            if state is None or state.finished:
                continue
            theirs = harness.scheduler.kv_cache_manager.get_block_ids(req_id)
            for g in stable:
                checked.append(req_id)
                if list(state.block_ids[g]) != list(theirs[g]):
                    mismatched.append((req_id, g, list(state.block_ids[g]), list(theirs[g])))

    harness.step_listeners.append(compare)
    results = run_phases(
        harness, [Phase("cold", {f"p{i}": p for i, p in enumerate(random_prompts(4, 1900))}, max_tokens=700)]
    )
    assert preempted and checked
    assert not mismatched, mismatched[:3]
    # (Whether a readmission finds its blocks stored depends on the copy threads' pace: not asserted here.)
    assert all(len(r.output_tokens) == 700 for r in results["cold"].values())
    assert_no_leaks(harness)


def test_the_dma_call_size_reaches_the_copy_worker(make_harness):
    """`copy_descriptors_per_call` travels from the connector config to the worker's config (used by the CUDA DMA
    backend only: on CPU the copies are unchanged); 0, the default, leaves the backend its own rule."""
    tuned = make_harness(
        HYBRID,
        connector="toolkit",
        worker="copy",
        extra_config={"cpu_bytes_to_use": cpu_bytes(50), "copy_descriptors_per_call": 96},
    )
    assert tuned.worker.worker_side.worker.config.dma_descriptors_per_call == 96
    default = make_harness(HYBRID, connector="toolkit", worker="copy", extra_config={"cpu_bytes_to_use": cpu_bytes(50)})
    assert default.worker.worker_side.worker.config.dma_descriptors_per_call is None


def test_kv_caches_unregistered_then_restored_never_serve_what_was_stored_before(make_harness):
    """vLLM 0.33/0.34 call `unregister_kv_caches()` and `restore_kv_caches()` (no arguments) around sleep mode and,
    on 0.34, weight updates. The host tier is dropped with the copy worker, and KV computed before a weight update
    is wrong after it: a load of anything stored before the unregister fails (the engine recomputes, the keys go),
    what is stored after the restore is served again."""
    harness = make_harness(
        HYBRID, connector="toolkit", worker="copy", extra_config={"cpu_bytes_to_use": cpu_bytes(200)}
    )
    (prompt,) = random_prompts(1, 2000, seed=12)
    run_phases(harness, [Phase("cold", {"a": prompt}, max_tokens=2)])
    harness.worker.unregister_kv_caches()
    assert harness.worker.worker_side.worker is None
    harness.worker.restore_kv_caches()
    harness.worker.restore_kv_caches()  # idempotent, as vLLM asks
    assert harness.worker.worker_side.worker is not None
    stale = run_phases(harness, [Phase("stale", {"b": prompt}, max_tokens=2, reset_before=True)])["stale"]["b"]
    assert stale.external_hit_tokens == 1920 and len(stale.output_tokens) == 2  # offered, failed, recomputed
    counters = harness.connector.cumulative_stats()["counters"]
    assert counters["loads_failed"] == 1
    again = run_phases(harness, [Phase("again", {"c": prompt}, max_tokens=2, reset_before=True)])["again"]["c"]
    assert again.external_hit_tokens == 1920 and again.loaded_pairs  # stored again after the restore: served
    assert harness.connector.cumulative_stats()["counters"]["loads_failed"] == 1
    assert_no_leaks(harness)
