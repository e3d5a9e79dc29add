"""Counters the manager keeps: boundary hand-off outcomes, lookup miss attribution, CPU usage per group."""

from __future__ import annotations

import dataclasses
import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from toolkit.core.lookup.hybrid import LookupResult, MissReason


class HandoffOutcome(str, enum.Enum):
    """What became of one boundary hand-off; each value names the `BoundaryStoreStats` counter that counts it."""

    STORED = "stored"
    DROPPED_CPU_FULL = "dropped_cpu_full"
    DROPPED_REQUEST_GONE = "dropped_request_gone"
    SKIPPED_ALREADY_CACHED = "skipped_already_cached"
    SKIPPED_IN_FLIGHT = "skipped_in_flight"
    DROPPED_NULL_BLOCK = "dropped_null_block"
    DROPPED_NOT_HASHED = "dropped_not_hashed"
    SKIPPED_FINE_TIER_FULL = "skipped_fine_tier_full"  # inside a scheduler block, and the tier had no spare room
    PENDING_RETRY = "pending_retry"


@dataclass
class BoundaryStoreStats:
    """Cumulative outcomes of Mamba-align boundary hand-offs (eager mode), reset only by `reset()`.

    Invariant at every instant: `published == stored + dropped_cpu_full + dropped_request_gone +
    skipped_already_cached + skipped_in_flight + dropped_null_block + dropped_not_hashed + skipped_fine_tier_full +
    pending_retry`. `skipped_fine_tier_full`: a state only a fine-grained hit could use, not stored because the tier
    had no room that was free, empty or held by other such states (it would have evicted a block-aligned prefix).
    `pending_retry` is a gauge: hand-offs waiting (device block pinned) for CPU room; each later becomes `stored`
    or `dropped_cpu_full` (retry budget spent) and leaves the gauge.
    """

    published: int = 0
    stored: int = 0
    dropped_cpu_full: int = 0
    dropped_request_gone: int = 0
    skipped_already_cached: int = 0
    skipped_in_flight: int = 0
    dropped_null_block: int = 0
    dropped_not_hashed: int = 0
    skipped_fine_tier_full: int = 0
    pending_retry: int = 0
    num_retried_stored: int = 0

    def accounted(self) -> int:
        return (
            self.stored
            + self.dropped_cpu_full
            + self.dropped_request_gone
            + self.skipped_already_cached
            + self.skipped_in_flight
            + self.dropped_null_block
            + self.dropped_not_hashed
            + self.skipped_fine_tier_full
            + self.pending_retry
        )

    def record(self, outcome: HandoffOutcome, count: int = 1) -> None:
        """`count` newly published hand-offs ended in `outcome`."""
        self.published += count
        self._add(outcome, count)

    def reclassify_stored(self, outcome: HandoffOutcome, count: int) -> None:
        """`count` hand-offs counted `stored` were cut from their store batch before it was committed."""
        self.stored -= count
        self._add(outcome, count)

    def resolve_pending(self, outcome: HandoffOutcome) -> None:
        """A waiting hand-off left the retry queue with its final `outcome`."""
        self.pending_retry -= 1
        self._add(outcome, 1)

    def _add(self, outcome: HandoffOutcome, count: int) -> None:
        # Each outcome's value names its counter (the enum's docstring): one attribute read and write, not a match
        # over nine members (this runs for every outcome of every step's hand-offs).
        if type(outcome) is not HandoffOutcome:
            raise ValueError(f"outcome: not a HandoffOutcome: {outcome!r}")
        name = outcome.value
        setattr(self, name, getattr(self, name) + count)

    def copy(self) -> "BoundaryStoreStats":
        return dataclasses.replace(self)

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclass
class MissStats:
    """Lookup outcomes: how many lookups and tokens missed for each reason, overall and per limiting group."""

    num_lookups: int = 0
    num_hit_lookups: int = 0
    num_hit_tokens: int = 0
    num_missed_tokens: int = 0
    lookups_by_reason: Counter[str] = field(default_factory=Counter)
    lookups_by_group_reason: Counter[tuple[int, str]] = field(default_factory=Counter)

    def record(self, result: LookupResult, *, num_wanted_tokens: int) -> None:
        self.num_lookups += 1
        self.num_hit_tokens += result.hit_tokens
        self.num_missed_tokens += max(0, num_wanted_tokens - result.hit_tokens)
        if result.hit_tokens:
            self.num_hit_lookups += 1
        reason = result.miss_reason.value
        self.lookups_by_reason[reason] += 1
        if result.limiting_group_id is not None:
            self.lookups_by_group_reason[(result.limiting_group_id, reason)] += 1

    def by_group(self) -> dict[int, dict[str, int]]:
        out: dict[int, dict[str, int]] = {}
        for (group_id, reason), count in self.lookups_by_group_reason.items():
            out.setdefault(group_id, {})[reason] = count
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "num_lookups": self.num_lookups,
            "num_hit_lookups": self.num_hit_lookups,
            "num_hit_tokens": self.num_hit_tokens,
            "num_missed_tokens": self.num_missed_tokens,
            "by_reason": dict(self.lookups_by_reason),
            "by_group": {str(g): reasons for g, reasons in self.by_group().items()},
        }


@dataclass(frozen=True, kw_only=True)
class GroupUsage:
    """CPU pool usage of one group: blocks holding its data (cached or being written) and their bytes per rank."""

    group_id: int
    kind: str
    num_used_blocks: int
    num_pinned_blocks: int
    used_bytes: int


MISS_REASONS = tuple(r.value for r in MissReason)


@dataclass
class HintStats:
    """What the orchestrator's KV hints did (`toolkit.core.hints`): cumulative counters and a few gauges.

    `received` actions = `accepted` + sum(`rejected_by_reason`). `not_applied`: valid actions for a tier whose
    eviction is not hint-aware (an eviction policy without `+hints`); `no_lower_tier` / `no_upper_tier`: demote and
    prefetch actions accepted and counted, with nothing to do (the CPU tier has no tier below it, and a prefetch's
    blocks are loaded by the next turn's lookup anyway). `hits_on_retained_blocks`: lookup hits on blocks held
    because a hint retained them (hits a hint saved, at most: an unhinted tier may have kept some of them too).
    """

    received: int = 0
    accepted: int = 0
    rejected_by_reason: Counter[str] = field(default_factory=Counter)
    accepted_by_kind: Counter[str] = field(default_factory=Counter)
    not_applied: int = 0
    no_lower_tier: int = 0
    no_upper_tier: int = 0
    sessions_expired: int = 0
    sessions_released: int = 0
    hits_on_retained_blocks: int = 0
    hits_on_released_blocks: int = 0

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = dataclasses.asdict(self)
        out["rejected_by_reason"] = dict(self.rejected_by_reason)
        out["accepted_by_kind"] = dict(self.accepted_by_kind)
        return out
