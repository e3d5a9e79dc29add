"""No silent hang in the dry engine: a request the device cache can never hold is refused before the run starts,
with the numbers: from the block geometry before vLLM is imported (`geometry_min_blocks`, used by the experiment's
plan), and again from vLLM's KV cache config before each phase steps (`check_requests`); a scheduler that stops
scheduling anyway ends the run (`STALL_STEPS` steps in a row, `harness.stall.StallWatch`).

vLLM's own engine refuses a KV cache too small for `max_model_len` at start; the dry engine sizes its device cache
from options instead, so a trace's longest request can need more device blocks than exist. vLLM's scheduler then
waits for blocks forever, step after step, scheduling nothing.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from toolkit.errors import BadInput

# Steps that schedule nothing while requests wait, with every transfer instant, before the run is declared stalled:
# a decode stretch or a deferred load resolves within a few steps, never hundreds.
STALL_STEPS = 500


def min_device_blocks(kv_cache_config: Any, tokens: int, *, dcp: int = 1) -> int:
    """A lower bound on the device blocks one request holding `tokens` tokens of KV needs at once: every
    full-attention (or MLA) group holds a block per `block_size` tokens (DCP-sharded groups per rank), every other
    group (sliding window, chunked local, Mamba state) at least one block."""
    need = 0
    for group in kv_cache_config.kv_cache_groups:
        spec = group.kv_cache_spec
        windowed = getattr(spec, "sliding_window", None) or getattr(spec, "attention_chunk_size", None)
        if windowed or "Mamba" in type(spec).__name__:
            need += 1
            continue
        per_rank = -(-tokens // dcp) if getattr(spec, "dcp_sharded", False) and dcp > 1 else tokens
        need += -(-per_rank // spec.block_size)
    return need


def geometry_min_blocks(geometry: Any, tokens: int) -> int:
    """`min_device_blocks` from a `core.geometry.HybridGeometry` (no vLLM): a block per resolved group block of
    tokens in every full-attention or MLA group (their blocks already span DCP ranks), one in every other group."""
    return sum(
        1 if g.kind.is_mamba or g.kind.is_windowed else -(-tokens // block)
        for g, block in zip(geometry.groups, geometry.group_block_tokens)
    )


def device_token_capacity(need_blocks: Callable[[int], int], usable: int, upper: int) -> int:
    """The longest request (tokens of KV, at most `upper`) whose lower bound fits `usable` device blocks."""
    low, high = 0, upper
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if need_blocks(mid) <= usable else (low, mid - 1)
    return low


def never_schedulable(
    request_id: str, prompt_tokens: int, output_tokens: int, need: int, usable: int, capacity_tokens: int, hint: str
) -> str:
    """The one line for a request no device cache of this size could ever hold."""
    return (
        f"request {request_id}: {prompt_tokens} prompt + {output_tokens} output tokens need at least {need} device "
        f"blocks, the dry engine's device cache has {usable} (one request of at most {capacity_tokens} tokens); it "
        f"could never be scheduled: {hint}"
    )


def check_requests(harness: Any, requests: Iterable[tuple[str, int, int]]) -> None:
    """Before a phase steps: raise ValueError (one line, the numbers) for the first request (id, prompt tokens,
    output tokens) that vLLM's scheduler could never finish on this harness: longer than `max_model_len` (vLLM
    stops one token short of it), or needing more device blocks than the device cache has."""
    kv_cache_config, vllm_config = harness.kv_cache_config, harness.vllm_config
    max_model_len = vllm_config.model_config.max_model_len
    dcp = vllm_config.parallel_config.decode_context_parallel_size
    usable = kv_cache_config.num_blocks - 1  # block 0 is vLLM's null block, never allocated
    for request_id, prompt_tokens, output_tokens in requests:
        if prompt_tokens + output_tokens > max_model_len:
            raise BadInput(
                f"request {request_id}: {prompt_tokens} prompt + {output_tokens} output tokens exceed the dry "
                f"engine's max_model_len {max_model_len}"
            )
        tokens = prompt_tokens + max(0, output_tokens - 1)  # the last sampled token never gets KV
        need = min_device_blocks(kv_cache_config, tokens, dcp=dcp)
        if need > usable:
            capacity = device_token_capacity(lambda t: min_device_blocks(kv_cache_config, t, dcp=dcp), usable, tokens)
            raise BadInput(
                never_schedulable(
                    request_id,
                    prompt_tokens,
                    output_tokens,
                    need,
                    usable,
                    capacity,
                    "give a larger --device-gib or --device-blocks, or leave it out with --max-requests",
                )
            )
