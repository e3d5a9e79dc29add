"""What the connector's scheduler side reads of vLLM's engine configuration: the core's geometry and manager settings
(`OffloadConfig`) that the engine's KV cache layout, parallel sizes, batch limits, KV events and drafter imply."""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolkit.core.geometry import HybridGeometry
from toolkit.core.offload_config import OffloadConfig
from toolkit.errors import BadInput
from toolkit.vllm.adapters import geometry_from_kv_cache_config
from toolkit.vllm.config import ConnectorConfig

if TYPE_CHECKING:  # vLLM's types, for the reader (mypy sees them as Any: vLLM is not analysed)
    from vllm.config import VllmConfig
    from vllm.v1.kv_cache_interface import KVCacheConfig


def geometry_of(
    vllm_config: VllmConfig, kv_cache_config: KVCacheConfig, config: ConnectorConfig
) -> tuple[HybridGeometry, int]:
    """The core's geometry of the engine's KV cache, and vLLM's scheduler block in tokens."""
    from vllm.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes

    scheduler_block, hash_block = resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)
    # Fine-grained hits only where vLLM's own KV cache manager lands hits on the hash block too.
    alignment = getattr(kv_cache_config, "cache_hit_alignment_tokens", None)
    vllm_fine = alignment is None or alignment == hash_block
    geometry = geometry_from_kv_cache_config(
        kv_cache_config,
        dcp=vllm_config.parallel_config.decode_context_parallel_size,
        hash_block_tokens=hash_block,
        allow_fine_grained=config.fine_grained and vllm_fine and not config.lazy,
    )
    return geometry, scheduler_block


def manager_settings(
    vllm_config: VllmConfig, config: ConnectorConfig, num_cpu_blocks: int, *, num_disk_blocks: int = 0
) -> OffloadConfig:
    """`num_disk_blocks`: the disk tier below the CPU tier in CPU-sized blocks (`disk_blocks_for`; 0: none)."""
    kv_events = vllm_config.kv_events_config
    return OffloadConfig(
        num_cpu_blocks=num_cpu_blocks,
        lazy=config.lazy,
        world_size=vllm_config.parallel_config.world_size,
        eviction_policy=config.eviction_policy,
        fine_store_priority=config.fine_store_priority,
        max_num_batched_tokens=vllm_config.scheduler_config.max_num_batched_tokens,
        enable_kv_events=bool(kv_events and kv_events.enable_kv_cache_events),
        max_step_events=0,  # nothing drains the visualizer's step events here: do not record them
        diagnose_lookups=False,  # per-group reach only for an observer (`observe_requests` turns it on)
        speculative_block_drop=speculative_block_drop(vllm_config),
        num_disk_blocks=num_disk_blocks,
        disk_write_policy=config.disk_write_policy,
        disk_groups=config.disk_groups,
    )


def disk_blocks_for(kv_cache_config: KVCacheConfig, config: ConnectorConfig) -> int:
    """The disk tier's blocks per rank at the CPU pool's block size (`host_blocks_for`'s); 0: no disk tier."""
    if not config.disk_bytes_per_rank:
        return 0
    total = max(t.size + t.offset for t in kv_cache_config.kv_cache_tensors)
    block_bytes = max(1, total // kv_cache_config.num_blocks)
    blocks: int = config.disk_bytes_per_rank // block_bytes
    if blocks < 1:
        raise BadInput(
            f"kv_connector_extra_config.disk_bytes_to_use: {config.disk_bytes_per_rank} bytes per rank hold no block "
            f"of {block_bytes} bytes"
        )
    return blocks


def speculative_block_drop(vllm_config: VllmConfig) -> bool:
    """Whether vLLM drops the last block of a prefix hit for its drafter (EAGLE, EAGLE3, MTP; not ngram, DFlash or
    DSpark), as its own KV cache manager and SimpleCPU do. Lookahead block hashes would make the drop unneeded, but
    vLLM turns them off whenever a KV connector is configured; read here anyway, for a build that keeps them."""
    spec = vllm_config.speculative_config
    if spec is None:
        return False
    lookahead_tokens: int = getattr(vllm_config, "num_hash_lookahead_tokens", 0)
    if lookahead_tokens:
        return False
    drop = getattr(spec, "use_eagle_block_drop", None)  # vLLM >= 0.33; 0.32 drops for every EAGLE-family drafter
    return bool(drop() if drop is not None else spec.use_eagle())
