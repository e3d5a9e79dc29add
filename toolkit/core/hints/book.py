"""`HintBook`: the sessions the orchestrator's hints retain or released, as cache keys, applied to the CPU tier.

A retained session holds the keys of its latest turn's prefix (every group's key at every hash boundary, or only
the last `boundaries` of them): attention blocks and, for hybrid models, the Mamba states stored at those boundaries,
which is where the next turn's hit ends. The book answers the hint-aware policy's question "which segment does this
free block join" from the block's keys (`classify`) and moves free blocks when a retention starts, expires or is
released; blocks stored later are classified as they are freed after their store, so a turn's own blocks are
retained once they reach the tier. Time is the orchestrator's (`issued_at_s`, else the caller's `now_s`), kept
monotonic (a clock that went back continues from the book's time): a TTL expires when a later hint (or `advance`)
says that time has come.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Hashable, Iterable, Sequence

from toolkit.core.hints.schema import HintAction, HintKind, ParsedHints
from toolkit.core.pool.blocks import CpuBlockPool
from toolkit.core.pool.hinted import PLAIN, RELEASED, RETAINED, HintedPolicy
from toolkit.core.pool.keys import BlockKey
from toolkit.core.stats import HintStats

MAX_SESSIONS = 1 << 16  # more live sessions than this: the oldest-expiring are dropped first (bounded memory)
MAX_KEYS_PER_TURN = 1 << 18  # a turn's retained keys (groups x hash boundaries); past it, the prefix's head
MAX_RELEASED_KEYS = 1 << 18  # released keys remembered (oldest forgotten: their blocks then age as unhinted)


@dataclass(slots=True)
class _Session:
    keys: dict[BlockKey, None] = field(default_factory=dict)  # in prefix order: iteration never follows hashes
    expires_at_s: float = math.inf
    generation: int = 0


@dataclass(slots=True)
class _Turn:
    session_id: str
    kind: HintKind
    boundaries: int | None


@dataclass
class HintBook:
    pool: CpuBlockPool
    num_groups: int
    stats: HintStats = field(default_factory=HintStats)

    def __post_init__(self) -> None:
        policy = self.pool.policy
        self.policy = policy if isinstance(policy, HintedPolicy) else None
        self.now_s = 0.0
        # Added to `issued_at_s`: an orchestrator clock that went back (a replay's next phase sends its sessions
        # from time 0 again) continues from the book's time instead of stretching every retention until it
        # catches up.
        self._offset_s = 0.0
        self._retain_count: dict[BlockKey, int] = {}
        self._ends_at_s: dict[BlockKey, float] = {}  # the latest end of the retentions holding the key
        self._released: dict[BlockKey, None] = {}
        self._sessions: dict[str, _Session] = {}
        self._expiry: list[tuple[float, int, str]] = []
        self._turns: dict[str, _Turn] = {}
        self._generation = 0

    # ----- arrivals and departures --------------------------------------------------------------------------

    def on_request(
        self, request_id: str, block_hashes: Sequence[Hashable], hints: ParsedHints, *, now_s: float
    ) -> None:
        """A new request's parsed hints (`schema.parse_envelope`); `now_s`: the caller's clock, for actions that
        carry no `issued_at_s`. Never raises on what the hints say."""
        stats = self.stats
        stats.received += hints.num_received
        stats.rejected_by_reason.update(hints.rejected)
        stats.accepted += len(hints.actions)
        for action in hints.actions:
            stats.accepted_by_kind[action.kind.value] += 1
        if not hints.actions:
            return
        times = [a.issued_at_s for a in hints.actions if a.issued_at_s is not None]
        if times:
            now_s = max(times) + self._offset_s
            if now_s < self.now_s:
                self._offset_s += self.now_s - now_s
                now_s = self.now_s
        self.advance(now_s)
        if self.policy is None:
            stats.not_applied += len(hints.actions)
            return
        self.policy.classifier = self  # from the first hint on; before it, the base policy alone decides
        for action in hints.actions:
            self._apply(request_id, block_hashes, action)

    def _apply(self, request_id: str, block_hashes: Sequence[Hashable], action: HintAction) -> None:
        kind = action.kind
        if kind is HintKind.DEMOTE:
            self.stats.no_lower_tier += 1
        elif kind is HintKind.PREFETCH:
            self.stats.no_upper_tier += 1
        elif kind is HintKind.RELEASE:
            self._turns[request_id] = _Turn(action.session_id, kind, None)
            self._release(action.session_id, {})
        else:
            ttl_s = action.ttl_s if kind is HintKind.RETAIN and action.ttl_s is not None else math.inf
            self._turns[request_id] = _Turn(action.session_id, kind, action.boundaries)
            self._retain(action.session_id, self._keys(block_hashes, action.boundaries), self.now_s + ttl_s)

    def on_finished(self, request_id: str, block_hashes: Sequence[Hashable]) -> None:
        """The request left: its session now covers its whole sequence (prompt and output), as the next turn will
        extend it; a releasing turn's blocks are released too."""
        turn = self._turns.pop(request_id, None)
        if turn is None or self.policy is None:
            return
        keys = self._keys(block_hashes, turn.boundaries)
        if turn.kind is HintKind.RELEASE:
            self._release(turn.session_id, keys)
            return
        session = self._sessions.get(turn.session_id)
        if session is not None:  # not expired or released meanwhile
            self._set_keys(session, keys)

    def advance(self, now_s: float) -> None:
        """Move the clock to `now_s` (never back) and end the retentions whose time has come."""
        if now_s <= self.now_s:
            return
        self.now_s = now_s
        expiry = self._expiry
        while expiry and expiry[0][0] <= now_s:
            _, generation, session_id = heapq.heappop(expiry)
            session = self._sessions.get(session_id)
            if session is not None and session.generation == generation:
                del self._sessions[session_id]
                self._set_keys(session, {})
                self.stats.sessions_expired += 1

    # ----- the policy's questions ---------------------------------------------------------------------------

    def classify(self, block_id: int) -> tuple[int, float]:
        """The policy's question (`hinted.BlockClassifier`): the block's class and when its retention ends."""
        keys = self.pool.keys_of(block_id)
        ends = self._ends_at_s
        ends_at = [ends[key] for key in keys if key in ends]
        if ends_at:
            return RETAINED, max(ends_at)
        released = self._released
        if released and any(key in released for key in keys):
            return RELEASED, 0.0
        return PLAIN, 0.0

    def on_hit(self, block_id: int, block_class: int) -> None:
        if block_class == RETAINED:
            self.stats.hits_on_retained_blocks += 1
        elif block_class == RELEASED:
            # Someone else still uses it: it ages as unhinted from now on.
            self.stats.hits_on_released_blocks += 1
            for key in self.pool.keys_of(block_id):
                self._released.pop(key, None)

    # ----- gauges --------------------------------------------------------------------------------------------

    def gauges(self) -> dict[str, int]:
        policy = self.policy
        return {
            "sessions_retained": len(self._sessions),
            "retained_keys": len(self._retain_count),
            "released_keys": len(self._released),
            "retained_free_blocks": policy.num_retained_free() if policy is not None else 0,
            "released_free_blocks": policy.num_released_free() if policy is not None else 0,
            "budget_blocks": policy.budget_blocks if policy is not None else 0,
            "budget_demoted_blocks": policy.num_budget_demoted if policy is not None else 0,
        }

    # ----- keys ----------------------------------------------------------------------------------------------

    def _keys(self, block_hashes: Sequence[Hashable], boundaries: int | None) -> dict[BlockKey, None]:
        hashes = block_hashes[-boundaries:] if boundaries else block_hashes
        per_group = max(1, MAX_KEYS_PER_TURN // max(1, self.num_groups))
        if len(hashes) > per_group:
            hashes = hashes[:per_group]  # the prefix's head: what every later turn needs first
        # A dict, not a set: moves happen in this order, and a set's order follows the hashes (PYTHONHASHSEED).
        return {BlockKey(g, h): None for h in hashes for g in range(self.num_groups)}

    def _retain(self, session_id: str, keys: dict[BlockKey, None], expires_at_s: float) -> None:
        session = self._sessions.get(session_id)
        if session is None:
            if len(self._sessions) >= MAX_SESSIONS:
                self._drop_soonest_expiring()
            session = self._sessions[session_id] = _Session()
        self._generation += 1
        session.generation, session.expires_at_s = self._generation, expires_at_s
        if math.isfinite(expires_at_s):
            heapq.heappush(self._expiry, (expires_at_s, self._generation, session_id))
        self._set_keys(session, keys)

    def _drop_soonest_expiring(self) -> None:
        session_id = min(self._sessions, key=lambda s: self._sessions[s].expires_at_s)
        self._set_keys(self._sessions.pop(session_id), {})

    def _release(self, session_id: str, extra: dict[BlockKey, None]) -> None:
        session = self._sessions.pop(session_id, None)
        keys = extra
        if session is not None:
            keys = session.keys | extra
            self._set_keys(session, {})
            self.stats.sessions_released += 1
        released = self._released
        for key in keys:
            if key not in self._retain_count:
                released[key] = None
        while len(released) > MAX_RELEASED_KEYS:
            del released[next(iter(released))]
        self._reclassify(keys)

    def _set_keys(self, session: _Session, keys: dict[BlockKey, None]) -> None:
        """Replace a session's retained keys (the new turn's first, then the old turn's go: no churn between)."""
        old, counts, ends, released = session.keys, self._retain_count, self._ends_at_s, self._released
        added = [key for key in keys if key not in old]
        removed = [key for key in old if key not in keys]
        for key in added:
            counts[key] = counts.get(key, 0) + 1
            released.pop(key, None)
        for key in removed:
            left = counts[key] - 1
            if left:
                counts[key] = left
            else:
                del counts[key], ends[key]
        renewed = []  # kept keys whose retention now ends later: their blocks move in the retained order
        end_s = session.expires_at_s
        for key in keys:
            if ends.get(key, -1.0) < end_s:
                if key not in added:
                    renewed.append(key)
                ends[key] = end_s
        session.keys = keys
        self._reclassify(added + removed + renewed)

    def _reclassify(self, keys: Iterable[BlockKey]) -> None:
        policy, pool = self.policy, self.pool
        if policy is None:
            return
        for key in keys:
            for block_id in pool.holders(key):
                policy.reclassify(block_id, low=pool.is_low(block_id))
