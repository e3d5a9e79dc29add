"""Triton gather/scatter of KV blocks, driven by copy descriptors (src address, dst address, bytes).

For small blocks, where the DMA engines' per-descriptor cost dominates, a kernel that reads a descriptor table and
copies with many threads is faster in isolation (below ~28 KiB with >= 16 descriptors:
docs/reference-behaviour.md, "Copy engines and kernels"). It runs on
the SMs, so the policy only picks it where it wins. Addresses may be device or pinned host memory (unified
addressing). Runs under the Triton interpreter (`TRITON_INTERPRET=1`) on CPU, where it is tested against
`reference_gather_scatter`.

Layout of a launch: program (d, c) copies words c*CHUNK, (c + P)*CHUNK, ... of descriptor d, with P programs per
descriptor; words are 8 bytes, so every address and size must be a multiple of 8 (checked by the launcher).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

WORD_BYTES = 8
CHUNK_WORDS = 512  # 4 KiB per program iteration
MAX_PROGRAMS_PER_DESCRIPTOR = 64


@triton.jit
def _copy_descriptors_kernel(src_addrs, dst_addrs, num_words, CHUNK: tl.constexpr):
    d = tl.program_id(0)
    c = tl.program_id(1)
    programs = tl.num_programs(1)
    src = tl.load(src_addrs + d).to(tl.pointer_type(tl.int64), bitcast=True)
    dst = tl.load(dst_addrs + d).to(tl.pointer_type(tl.int64), bitcast=True)
    n = tl.load(num_words + d)
    for start in range(c * CHUNK, n, programs * CHUNK):
        offs = start + tl.arange(0, CHUNK)
        mask = offs < n
        tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)


def check_descriptors(srcs: torch.Tensor, dsts: torch.Tensor, sizes: torch.Tensor) -> int:
    """Validate a descriptor table on the CPU, before upload; return the programs per descriptor to launch.

    `srcs`, `dsts`, `sizes`: 1-D int64 CPU tensors of equal length (addresses and bytes). Checking here, where
    reading a value costs nothing, keeps the launch free of host synchronisations (a `bool()` or `int()` of a CUDA
    tensor waits for the device).
    """
    for name, t in (("srcs", srcs), ("dsts", dsts), ("sizes", sizes)):
        if t.dtype != torch.int64 or t.dim() != 1:
            raise ValueError(f"{name}: must be a 1-D int64 tensor, got {t.dtype} with {t.dim()} dims")
        if t.device.type != "cpu":
            raise ValueError(f"{name}: descriptors are validated on the CPU before upload, got {t.device}")
        if t.numel() != sizes.numel():
            raise ValueError(f"{name}: length {t.numel()} != sizes length {sizes.numel()}")
    if sizes.numel() == 0:
        return 0
    for name, t in (("srcs", srcs), ("dsts", dsts), ("sizes", sizes)):
        misaligned = t % WORD_BYTES != 0
        if bool(misaligned.any()):
            bad = int(t[misaligned.nonzero()[0]])
            raise ValueError(f"{name}: every value must be a multiple of {WORD_BYTES} bytes, got {bad}")
    if int(sizes.min()) <= 0:
        raise ValueError(f"sizes: every size must be > 0, got {int(sizes.min())}")
    return min(MAX_PROGRAMS_PER_DESCRIPTOR, -(-int(sizes.max()) // (WORD_BYTES * CHUNK_WORDS)))


def launch_table(table: torch.Tensor, programs: int) -> None:
    """Launch on the current stream over a checked `[3, n]` int64 table (srcs, dsts, sizes) on the launch device.

    `programs` comes from `check_descriptors` of the same rows; nothing here reads a device value.
    """
    count = table.shape[1]
    if count == 0:
        return
    words = table[2] // WORD_BYTES  # on the device, queued like the kernel: no synchronisation
    _copy_descriptors_kernel[(count, programs)](table[0], table[1], words, CHUNK=CHUNK_WORDS)


def copy_descriptors(
    srcs: torch.Tensor, dsts: torch.Tensor, sizes: torch.Tensor, device: torch.device | str = "cpu"
) -> None:
    """Check the CPU descriptors, upload them to `device` (asynchronously from pinned memory), launch there."""
    programs = check_descriptors(srcs, dsts, sizes)
    if programs == 0:
        return
    table = torch.stack([srcs, dsts, sizes])
    device = torch.device(device)
    if device.type == "cuda":
        table = table.pin_memory().to(device, non_blocking=True)
    launch_table(table, programs)


def _check_views(src: torch.Tensor, dst: torch.Tensor, src_ids: torch.Tensor, dst_ids: torch.Tensor) -> None:
    for name, t in (("src", src), ("dst", dst)):
        if t.dim() != 2 or t.stride(1) != 1:
            raise ValueError(f"{name}: must be 2-D with dense rows, got shape {tuple(t.shape)} stride {t.stride()}")
    if src.dtype != dst.dtype or src.shape[1] != dst.shape[1]:
        raise ValueError(f"dst: {dst.dtype} rows of {dst.shape[1]} do not match src {src.dtype} rows of {src.shape[1]}")
    row_bytes = src.shape[1] * src.element_size()
    for name, t in (("src", src), ("dst", dst)):
        if t.data_ptr() % WORD_BYTES or (t.stride(0) * t.element_size()) % WORD_BYTES or row_bytes % WORD_BYTES:
            raise ValueError(
                f"{name}: base, row stride and row bytes must be multiples of {WORD_BYTES}, got base "
                f"{t.data_ptr() % 64} mod 64, stride {t.stride(0) * t.element_size()}, row {row_bytes}"
            )
    if src_ids.numel() != dst_ids.numel():
        raise ValueError(f"dst_ids: {dst_ids.numel()} ids do not pair with {src_ids.numel()} src_ids")
    for name, ids, bound in (("src_ids", src_ids, src.shape[0]), ("dst_ids", dst_ids, dst.shape[0])):
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= bound):
            raise ValueError(f"{name}: ids must be in [0, {bound}), got min {int(ids.min())} max {int(ids.max())}")


def gather_scatter(src: torch.Tensor, dst: torch.Tensor, src_ids: torch.Tensor, dst_ids: torch.Tensor) -> None:
    """`dst[dst_ids[i]] = src[src_ids[i]]` (rows) through the kernel; validates dtype, alignment and bounds."""
    src_ids = torch.as_tensor(src_ids, dtype=torch.int64).cpu()
    dst_ids = torch.as_tensor(dst_ids, dtype=torch.int64).cpu()
    _check_views(src, dst, src_ids, dst_ids)
    row_bytes = src.shape[1] * src.element_size()
    srcs = src.data_ptr() + src_ids * (src.stride(0) * src.element_size())
    dsts = dst.data_ptr() + dst_ids * (dst.stride(0) * dst.element_size())
    sizes = torch.full_like(srcs, row_bytes)
    copy_descriptors(srcs, dsts, sizes, src.device if src.device.type == "cuda" else dst.device)


def reference_gather_scatter(src: torch.Tensor, dst: torch.Tensor, src_ids, dst_ids) -> None:
    """The test oracle: plain torch indexing."""
    src_ids = torch.as_tensor(src_ids, dtype=torch.int64)
    dst_ids = torch.as_tensor(dst_ids, dtype=torch.int64)
    dst[dst_ids.to(dst.device)] = src[src_ids.to(src.device)].to(dst.device)
