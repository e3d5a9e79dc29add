"""vLLM's request block hasher for plain token prompts, the same bytes at a fraction of the cost.

vLLM hashes every full hash block of a request as `sha256(pickle((parent, tuple(tokens), extra_keys)))`, chained
from `NONE_HASH`, calling a generic extra-keys function (multimodal, LoRA, cache salt, prompt embeddings) per
block. The dry engine's requests never carry any of those, so `extra_keys` is always None; at hash unit 16 the
whole Mooncake trace is 3.9M blocks, and the generic path costs more than the scheduler. `plain_block_hasher`
computes the identical digests in one tight loop and hands any request that has extra keys to vLLM's own hasher.

Mooncake prompts (`PromptBlockHashes`): a prompt is its block ids' tokens end to end, and a block's tokens depend
on its id alone (`mooncake.py`), so the hash blocks inside one Mooncake block depend only on the chain hash before
it and the block id. The 3,993 requests of the synthetic trace hold 121,877 Mooncake blocks but only 43,924
distinct (prefix, block) pairs: each pair's digests are computed once and reused, from the request's own tokens.
Tests check the bytes against vLLM's hasher.
"""

from __future__ import annotations

import hashlib
import pickle
from array import array
from functools import partial
from itertools import islice
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from toolkit.engines.harness.driver import BlockHasher, Harness

DIGEST_BYTES = 32  # sha256
MAX_MEMO_ENTRIES = 1 << 16  # (prefix, block) pairs kept (about 1.2 KiB each at 32 hash blocks a block): <= 80 MiB


def _chain(parent: bytes, tokens: Sequence[int], start: int, count: int, unit: int) -> list[bytes]:
    """`count` chained digests of the hash blocks of `unit` tokens from `start` (vLLM's bytes, no extra keys)."""
    sha256, dumps, protocol = hashlib.sha256, pickle.dumps, pickle.HIGHEST_PROTOCOL
    out: list[bytes] = []
    for i in range(start, start + count * unit, unit):
        parent = sha256(dumps((parent, tuple(tokens[i : i + unit]), None), protocol)).digest()
        out.append(parent)
    return out


class PromptBlockHashes:
    """The prompt block hashes of requests whose prompts are Mooncake block ids, memoised per (parent hash, block
    id). `expect(req_id, block_ids, block_tokens)` before the request is made; the hasher then calls `take`."""

    def __init__(self, hash_block_tokens: int) -> None:
        self._unit = hash_block_tokens
        self._pending: dict[str, tuple[Sequence[int], int, tuple[object, ...]]] = {}
        self._memo: dict[tuple[bytes, int, tuple[object, ...]], bytes] = {}
        self.num_reused = 0  # Mooncake blocks whose digests came from the memo (for tests and reports)

    def accepts(self, block_tokens: int) -> bool:
        """Whether blocks of `block_tokens` hold whole hash blocks (else their digests straddle two blocks)."""
        return block_tokens % self._unit == 0

    def expect(self, req_id: str, block_ids: Sequence[int], block_tokens: int, tokens_key: tuple[object, ...]) -> None:
        """The next request `req_id`'s prompt is `block_ids`' tokens (cut to its length); `tokens_key` names the
        block-id-to-tokens function (a trace's seed, vocabulary, block size), part of the memo's key."""
        self._pending[req_id] = (block_ids, block_tokens, tokens_key)

    def take(self, req_id: str, tokens: Sequence[int], none_hash: bytes) -> list[bytes] | None:
        """The digests of every full hash block of `tokens` (the prompt of `req_id`), None if none was expected."""
        expected = self._pending.pop(req_id, None)
        if expected is None:
            return None
        block_ids, block_tokens, tokens_key = expected
        unit, memo = self._unit, self._memo
        per_block = block_tokens // unit
        num_tokens = len(tokens)
        parent = none_hash
        out: list[bytes] = []
        for k, block_id in enumerate(block_ids):
            start = k * block_tokens
            need = min(per_block, (num_tokens - start) // unit)
            if need <= 0:
                break
            key = (parent, block_id, tokens_key)
            blob = memo.get(key)
            if blob is not None and len(blob) >= need * DIGEST_BYTES:
                out.extend(blob[i : i + DIGEST_BYTES] for i in range(0, need * DIGEST_BYTES, DIGEST_BYTES))
                self.num_reused += 1
            else:
                digests = _chain(parent, tokens, start, need, unit)
                out.extend(digests)
                if len(memo) >= MAX_MEMO_ENTRIES:
                    # Bounds memory on long traces: the older half goes (a dict keeps insertion order), the recent
                    # prefixes a trace reuses most stay; later prompts recompute what they need.
                    for old in list(islice(memo, len(memo) // 2)):
                        del memo[old]
                memo[key] = b"".join(digests)
            if need < per_block:
                break
            parent = out[-1]
        return out


def plain_block_hasher(
    hash_block_tokens: int, vllm_hasher: BlockHasher, prompts: PromptBlockHashes | None = None
) -> BlockHasher:
    """A drop-in for `vllm.v1.core.kv_cache_utils.get_request_block_hasher(hash_block_tokens, sha256)`; with
    `prompts`, a request's first call takes its prompt digests from there when it was expected."""
    from vllm.v1.core import kv_cache_utils

    def request_block_hasher(request: Any) -> list[bytes]:
        if request.mm_features or request.lora_request or request.cache_salt or request.prompt_embeds is not None:
            return vllm_hasher(request)
        hashes = request.block_hashes
        # The buffer behind the read-only `all_token_ids` view (a list up to vLLM 0.33, an int32 `array` subclass,
        # `TokenBuffer`, from 0.34): slicing the view, or copying the buffer, costs more than hashing.
        tokens: Sequence[int] | None = getattr(request, "_all_token_ids", None)
        if not isinstance(tokens, (list, array)):
            tokens = list(request.all_token_ids)
        if not hashes and prompts is not None:
            # Read per call: init_none_hash sets NONE_HASH.
            found = prompts.take(request.request_id, tokens, kv_cache_utils.NONE_HASH)
            if found is not None:
                return found
        start = len(hashes) * hash_block_tokens
        count = (len(tokens) - start) // hash_block_tokens
        if count <= 0:
            return []
        parent = hashes[-1] if hashes else kv_cache_utils.NONE_HASH
        return _chain(parent, tokens, start, count, hash_block_tokens)

    return request_block_hasher


def install_plain_hasher(harness: Harness) -> PromptBlockHashes | None:
    """Hash the harness's next requests with `plain_block_hasher`: the same block hashes as vLLM's (byte for
    byte), without its per-block generic path, and Mooncake prompts' shared blocks hashed once. Returns the prompt
    memo to tell of Mooncake prompts (`expect`); None where vLLM hashes with other than sha256 (left as it is)."""
    if harness.vllm_config.cache_config.prefix_caching_hash_algo != "sha256":
        return None
    prompts = PromptBlockHashes(harness.hash_block_tokens)
    harness.replace_block_hasher(partial(plain_block_hasher, prompts=prompts))
    return prompts
