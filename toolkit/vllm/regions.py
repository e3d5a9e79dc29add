"""Byte views of a vLLM KV cache allocation: one `[num_blocks, row_bytes]` int8 view per distinct region.

vLLM describes each layer's place in the backing allocation with `KVCacheTensor` (size, layers, layer_stride,
block_stride, offset); tensors of different groups may alias the same bytes (a block id belongs to one group at a
time). Copying block id `b` therefore means copying row `b` of every distinct region once. Used by the reference
worker and by the engine-less harness to allocate fake device KV; the toolkit's own worker uses `toolkit.copy`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class RegionSpec:
    offset: int  # bytes into the backing allocation
    row_bytes: int
    row_stride: int


def region_specs(kv_cache_config) -> list[tuple[str, RegionSpec]]:
    """(first layer name, region) for every distinct region, in placement order."""
    num_blocks = kv_cache_config.num_blocks
    seen: dict[int, tuple[str, RegionSpec]] = {}
    for tensor in kv_cache_config.kv_cache_tensors:
        layers = list(tensor.layers)
        layer_outermost = len(layers) == 1 or tensor.layer_stride >= tensor.block_stride * num_blocks
        row_bytes = tensor.block_stride if layer_outermost else tensor.layer_stride
        for index, layer in enumerate(layers):
            offset = tensor.offset + index * tensor.layer_stride
            seen.setdefault(offset, (layer, RegionSpec(offset, row_bytes, tensor.block_stride)))
    return [seen[k] for k in sorted(seen)]


def backing_bytes(kv_cache_config) -> int:
    return max(t.size + t.offset for t in kv_cache_config.kv_cache_tensors)


@dataclass
class DeviceRegions:
    rows: list[torch.Tensor]  # each [num_blocks, row_bytes] int8, aliasing the KV cache

    @classmethod
    def from_kv_caches(cls, kv_cache_config, kv_caches: dict[str, torch.Tensor]) -> "DeviceRegions":
        num_blocks = kv_cache_config.num_blocks
        rows = []
        for layer, spec in region_specs(kv_cache_config):
            tensor = kv_caches[layer]
            storage = tensor.untyped_storage()
            flat = torch.empty(0, dtype=torch.int8, device=tensor.device).set_(storage)
            # The layer's tensor starts at its region's offset inside the storage (whether the engine allocated
            # one buffer for all tensors or one per KVCacheTensor).
            start = tensor.storage_offset() * tensor.element_size()
            needed = start + (num_blocks - 1) * spec.row_stride + spec.row_bytes
            if needed > storage.nbytes():
                raise ValueError(
                    f"kv_caches[{layer!r}]: region needs {needed} bytes, the storage holds {storage.nbytes()}"
                )
            rows.append(flat.as_strided((num_blocks, spec.row_bytes), (spec.row_stride, 1), start))
        return cls(rows)

    @staticmethod
    def allocate(kv_cache_config, device: str = "cpu") -> dict[str, torch.Tensor]:
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
