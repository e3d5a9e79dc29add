"""The core's KV-cache events as vLLM `KVCacheEvent`s (medium CPU), for `take_events`."""

from __future__ import annotations

from typing import Iterable

from vllm.distributed.kv_events import MEDIUM_CPU, AllBlocksCleared, BlockRemoved, BlockStored, KVCacheEvent
from vllm.v1.core.kv_cache_utils import maybe_convert_block_hash

from toolkit.core.event_log import CacheEvent
from toolkit.core.geometry import HybridGeometry


def to_vllm_events(events: Iterable[CacheEvent], geometry: HybridGeometry) -> list[KVCacheEvent]:
    out: list[KVCacheEvent] = []
    for event in events:
        if event.kind == "cleared":
            out.append(AllBlocksCleared())
            continue
        hashes = [maybe_convert_block_hash(key.block_hash) for key in event.keys]
        if event.kind == "removed":
            out.append(BlockRemoved(block_hashes=hashes, medium=MEDIUM_CPU, group_idx=event.group_id))
        elif event.kind == "stored" and event.meta is not None and event.meta.token_ids is not None:
            parent = event.meta.parent_key
            out.append(
                BlockStored(
                    block_hashes=hashes,
                    parent_block_hash=None if parent is None else maybe_convert_block_hash(parent.block_hash),
                    token_ids=list(event.meta.token_ids),
                    block_size=geometry.group_block_tokens[event.group_id],
                    lora_id=None,
                    medium=MEDIUM_CPU,
                    lora_name=None,
                    group_idx=event.group_id,
                )
            )
    return out
