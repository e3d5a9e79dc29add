"""Unrelated random prompts: the published serving runs that `kvtk bench dry --check-published` replays (fixed
lengths, nothing reused). Pure Python from one seed."""

from __future__ import annotations

import random

from toolkit.workloads.traces import FIRST_TOKEN_ID, Trace, TraceRequest


def random_prompts(
    *, num_requests: int, prompt_tokens: int, vocab_size: int, seed: int = 0, max_tokens: int = 1
) -> Trace:
    """`num_requests` unrelated prompts of `prompt_tokens` ids in [3, vocab_size), inline (nothing is reused), all
    arriving at 0, each asking for `max_tokens` output tokens."""
    rng = random.Random(seed)
    params = {"num_requests": num_requests, "prompt_tokens": prompt_tokens, "seed": seed, "max_tokens": max_tokens}
    trace = Trace(f"random-{num_requests}x{prompt_tokens}", "random", vocab_size, params=params)
    for i in range(num_requests):
        tokens = tuple(rng.randrange(FIRST_TOKEN_ID, vocab_size) for _ in range(prompt_tokens))
        trace.requests.append(TraceRequest(f"r{i}", 0.0, (tokens,), max_tokens))
    return trace
