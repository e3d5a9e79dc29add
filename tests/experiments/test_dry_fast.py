"""The dry engine's decode stretches (`decode_stretch.py`) give the step-by-step reference's answers, per request.

Each case runs the same requests through two fresh dry engines, one with `step_by_step=True` (vLLM's scheduler
called for every step), and compares every field of every request record: hit tokens, load and store bytes, miss
reasons exactly; queueing, TTFT and end-to-end times to float rounding. It also checks the fast path really skipped
most steps and that the clocks counted the same steps, so a stretch that silently never ran would fail.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from toolkit.engines.base import VariantSpec

MOONCAKE = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "mooncake" / "synthetic_trace.jsonl"


def _same_records(fast, reference) -> None:
    assert [r.request_id for r in fast] == [r.request_id for r in reference]
    for a, b in zip(fast, reference):
        for key, want in vars(b).items():
            got = getattr(a, key)
            if isinstance(want, float) and isinstance(got, float):
                assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(got) and math.isnan(want)), (
                    a.request_id,
                    key,
                    got,
                    want,
                )
            else:
                assert got == want, (a.request_id, key, got, want)


def _run_both(make, phases: list[tuple[str, list]], **run_kwargs):
    out = {}
    for step_by_step in (False, True):
        engine = make(step_by_step)
        records = []
        for phase, requests in phases:
            records += engine.run_phase(phase, requests, **run_kwargs)
            if phase != phases[-1][0]:
                engine.reset_device_cache()
        skipped = engine._stretch.num_skipped_steps if not step_by_step else 0
        out[step_by_step] = (records, engine.clock.num_steps, engine.clock.now_s, skipped)
    fast, ref = out[False], out[True]
    _same_records(fast[0], ref[0])
    assert fast[1] == ref[1]  # the same engine steps, skipped ones counted
    assert math.isclose(fast[2], ref[2], rel_tol=1e-9)
    return fast[3], fast[1]


@pytest.mark.engine
@pytest.mark.skipif(not MOONCAKE.is_file(), reason="the Mooncake synthetic trace is not in ../shared/traces")
@pytest.mark.parametrize(
    "model, tp, unit, num_requests, skipped_share",
    [
        ("qwen3-next-80b-a3b", 4, 16, 120, 0.8),  # the set-up: hybrid GDN + full attention, 272-token blocks
        ("gpt-oss-20b", 1, None, 60, 0.1),  # sliding-window layers: their trailing edge cuts the stretches
    ],
)
def test_mooncake_slice_is_the_step_by_step_run(model, tp, unit, num_requests, skipped_share):
    """The Mooncake trace's first requests fed open loop on their arrival times, an H200-sized device and a
    512 GiB tier (for Qwen3-Next-80B-A3B: the issue's TP4, hash unit 16, 75 GiB KV per rank)."""
    from toolkit.engines.dry import DryEngine
    from toolkit.experiments.runner import phase_prompts
    from toolkit.perfmodel.step_time import build_step_model
    from toolkit.workloads.resolve import resolve_trace

    trace = resolve_trace(f"mooncake:{MOONCAKE}", max_requests=num_requests)
    prompts = phase_prompts(trace)
    longest = max(trace.prompt_len(r) + r.max_tokens for r in trace.requests)

    def make(step_by_step: bool) -> DryEngine:
        engine = DryEngine(
            VariantSpec(name="toolkit"),
            model=model,
            cpu_bytes=512 << 30,
            num_gpu_blocks=1,
            device_bytes=(75 if tp == 4 else 20) << 30,
            tp=tp,
            prefix_match_unit=unit,
            max_num_seqs=64,
            max_model_len=longest + 1,
            window=256,
            step_by_step=step_by_step,
        )
        engine.step_model = build_step_model(model, gpu="h200", tp=tp)
        return engine

    skipped, steps = _run_both(make, [("cold", prompts)])
    assert skipped > skipped_share * steps, (skipped, steps)


@pytest.mark.engine
@pytest.mark.parametrize("connector", ["toolkit", "simplecpu"])
def test_tiny_model_sessions_with_clients_and_a_hot_phase(connector):
    """Multi-turn sessions with 24-token answers on the tiny hybrid model, 3 closed-loop clients, a small device
    and CPU tier (stores, loads and evictions between the decode stretches), cold then hot; both connectors."""
    from toolkit.engines.dry import DryEngine
    from toolkit.experiments.runner import phase_prompts
    from toolkit.workloads.clients import previous_turns
    from toolkit.workloads.resolve import resolve_trace

    trace = resolve_trace("agentic:num_sessions=4,num_turns=3,max_tokens=40")
    prompts, after = phase_prompts(trace), previous_turns(trace)
    spec = VariantSpec(name=connector, connector=connector)

    def make(step_by_step: bool) -> DryEngine:
        return DryEngine(
            spec,
            model="tiny-qwen3-next",
            cpu_bytes=48 << 20,
            num_gpu_blocks=48,
            prefix_match_unit=128,
            step_by_step=step_by_step,
        )

    skipped, steps = _run_both(make, [("cold", prompts), ("hot", prompts)], concurrency=3, after=after)
    assert skipped > 0.3 * steps, (skipped, steps)


@pytest.mark.engine
def test_plain_block_hasher_gives_vllms_bytes():
    """The dry engine's prompt hasher (`dry_hashing.py`) against vLLM's own, prompt and appended outputs, at a
    hash unit that does and one that does not divide the prompt; a cache salt goes to vLLM's hasher."""
    import random

    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher
    from vllm.v1.request import Request

    from toolkit.engines.dry import DryEngine

    engine = DryEngine(
        VariantSpec(name="toolkit"),
        model="tiny-qwen3-next",
        cpu_bytes=16 << 20,
        num_gpu_blocks=16,
        prefix_match_unit=16,
    )
    fast = engine.harness._block_hasher
    assert fast.__module__ == "toolkit.engines.dry_hashing"
    reference = get_request_block_hasher(16, sha256)
    rng = random.Random(3)
    for length, salt in ((16 * 40, None), (16 * 40 + 7, None), (5, None), (300, "s")):
        tokens = [rng.randrange(1 << 17) for _ in range(length)]
        ours, theirs = (
            Request(
                request_id=f"r{length}",
                prompt_token_ids=tokens,
                cache_salt=salt,
                sampling_params=SamplingParams(max_tokens=64),
                pooling_params=None,
                block_hasher=h,
            )
            for h in (fast, reference)
        )
        assert ours.block_hashes == theirs.block_hashes and len(ours.block_hashes) == length // 16
        for step in range(40):
            ours.append_output_token_ids(step + 1)
            theirs.append_output_token_ids(step + 1)
        assert ours.block_hashes == theirs.block_hashes


@pytest.mark.engine
@pytest.mark.skipif(not MOONCAKE.is_file(), reason="the Mooncake synthetic trace is not in ../shared/traces")
def test_mooncake_prompt_hashes_from_the_memo_are_vllms_bytes():
    """Mooncake prompts hashed through the (parent hash, block id) memo (`PromptBlockHashes`), tiled copies
    included, against vLLM's own hasher: the same digests, with most blocks taken from the memo."""
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    from toolkit.engines.dry_hashing import PromptBlockHashes, plain_block_hasher
    from toolkit.workloads.mooncake_tiled import tile_mooncake
    from toolkit.workloads.resolve import resolve_trace

    init_none_hash(sha256)
    trace = tile_mooncake(resolve_trace(f"mooncake:{MOONCAKE}", max_requests=40), 2)
    memo = PromptBlockHashes(16)
    ours_hasher = plain_block_hasher(16, None, prompts=memo)
    reference = get_request_block_hasher(16, sha256)
    # The first requests share few prefixes: five of them again (new ids) reuse the memo's digests.
    for i, request in enumerate(trace.requests + trace.requests[:5]):
        req_id = f"{request.request_id}-{i}"
        memo.expect(req_id, trace.prompt_block_ids(request), trace.block_tokens, trace.tokens_key())
        tokens = trace.prompt_token_ids(request)
        ours, theirs = (
            Request(
                request_id=req_id,
                prompt_token_ids=list(tokens),
                sampling_params=SamplingParams(max_tokens=64),
                pooling_params=None,
                block_hasher=h,
            )
            for h in (ours_hasher, reference)
        )
        assert ours.block_hashes == theirs.block_hashes and len(ours.block_hashes) == len(tokens) // 16
        for step in range(40):
            ours.append_output_token_ids(step + 1)
            theirs.append_output_token_ids(step + 1)
        assert ours.block_hashes == theirs.block_hashes
    assert memo.num_reused > 0


def test_a_stretchs_sampled_tokens_are_the_harness_tokens_one_by_one():
    """`Harness.sample_tokens` (a stretch's tokens at once) gives `sample_token` per index, for the default and for
    a given sampler."""
    from toolkit.engines.harness import Harness

    for sample_fn in (None, lambda req_id, index: len(req_id) + 3 * index):
        harness = Harness("tiny-qwen3-next", connector="none", num_gpu_blocks=8, sample_fn=sample_fn)
        for req_id in ("a", "cold:r17"):
            assert harness.sample_tokens(req_id, 4, 9) == [harness.sample_token(req_id, i) for i in range(4, 13)]
