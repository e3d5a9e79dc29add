"""Hint-aware eviction: any policy (`lru`, `slru`) with two segments the orchestrator's hints fill.

Victim order: *released* blocks (a session that ended: nobody said it comes back), oldest freed first; then the base
policy's whole order (unhinted traffic, as without hints); then *retained* blocks (a session that said it comes
back), the one whose retention ends *last* first. A retention's end is the orchestrator's word on when the session is
needed again (an oracle's next turn, a TTL's guess): evicting the latest-needed first is Belady's rule with the hints
as its future. With equal TTLs it evicts the newest retention first, which is what a round of more sessions than fit
needs (recency evicts exactly the session due next). Retained blocks are bounded by a budget (`budget_fraction` of
the tier): past it the retained block whose retention ends last joins the base policy's tail and competes like any
other, so hints can never take more than that share of the tier from unhinted traffic.

Which segment a freed block joins, and when its retention ends, is the *classifier's* answer
(`toolkit.core.hints.book.HintBook`: from the block's keys); the book moves free blocks when a retention starts,
is renewed, expires or is released (`reclassify`). With no classifier (no hint arrived yet) every call goes to the
base policy, in its order.
"""

from __future__ import annotations

import heapq
from array import array
from typing import Iterator, Protocol

from toolkit.core.pool.eviction import EvictionPolicy, make_policy
from toolkit.core.pool.free_queue import LinkedQueue, link_array

# A block's hint class (the classifier's answer) and, for a free block, where it waits.
PLAIN, RETAINED, RELEASED = 0, 1, 2
DEFAULT_BUDGET_FRACTION = 0.9  # the share of the tier hints may hold: unhinted traffic keeps a tenth


class BlockClassifier(Protocol):
    def classify(self, block_id: int) -> tuple[int, float]:
        """(PLAIN, RETAINED or RELEASED; for RETAINED, when the retention ends: inf for a pin)."""
        ...

    def on_hit(self, block_id: int, block_class: int) -> None: ...


class _RetainedHeap:
    """Free retained blocks, the latest-ending retention first (ties: the latest pushed, a prefix's deepest block).
    Entries are dropped lazily: a block's live entry is the one with its current sequence number."""

    __slots__ = ("_heap", "_seq", "_next_seq", "_len")

    def __init__(self, num_blocks: int) -> None:
        self._heap: list[tuple[float, int, int]] = []  # (-ends_at_s, -seq, block_id)
        self._seq = array("q", [0]) * num_blocks  # 0: not in the segment
        self._next_seq = 1
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __contains__(self, block_id: int) -> bool:
        return self._seq[block_id] != 0

    def push(self, block_id: int, ends_at_s: float) -> None:
        if self._seq[block_id] == 0:
            self._len += 1
        seq = self._next_seq
        self._next_seq += 1
        self._seq[block_id] = seq
        heapq.heappush(self._heap, (-ends_at_s, -seq, block_id))
        if len(self._heap) > 2 * self._len + 64:  # renewals leave stale entries: compact now and then
            self._heap = [e for e in self._heap if self._seq[e[2]] == -e[1]]
            heapq.heapify(self._heap)

    def remove(self, block_id: int) -> None:
        assert self._seq[block_id] != 0, f"block {block_id} is not retained"
        self._seq[block_id] = 0
        self._len -= 1

    def pop(self) -> int:
        heap, seqs = self._heap, self._seq
        while True:
            _, neg_seq, block_id = heapq.heappop(heap)
            if seqs[block_id] == -neg_seq:
                seqs[block_id] = 0
                self._len -= 1
                return block_id

    def in_order(self) -> list[int]:
        """Victim order (O(n log n): snapshots, tests and the lazy walk only)."""
        return [e[2] for e in sorted(self._heap) if self._seq[e[2]] == -e[1]]


class HintedPolicy(EvictionPolicy):
    """`base` plus the released and retained segments (see the module docstring)."""

    def __init__(self, base: EvictionPolicy, *, budget_fraction: float | None = None) -> None:
        super().__init__(base.num_blocks)
        if budget_fraction is None:
            budget_fraction = DEFAULT_BUDGET_FRACTION  # read now: `kvtk bench hints --budget` sets it per run
        if not 0.0 < budget_fraction <= 1.0:
            raise ValueError(f"budget_fraction: must be in (0, 1], got {budget_fraction}")
        self.base = base
        self.name = f"{base.name}+hints"
        self._released = LinkedQueue(link_array(base.num_blocks, 2), link_array(base.num_blocks, 2))
        self._retained = _RetainedHeap(base.num_blocks)
        self._where = bytearray(base.num_blocks)  # a free block's segment: PLAIN (in base), RETAINED or RELEASED
        self.budget_blocks = max(1, int((base.num_blocks - 1) * budget_fraction))
        self.classifier: BlockClassifier | None = None
        self.num_budget_demoted = 0  # retained blocks that went to the base policy: the budget was full

    # ----- the contract --------------------------------------------------------------------------------------

    def on_free(self, block_id: int, *, cached: bool, low: bool = False) -> None:
        classifier = self.classifier
        if not cached or classifier is None:
            self.base.on_free(block_id, cached=cached, low=low)
            return
        cls, ends_at_s = classifier.classify(block_id)
        if cls == PLAIN:
            self.base.on_free(block_id, cached=cached, low=low)
        elif cls == RELEASED:
            self._where[block_id] = RELEASED
            self._released.append(block_id)
        else:
            self._where[block_id] = RETAINED
            self._retained.push(block_id, ends_at_s)
            if len(self._retained) > self.budget_blocks:
                demoted = self._retained.pop()
                self._where[demoted] = PLAIN
                self.base.on_free(demoted, cached=True)
                self.num_budget_demoted += 1

    def on_pin(self, block_id: int) -> None:
        where = self._where[block_id]
        if where == PLAIN:
            self.base.on_pin(block_id)
            return
        (self._retained if where == RETAINED else self._released).remove(block_id)
        self._where[block_id] = PLAIN

    def pop_victim(self) -> int:
        return self.pop_victims(1)[0]

    def pop_victims(self, count: int) -> list[int]:
        victims: list[int] = []
        released = self._released
        if len(released):
            victims = released.popleft_many(min(count, len(released)))
            for block_id in victims:
                self._where[block_id] = PLAIN
        base = self.base
        unproven = min(count - len(victims), len(base) - base.num_proven_free())
        if unproven:
            victims += base.pop_victims(unproven)
        while len(victims) < count and len(self._retained):
            block_id = self._retained.pop()
            self._where[block_id] = PLAIN
            victims.append(block_id)
        if len(victims) < count:
            victims += base.pop_victims(count - len(victims))  # blocks that showed reuse go last
        return victims

    def on_hit(self, block_id: int) -> None:
        classifier = self.classifier
        if classifier is not None:
            classifier.on_hit(block_id, classifier.classify(block_id)[0])
        self.base.on_hit(block_id)

    @property
    def tracks_hits(self) -> bool:
        return True

    def on_evicted(self, block_id: int) -> None:
        self.base.on_evicted(block_id)

    def num_cheap_free(self) -> int:
        return self.base.num_cheap_free() + len(self._released)

    def __len__(self) -> int:
        return len(self.base) + len(self._retained) + len(self._released)

    def __contains__(self, block_id: int) -> bool:
        return block_id in self.base or (0 <= block_id < self.num_blocks and self._where[block_id] != PLAIN)

    def iter_free(self, after: int | None = None) -> Iterator[int]:
        base = self.base
        where = PLAIN if after is None else self._where[after]
        if after is not None and where == PLAIN and base.is_proven(after):
            yield from base.iter_free(after)  # the proven blocks are the last of all
            return
        if after is None or where == RELEASED:
            yield from self._released.iter_after(after)
        proven = None
        if where != RETAINED:
            for block_id in base.iter_free(after if where == PLAIN else None):
                if base.is_proven(block_id):
                    proven = block_id
                    break
                yield block_id
        retained = self._retained.in_order()
        yield from retained[retained.index(after) + 1 :] if after is not None and where == RETAINED else retained
        if proven is not None:
            yield proven
            yield from base.iter_free(proven)
        elif where == RETAINED and base.num_proven_free():
            first = next(b for b in base.iter_free(None) if base.is_proven(b))
            yield first
            yield from base.iter_free(first)

    # ----- hints ---------------------------------------------------------------------------------------------

    def reclassify(self, block_id: int, *, low: bool = False) -> None:
        """A free block's class or retention end may have changed (a retention started, was renewed, ended or was
        released): move it (a plain block that stays plain keeps its place in the base policy's order)."""
        if block_id not in self or self.classifier is None:
            return  # pinned (it is classified when freed) or never used
        if self._where[block_id] == PLAIN and self.classifier.classify(block_id)[0] == PLAIN:
            return
        self.on_pin(block_id)
        self.on_free(block_id, cached=True, low=low)

    def retained_block_ids(self) -> list[int]:
        """The free retained blocks, next victim first (O(n log n): reports and tests)."""
        return self._retained.in_order()

    def num_retained_free(self) -> int:
        return len(self._retained)

    def num_released_free(self) -> int:
        return len(self._released)


HINTS_SUFFIX = "+hints"


def make_pool_policy(name: str, num_blocks: int) -> EvictionPolicy:
    """`make_policy`, and `NAME+hints` for that policy with the hint segments (`lru+hints`, `slru+hints`)."""
    if name.endswith(HINTS_SUFFIX):
        return HintedPolicy(make_policy(name[: -len(HINTS_SUFFIX)], num_blocks))
    return make_policy(name, num_blocks)
