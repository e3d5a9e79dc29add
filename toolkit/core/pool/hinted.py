"""Hint-aware eviction: any policy (`lru`, `slru`) with two segments the orchestrator's hints fill.

Victim order: *released* blocks (a session that ended: nobody said it comes back), then the base policy's whole
order (unhinted traffic, as without hints), then *retained* blocks (a session that said it comes back), oldest
freed first. Retained blocks are bounded by a budget (`budget_fraction` of the tier): past it the longest-waiting
retained block joins the base policy's tail and competes like any other, so hints can never take more than that
share of the tier from unhinted traffic.

Which segment a freed block joins is the *classifier's* answer (`toolkit.core.hints.book.HintBook`: from the
block's keys); the book moves free blocks between segments when a retention starts, ends or is released
(`reclassify`). With no classifier (no hint arrived yet) every call goes to the base policy, in its order.
"""

from __future__ import annotations

from typing import Iterator, Protocol

from toolkit.core.pool.eviction import EvictionPolicy, make_policy
from toolkit.core.pool.free_queue import LinkedQueue, link_array

# A block's hint class (the classifier's answer) and, for a free block, where it waits.
PLAIN, RETAINED, RELEASED = 0, 1, 2
DEFAULT_BUDGET_FRACTION = 0.5


class BlockClassifier(Protocol):
    def block_class(self, block_id: int) -> int: ...

    def on_hit(self, block_id: int, block_class: int) -> None: ...


class HintedPolicy(EvictionPolicy):
    """`base` plus the released and retained segments (see the module docstring)."""

    def __init__(self, base: EvictionPolicy, *, budget_fraction: float = DEFAULT_BUDGET_FRACTION) -> None:
        super().__init__(base.num_blocks)
        if not 0.0 < budget_fraction <= 1.0:
            raise ValueError(f"budget_fraction: must be in (0, 1], got {budget_fraction}")
        self.base = base
        self.name = f"{base.name}+hints"
        nxt, prev = link_array(base.num_blocks, 4), link_array(base.num_blocks, 4)
        self._retained = LinkedQueue(nxt, prev, -1, -2)
        self._released = LinkedQueue(nxt, prev, -3, -4)
        self._where = bytearray(base.num_blocks)  # a free block's segment: PLAIN (in base), RETAINED or RELEASED
        self.budget_blocks = max(1, int((base.num_blocks - 1) * budget_fraction))
        self.classifier: BlockClassifier | None = None
        self.num_budget_demoted = 0  # retained blocks that went to the base policy: the budget was full

    # ----- the contract --------------------------------------------------------------------------------------

    def on_free(self, block_id: int, *, cached: bool, low: bool = False) -> None:
        classifier = self.classifier
        cls = classifier.block_class(block_id) if cached and classifier is not None else PLAIN
        if cls == PLAIN:
            self.base.on_free(block_id, cached=cached, low=low)
            return
        self._where[block_id] = cls
        if cls == RELEASED:
            self._released.append(block_id)
            return
        self._retained.append(block_id)
        if len(self._retained) > self.budget_blocks:
            oldest = self._retained.popleft()
            self._where[oldest] = PLAIN
            self.base.on_free(oldest, cached=True)
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
        from_base = min(count - len(victims), len(self.base))
        if from_base:
            victims += self.base.pop_victims(from_base)
        left = count - len(victims)
        if left:
            taken = self._retained.popleft_many(left)
            for block_id in taken:
                self._where[block_id] = PLAIN
            victims += taken
        return victims

    def on_hit(self, block_id: int) -> None:
        classifier = self.classifier
        if classifier is not None:
            classifier.on_hit(block_id, classifier.block_class(block_id))
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
        where = PLAIN if after is None else self._where[after]
        if after is None or where == RELEASED:
            yield from self._released.iter_after(after)
            yield from self.base.iter_free(None)
        elif where == PLAIN:
            yield from self.base.iter_free(after)
        yield from self._retained.iter_after(after if where == RETAINED else None)

    # ----- hints ---------------------------------------------------------------------------------------------

    def reclassify(self, block_id: int, *, low: bool = False) -> None:
        """A free block's class may have changed (a retention started, ended or was released): move it."""
        if block_id not in self or self.classifier is None:
            return  # pinned (it is classified when freed) or never used
        if self.classifier.block_class(block_id) == self._where[block_id]:
            return  # unchanged: a plain block keeps its place in the base policy's order
        self.on_pin(block_id)
        self.on_free(block_id, cached=True, low=low)

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
