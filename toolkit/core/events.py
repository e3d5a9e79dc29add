"""The manager's one event stream: what it decided and what completed, as typed records.

Every part of the manager emits through `EventLog.emit` (`toolkit.core.event_log`); two kinds of reader take them:
the visualizer drains a bounded buffer (`OffloadManager.take_step_events`, `to_json` for the widget), and observers
with `wants_events` receive each one as it happens (`OffloadObserver.on_event`: the soak counts failures and
evictions this way instead of patching the objects that cause them).

The kinds, by stage:
- lookup: `LookupDone`;
- loads: `LoadDeclined` (planned but refused), `LoadSent` (joined a load event), `LoadDone`, `LoadFailed`;
- stores: `StoreSent` (a store event committed), `StoreDone` (completed, failed or abandoned: see its flags);
- hand-offs: `HandoffTaken` (with the outcome: stored, pending retry, or the counter of why it was dropped);
- the pool: `BlockEvicted` (a cached block reused by allocation), `KeysDropped` (keys removed after a failed load);
- `TierReset`.

`BlockMeta` lives here too: the KV-event payload of a stored block, shared by the store stage and the event log.
Nothing here imports a stage above the pool and the lookup result, so every stage can emit.

Plain slotted dataclasses, not frozen ones: a frozen dataclass's generated `__init__` sets each field through
`object.__setattr__` (about 2x the construction cost), and a pool under pressure emits thousands of evictions a
step where events are recorded (`kvtk bench scheduler --core-only`, 1,024-block pool: +22-35% per step frozen).
Nobody mutates an event: readers get them after they were emitted.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

from toolkit.core.pool.keys import BlockKey


@dataclass(frozen=True, kw_only=True)
class BlockMeta:
    """KV-event payload of one positional block (`token_ids` None when the request has no token ids)."""

    num_tokens: int
    token_ids: tuple[int, ...] | None
    parent_key: BlockKey | None


@dataclass(slots=True, kw_only=True)
class ManagerEvent:
    """One event; `kind` is its name in the visualizer's JSON ("type")."""

    kind: ClassVar[str] = ""

    def to_json(self) -> dict[str, Any]:
        """JSON-ready: {"type": kind, field: value, ...}, tuples as lists."""
        out: dict[str, Any] = {"type": self.kind}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


@dataclass(slots=True, kw_only=True)
class LookupDone(ManagerEvent):
    """A lookup's outcome: where its hit ended, why, and the group that stopped it."""

    kind: ClassVar[str] = "lookup"
    request_id: str
    local_tokens: int
    hit_tokens: int
    miss_reason: str
    limiting_group_id: int | None


@dataclass(slots=True, kw_only=True)
class LoadDeclined(ManagerEvent):
    """A planned load refused (the accepted boundary could not be served in every group): recompute these blocks."""

    kind: ClassVar[str] = "load_declined"
    request_id: str
    reason: str
    failed_device_block_ids: tuple[int, ...]


@dataclass(slots=True, kw_only=True)
class LoadSent(ManagerEvent):
    """Unsent loads joined one load event."""

    kind: ClassVar[str] = "load"
    event_id: int
    request_ids: tuple[str, ...]
    device_block_ids: tuple[int, ...]
    cpu_block_ids: tuple[int, ...]


@dataclass(slots=True, kw_only=True)
class LoadDone(ManagerEvent):
    kind: ClassVar[str] = "load_complete"
    request_id: str


@dataclass(slots=True, kw_only=True)
class LoadFailed(ManagerEvent):
    """A worker failed the load: the engine recomputes these device blocks, the CPU copies' keys are dropped."""

    kind: ClassVar[str] = "load_failed"
    request_id: str
    failed_device_block_ids: tuple[int, ...]


@dataclass(slots=True, kw_only=True)
class StoreSent(ManagerEvent):
    """A store event committed: device blocks to copy into these CPU blocks (parallel tuples)."""

    kind: ClassVar[str] = "store"
    event_id: int
    device_block_ids: tuple[int, ...]
    cpu_block_ids: tuple[int, ...]
    group_ids: tuple[int, ...]
    sources: tuple[str, ...]
    request_ids: tuple[str, ...]


@dataclass(slots=True, kw_only=True)
class StoreDone(ManagerEvent):
    """A store event ended: `failed` (a worker failed it: nothing cached) or `abandoned` (a reset came first)."""

    kind: ClassVar[str] = "store_complete"
    event_id: int
    num_blocks: int
    num_cached_blocks: int
    abandoned: bool
    failed: bool


@dataclass(slots=True, kw_only=True)
class HandoffTaken(ManagerEvent):
    """A hand-off (an exact Mamba/sliding-window state at a boundary) and what became of it."""

    kind: ClassVar[str] = "handoff"
    request_id: str
    group_id: int
    device_block_id: int
    boundary_tokens: int
    outcome: str
    retried: bool


@dataclass(slots=True, kw_only=True)
class CpuBlockKeysGone(ManagerEvent):
    """A CPU block lost its `num_keys` keys: no longer hits (the two kinds below say why)."""

    cpu_block_id: int
    group_id: int
    num_keys: int


@dataclass(slots=True, kw_only=True)
class BlockEvicted(CpuBlockKeysGone):
    """Allocation reused a cached CPU block."""

    kind: ClassVar[str] = "evict"


@dataclass(slots=True, kw_only=True)
class KeysDropped(CpuBlockKeysGone):
    """The keys were removed on request (the block's data is suspect after a failed load)."""

    kind: ClassVar[str] = "drop_keys"


@dataclass(slots=True, kw_only=True)
class TierReset(ManagerEvent):
    """The CPU tier was reset; `abandoned`: copies in flight were abandoned (the pool clears when they end)."""

    kind: ClassVar[str] = "reset"
    abandoned: bool
