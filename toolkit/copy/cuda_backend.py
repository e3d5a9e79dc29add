"""CUDA batched-DMA backend: one `cuMemcpyBatchAsync` per batch on the direction's copy stream.

Copy engines move the bytes, so no SM time is taken from the model (DMA wins end to end even where a kernel wins in
isolation: docs/reference-behaviour.md, "Copy engines and kernels"). Runs are coalesced first (descriptors.py).
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
from toolkit.copy.cuda_driver import SRC_ACCESS_ORDER_ANY, SRC_ACCESS_ORDER_STREAM, driver_calls
from toolkit.copy.descriptors import RegionPair, build_descriptors
from toolkit.copy.streams import CopyStreams

# Largest descriptor count per driver call (ROCm needs chunks of 8192; CUDA accepts more but gains nothing).
DEFAULT_MAX_DESCRIPTORS = 8192


class CudaDmaBackend(CopyBackend):
    name = "cuda-dma"

    def __init__(
        self,
        *,
        store_pairs: Sequence[RegionPair],
        copy_timeout_s: float | None = None,
        order_after_compute: bool = True,
        max_descriptors: int = DEFAULT_MAX_DESCRIPTORS,
        use_batch_call: bool = True,
    ) -> None:
        super().__init__(store_pairs=store_pairs, copy_timeout_s=copy_timeout_s)
        device = store_pairs[0].src.device
        if device.type != "cuda":
            raise ValueError(f"store_pairs: device views must be on CUDA, got {device}")
        if max_descriptors < 1:
            raise ValueError(f"max_descriptors: must be >= 1, got {max_descriptors}")
        self.device = device
        self.order_after_compute = order_after_compute
        self.max_descriptors = max_descriptors
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
        descriptors = build_descriptors(pairs, src_ids, dst_ids)
        order = SRC_ACCESS_ORDER_STREAM if direction is Direction.STORE else SRC_ACCESS_ORDER_ANY
        with torch.cuda.device(self.device):  # makes the device's primary context current for the driver calls
            stream = self._streams.begin(direction, after, self.order_after_compute)
            try:
                self._enqueue(descriptors, order, stream.cuda_stream)
            except Exception as exc:  # earlier chunks may be copying: settle only after them (keeps the pins)
                return self._streams.finish_failed(direction, exc)
            return self._streams.finish(direction)

    def _enqueue(self, descriptors, order: int, stream_handle: int) -> None:
        for start in range(0, descriptors.count, self.max_descriptors):
            srcs = descriptors.srcs[start : start + self.max_descriptors].contiguous()
            dsts = descriptors.dsts[start : start + self.max_descriptors].contiguous()
            sizes = descriptors.sizes[start : start + self.max_descriptors].contiguous()
            if self.uses_batch_call:
                self._driver.batch(
                    dsts.data_ptr(), srcs.data_ptr(), sizes.data_ptr(), sizes.numel(), order, stream_handle
                )
            else:
                for d, s, n in zip(dsts.tolist(), srcs.tolist(), sizes.tolist()):
                    self._driver.one(d, s, n, stream_handle)
