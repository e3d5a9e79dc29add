"""Triton backend: the descriptor-table gather/scatter kernel of kernels/triton_block_copy.py.

On CUDA it launches on the direction's copy stream (the same streams and ordering as the DMA backend) and reads
or writes the host mirrors straight from the GPU, so it is only built over pinned, device-mapped mirrors: a kernel
dereferencing pageable memory faults, and that fault is sticky (it kills the CUDA context for the whole process).
Construction ends with a one-descriptor warm-up copy (host mirror row -> a scratch device buffer, checked byte for
byte): Triton compiles its launcher with the system C compiler and Python's headers on first launch, and a machine
without them must lose this backend at start-up, not fail every small batch later.

Descriptors are checked on the CPU before upload (`check_descriptors`): no launch reads a device value back, so a
batch costs no host synchronisation. On CPU it only runs under the Triton interpreter (`TRITON_INTERPRET=1` set
before triton is imported), synchronously: that is how its tests run without a GPU.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Sequence

import torch

from toolkit.copy import kernel_sources
from toolkit.copy.backend import CopyBackend
from toolkit.copy.completion import CopyHandle, Direction, ReadyHandle
from toolkit.copy.descriptors import RegionPair, build_descriptors
from toolkit.copy.streams import CopyStreams

KERNEL_MODULE = "triton_block_copy"
_WARM_UP_BYTES = 256


class TritonWarmUpFailed(RuntimeError):
    """The one-descriptor warm-up copy raised or copied the wrong bytes: this backend must not be used."""


def load_kernel_module(name: str = KERNEL_MODULE) -> ModuleType:
    """Import `kernels/<name>.py` (installed as `toolkit._kernels.<name>`, else from the source tree)."""
    return kernel_sources.load_kernel_module(name)


class TritonCopyBackend(CopyBackend):
    name = "triton"

    def __init__(
        self,
        *,
        store_pairs: Sequence[RegionPair],
        copy_timeout_s: float | None = None,
        order_after_compute: bool = True,
        host_pinned: bool = False,
        kernel: ModuleType | None = None,
    ) -> None:
        """`host_pinned`: the caller pinned the host mirrors (required on CUDA). `kernel`: tests inject a fake."""
        super().__init__(store_pairs=store_pairs, copy_timeout_s=copy_timeout_s)
        device = store_pairs[0].src.device
        if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            raise ValueError(f"store_pairs: the triton backend needs CUDA or TRITON_INTERPRET=1, got {device}")
        if device.type == "cuda" and not host_pinned:
            raise ValueError(
                "host_pinned: the triton backend addresses the host mirrors from the GPU; they must be "
                "pinned (registered with the driver), got pageable mirrors"
            )
        self.device = device
        self.order_after_compute = order_after_compute
        self._kernel = kernel if kernel is not None else load_kernel_module()
        self._streams = CopyStreams(device) if device.type == "cuda" else None
        self._warm_up()

    def _warm_up(self) -> None:
        """Copy the first bytes of host mirror row 0 to a scratch device buffer and compare (module docstring)."""
        host_row = self._pairs[Direction.STORE][0].dst[0]
        n = min(_WARM_UP_BYTES, host_row.numel()) // 8 * 8
        if n == 0:
            raise TritonWarmUpFailed(f"row_bytes: the kernel copies 8-byte words, got rows of {host_row.numel()}")
        scratch = torch.full((n,), 0x5A, dtype=torch.int8, device=self.device)
        descriptor = [torch.tensor([v], dtype=torch.int64) for v in (host_row.data_ptr(), scratch.data_ptr(), n)]
        hint = "Triton needs a C compiler and Python headers at its first launch"
        try:
            handle = self._launch_descriptors(Direction.LOAD, descriptor, after=None)
            finished = handle.wait(60.0)
            failure = handle.error()
            copied = scratch.cpu() if finished and failure is None else None
        except Exception as exc:
            raise TritonWarmUpFailed(f"{type(exc).__name__}: {exc} ({hint})") from exc
        if failure is not None:
            raise TritonWarmUpFailed(f"{type(failure).__name__}: {failure} ({hint})") from failure
        if not finished:
            raise TritonWarmUpFailed("the warm-up copy did not finish within 60 s")
        if not torch.equal(copied, host_row[:n].cpu()):
            raise TritonWarmUpFailed(f"copied bytes differ from host row 0 ({n} bytes)")

    def _launch(self, *, direction, pairs, src_ids, dst_ids, fault, after) -> CopyHandle:
        if fault is not None:
            return ReadyHandle(fault)
        d = build_descriptors(pairs, src_ids, dst_ids)
        return self._launch_descriptors(direction, [d.srcs, d.dsts, d.sizes], after=after)

    def _launch_descriptors(self, direction: Direction, columns: Sequence[torch.Tensor], *, after) -> CopyHandle:
        programs = self._kernel.check_descriptors(*columns)  # on the CPU, before anything is enqueued
        table = torch.stack(list(columns))
        if self._streams is None:
            self._kernel.launch_table(table, programs)
            return ReadyHandle()
        with torch.cuda.device(self.device):
            stream = self._streams.begin(direction, after, self.order_after_compute)
            try:
                with torch.cuda.stream(stream):
                    # The caching host allocator keeps the pinned staging rows alive until the upload ran.
                    self._kernel.launch_table(table.pin_memory().to(self.device, non_blocking=True), programs)
            except Exception as exc:  # the upload may be queued: settle after it, not at once
                return self._streams.finish_failed(direction, exc)
            return self._streams.finish(direction)
