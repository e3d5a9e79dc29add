"""Where each layer's pages live inside a KV cache allocation: the plain input of region discovery.

`TensorPlacement` mirrors one vLLM `KVCacheTensor` (vllm/v1/kv_cache_interface.py) plus the two numbers the worker
needs that vLLM keeps elsewhere. The vLLM adapter (toolkit/vllm) builds one per `kv_cache_config.kv_cache_tensors`
entry:

    TensorPlacement(
        layer_names=tuple(t.layers),            # vLLM: KVCacheTensor.layers (older: shared_by)
        size_bytes=t.size,
        num_blocks=kv_cache_config.num_blocks,
        layer_stride_bytes=t.layer_stride,      # where absent (older vLLM): the page size
        block_stride_bytes=t.block_stride,      # where absent: the page size
        offset_bytes=t.offset,                  # where absent: 0
    )

Addressing (identical to vLLM's): the page of layer `layer_names[l]` for block `b` starts at
`offset_bytes + l * layer_stride_bytes + b * block_stride_bytes` bytes into the backing allocation, which is the
`untyped_storage()` of the registered tensors of those layers.

Two layouts follow from the strides:
- layer-outermost (`layer_stride_bytes >= num_blocks * block_stride_bytes`): each layer owns a contiguous span;
  one copy region per layer (per split, see `num_splits`), a row is one page.
- block-outermost / cross-layer packed (`layer_stride_bytes < num_blocks * block_stride_bytes`): each block holds
  every layer's page; one copy region for the whole tensor, a row is all layers' pages of one block.

Per-head-group splits: some layouts put a head-group (or K/V) dimension outside the block dimension inside each
layer's span (e.g. `[2, num_blocks, ...]` for K and V). Set `num_splits` to the number of such parts and
`split_stride_bytes` to the distance between them (default `num_blocks * block_stride_bytes`); the page of split
`h` of layer `l` for block `b` is then at `offset + l * layer_stride + h * split_stride + b * block_stride`, and
each split becomes its own region named `"{layer}.{h}"`.

Padding: `page_bytes` is what a row copies. It defaults to `block_stride_bytes` (layer-outermost) or
`num_layers * layer_stride_bytes` (packed), so per-page alignment padding is copied along (harmless, keeps runs
contiguous) and trailing padding after the last block or layer is never touched.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class TensorPlacement:
    """One backing allocation shared by `layer_names`, and where each layer's pages sit in it (bytes)."""

    layer_names: tuple[str, ...]
    size_bytes: int
    num_blocks: int
    layer_stride_bytes: int
    block_stride_bytes: int
    offset_bytes: int = 0
    page_bytes: int | None = None
    num_splits: int = 1
    split_stride_bytes: int | None = None

    def __post_init__(self) -> None:
        if not self.layer_names:
            raise ValueError("layer_names: at least one layer is needed")
        for name in ("size_bytes", "num_blocks", "layer_stride_bytes", "block_stride_bytes", "num_splits"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)}")
        if self.offset_bytes < 0:
            raise ValueError(f"offset_bytes: must be >= 0, got {self.offset_bytes}")
        if self.page_bytes is not None and self.page_bytes <= 0:
            raise ValueError(f"page_bytes: must be > 0, got {self.page_bytes}")
        if self.num_splits > 1 and not self.is_layer_outermost:
            raise ValueError(
                f"num_splits: {self.num_splits} splits need a layer-outermost layout, but layer_stride_bytes "
                f"{self.layer_stride_bytes} < num_blocks {self.num_blocks} * block_stride_bytes {self.block_stride_bytes}"
            )
        if self.is_layer_outermost and self.row_bytes > self.block_stride_bytes:
            raise ValueError(
                f"page_bytes: {self.row_bytes} exceeds block_stride_bytes {self.block_stride_bytes} (rows would overlap)"
            )
        if self.end_bytes > self.size_bytes:
            raise ValueError(
                f"size_bytes: {self.size_bytes} is smaller than the placement's extent {self.end_bytes} "
                f"(layers {len(self.layer_names)}, num_blocks {self.num_blocks}, offset {self.offset_bytes})"
            )

    @property
    def num_layers(self) -> int:
        return len(self.layer_names)

    @property
    def is_layer_outermost(self) -> bool:
        return self.layer_stride_bytes >= self.num_blocks * self.block_stride_bytes

    @property
    def resolved_split_stride_bytes(self) -> int:
        if self.split_stride_bytes is not None:
            return self.split_stride_bytes
        return self.num_blocks * self.block_stride_bytes

    @property
    def row_bytes(self) -> int:
        """Bytes one copy row (one block of one region) moves."""
        if self.page_bytes is not None:
            return self.page_bytes
        if self.is_layer_outermost:
            return self.block_stride_bytes
        return self.num_layers * self.layer_stride_bytes

    @property
    def end_bytes(self) -> int:
        """One past the last byte any row of this placement touches."""
        last_row = (self.num_blocks - 1) * self.block_stride_bytes + self.row_bytes
        if self.is_layer_outermost:
            last_split = (self.num_splits - 1) * self.resolved_split_stride_bytes
            return self.offset_bytes + (self.num_layers - 1) * self.layer_stride_bytes + last_split + last_row
        return self.offset_bytes + last_row
