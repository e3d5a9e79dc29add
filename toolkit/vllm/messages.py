"""The connector's per-step messages in vLLM's types: scheduler -> worker metadata, worker -> scheduler metadata."""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorMetadata, KVConnectorWorkerMetadata

from toolkit.core.metadata import StepMetadata
from toolkit.vllm.tier_counts import TierCounts


@dataclass
class HybridConnectorMetadata(KVConnectorMetadata):  # type: ignore[misc]  # vLLM is not analysed: its base is Any
    """One step's transfers (block ids only) plus the loads the scheduler declined after allocation.

    `declined_req_ids`: requests whose accepted boundary could not be served; the worker reports them back as
    failed receives so the engine recomputes them (the failure travels the same path as a failed copy).
    """

    step: StepMetadata = field(default_factory=StepMetadata)
    declined_req_ids: tuple[str, ...] = ()

    # Accessors the harness uses for both connectors' metadata.
    @property
    def load_req_ids(self) -> tuple[str, ...]:
        if self.step.load is None:
            return ()
        return tuple(self.step.load_event_to_req_ids.get(self.step.load.event_id, ()))

    @property
    def load_device_block_ids(self) -> tuple[int, ...]:
        return self.step.load.device_block_ids if self.step.load is not None else ()


@dataclass
class HybridWorkerMetadata(KVConnectorWorkerMetadata):  # type: ignore[misc]  # vLLM is not analysed: its base is Any
    """Worker -> scheduler: store completions counted per worker (summed by `aggregate`), failures, and the copy
    volume and time of this step per direction."""

    completed_store_events: dict[int, int] = field(default_factory=dict)
    failed_store_events: set[int] = field(default_factory=set)
    failed_load_events: set[int] = field(default_factory=set)
    bytes_loaded: int = 0
    bytes_stored: int = 0
    # The disk tier below the CPU tier: disk events whose promotions settled (counted per worker, like stores) and
    # promoted host blocks whose read failed.
    disk_settled_events: dict[int, int] = field(default_factory=dict)
    disk_failed_host_blocks: set[int] = field(default_factory=set)
    # What the tier below did since the last report (`tier_counts.py`), and the keys of writes it did not keep.
    lower_tier: TierCounts | None = None
    unheld_keys: set[bytes] = field(default_factory=set)

    def aggregate(self, other: "KVConnectorWorkerMetadata") -> "KVConnectorWorkerMetadata":
        assert isinstance(other, HybridWorkerMetadata)
        counts = dict(self.completed_store_events)
        for event_id, count in other.completed_store_events.items():
            counts[event_id] = counts.get(event_id, 0) + count
        disk = dict(self.disk_settled_events)
        for event_id, count in other.disk_settled_events.items():
            disk[event_id] = disk.get(event_id, 0) + count
        lower_tier = self.lower_tier.copy() if self.lower_tier is not None else None
        if other.lower_tier is not None:
            lower_tier = lower_tier or TierCounts()
            lower_tier.add(other.lower_tier)
        return HybridWorkerMetadata(
            lower_tier=lower_tier,
            unheld_keys=self.unheld_keys | other.unheld_keys,
            disk_settled_events=disk,
            disk_failed_host_blocks=self.disk_failed_host_blocks | other.disk_failed_host_blocks,
            completed_store_events=counts,
            failed_store_events=self.failed_store_events | other.failed_store_events,
            failed_load_events=self.failed_load_events | other.failed_load_events,
            bytes_loaded=self.bytes_loaded + other.bytes_loaded,
            bytes_stored=self.bytes_stored + other.bytes_stored,
        )
