"""Group-tagged cache keys.

A request's block hashes are chained: hash i covers every token up to boundary `(i + 1) * hash_tokens`. Each cache
group stores its own data for the same boundary, so the key carries the group id: the same token hash in two
groups never collides. Hashes are opaque hashables (vLLM passes bytes); the core never looks inside them.
"""

from __future__ import annotations

from typing import Hashable, NamedTuple, Sequence


class BlockKey(NamedTuple):
    """The key of one group's data at one hash boundary."""

    group_id: int
    block_hash: Hashable


def key_at(group_id: int, block_hashes: Sequence[Hashable], end_tokens: int, hash_tokens: int) -> BlockKey:
    """The key of `group_id`'s data for the prefix ending at `end_tokens` (a multiple of `hash_tokens`, > 0)."""
    assert end_tokens > 0 and end_tokens % hash_tokens == 0, (end_tokens, hash_tokens)
    return BlockKey(group_id, block_hashes[end_tokens // hash_tokens - 1])
