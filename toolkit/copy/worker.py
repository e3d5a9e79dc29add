"""`OffloadWorker`: the worker side of the offload, from per-step metadata to per-step reports.

It owns the copy regions, their host mirrors and the backends. `apply(step)` starts the step's load and store
batches and returns without waiting; `collect()` reports which events settled since the last call. This is the
failure boundary: anything a copy raises (at submit or later, including timeouts) is caught here, logged once per
kind, and reported as a failed load event (the requests recompute) or a failed store event (its keys must never
become hits) - never as a completion. A copy past `copy_timeout_s` is warned about at once but reported (failed)
only once its stream or thread really finished it: until then its blocks stay pinned, because the copy may still
write them (completion.py). Every step's copies, loads and stores alike, wait for the compute queued before them
(streams.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

import torch

from toolkit.copy.backend_setup import choose_policy, make_backends, measure_store_policy
from toolkit.copy.completion import CopyOutcome, CopyTimeout, Direction
from toolkit.copy.descriptors import RegionPair, coalesce_runs
from toolkit.copy.faults import FaultInjector, FaultSpec
from toolkit.copy.host_mirror import allocate_host_mirrors, num_host_blocks_for
from toolkit.copy.placement import TensorPlacement
from toolkit.copy.policy import BackendPolicy
from toolkit.copy.regions import CopyRegion, KVCaches, discover_regions, regions_from_tensors
from toolkit.copy.streams import ComputeFence
from toolkit.core.metadata import StepMetadata, TransferBatch, WorkerReport

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class WorkerConfig:
    """How the worker is built. Give `num_host_blocks` or `host_capacity_bytes` (the scheduler's pool size)."""

    num_host_blocks: int | None = None
    host_capacity_bytes: int | None = None
    backend: str = "auto"  # "auto": the policy picks per batch; else a backend name to force
    # None: measured at start-up when several backends exist (CUDA), else default_policy; "static": default_policy;
    # "measure": always measure; other str: parse_policy syntax.
    policy: str | BackendPolicy | None = None
    copy_timeout_s: float | None = 60.0  # a batch still running after this is reported failed (once it ended)
    flush_timeout_s: float = 60.0  # a preemption flush gives up after this (the rest stay in flight)
    fault_inject: str | None = None  # faults.py syntax; None: read KVTK_FAULT_INJECT
    rank: int = 0  # this worker's rank (a fault spec's `rank=R` applies to one rank only)
    pin_host_memory: bool | None = None  # None: pin exactly on CUDA
    host_mmap_path: str | None = None  # back the mirrors with a new 0600 file here
    cpu_threads: int = 1  # threads per CPU batch (the model shares these cores)
    dma_descriptors_per_call: int | None = None  # CUDA DMA; None: cuda_backend.descriptors_per_call
    asynchronous: bool = True  # CPU: copy on background threads

    def __post_init__(self) -> None:
        if (self.num_host_blocks is None) == (self.host_capacity_bytes is None):
            raise ValueError("num_host_blocks: give exactly one of num_host_blocks and host_capacity_bytes")
        if self.flush_timeout_s <= 0:
            raise ValueError(f"flush_timeout_s: must be > 0, got {self.flush_timeout_s}")
        if self.dma_descriptors_per_call is not None and self.dma_descriptors_per_call < 1:
            raise ValueError(f"dma_descriptors_per_call: must be >= 1 or None, got {self.dma_descriptors_per_call}")


class OffloadWorker:
    def __init__(self, *, regions: Sequence[CopyRegion], config: WorkerConfig) -> None:
        if not regions:
            raise ValueError("regions: at least one copy region is needed")
        devices = {str(r.device) for r in regions}
        if len(devices) != 1:
            raise ValueError(f"regions: all regions must be on one device, got {sorted(devices)}")
        self.config = config
        self.regions = tuple(regions)
        self.device = regions[0].device
        num_host_blocks = config.num_host_blocks or num_host_blocks_for(config.host_capacity_bytes, regions)
        self.host = allocate_host_mirrors(
            regions, num_host_blocks=num_host_blocks, pin=config.pin_host_memory, mmap_path=config.host_mmap_path
        )
        self.backends = {}
        try:
            self._build(regions, config)
        except BaseException:  # nothing half-built outlives a failed constructor: backends, then the pinned mirrors
            for backend in self.backends.values():
                backend.close()
            self.host.close()
            raise

    def _build(self, regions: Sequence[CopyRegion], config: WorkerConfig) -> None:
        pairs = [RegionPair(name=r.name, src=r.view, dst=m.view) for r, m in zip(regions, self.host.mirrors)]
        self.dropped_backends: dict[str, str] = {}  # name -> why it is not used (warm-up or probe failure, ...)
        self.backends = make_backends(
            pairs, self.device, config, host_pinned=self.host.pinned, dropped=self.dropped_backends
        )
        if config.backend != "auto" and config.backend not in self.backends:
            raise ValueError(f"backend: {config.backend!r} not available here (have {sorted(self.backends)})")
        spec = FaultSpec.parse(config.fault_inject) if config.fault_inject is not None else FaultSpec.from_env()
        spec = spec.for_rank(config.rank)
        self.faults = FaultInjector(spec)
        self._check_late_copies(spec)
        if spec.active:
            log.warning("copy: fault injection is ON (%s)", config.fault_inject or "from KVTK_FAULT_INJECT")
        self._dense_regions = sum(1 for p in pairs if p.dense)
        self._row_bytes = sum(r.row_bytes for r in regions)
        self.policy = choose_policy(
            config.policy,
            self.device.type,
            self.backends,
            self.dropped_backends,
            lambda names, default: self._measure_policy(pairs, names, default),
        )
        # One compute-done event per step, waited on by both directions (streams.py says why).
        self._fence = ComputeFence(self.device) if self.device.type == "cuda" else None
        self._early: list[CopyOutcome] = []  # failed at submit, or empty batches
        self._load_device_ids: dict[int, tuple[int, ...]] = {}
        self._logged_kinds: set[tuple[str, str]] = set()
        self._closed = False

    def _check_late_copies(self, spec: FaultSpec) -> None:
        if spec.has_late_copies and not all(b.supports_delay for b in self.backends.values()):
            raise ValueError(
                f"fault_injection: late_load/late_store need a backend that can delay copies (cpu); "
                f"this worker copies with {sorted(self.backends)}"
            )

    def set_faults(self, spec: FaultSpec) -> None:
        """Testing: replace the fault injection of a running worker (counts start again from zero)."""
        spec = spec.for_rank(self.config.rank)
        self._check_late_copies(spec)
        self.faults = FaultInjector(spec)

    def _measure_policy(self, pairs: Sequence[RegionPair], names: Sequence[str], default: str) -> BackendPolicy:
        probes = make_backends(pairs, self.device, self.config, host_pinned=self.host.pinned, dropped={}, only=names)
        try:
            return measure_store_policy(
                probes,
                num_rows=min(256, self.host.num_blocks, min(r.num_blocks for r in self.regions)),
                row_bytes=self._row_bytes,
                num_regions=len(self.regions),
                flush_timeout_s=self.config.flush_timeout_s,
                default=default,
            )
        finally:
            for backend in probes.values():
                backend.close()

    @classmethod
    def from_placements(
        cls, *, placements: Sequence[TensorPlacement], kv_caches: KVCaches, config: WorkerConfig
    ) -> "OffloadWorker":
        return cls(regions=discover_regions(placements, kv_caches), config=config)

    @classmethod
    def from_kv_caches(cls, *, kv_caches: KVCaches, config: WorkerConfig) -> "OffloadWorker":
        return cls(regions=regions_from_tensors(kv_caches), config=config)

    @property
    def num_host_blocks(self) -> int:
        return self.host.num_blocks

    @property
    def num_in_flight(self) -> int:
        return sum(b.num_in_flight for b in self.backends.values())

    def pick_backend(self, num_blocks: int, num_runs: int) -> str:
        if self.config.backend != "auto":
            return self.config.backend
        descriptors = num_runs * self._dense_regions + num_blocks * (len(self.regions) - self._dense_regions)
        return self.policy.pick(
            bytes_per_descriptor=num_blocks * self._row_bytes / max(1, descriptors),
            num_descriptors=descriptors,
            available=self.backends,
        )

    # -- per step ---------------------------------------------------------------------------------------------
    def apply(self, step: StepMetadata) -> None:
        """Flush if asked (before any device block is reused), then start the step's load and store."""
        if self._closed:
            raise RuntimeError("OffloadWorker is closed")
        if step.need_flush:
            self.flush()
        moving = [
            (d, b)
            for d, b in ((Direction.LOAD, step.load), (Direction.STORE, step.store))
            if b is not None and b.num_blocks
        ]
        after = self._fence.record() if self._fence is not None and moving else None
        if step.load is not None:
            self.start(Direction.LOAD, step.load, after=after)
        if step.store is not None:
            self.start(Direction.STORE, step.store, after=after)

    def start(self, direction: Direction, batch: TransferBatch, *, after: object | None = None) -> None:
        """Start one batch after `after` (a compute-done event), else after the compute queued so far (CUDA)."""
        if direction is Direction.LOAD:
            src, dst = batch.host_block_ids, batch.device_block_ids
            self._load_device_ids[batch.event_id] = batch.device_block_ids
        else:
            src, dst = batch.device_block_ids, batch.host_block_ids
        if batch.num_blocks == 0:
            self._early.append(CopyOutcome(event_id=batch.event_id, direction=direction))
            return
        try:
            src_ids = torch.as_tensor(src, dtype=torch.int64)
            dst_ids = torch.as_tensor(dst, dtype=torch.int64)
            backend = self.backends[self.pick_backend(batch.num_blocks, coalesce_runs(src_ids, dst_ids).num_runs)]
            backend.submit(
                direction=direction,
                event_id=batch.event_id,
                src_block_ids=src_ids,
                dst_block_ids=dst_ids,
                inject_fault=self.faults.should_fail(direction.value),
                inject_delay_s=self.faults.delay_s(direction.value),
                after=after,
            )
        except Exception as exc:  # the boundary: a failed launch is a failed event, not a crashed step
            self._early.append(CopyOutcome(event_id=batch.event_id, direction=direction, error=exc))

    def collect(self) -> WorkerReport:
        """Events settled since the last call. Never blocks."""
        outcomes, self._early = self._early, []
        for backend in self.backends.values():
            try:
                outcomes.extend(backend.poll())
                for direction, event_id in backend.take_overdue():
                    self._log_once(
                        f"{direction.value} overdue",
                        CopyTimeout(
                            f"still running after {self.config.copy_timeout_s} s; reported failed once its copy "
                            f"stream finished, its blocks stay pinned until then"
                        ),
                        event_id,
                    )
            except Exception as exc:  # a broken backend must not take the step down
                self._log_once("poll", exc)
        return self._report(outcomes)

    def flush(self) -> None:
        """Wait for every in-flight copy (bounded by `flush_timeout_s`); the outcomes come with the next collect."""
        for backend in self.backends.values():
            backend.flush(self.config.flush_timeout_s)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for backend in self.backends.values():
            backend.close(self.config.flush_timeout_s)
        still_running = self.num_in_flight
        if still_running:  # unpinning memory a copy engine still writes would be worse than the leak
            log.warning("copy: %d batches still running at close; host mirrors left pinned", still_running)
            return
        self.host.close()

    # -- internals --------------------------------------------------------------------------------------------
    def _report(self, outcomes: list[CopyOutcome]) -> WorkerReport:
        done = {d: set() for d in Direction}
        failed = {d: set() for d in Direction}
        for outcome in outcomes:
            if outcome.direction is Direction.LOAD:
                device_ids = self._load_device_ids.pop(outcome.event_id, ())
            if outcome.ok:
                if outcome.direction is Direction.LOAD and device_ids and self.faults.should_corrupt():
                    self._corrupt(device_ids)
                done[outcome.direction].add(outcome.event_id)
            else:
                self._log_once(outcome.direction.value, outcome.error, outcome.event_id)
                failed[outcome.direction].add(outcome.event_id)
        # An event split over backends (never today) could settle both ways: failure wins.
        for d in Direction:
            done[d] -= failed[d]
        return WorkerReport(
            completed_load_event_ids=frozenset(done[Direction.LOAD]),
            completed_store_event_ids=frozenset(done[Direction.STORE]),
            failed_load_event_ids=frozenset(failed[Direction.LOAD]),
            failed_store_event_ids=frozenset(failed[Direction.STORE]),
        )

    def _corrupt(self, device_ids: Sequence[int]) -> None:
        rows = torch.as_tensor(device_ids, dtype=torch.int64, device=self.device)
        for region in self.regions:
            region.view.index_copy_(0, rows, torch.bitwise_not(region.view.index_select(0, rows)))

    def _log_once(self, what: str, error: BaseException | None, event_id: int | None = None) -> None:
        kind = (what, type(error).__name__)
        if kind in self._logged_kinds:
            log.debug("copy: %s event %s failed again: %s", what, event_id, error)
            return
        self._logged_kinds.add(kind)
        log.warning(
            "copy: %s event %s failed (%s: %s); reported as failed, further ones logged at debug",
            what,
            event_id,
            type(error).__name__,
            error,
        )
