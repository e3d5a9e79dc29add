"""vLLM's request block hasher for plain token prompts, the same bytes at a fraction of the cost.

vLLM hashes every full hash block of a request as `sha256(pickle((parent, tuple(tokens), extra_keys)))`, chained
from `NONE_HASH`, calling a generic extra-keys function (multimodal, LoRA, cache salt, prompt embeddings) per
block. The dry engine's requests never carry any of those, so `extra_keys` is always None; at hash unit 16 the
whole Mooncake trace is 3.9M blocks, and the generic path costs more than the scheduler. `plain_block_hasher`
computes the identical digests in one tight loop and hands any request that has extra keys to vLLM's own hasher.
A test checks the bytes against vLLM's hasher.
"""

from __future__ import annotations

import hashlib
import pickle
from typing import Callable


def plain_block_hasher(hash_block_tokens: int, vllm_hasher: Callable) -> Callable:
    """A drop-in for `vllm.v1.core.kv_cache_utils.get_request_block_hasher(hash_block_tokens, sha256)`."""
    from vllm.v1.core import kv_cache_utils

    sha256, dumps, protocol = hashlib.sha256, pickle.dumps, pickle.HIGHEST_PROTOCOL

    def request_block_hasher(request) -> list[bytes]:
        if request.mm_features or request.lora_request or request.cache_salt or request.prompt_embeds is not None:
            return vllm_hasher(request)
        hashes = request.block_hashes
        start = len(hashes) * hash_block_tokens
        # The list behind the read-only `all_token_ids` view: slicing the view costs more than hashing.
        tokens = getattr(request, "_all_token_ids", None)
        if not isinstance(tokens, list):
            tokens = list(request.all_token_ids)
        end = len(tokens) - hash_block_tokens
        if start > end:
            return []
        parent = hashes[-1] if hashes else kv_cache_utils.NONE_HASH  # read per call: init_none_hash sets it
        out = []
        for i in range(start, end + 1, hash_block_tokens):
            parent = sha256(dumps((parent, tuple(tokens[i : i + hash_block_tokens]), None), protocol)).digest()
            out.append(parent)
        return out

    return request_block_hasher
