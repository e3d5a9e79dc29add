"""CUDA batched-DMA backend: a batch as a few `cuMemcpyBatchAsync` calls on the direction's copy stream.

Copy engines move the bytes, so no SM time is taken from the model (DMA wins end to end even where a kernel wins in
isolation: docs/reference-behaviour.md, "Copy engines and kernels"). Runs are coalesced first (descriptors.py), then
enqueued in chunks so the copy engines start while the CPU still enqueues (`descriptors_per_call`).
Both directions start after the compute-done event (streams.py); stores read in stream order, loads let the driver
read the pinned host rows in any order. Without the batched entry point (driver < 12.8) each descriptor becomes one
`cuMemcpyAsync` on the same stream: same bytes, more launch overhead; `variant` says which one this backend uses.
A launch that fails part way is settled (failed) only once the stream passed the chunks already enqueued.
Cannot run without a GPU: its pure parts (descriptors) are CPU-tested, the rest is in tests marked `gpu`.
"""

from __future__ import annotations

from typing import Sequence

import torch

from toolkit.copy.backend import CopyBackend
from toolkit.copy.completion import CopyHandle, Direction, ReadyHandle
from toolkit.copy.cuda_driver import (
    MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE,
    SRC_ACCESS_ORDER_ANY,
    SRC_ACCESS_ORDER_STREAM,
    driver_calls,
)
from toolkit.copy.descriptors import RegionPair, build_descriptors
from toolkit.copy.streams import CopyStreams

# Descriptors per driver call. The driver's enqueue costs the CPU 0.4-1.3 us per descriptor, more per descriptor
# in larger host-to-device calls, and the copy engines start on a call only once it returned: a batch cut into
# about 16 calls of 64..256 descriptors lets them copy while the next call is enqueued. Measured on an H200 (PCIe
# Gen5, driver 580 / CUDA 13.0, `kvtk bench dma-shape`, docs/results/2026-12-04-h200-copy.md):
# 16 KiB x 4096 random loads 24 GB/s in calls of 256 against 4-6 in calls of 8192 (the earlier default) or in one
# call (vLLM's shape), stores 31 against 20; 1,024 blocks copy best in calls of 64-128; no cell gained more than
# 10% from calls of 2,048 or more.
MIN_CHUNK_DESCRIPTORS = 64
MAX_CHUNK_DESCRIPTORS = 256
CALLS_PER_BATCH = 16


def descriptors_per_call(count: int) -> int:
    """A sixteenth of a batch of `count` descriptors, within [64, 256] (the measurements above)."""
    return min(MAX_CHUNK_DESCRIPTORS, max(MIN_CHUNK_DESCRIPTORS, -(-count // CALLS_PER_BATCH)))


class CudaDmaBackend(CopyBackend):
    name = "cuda-dma"

    def __init__(
        self,
        *,
        store_pairs: Sequence[RegionPair],
        copy_timeout_s: float | None = None,
        order_after_compute: bool = True,
        max_descriptors: int | None = None,
        use_batch_call: bool = True,
        coalesce: bool = True,
        load_access_order: int = SRC_ACCESS_ORDER_ANY,
        memcpy_flags: int = MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE,
    ) -> None:
        super().__init__(store_pairs=store_pairs, copy_timeout_s=copy_timeout_s)
        device = store_pairs[0].src.device
        if device.type != "cuda":
            raise ValueError(f"store_pairs: device views must be on CUDA, got {device}")
        if max_descriptors is not None and max_descriptors < 1:
            raise ValueError(f"max_descriptors: must be >= 1, got {max_descriptors}")
        self.device = device
        self.order_after_compute = order_after_compute
        self.max_descriptors = max_descriptors
        self.coalesce = coalesce  # False only for the benchmark's vLLM-shaped reference (one descriptor per block)
        self.load_access_order = load_access_order  # stores always read in stream order (they read live KV)
        self.memcpy_flags = memcpy_flags
        self._driver = driver_calls()
        self.uses_batch_call = use_batch_call and self._driver.memcpy_batch_async is not None
        self._streams = CopyStreams(device)

    @property
    def variant(self) -> str:
        """What this backend really launches: `dma-batch` (cuMemcpyBatchAsync) or `dma-loop` (cuMemcpyAsync each)."""
        return "dma-batch" if self.uses_batch_call else "dma-loop"

    def _launch(self, *, direction, pairs, src_ids, dst_ids, fault, after) -> CopyHandle:
        if fault is not None:
            return ReadyHandle(fault)
        descriptors = build_descriptors(pairs, src_ids, dst_ids, coalesce=self.coalesce)
        order = SRC_ACCESS_ORDER_STREAM if direction is Direction.STORE else self.load_access_order
        with torch.cuda.device(self.device):  # makes the device's primary context current for the driver calls
            stream = self._streams.begin(direction, after, self.order_after_compute)
            try:
                self._enqueue(descriptors, order, stream.cuda_stream)
            except Exception as exc:  # earlier chunks may be copying: settle only after them (keeps the pins)
                return self._streams.finish_failed(direction, exc)
            return self._streams.finish(direction)

    def _enqueue(self, descriptors, order: int, stream_handle: int) -> None:
        chunk = self.max_descriptors or descriptors_per_call(descriptors.count)
        for start in range(0, descriptors.count, chunk):
            srcs = descriptors.srcs[start : start + chunk].contiguous()
            dsts = descriptors.dsts[start : start + chunk].contiguous()
            sizes = descriptors.sizes[start : start + chunk].contiguous()
            if self.uses_batch_call:
                self._driver.batch(
                    dsts.data_ptr(),
                    srcs.data_ptr(),
                    sizes.data_ptr(),
                    sizes.numel(),
                    order,
                    stream_handle,
                    self.memcpy_flags,
                )
            else:
                for d, s, n in zip(dsts.tolist(), srcs.tolist(), sizes.tolist()):
                    self._driver.one(d, s, n, stream_handle)
