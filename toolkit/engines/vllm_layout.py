"""What the dry and live engines report of vLLM's KV cache layout (`describe()`), read one way for both.

Both hold a `KVCacheConfig` (the dry engine's fabricated one, the live engine's allocated one); the facts below are
the ones the runner, the bounds and the report read (`facts.EngineFacts`). vLLM is imported when a layout is read.
"""

from __future__ import annotations

from typing import Any, TypedDict


class LayoutFacts(TypedDict):
    """The `EngineFacts` fields a KV cache config decides (see `layout_facts`)."""

    group_block_tokens: tuple[int, ...]
    group_page_bytes: tuple[int, ...]
    group_kinds: tuple[str, ...]
    device_blocks: int
    device_tokens: int
    blocks_per_scheduler_block: int


def block_bytes(kv_cache_config: Any) -> int:
    """Bytes one block id owns across the KV cache on one rank (every group's layers share the tensors' rows)."""
    return int(kv_cache_config.kv_cache_tensors[0].size // kv_cache_config.num_blocks)


def blocks_per_scheduler_block(kv_cache_config: Any, scheduler_block_tokens: int) -> int:
    """Device blocks one scheduler block takes over all groups: one state per Mamba group, and enough blocks to
    cover the scheduler block in every other group."""
    from vllm.v1.kv_cache_interface import MambaSpec

    return sum(
        1 if isinstance(g.kv_cache_spec, MambaSpec) else -(-scheduler_block_tokens // g.kv_cache_spec.block_size)
        for g in kv_cache_config.kv_cache_groups
    )


def layout_facts(kv_cache_config: Any, scheduler_block_tokens: int) -> LayoutFacts:
    """Per group its block tokens, page bytes and spec kind (vLLM's class name); the device blocks and the tokens
    they hold; the blocks per scheduler block."""
    groups = kv_cache_config.kv_cache_groups
    per_sched = blocks_per_scheduler_block(kv_cache_config, scheduler_block_tokens)
    num_blocks = int(kv_cache_config.num_blocks)
    return LayoutFacts(
        group_block_tokens=tuple(int(g.kv_cache_spec.block_size) for g in groups),
        group_page_bytes=tuple(int(g.kv_cache_spec.page_size_bytes) for g in groups),
        group_kinds=tuple(type(g.kv_cache_spec).__name__ for g in groups),
        device_blocks=num_blocks,
        device_tokens=num_blocks // max(1, per_sched) * scheduler_block_tokens,
        blocks_per_scheduler_block=per_sched,
    )
