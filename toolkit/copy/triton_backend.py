"""Triton backend: the descriptor-table gather/scatter kernel of kernels/triton_block_copy.py.

On CUDA it launches on the direction's copy stream (the same streams and ordering as the DMA backend). On CPU it
only runs under the Triton interpreter (`TRITON_INTERPRET=1` set before triton is imported), synchronously: that
is how its tests run without a GPU.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Sequence

import torch

from toolkit.copy.backend import CopyBackend
from toolkit.copy.completion import CopyHandle, ReadyHandle
from toolkit.copy.descriptors import RegionPair, build_descriptors
from toolkit.copy.streams import CopyStreams

def load_kernel_module(name: str = "triton_block_copy") -> ModuleType:
    """Import `kernels/<name>.py`, shipped as `toolkit._kernels.<name>`."""
    return importlib.import_module(f"toolkit._kernels.{name}")


class TritonCopyBackend(CopyBackend):
    name = "triton"

    def __init__(self, *, store_pairs: Sequence[RegionPair], copy_timeout_s: float | None = None,
                 order_stores_after_compute: bool = True) -> None:
        super().__init__(store_pairs=store_pairs, copy_timeout_s=copy_timeout_s)
        device = store_pairs[0].src.device
        if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            raise ValueError(f"store_pairs: the triton backend needs CUDA or TRITON_INTERPRET=1, got {device}")
        self.device = device
        self.order_stores_after_compute = order_stores_after_compute
        self._kernel = load_kernel_module()
        self._streams = CopyStreams(device) if device.type == "cuda" else None

    def _launch(self, *, direction, pairs, src_ids, dst_ids, fault, after) -> CopyHandle:
        if fault is not None:
            return ReadyHandle(fault)
        d = build_descriptors(pairs, src_ids, dst_ids)
        if self._streams is None:
            self._kernel.copy_descriptors(d.srcs, d.dsts, d.sizes)
            return ReadyHandle()
        with torch.cuda.device(self.device):
            stream = self._streams.begin(direction, after, self.order_stores_after_compute)
            with torch.cuda.stream(stream):
                table = torch.stack([d.srcs, d.dsts, d.sizes]).pin_memory().to(self.device, non_blocking=True)
                self._kernel.copy_descriptors(table[0], table[1], table[2])
            return self._streams.finish(direction)
