"""Which copy backends a worker gets, and the table that picks among them: decided once, at start-up.

On CPU there is one backend. On CUDA the DMA backend always exists; the Triton backend only over pinned host
mirrors, only with Triton installed, and only once its warm-up copy succeeded (triton_backend.py). A backend that
fails (its warm-up, or a copy of the start-up policy measurement) is dropped with its reason in `dropped`, and the
policy is chosen from the backends that remain, so a batch is never routed to a backend known not to work.
"""

from __future__ import annotations

import logging
from typing import Callable, Sequence

import torch

from toolkit.copy.backend import CopyBackend
from toolkit.copy.completion import Direction
from toolkit.copy.cpu_backend import CpuCopyBackend
from toolkit.copy.descriptors import RegionPair
from toolkit.copy.kernel_sources import KernelSourceMissing
from toolkit.copy.policy import (
    CPU,
    CUDA_DMA,
    TRITON,
    TRITON_MIN_DESCRIPTORS,
    BackendPolicy,
    default_policy,
    measure_policy,
    parse_policy,
)

log = logging.getLogger(__name__)


class ProbeCopyFailed(RuntimeError):
    """One backend's copy failed during the start-up measurement."""

    def __init__(self, backend: str, reason: str) -> None:
        super().__init__(f"{backend} probe copy failed: {reason}")
        self.backend = backend


def _triton_missing(exc: ImportError) -> bool:
    return (exc.name or "").split(".")[0] == "triton"


def make_backends(
    pairs: Sequence[RegionPair],
    device: torch.device,
    config,
    *,
    host_pinned: bool,
    dropped: dict[str, str],
    only: Sequence[str] | None = None,
) -> dict[str, CopyBackend]:
    """The backends for `pairs` (`config`: a `WorkerConfig`); reasons for the ones left out go into `dropped`."""
    timeout = config.copy_timeout_s
    if device.type != "cuda":
        return {
            CPU: CpuCopyBackend(
                store_pairs=pairs,
                num_threads=config.cpu_threads,
                asynchronous=config.asynchronous,
                copy_timeout_s=timeout,
            )
        }
    from toolkit.copy.cuda_backend import CudaDmaBackend

    backends: dict[str, CopyBackend] = {
        CUDA_DMA: CudaDmaBackend(
            store_pairs=pairs, copy_timeout_s=timeout, max_descriptors=config.dma_descriptors_per_call
        )
    }
    if only is not None and TRITON not in only:
        return backends
    if not host_pinned:
        dropped[TRITON] = "host mirrors are pageable (the kernel addresses them from the GPU)"
    else:
        from toolkit.copy.triton_backend import TritonCopyBackend

        try:
            backends[TRITON] = TritonCopyBackend(store_pairs=pairs, copy_timeout_s=timeout, host_pinned=True)
        except KernelSourceMissing:
            raise  # a packaging bug, not a property of this machine
        except ImportError as exc:
            dropped[TRITON] = (
                f"triton not installed ({exc})"
                if _triton_missing(exc)
                else f"triton import failed ({type(exc).__name__}: {exc})"
            )
        except Exception as exc:
            dropped[TRITON] = f"warm-up copy failed ({exc})"
    if TRITON in dropped and only is None:
        # No Triton, or pageable mirrors, is a choice; a broken import or warm-up is a setup worth seeing.
        level = logging.INFO if dropped[TRITON].startswith(("triton not", "host mirrors")) else logging.WARNING
        log.log(level, "copy: no triton backend: %s; DMA only", dropped[TRITON])
    return backends


def choose_policy(
    setting: "str | BackendPolicy | None",
    device_type: str,
    backends: dict[str, CopyBackend],
    dropped: dict[str, str],
    measure: Callable[[list[str], str], BackendPolicy],
) -> BackendPolicy:
    """The policy for `setting` (see `WorkerConfig.policy`); a backend whose probe copy fails is dropped (closed)."""
    if isinstance(setting, BackendPolicy):
        return setting
    if setting not in (None, "static", "measure"):
        return parse_policy(setting)
    while True:
        static = default_policy(device_type, list(backends))
        if setting == "static" or (setting is None and len(backends) < 2):
            return static
        try:
            measured = measure(list(backends), static.default)
        except ProbeCopyFailed as exc:
            if exc.backend == static.default or exc.backend not in backends:
                log.warning("copy: start-up policy measurement failed (%s); using %s", exc, static.describe())
                return static
            log.warning("copy: %s; dropping the %s backend", exc, exc.backend)
            backends.pop(exc.backend).close()
            dropped[exc.backend] = str(exc)
            continue
        except Exception as exc:  # a failed measurement must not stop the engine: keep the static table
            log.warning("copy: start-up policy measurement failed (%s); using %s", exc, static.describe())
            return static
        log.info("copy: measured backend policy %s", measured.describe())
        return measured


def measure_store_policy(
    probes: dict[str, CopyBackend],
    *,
    num_rows: int,
    row_bytes: int,
    num_regions: int,
    flush_timeout_s: float,
    default: str,
) -> BackendPolicy:
    """Time every backend in `probes` on store batches, one descriptor size at a time.

    Stores only (device -> host): at start-up no host block holds a key yet, so overwriting host rows is harmless,
    while a load would overwrite device rows. The caller passes throwaway backends, keeping the probe events out of
    the real completion trackers, whose high-water marks must only ever see the scheduler's event ids.
    `row_bytes`: bytes of one block over all regions.
    """
    run_lengths = [n for n in (1, 4, 16, 64) if 2 * n <= num_rows] or [1]
    event_ids = iter(range(1 << 30))
    # Sizes in the unit `pick_backend` uses: average bytes per descriptor (one descriptor per run per region).
    mean_row_bytes = row_bytes // num_regions
    run_length_of = {n * mean_row_bytes: n for n in run_lengths}

    def run(name: str, bytes_per_descriptor: int) -> None:
        run_length = run_length_of[bytes_per_descriptor]
        # Runs of `run_length` consecutive ids separated by one skipped id: descriptors of that size.
        ids = [start + i for start in range(0, num_rows - run_length + 1, run_length + 1) for i in range(run_length)]
        try:
            probes[name].submit(
                direction=Direction.STORE, event_id=next(event_ids), src_block_ids=ids, dst_block_ids=ids
            )
            probes[name].flush(flush_timeout_s)
            failures = [o.error for o in probes[name].poll() if not o.ok]
        except Exception as exc:
            raise ProbeCopyFailed(name, f"{type(exc).__name__}: {exc}") from exc
        if failures or probes[name].num_in_flight:
            raise ProbeCopyFailed(name, repr(failures[0]) if failures else "still running at the flush timeout")

    # The probes copy whole-pool batches (thousands of descriptors): a kernel's win there holds only for large ones.
    return measure_policy(
        run, list(probes), list(run_length_of), default=default, min_descriptors={TRITON: TRITON_MIN_DESCRIPTORS}
    )
