"""Byte views of a vLLM KV cache allocation: one `[num_blocks, row_bytes]` int8 view per distinct region.

vLLM describes each layer's place in the backing allocation with `KVCacheTensor` (size, layers, layer_stride,
block_stride, offset); tensors of different groups may alias the same bytes (a block id belongs to one group at a
time). Copying block id `b` therefore means copying row `b` of every distinct region once. Both workers (the
toolkit's and the SimpleCPU reference) find their regions with `toolkit.copy.discover_regions` over
`placements_from_kv_cache_config`; the engine-less harness allocates fake device KV with `allocate_fake_kv`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from toolkit.copy.placement import TensorPlacement

if TYPE_CHECKING:  # vLLM's type, for the reader (mypy sees it as Any: vLLM is not analysed)
    from vllm.v1.kv_cache_interface import KVCacheConfig


def placements_from_kv_cache_config(kv_cache_config: KVCacheConfig) -> list[TensorPlacement]:
    """vLLM's `KVCacheTensor` list as `toolkit.copy` placements: the one translation both workers use."""
    return [
        TensorPlacement(
            layer_names=tuple(t.layers),
            size_bytes=t.size,
            num_blocks=kv_cache_config.num_blocks,
            layer_stride_bytes=t.layer_stride,
            block_stride_bytes=t.block_stride,
            offset_bytes=t.offset,
        )
        for t in kv_cache_config.kv_cache_tensors
    ]


def backing_bytes(kv_cache_config: KVCacheConfig) -> int:
    total: int = max(t.size + t.offset for t in kv_cache_config.kv_cache_tensors)
    return total


def allocate_fake_kv(kv_cache_config: KVCacheConfig, device: str = "cpu") -> dict[str, torch.Tensor]:
    """Fake device KV for engine-less runs: one zeroed backing buffer, an int8 view per layer."""
    buffer = torch.zeros(backing_bytes(kv_cache_config), dtype=torch.int8, device=device)
    num_blocks = kv_cache_config.num_blocks
    caches = {}
    for tensor in kv_cache_config.kv_cache_tensors:
        layer_outermost = len(tensor.layers) == 1 or tensor.layer_stride >= tensor.block_stride * num_blocks
        row_bytes = tensor.block_stride if layer_outermost else tensor.layer_stride
        for index, layer in enumerate(tensor.layers):
            offset = tensor.offset + index * tensor.layer_stride
            caches[layer] = buffer.as_strided((num_blocks, row_bytes), (tensor.block_stride, 1), offset)
    return caches
