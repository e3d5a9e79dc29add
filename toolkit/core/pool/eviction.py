"""Eviction policies for the CPU block pool: which free block is reused next.

The pool owns ref counts and keys; a policy only orders the *free* (unpinned) blocks. `lru` reproduces vLLM's
`BlockPool` free queue exactly (differential tests rely on it); `slru` is a scan-resistant segmented LRU.

Both take a *low-priority* hint at `on_free`: blocks stored only for fine-grained hits (prompt-tail blocks, Mamba
states at boundaries inside a scheduler block) that no lookup has hit yet. They are reused before every other
cached block, so they only ever occupy room the block-aligned prefixes do not need; a hit lifts the hint (the pool
stops passing it) and the block competes like any other from then on. With no low-priority block freed, both
policies order blocks exactly as before.
"""

from __future__ import annotations

from array import array
from typing import Iterator, Sequence

from toolkit.core.pool.free_queue import FreshRange, LinkedQueue, link_array
from toolkit.errors import BadInput


class EvictionPolicy:
    """Orders the pool's free blocks. The contract, for every implementation:

    - At start-up blocks `1 .. num_blocks - 1` are free, empty and ordered by id (block 0 is the null block).
    - `on_free(block_id, cached=..., low=...)`: the block's ref count dropped to 0; it becomes a candidate. `cached`
      says whether it still holds keys (an empty block can be reused at no loss); `low` that it is a cached block
      to reuse before any other cached one (in the order they were freed).
    - `on_pin(block_id)`: a free block got a ref again (touch); it is no longer a candidate.
    - `pop_victim()`: remove and return the next block to reuse; the pool then drops its keys.
    - `on_hit(block_id)`: a lookup hit the block (a reuse signal; LRU ignores it).
    - `on_evicted(block_id)`: the block lost its keys; forget any history about it.
    - `iter_free(after)`: the free blocks in eviction order, starting after free block `after` (None: the head).
      Read-only; do not change the policy while iterating.
    Every method except `eviction_order`/`iter_free` is O(1).
    """

    name = "base"

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks

    def on_free(self, block_id: int, *, cached: bool, low: bool = False) -> None:
        raise NotImplementedError

    def on_pin(self, block_id: int) -> None:
        raise NotImplementedError

    def pop_victim(self) -> int:
        raise NotImplementedError

    def pop_victims(self, count: int) -> list[int]:
        """`pop_victim()` `count` times, in order (one call per store batch; policies may inline it)."""
        pop = self.pop_victim
        return [pop() for _ in range(count)]

    def on_hit(self, block_id: int) -> None:
        pass

    def num_cheap_free(self) -> int:
        """Free blocks whose reuse costs no block-aligned prefix: never used, empty, or low-priority."""
        raise NotImplementedError

    @property
    def tracks_hits(self) -> bool:
        """Whether `on_hit` does anything (callers skip the per-block call when it does not)."""
        return type(self).on_hit is not EvictionPolicy.on_hit

    def on_evicted(self, block_id: int) -> None:
        pass

    def requeue(self, block_ids: Sequence[int]) -> None:
        """Free, cached blocks that were pinned and freed again at once, moved to the tail: `on_pin` then
        `on_free(cached=True)` per block, in order (the local-prefix refresh; a policy may do it in one pass)."""
        on_pin, on_free = self.on_pin, self.on_free
        for block_id in block_ids:
            on_pin(block_id)
            on_free(block_id, cached=True)

    def num_proven_free(self) -> int:
        """Free blocks that showed reuse (SLRU's protected segment): always the last in eviction order. The
        hint-aware policy keeps them over hinted blocks (`hinted.py`); LRU proves nothing."""
        return 0

    def is_proven(self, block_id: int) -> bool:
        """Whether a free block is one of `num_proven_free`'s."""
        return False

    def __len__(self) -> int:
        raise NotImplementedError

    def __contains__(self, block_id: int) -> bool:
        raise NotImplementedError

    def iter_free(self, after: int | None = None) -> Iterator[int]:
        raise NotImplementedError

    def eviction_order(self) -> list[int]:
        """Every free block, next victim first (O(n): snapshots and tests only)."""
        return list(self.iter_free())


class LruPolicy(EvictionPolicy):
    """vLLM's free queue: free appends to the tail, touch removes, allocation takes the head (low-priority blocks,
    in a queue of their own, go before the head)."""

    name = "lru"

    def __init__(self, num_blocks: int) -> None:
        super().__init__(num_blocks)
        self._fresh = FreshRange(1, num_blocks)
        # Two queues over one pair of link arrays (a free block is in one of them), each with its own sentinels.
        nxt, prev = link_array(num_blocks, 4), link_array(num_blocks, 4)
        self._queue = LinkedQueue(nxt, prev, -1, -2)
        self._low = LinkedQueue(nxt, prev, -3, -4)
        self._is_low = bytearray(num_blocks)

    def on_free(self, block_id: int, *, cached: bool, low: bool = False) -> None:
        if low:
            self._is_low[block_id] = 1
            self._low.append(block_id)
        else:
            self._queue.append(block_id)

    def on_pin(self, block_id: int) -> None:
        fresh = self._fresh
        assert not fresh.next_id <= block_id < fresh.end, (
            f"block {block_id} was never allocated, so it cannot be pinned"
        )
        if self._is_low[block_id]:
            self._is_low[block_id] = 0
            self._low.remove(block_id)
        else:
            self._queue.remove(block_id)  # asserts the block is free (pinned blocks are in no queue)

    def requeue(self, block_ids: Sequence[int]) -> None:
        is_low = self._is_low
        if len(self._low) and any(is_low[block_id] for block_id in block_ids):
            super().requeue(block_ids)  # rare: a low-priority block lifts its hint and joins the main queue
        else:
            self._queue.move_to_tail(block_ids)

    def pop_victim(self) -> int:
        return self.pop_victims(1)[0]

    def pop_victims(self, count: int) -> list[int]:
        # Fresh blocks first (in id order), then low-priority blocks, then the queue head: vLLM's free-queue order
        # whenever no low-priority block is free.
        fresh = self._fresh
        take_fresh = min(count, fresh.end - fresh.next_id)
        victims = list(range(fresh.next_id, fresh.next_id + take_fresh))
        fresh.next_id += take_fresh
        left = count - take_fresh
        if left and len(self._low):
            take_low = min(left, len(self._low))
            low = self._low.popleft_many(take_low)
            is_low = self._is_low
            for block_id in low:
                is_low[block_id] = 0
            victims += low
            left -= take_low
        if left:
            victims += self._queue.popleft_many(left)
        return victims

    def __len__(self) -> int:
        return len(self._fresh) + len(self._low) + len(self._queue)

    def num_cheap_free(self) -> int:
        # Empty blocks sit in the main queue here (vLLM's order keeps them there), so they do not count.
        return len(self._fresh) + len(self._low)

    def __contains__(self, block_id: int) -> bool:
        return block_id in self._fresh or (0 <= block_id < self.num_blocks and self._queue.is_linked(block_id))

    def iter_free(self, after: int | None = None) -> Iterator[int]:
        if after is None or after in self._fresh:
            yield from self._fresh.iter_after(after)
            yield from self._low.iter_after(None)
            yield from self._queue.iter_after(None)
        elif self._is_low[after]:
            yield from self._low.iter_after(after)
            yield from self._queue.iter_after(None)
        else:
            yield from self._queue.iter_after(after)


# SLRU segments, as indices into `SegmentedLruPolicy._segments` (victim order) and values of its `_segment_of`.
_EMPTY_SEGMENT, _LOW_SEGMENT, _PROBATION_SEGMENT, _PROTECTED_SEGMENT = 0, 1, 2, 3
_NUM_SEGMENTS = 4
_NO_SEGMENT = -1


def _segment_sentinels(segment: int) -> tuple[int, int]:
    """A segment's head and tail slots in the link arrays the segments share (negative: the arrays' tail slots)."""
    return -2 * segment - 1, -2 * segment - 2


class SegmentedLruPolicy(EvictionPolicy):
    """Scan-resistant segmented LRU.

    A block that was hit by a lookup since it was stored is *protected* when it is freed; everything else is
    *probationary*, or *low* with the low-priority hint. Victims come from empty blocks first, then low, then
    probation, then protected, so a burst of one-off prompts only churns probation and reused prefixes survive.
    Protected holds at most `protected_fraction` of the pool; overflow is demoted to the probation tail and must be
    hit again to be protected again.
    """

    name = "slru"

    def __init__(self, num_blocks: int, *, protected_fraction: float = 0.8) -> None:
        super().__init__(num_blocks)
        if not 0.0 < protected_fraction < 1.0:
            raise ValueError(f"protected_fraction: must be in (0, 1), got {protected_fraction}")
        self._fresh = FreshRange(1, num_blocks)
        # The three segments share one pair of link arrays (a free block is in exactly one segment), each with its
        # own two sentinel slots, so the policy costs two words per block whatever the segment count.
        nxt, prev = link_array(num_blocks, 2 * _NUM_SEGMENTS), link_array(num_blocks, 2 * _NUM_SEGMENTS)
        self._empty = LinkedQueue(nxt, prev, *_segment_sentinels(_EMPTY_SEGMENT))
        self._low = LinkedQueue(nxt, prev, *_segment_sentinels(_LOW_SEGMENT))
        self._probation = LinkedQueue(nxt, prev, *_segment_sentinels(_PROBATION_SEGMENT))
        self._protected = LinkedQueue(nxt, prev, *_segment_sentinels(_PROTECTED_SEGMENT))
        # Victim order: the *_SEGMENT indices.
        self._segments = (self._empty, self._low, self._probation, self._protected)
        # Per block: its segment's index in `_segments` (or `_NO_SEGMENT`) and a hit-since-stored flag.
        self._segment_of = array("b", [_NO_SEGMENT]) * num_blocks
        self._reused = bytearray(num_blocks)
        self._num_segmented = 0
        self._protected_cap = max(1, int((num_blocks - 1) * protected_fraction))

    def _put(self, segment_index: int, block_id: int) -> None:
        self._segments[segment_index].append(block_id)
        self._segment_of[block_id] = segment_index

    def on_free(self, block_id: int, *, cached: bool, low: bool = False) -> None:
        self._num_segmented += 1
        if not cached:
            self._put(_EMPTY_SEGMENT, block_id)
        elif low:
            self._put(_LOW_SEGMENT, block_id)
        elif self._reused[block_id]:
            self._put(_PROTECTED_SEGMENT, block_id)
            while len(self._protected) > self._protected_cap:
                demoted = self._protected.popleft()
                self._reused[demoted] = 0
                self._put(_PROBATION_SEGMENT, demoted)
        else:
            self._put(_PROBATION_SEGMENT, block_id)

    def on_pin(self, block_id: int) -> None:
        assert block_id not in self._fresh, f"block {block_id} was never allocated, so it cannot be pinned"
        segment_index = self._segment_of[block_id]
        assert segment_index != _NO_SEGMENT, f"block {block_id} is pinned already"
        self._segments[segment_index].remove(block_id)
        self._segment_of[block_id] = _NO_SEGMENT
        self._num_segmented -= 1

    def pop_victim(self) -> int:
        if len(self._fresh):
            return self._fresh.pop()
        for segment in self._segments:
            if len(segment):
                block_id = segment.popleft()
                self._segment_of[block_id] = _NO_SEGMENT
                self._num_segmented -= 1
                return block_id
        raise AssertionError("pop_victim on a policy with no free block")

    def on_hit(self, block_id: int) -> None:
        self._reused[block_id] = 1

    def num_cheap_free(self) -> int:
        return len(self._fresh) + len(self._empty) + len(self._low)

    def on_evicted(self, block_id: int) -> None:
        self._reused[block_id] = 0

    def num_proven_free(self) -> int:
        return len(self._protected)

    def is_proven(self, block_id: int) -> bool:
        return self._segment_of[block_id] == _PROTECTED_SEGMENT

    def __len__(self) -> int:
        return len(self._fresh) + self._num_segmented

    def __contains__(self, block_id: int) -> bool:
        return block_id in self._fresh or (
            0 <= block_id < self.num_blocks and self._segment_of[block_id] != _NO_SEGMENT
        )

    def iter_free(self, after: int | None = None) -> Iterator[int]:
        if after is None or after in self._fresh:
            yield from self._fresh.iter_after(after)
            after = None
            start = _EMPTY_SEGMENT
        else:
            start = self._segment_of[after]
        for index in range(start, len(self._segments)):
            yield from self._segments[index].iter_after(after if index == start else None)


POLICIES: dict[str, type[EvictionPolicy]] = {"lru": LruPolicy, "slru": SegmentedLruPolicy}


def make_policy(name: str, num_blocks: int) -> EvictionPolicy:
    """Build a policy by name (`lru` or `slru`)."""
    try:
        return POLICIES[name](num_blocks)
    except KeyError:
        raise BadInput(f"eviction_policy: unknown policy {name!r}; valid: {', '.join(POLICIES)}") from None
