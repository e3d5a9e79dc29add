"""The disk tier as the connector sees it: where each rank's store lives, what cache identity it carries (read off
vLLM's configuration, the same on the scheduler and the workers), and what a restart kept.

One store per rank (`<disk_path>/rank-<r>`), one pool (`POOL`) whose block is a CPU-tier block: one row of every
host-mirror region, attention and Mamba alike, so a block moves to disk and back exactly as it sits in host
memory. `disk_bytes_to_use` counts payload; each slot adds a 4 KiB header (and padding to 4 KiB).

Restart reuse needs vLLM's block hashes to be the same in the new process. vLLM seeds them (`init_none_hash`) from
`PYTHONHASHSEED` when set, else from a fixed seed for the cryptographic algorithms (`sha256`, the default, and
`sha256_cbor`) and a random one per process for `xxhash`/`xxhash_cbor`: there, without a fixed `PYTHONHASHSEED`, a
restarted engine simply misses (its keys differ; never a wrong hit).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from toolkit.core.pool.keys import BlockKey
from toolkit.errors import BadInput
from toolkit.tiers.disk import CacheIdentity, GroupGeometry
from toolkit.vllm.config import ConnectorConfig

if TYPE_CHECKING:  # vLLM's types, for the reader (mypy sees them as Any: vLLM is not analysed)
    from vllm.config import VllmConfig
    from vllm.v1.kv_cache_interface import KVCacheConfig

POOL = "block"


@dataclass(frozen=True, slots=True)
class DiskSettings:
    """The disk tier below one worker's CPU tier: its store's identity (this rank's) and its size in blocks."""

    identity: CacheIdentity
    num_blocks: int


def disk_settings(
    vllm_config: VllmConfig, kv_cache_config: KVCacheConfig, config: ConnectorConfig, *, rank: int, vllm_version: str
) -> DiskSettings | None:
    """The worker of world rank `rank`'s disk tier (None without `disk_bytes_to_use`); refused in one line without
    `disk_path`."""
    if not config.disk_bytes_per_rank:
        return None
    if not config.disk_path and not config.shared_store_master:  # the shared store needs no folder
        raise BadInput(
            "kv_connector_extra_config.disk_path: required with disk_bytes_to_use (the folder of the disk tier's "
            "stores, one per rank)"
        )
    from toolkit.vllm.engine_settings import disk_blocks_for

    identity = cache_identity(vllm_config, kv_cache_config, rank=rank, vllm_version=vllm_version)
    return DiskSettings(identity=identity, num_blocks=disk_blocks_for(kv_cache_config, config))


def rank_folder(config: ConnectorConfig, rank: int) -> Path:
    return Path(config.disk_path) / f"rank-{rank}"


def cache_identity(
    vllm_config: VllmConfig, kv_cache_config: KVCacheConfig, *, rank: int, vllm_version: str
) -> CacheIdentity:
    """Everything that decides what a stored block's bytes mean, for the worker of world rank `rank`."""
    from vllm.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes

    model = vllm_config.model_config
    parallel = vllm_config.parallel_config
    _, hash_block = resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)
    hf_text = json.dumps(model.hf_config.to_dict(), sort_keys=True, default=str)
    groups = tuple(
        GroupGeometry(
            kind=type(group.kv_cache_spec).__name__,
            block_tokens=int(group.kv_cache_spec.block_size),
            block_bytes=int(group.kv_cache_spec.page_size_bytes) * max(1, len(group.layer_names)),
        )
        for group in kv_cache_config.kv_cache_groups
    )
    tp_size = max(1, int(parallel.tensor_parallel_size))
    dcp_size = max(1, int(getattr(parallel, "decode_context_parallel_size", 1) or 1))
    tp_rank = rank % tp_size
    return CacheIdentity(
        model=str(model.model)[-256:],
        model_config_hash=hashlib.blake2b(hf_text.encode(), digest_size=16).hexdigest(),
        dtype=str(model.dtype).removeprefix("torch."),
        groups=groups,
        hash_unit_tokens=int(hash_block),
        hash_algorithm=str(vllm_config.cache_config.prefix_caching_hash_algo),
        vllm_version=vllm_version,
        tp_size=tp_size,
        tp_rank=tp_rank,
        dcp_size=dcp_size,
        dcp_rank=tp_rank % dcp_size,
    )


def row_layout_bytes(kv_cache_config: KVCacheConfig) -> int:
    """A CPU block's bytes, as the scheduler sizes its pools (`host_blocks_for`)."""
    total = max(t.size + t.offset for t in kv_cache_config.kv_cache_tensors)
    return max(1, int(total // kv_cache_config.num_blocks))


def slot_capacity_bytes(num_disk_blocks: int, payload_bytes: int) -> int:
    """The store's capacity for exactly `num_disk_blocks` blocks of `payload_bytes` (headers and padding included),
    so the store holds what the scheduler's disk index counts and evicts nothing on its own."""
    from toolkit.tiers.disk.layout import PoolGeometry

    return num_disk_blocks * PoolGeometry(payload_bytes, 1).slot_bytes


def keys_kept(vllm_config: VllmConfig, kv_cache_config: KVCacheConfig, config: ConnectorConfig) -> list[BlockKey]:
    """What rank 0's store holds for the scheduler side's disk index at start, least recently used first ([]
    without a disk tier or a store of this identity). Read from the store's files, read-only: the scheduler's
    first lookups run before any worker reports, and vLLM builds the scheduler after its workers opened (and,
    on an identity change, discarded) their stores. Every rank stores the same blocks, so rank 0 speaks for all;
    a rank that lost one reads it as a miss (recomputed)."""
    if not (config.disk_bytes_per_rank and config.disk_path):
        return []
    from toolkit.core.pool.disk_index import block_key_of
    from toolkit.tiers.disk.peek import held_keys
    from toolkit.vllm.version import check_supported

    identity = cache_identity(vllm_config, kv_cache_config, rank=0, vllm_version=check_supported()[1])
    keys = (block_key_of(name) for name in held_keys(rank_folder(config, 0), identity, POOL))
    return [key for key in keys if key is not None]
