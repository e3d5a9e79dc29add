"""Adapters from vLLM's objects to the core's plain inputs: KVCacheConfig -> HybridGeometry, BlockPool ->
DevicePool, SchedulerOutput -> StepInput. Keep this thin: no policy lives here."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from vllm.v1.core.kv_cache_utils import make_block_hash_with_group_id
from vllm.v1.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)

from toolkit.core.geometry import HybridGeometry
from toolkit.core.pool.keys import BlockKey
from toolkit.core.specs import CacheGroupSpec, GroupKind

if TYPE_CHECKING:  # vLLM's types, for the reader (mypy sees them as Any: vLLM is not analysed)
    from vllm.v1.core.block_pool import BlockPool
    from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheSpec
    from vllm.v1.request import Request


def group_kind(spec: KVCacheSpec) -> tuple[GroupKind, int | None]:
    """The toolkit kind (and window) of one vLLM cache-group spec; unsupported specs raise with the type name."""
    # Order matters: MLA and sliding-window specs subclass the attention specs.
    if isinstance(spec, SlidingWindowSpec):
        return GroupKind.SLIDING_WINDOW, spec.sliding_window
    if isinstance(spec, ChunkedLocalAttentionSpec):
        return GroupKind.CHUNKED_LOCAL, spec.attention_chunk_size
    if isinstance(spec, MLAAttentionSpec):
        return GroupKind.MLA, None
    if isinstance(spec, FullAttentionSpec):
        return GroupKind.FULL_ATTENTION, None
    if isinstance(spec, MambaSpec):
        mode = spec.mamba_cache_mode
        if mode == "align":
            return GroupKind.MAMBA_ALIGN, None
        if mode == "all":
            return GroupKind.MAMBA_ALL, None
        raise ValueError(
            f"kv_cache_config: Mamba group with mamba_cache_mode={mode!r} cannot be offloaded; "
            "enable prefix caching (align mode)"
        )
    raise ValueError(f"kv_cache_config: unsupported KV cache spec {type(spec).__name__} for CPU offload")


def geometry_from_kv_cache_config(
    kv_cache_config: KVCacheConfig,
    *,
    dcp: int = 1,
    hash_block_tokens: int | None = None,
    allow_fine_grained: bool = True,
) -> HybridGeometry:
    """The toolkit geometry of an engine's KV cache config (group order and block sizes unchanged)."""
    groups = []
    for index, group in enumerate(kv_cache_config.kv_cache_groups):
        spec = group.kv_cache_spec
        kind, window = group_kind(spec)
        groups.append(
            CacheGroupSpec(
                kind=kind,
                block_tokens=spec.block_size,
                window_tokens=window,
                page_bytes=spec.page_size_bytes * max(1, len(group.layer_names)),
                num_layers=max(1, len(group.layer_names)),
                name=f"g{index}:{kind.value}",
            )
        )
    return HybridGeometry(
        groups=tuple(groups), dcp=dcp, hash_block_tokens=hash_block_tokens, allow_fine_grained=allow_fine_grained
    )


class _KeyCache(dict[bytes, BlockKey]):
    """vLLM packs the group id into the hash bytes; unpacking costs a slice and an int per call, on the hot path of
    every store decision. Memoize (bounded: cleared when it grows past `limit`)."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def __missing__(self, packed: bytes) -> BlockKey:
        if len(self) >= self.limit:
            self.clear()
        key = self[packed] = BlockKey(int.from_bytes(packed[-4:], "big"), packed[:-4])
        return key


class VllmDevicePool:
    """vLLM's `BlockPool` seen through the core's `DevicePool` protocol (no copies of its state)."""

    def __init__(self, block_pool: BlockPool) -> None:
        self._pool = block_pool
        self._blocks = block_pool.blocks
        self._keys = _KeyCache(limit=8 * len(block_pool.blocks) + 1024)

    @property
    def null_block_id(self) -> int:
        block_id: int = self._pool.null_block.block_id
        return block_id

    @property
    def usable_blocks(self) -> int:
        num_blocks: int = self._pool.num_gpu_blocks
        return num_blocks - 1  # the null block is never allocated to a request

    def primary_key(self, block_id: int) -> BlockKey | None:
        key = self._blocks[block_id].block_hash
        return None if key is None else self._keys[key]

    def alias_keys(self, block_id: int) -> tuple[BlockKey, ...]:
        aliases = self._pool.cached_block_hashes_by_block.get(block_id)
        return tuple(self._keys[k] for k in aliases) if aliases else ()

    def ref_count(self, block_id: int) -> int:
        ref_count: int = self._blocks[block_id].ref_cnt
        return ref_count

    def touch(self, block_ids: Sequence[int]) -> None:
        self._pool.touch([self._blocks[b] for b in block_ids])

    def free(self, block_ids: Sequence[int]) -> None:
        self._pool.free_blocks([self._blocks[b] for b in block_ids])

    def iter_free_queue(self, after_block_id: int | None = None) -> Iterator[int]:
        queue = self._pool.free_block_queue
        tail = queue.fake_free_list_tail
        node = (
            queue.fake_free_list_head.next_free_block
            if after_block_id is None
            else (self._blocks[after_block_id].next_free_block)
        )
        while node is not None and node is not tail:
            yield node.block_id
            node = node.next_free_block

    def find_cached_block(self, key: BlockKey) -> int | None:
        block = self._pool.cached_block_hash_to_block.get_one_block(
            make_block_hash_with_group_id(key.block_hash, key.group_id)
        )
        return None if block is None else block.block_id


@functools.cache
def _supported_build() -> bool:
    """Whether the installed vLLM is one `toolkit.vllm.version` supports (read once: package metadata is slow)."""
    from toolkit.vllm.version import SUPPORTED, installed_distribution, release_tuple

    found = installed_distribution()
    if found is None:
        return False
    entry = SUPPORTED.get(found[0])
    return entry is not None and entry[1](release_tuple(found[1]))


def engine_core(llm: Any) -> Any:
    """The engine core of an in-process `vllm.LLM` (`VLLM_ENABLE_V1_MULTIPROCESSING=0`): the only way to reach its
    scheduler and scheduler-side connector. Read through attributes vLLM does not promise to keep, so only on the
    builds `toolkit.vllm.version` supports; anything else raises naming what is missing."""
    if not _supported_build():
        from toolkit.vllm.version import SUPPORTED_TEXT

        raise RuntimeError(f"engine_core: reading vLLM's engine core is only done on {SUPPORTED_TEXT}")
    core = getattr(getattr(getattr(llm, "llm_engine", None), "engine_core", None), "engine_core", None)
    if core is None:
        raise RuntimeError(
            "engine_core: this LLM runs its engine core in another process; start it with "
            "VLLM_ENABLE_V1_MULTIPROCESSING=0 (toolkit.vllm.live.start_llm does)"
        )
    return core


def prefill_hit_tokens(request: Request) -> tuple[int, int] | None:
    """(local, external) cached prompt tokens vLLM recorded for `request` when its prefill was first scheduled
    (`Request.prefill_stats`, taken by the scheduler's output step), or None before that / on other builds."""
    if not _supported_build():
        return None
    stats = getattr(request, "prefill_stats", None)
    if stats is None or not stats.num_prompt_tokens:
        return None
    return stats.num_local_cached_tokens, stats.num_external_cached_tokens
