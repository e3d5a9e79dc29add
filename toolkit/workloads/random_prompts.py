"""Unrelated random prompts: the published serving runs that `kvtk bench dry --check-published` replays (fixed
lengths, nothing reused). Pure Python from one seed."""

from __future__ import annotations

import random


def random_prompts(*, num_requests: int, prompt_tokens: int, vocab_size: int, seed: int = 0) -> list[list[int]]:
    """`num_requests` unrelated prompts of `prompt_tokens` ids in [3, vocab_size): nothing is reused (the published
    serving runs `kvtk bench dry --check-published` replays)."""
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab_size) for _ in range(prompt_tokens)] for _ in range(num_requests)]
