"""The copy benchmark's backends (`kvtk bench copy`): every backend available on the device, what each really
is (`built`), and the native contiguous reference copy on CPU."""

from __future__ import annotations

import torch

from toolkit.copy.backend import CopyBackend

VLLM_SHAPE = "vllm-batch"  # the benchmark's name for vLLM's batched-memcpy call shape (see make_backends)
VLLM_SHAPE_MAX_DESCRIPTORS = 1 << 30  # vLLM passes a whole batch to one driver call on CUDA
NO_BATCH_CALL = "driver has no cuMemcpyBatchAsync (needs 12.8+)"


def driver_version(device: str) -> int | None:
    if device != "cuda":
        return None
    from toolkit.copy.cuda_driver import driver_calls

    return driver_calls().version()


def make_backends(pairs, device: str, threads: int, wanted, host_pinned: bool, built: dict) -> dict[str, CopyBackend]:
    """The backends to time; `built[name]` records what each really is, or why it could not be built."""
    backends: dict[str, CopyBackend] = {}
    if device == "cpu":
        from toolkit.copy.cpu_backend import CpuCopyBackend

        native = CpuCopyBackend(store_pairs=pairs, num_threads=threads, asynchronous=False)
        if native.uses_native:
            backends["cpu"] = native
        backends["cpu-torch"] = CpuCopyBackend(store_pairs=pairs, use_native=False, asynchronous=False)
        built.update({name: {"built": name} for name in backends})
        built.setdefault("cpu", {"built": None, "reason": "native copy unavailable (no compiler?)"})
    else:
        from toolkit.copy.cuda_backend import CudaDmaBackend
        from toolkit.copy.triton_backend import TritonCopyBackend

        for name, use_batch in (("cuda-dma", True), ("cuda-dma-loop", False)):
            backend = CudaDmaBackend(store_pairs=pairs, order_after_compute=False, use_batch_call=use_batch)
            backends[name] = backend
            # A driver older than 12.8 has no batched call: say so rather than time the loop under this name.
            built[name] = (
                {"built": backend.variant}
                if backend.variant != "dma-loop" or not use_batch
                else {"built": "dma-loop", "reason": NO_BATCH_CALL}
            )
        # vLLM's SimpleCPU call shape, the reference these rows are read against: one cuMemcpyBatchAsync over one
        # descriptor per (region, block), consecutive blocks not merged, all descriptors in one call.
        reference = CudaDmaBackend(
            store_pairs=pairs, order_after_compute=False, coalesce=False, max_descriptors=VLLM_SHAPE_MAX_DESCRIPTORS
        )
        if reference.uses_batch_call:
            backends[VLLM_SHAPE] = reference
            built[VLLM_SHAPE] = {"built": "dma-batch-per-block"}
        else:
            reference.close()
            built[VLLM_SHAPE] = {"built": None, "reason": NO_BATCH_CALL}
        try:
            backends["triton"] = TritonCopyBackend(
                store_pairs=pairs, order_after_compute=False, host_pinned=host_pinned
            )
            built["triton"] = {"built": "triton"}
        except Exception as exc:  # recorded in the JSON (and fatal with --require triton), never silent
            built["triton"] = {"built": None, "reason": f"{type(exc).__name__}: {exc}"}
    return {k: v for k, v in backends.items() if wanted is None or k in wanted}


def native_contiguous(backend: CopyBackend | None, pieces) -> "callable | None":
    """One native call copying each (src, dst) flat tensor pair whole, with `backend`'s threads and store policy."""
    if backend is None or not getattr(backend, "uses_native", False):
        return None
    srcs = torch.tensor([s.data_ptr() for s, _ in pieces], dtype=torch.int64)
    dsts = torch.tensor([d.data_ptr() for _, d in pieces], dtype=torch.int64)
    sizes = torch.tensor([s.numel() for s, _ in pieces], dtype=torch.int64)

    def copy() -> None:
        backend._native(
            srcs.data_ptr(), dsts.data_ptr(), sizes.data_ptr(), len(pieces), backend.num_threads, backend.nt_min_bytes
        )

    return copy
