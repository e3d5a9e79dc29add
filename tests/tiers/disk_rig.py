"""The disk tier tests' rig: an identity, a config factory, deterministic payloads."""

from __future__ import annotations

import random
from pathlib import Path

from toolkit.tiers.disk import CacheIdentity, Direct, DiskTierConfig, GroupGeometry, PoolSpec

PAYLOAD_BYTES = 64 * 1024


def make_identity(**changes: object) -> CacheIdentity:
    fields: dict[str, object] = {
        "model": "Qwen/Qwen3-Next-80B-A3B-Instruct",
        "model_config_hash": "c0ffee",
        "dtype": "bfloat16",
        "groups": (GroupGeometry("full_attention", 16, PAYLOAD_BYTES), GroupGeometry("mamba", 16, 2 * PAYLOAD_BYTES)),
        "hash_unit_tokens": 16,
        "hash_algorithm": "sha256_cbor",
        "vllm_version": "0.32.0",
        "tp_size": 4,
        "tp_rank": 1,
        "dcp_size": 1,
        "dcp_rank": 0,
    }
    fields.update(changes)
    return CacheIdentity(**fields)  # type: ignore[arg-type]


def make_config(folder: Path, *, slots: int = 16, direct: Direct = Direct.AUTO, **changes: object) -> DiskTierConfig:
    slot = PAYLOAD_BYTES + 4096
    pools = (
        PoolSpec("attn", PAYLOAD_BYTES, slots * slot),
        PoolSpec("mamba", 2 * PAYLOAD_BYTES, 4 * (slot + PAYLOAD_BYTES)),
    )
    base: dict[str, object] = {
        "folder": folder,
        "identity": make_identity(),
        "pools": pools,
        "queue_depth": 4,
        "direct": direct,
    }
    base.update(changes)
    return DiskTierConfig(**base)  # type: ignore[arg-type]


def payload_for(key: bytes, size: int = PAYLOAD_BYTES) -> bytes:
    """The bytes a block with this key holds (deterministic, so a test can check any block it reads back)."""
    return random.Random(key).randbytes(size)
