"""The vs-vLLM scheduler benchmark's workload (`kvtk bench scheduler`): documents shared by many requests.

A few hot documents and a long tail (Zipf-like popularity), each request one document plus its own suffix. Pure
Python from one seed: both connectors of the comparison get exactly the same prompts.
"""

from __future__ import annotations

import random

from toolkit.workloads.traces import Trace, TraceRequest

VOCAB_SIZE = 2000  # token ids in [3, 2000)


def shared_document_prompts(
    *,
    num_requests: int = 256,
    num_documents: int = 24,
    document_tokens: tuple[int, int] = (1280, 2560),
    suffix_tokens: tuple[int, int] = (64, 512),
    seed: int = 0,
    max_tokens: int = 1,
) -> Trace:
    """Requests `q0`, `q1`, ...: one document (a segment `doc<j>`) plus an inline suffix, token ids in [3, 2000);
    token counts are inclusive ranges; every request arrives at 0 and asks for `max_tokens` output tokens."""
    rng = random.Random(seed)
    params = {
        "num_requests": num_requests,
        "num_documents": num_documents,
        "document_tokens": list(document_tokens),
        "suffix_tokens": list(suffix_tokens),
        "seed": seed,
        "max_tokens": max_tokens,
    }
    trace = Trace(f"shared-documents-{num_requests}", "shared-documents", VOCAB_SIZE, params=params)
    for d in range(num_documents):
        tokens = [rng.randrange(3, VOCAB_SIZE) for _ in range(rng.randint(*document_tokens))]
        trace.segments[f"doc{d}"] = tokens
        trace.segment_specs[f"doc{d}"] = {"token_ids": tokens}
    weights = [1.0 / (i + 1) for i in range(num_documents)]  # a few hot documents, a long tail
    for i in range(num_requests):
        doc = rng.choices(range(num_documents), weights)[0]  # draws as choosing among the documents themselves
        suffix = tuple(rng.randrange(3, VOCAB_SIZE) for _ in range(rng.randint(*suffix_tokens)))
        trace.requests.append(TraceRequest(f"q{i}", 0.0, (f"doc{doc}", suffix), max_tokens))
    return trace
