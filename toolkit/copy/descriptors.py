"""Copy descriptors: a batch of block pairs turned into (src address, dst address, bytes) triples.

Pure index arithmetic shared by every pointer-based backend (native CPU memcpy, CUDA `cuMemcpyBatchAsync`,
the Triton gather/scatter kernel), so it is tested on CPU once. Runs of consecutive ids (both sides +1) become
one descriptor per region when rows are dense on both sides; strided rows (padding or other layers between
rows) get one descriptor per block, since a run copy would drag the bytes between rows along.
Every block id is bounds-checked here: the consumers write raw memory and trust these addresses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch


@dataclass(frozen=True, kw_only=True)
class RegionPair:
    """Source and destination views of one region for one direction, both `[num_blocks, row_bytes]` int8."""

    name: str
    src: torch.Tensor
    dst: torch.Tensor

    def __post_init__(self) -> None:
        for side in ("src", "dst"):
            t = getattr(self, side)
            if t.dtype != torch.int8 or t.dim() != 2 or t.stride(1) != 1:
                raise ValueError(
                    f"{side}: region {self.name!r} needs a 2-D int8 view with dense rows, got "
                    f"{t.dtype} shape {tuple(t.shape)} stride {t.stride()}"
                )
        if self.src.shape[1] != self.dst.shape[1]:
            raise ValueError(f"dst: region {self.name!r} row bytes {self.dst.shape[1]} != src {self.src.shape[1]}")

    @property
    def row_bytes(self) -> int:
        return self.src.shape[1]

    @property
    def dense(self) -> bool:
        return self.src.stride(0) == self.row_bytes and self.dst.stride(0) == self.row_bytes

    def reversed(self) -> "RegionPair":
        return RegionPair(name=self.name, src=self.dst, dst=self.src)


@dataclass(frozen=True, kw_only=True)
class BlockRuns:
    """Maximal runs where src and dst ids both step by +1; int64 CPU tensors of equal length."""

    src_starts: torch.Tensor
    dst_starts: torch.Tensor
    lengths: torch.Tensor

    @property
    def num_runs(self) -> int:
        return self.lengths.numel()


@dataclass(frozen=True, kw_only=True)
class CopyDescriptors:
    """Parallel int64 CPU tensors: copy `sizes[i]` bytes from address `srcs[i]` to address `dsts[i]`."""

    srcs: torch.Tensor
    dsts: torch.Tensor
    sizes: torch.Tensor

    @property
    def count(self) -> int:
        return self.sizes.numel()

    @property
    def total_bytes(self) -> int:
        return int(self.sizes.sum()) if self.count else 0


def as_ids(name: str, ids: Sequence[int] | torch.Tensor) -> torch.Tensor:
    t = torch.as_tensor(ids, dtype=torch.int64).reshape(-1)
    return t.cpu() if t.device.type != "cpu" else t


def check_ids(src_ids: torch.Tensor, dst_ids: torch.Tensor, *, num_src_blocks: int, num_dst_blocks: int) -> None:
    """ValueError naming the field unless ids pair up, stay in bounds and no destination repeats."""
    if src_ids.numel() != dst_ids.numel():
        raise ValueError(f"dst_block_ids: {dst_ids.numel()} ids do not pair with {src_ids.numel()} src_block_ids")
    for field_name, ids, bound in (
        ("src_block_ids", src_ids, num_src_blocks),
        ("dst_block_ids", dst_ids, num_dst_blocks),
    ):
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= bound):
            raise ValueError(
                f"{field_name}: ids must be in [0, {bound}), got min {int(ids.min())} max {int(ids.max())}"
            )
    # Copies within one batch run in no defined order: two writes to one block would race.
    n = dst_ids.numel()
    if n > 1:
        # A histogram over the id range is several times cheaper than torch.unique's sort when the range is not
        # much larger than the batch (the usual case: a batch is a good fraction of the pool).
        repeated = (
            int(torch.bincount(dst_ids, minlength=num_dst_blocks).max()) > 1
            if num_dst_blocks <= 16 * n
            else torch.unique(dst_ids).numel() != n
        )
        if repeated:
            raise ValueError("dst_block_ids: a destination block appears twice in one batch")


def coalesce_runs(src_ids: torch.Tensor, dst_ids: torch.Tensor) -> BlockRuns:
    n = src_ids.numel()
    if n == 0:
        empty = torch.empty(0, dtype=torch.int64)
        return BlockRuns(src_starts=empty, dst_starts=empty, lengths=empty)
    starts_mask = torch.ones(n, dtype=torch.bool)
    starts_mask[1:] = ((src_ids[1:] - src_ids[:-1]) != 1) | ((dst_ids[1:] - dst_ids[:-1]) != 1)
    starts = starts_mask.nonzero().reshape(-1)
    ends = torch.cat([starts[1:], torch.tensor([n])])
    return BlockRuns(src_starts=src_ids[starts], dst_starts=dst_ids[starts], lengths=ends - starts)


def sort_by_source(src_ids: torch.Tensor, dst_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The same (src, dst) pairs in ascending source order (stable; a no-op when already sorted).

    Destinations are unique within a batch (check_ids), so the copy order cannot change the result; repeated
    sources are fine. Ascending sources keep reads of a random batch close in memory (DRAM rows, page-table
    walks) and let runs given out of order coalesce.
    """
    if src_ids.numel() < 2 or bool((src_ids[1:] >= src_ids[:-1]).all()):
        return src_ids, dst_ids
    sorted_src, order = torch.sort(src_ids, stable=True)
    return sorted_src, dst_ids[order]


def build_descriptors(
    pairs: Sequence[RegionPair],
    src_ids: torch.Tensor,
    dst_ids: torch.Tensor,
    *,
    sort_sources: bool = False,
    coalesce: bool = True,
) -> CopyDescriptors:
    """Descriptors for copying rows `src_ids[i] -> dst_ids[i]` of every pair (ids already checked).

    Region by region in `pairs` order; within a region in the given id order, or ascending source block order
    with `sort_sources` (see `sort_by_source`). `coalesce=False` keeps one descriptor per region and block even
    for consecutive runs: vLLM's call shape, which the copy benchmark times as its reference.
    """
    if sort_sources:
        src_ids, dst_ids = sort_by_source(src_ids, dst_ids)
    runs = coalesce_runs(src_ids, dst_ids)
    ones = torch.ones_like(src_ids)
    srcs, dsts, sizes = [], [], []
    for pair in pairs:
        if pair.dense and coalesce:
            s0, d0, n = runs.src_starts, runs.dst_starts, runs.lengths
        else:
            s0, d0, n = src_ids, dst_ids, ones
        srcs.append(pair.src.data_ptr() + s0 * pair.src.stride(0))
        dsts.append(pair.dst.data_ptr() + d0 * pair.dst.stride(0))
        sizes.append(n * pair.row_bytes)
    if not sizes:
        empty = torch.empty(0, dtype=torch.int64)
        return CopyDescriptors(srcs=empty, dsts=empty, sizes=empty)
    return CopyDescriptors(srcs=torch.cat(srcs), dsts=torch.cat(dsts), sizes=torch.cat(sizes))
