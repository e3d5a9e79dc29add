"""What crosses between the scheduler side and the workers each step.

The scheduler sends only block ids and event ids: hashes never leave the scheduler. A block id names one row in
every KV cache region on the device (all groups share one block-id space) and one row in every host mirror.
At most one load batch and one store batch exist per step; each is a batch over all requests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

NO_EVENT = -1


@dataclass(frozen=True, kw_only=True)
class TransferBatch:
    """One direction's copies for a step, under one event id.

    `device_block_ids[i]` pairs with `host_block_ids[i]`. For a load the host block is the source; for a store the
    device block is the source.
    """

    event_id: int
    device_block_ids: tuple[int, ...]
    host_block_ids: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.device_block_ids) != len(self.host_block_ids):
            raise ValueError(
                f"host_block_ids: {len(self.host_block_ids)} ids do not pair with "
                f"{len(self.device_block_ids)} device_block_ids (event {self.event_id})"
            )
        if self.event_id < 0:
            raise ValueError(f"event_id: must be >= 0, got {self.event_id}")

    @property
    def num_blocks(self) -> int:
        return len(self.device_block_ids)


@dataclass(frozen=True, kw_only=True)
class DiskBatch:
    """A step's moves between the CPU tier and a disk tier below it, under one event id (`toolkit.core.load.from_disk`).

    Order matters and the worker keeps it: first `drop_keys` (slots the scheduler's disk index let go), then
    demotions (`demote_host_block_ids[i]`'s bytes are written under `demote_keys[i]`; the block was just evicted and
    may be reused by this very step's stores or promotions, so its bytes are copied out before any other copy of the
    step starts), then promotions (`promote_keys[i]` is read into `promote_host_block_ids[i]`; a load reading a
    promoted block starts only once that read landed). Promoted blocks stay pinned on the scheduler side until
    every worker reported the event (`DiskReport`). Keys are persistent names of a block's tokens (`disk_key`), not
    slots: a restarted engine computes the same keys for the same prompts (with a fixed hash seed).
    """

    event_id: int
    drop_keys: tuple[bytes, ...] = ()
    demote_host_block_ids: tuple[int, ...] = ()
    demote_keys: tuple[bytes, ...] = ()
    promote_host_block_ids: tuple[int, ...] = ()
    promote_keys: tuple[bytes, ...] = ()

    def __post_init__(self) -> None:
        if len(self.demote_host_block_ids) != len(self.demote_keys):
            raise ValueError(
                f"demote_keys: {len(self.demote_keys)} keys do not pair with {len(self.demote_host_block_ids)} blocks"
            )
        if len(self.promote_host_block_ids) != len(self.promote_keys):
            raise ValueError(
                f"promote_keys: {len(self.promote_keys)} keys do not pair with {len(self.promote_host_block_ids)} blocks"
            )


@dataclass(frozen=True, kw_only=True)
class DiskReport:
    """Worker -> scheduler: disk events whose promotions all settled, and the promoted host blocks whose read failed
    (missing, unreadable or not verifying: their keys must never be hits, their disk slots are forgotten)."""

    settled_event_ids: frozenset[int] = frozenset()
    failed_promote_host_block_ids: frozenset[int] = frozenset()


@dataclass(frozen=True, kw_only=True)
class StepMetadata:
    """Scheduler -> worker, once per step.

    `load_event_to_req_ids` is the full map of every load event not yet completed, resent every step so a worker
    can name the requests of any load that completes later.
    `need_flush` asks the workers to finish every in-flight copy before the step runs (a request was preempted
    and its device blocks may be reused).
    `disk`: the step's moves to and from a disk tier below the CPU tier (None: none, or no disk tier).
    """

    load: TransferBatch | None = None
    store: TransferBatch | None = None
    load_event_to_req_ids: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    need_flush: bool = False
    disk: DiskBatch | None = None

    @property
    def is_empty(self) -> bool:
        return self.load is None and self.store is None and not self.need_flush and self.disk is None


# A step with nothing to copy and no load in flight: the manager returns this one object for all of them (frozen;
# its empty map is never written: every reader only looks events up).
IDLE_STEP = StepMetadata()


@dataclass(frozen=True, kw_only=True)
class WorkerReport:
    """Worker -> scheduler, once per step per worker; the connector sums reports over workers.

    - `completed_load_event_ids`: load events whose copies all landed on the device.
    - `completed_store_event_ids`: store events whose copies all landed on the host (counted once per worker).
    - `failed_load_event_ids`: load events with at least one failed copy: their requests must recompute.
    - `failed_store_event_ids`: store events with a failed copy: their keys must never become hits.
    """

    completed_load_event_ids: frozenset[int] = frozenset()
    completed_store_event_ids: frozenset[int] = frozenset()
    failed_load_event_ids: frozenset[int] = frozenset()
    failed_store_event_ids: frozenset[int] = frozenset()
