"""The vs-vLLM scheduler benchmark's workload (`kvtk bench scheduler`): documents shared by many requests.

A few hot documents and a long tail (Zipf-like popularity), each request one document plus its own suffix. Pure
Python from one seed: both connectors of the comparison get exactly the same prompts.
"""

from __future__ import annotations

import random


def shared_document_prompts(
    *,
    num_requests: int = 256,
    num_documents: int = 24,
    document_tokens: tuple[int, int] = (1280, 2560),
    suffix_tokens: tuple[int, int] = (64, 512),
    seed: int = 0,
) -> dict[str, list[int]]:
    """Request id -> prompt token ids in [3, 2000); token counts are inclusive ranges."""
    rng = random.Random(seed)
    docs = [[rng.randrange(3, 2000) for _ in range(rng.randint(*document_tokens))] for _ in range(num_documents)]
    weights = [1.0 / (i + 1) for i in range(num_documents)]  # a few hot documents, a long tail
    prompts = {}
    for i in range(num_requests):
        doc = rng.choices(docs, weights)[0]
        prompts[f"q{i}"] = doc + [rng.randrange(3, 2000) for _ in range(rng.randint(*suffix_tokens))]
    return prompts
