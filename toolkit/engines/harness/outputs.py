"""What the harness fabricates in the model runner's place: the tokens a request samples and the step's
`ModelRunnerOutput`, the way vLLM's own scheduler unit tests do it (every scheduled request that has computed all
its tokens samples one token; partial prefills sample none)."""

from __future__ import annotations

import functools
import zlib
from typing import Any, Callable


def default_samples(req_id: str, first: int, count: int) -> list[int]:
    """The fabricated tokens a request samples at outputs `first` .. `first + count - 1`: fixed per (request,
    index), so runs repeat (the request's crc computed once for a decode stretch's run of them)."""
    base = zlib.crc32(req_id.encode())
    return [(base + i * 7) % 1000 + 3 for i in range(first, first + count)]


def default_sample(req_id: str, index: int) -> int:
    """`default_samples` of one output index: what a real step samples."""
    return default_samples(req_id, index, 1)[0]


@functools.cache
def _has_index_field() -> bool:
    """Whether this vLLM's `ModelRunnerOutput` takes `req_id_to_index` (0.32, 0.33; 0.34 dropped it)."""
    import dataclasses

    from vllm.v1.outputs import ModelRunnerOutput

    return any(f.name == "req_id_to_index" for f in dataclasses.fields(ModelRunnerOutput))


def runner_output(scheduler: Any, output: Any, kv_output: Any, sample: Callable[[str, int], int]) -> Any:
    """The `ModelRunnerOutput` of one scheduled step: one sampled token per request whose prompt is computed."""
    from vllm.v1.outputs import ModelRunnerOutput

    req_ids = list(output.num_scheduled_tokens)
    sampled = []
    for req_id in req_ids:
        request = scheduler.requests[req_id]
        done = request.num_computed_tokens >= request.num_tokens
        sampled.append([sample(req_id, request.num_output_tokens)] if done else [])
    fields: dict[str, Any] = {
        "req_ids": req_ids,
        "sampled_token_ids": sampled,
        "logprobs": None,
        "prompt_logprobs_dict": {},
        "pooler_output": [],
        "kv_connector_output": kv_output,
    }
    if _has_index_field():
        fields["req_id_to_index"] = {r: i for i, r in enumerate(req_ids)}
    return ModelRunnerOutput(**fields)
