"""Eviction policies for the CPU block pool: which free block is reused next.

The pool owns ref counts and keys; a policy only orders the *free* (unpinned) blocks. `lru` reproduces vLLM's
`BlockPool` free queue exactly (differential tests rely on it); `slru` is a scan-resistant segmented LRU.
"""

from __future__ import annotations

from typing import Iterator

_HEAD = -1
_TAIL = -2


class _LinkedQueue:
    """A doubly linked list of block ids with O(1) append, remove, pop-left and walk-from-a-member."""

    __slots__ = ("_next", "_prev", "_len")

    def __init__(self) -> None:
        self._next: dict[int, int] = {_HEAD: _TAIL}
        self._prev: dict[int, int] = {_TAIL: _HEAD}
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __contains__(self, block_id: int) -> bool:
        return block_id >= 0 and block_id in self._prev

    def append(self, block_id: int) -> None:
        last = self._prev[_TAIL]
        self._next[last] = block_id
        self._prev[block_id] = last
        self._next[block_id] = _TAIL
        self._prev[_TAIL] = block_id
        self._len += 1

    def remove(self, block_id: int) -> None:
        before = self._prev.pop(block_id)
        after = self._next.pop(block_id)
        self._next[before] = after
        self._prev[after] = before
        self._len -= 1

    def popleft(self) -> int:
        first = self._next[_HEAD]
        assert first != _TAIL, "pop from an empty queue"
        self.remove(first)
        return first

    def iter_after(self, block_id: int | None = None) -> Iterator[int]:
        current = self._next[_HEAD if block_id is None else block_id]
        while current != _TAIL:
            yield current
            current = self._next[current]


class _FreshRange:
    """Blocks never used since start-up: ids `[next_id, end)`, kept as a range so a 1M-block pool starts in O(1).

    They sit at the head of the free queue in id order, exactly where vLLM's initial free list puts them; a block
    leaves the range only by allocation (nothing can pin a block that was never handed out).
    """

    __slots__ = ("next_id", "end")

    def __init__(self, start: int, end: int) -> None:
        self.next_id, self.end = start, end

    def __len__(self) -> int:
        return self.end - self.next_id

    def __contains__(self, block_id: int) -> bool:
        return self.next_id <= block_id < self.end

    def pop(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def iter_after(self, block_id: int | None) -> Iterator[int]:
        return iter(range(self.next_id if block_id is None else block_id + 1, self.end))


class EvictionPolicy:
    """Orders the pool's free blocks. The contract, for every implementation:

    - At start-up blocks `1 .. num_blocks - 1` are free, empty and ordered by id (block 0 is the null block).
    - `on_free(block_id, cached=...)`: the block's ref count dropped to 0; it becomes a candidate. `cached` says
      whether it still holds keys (an empty block can be reused at no loss).
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

    def on_free(self, block_id: int, *, cached: bool) -> None:
        raise NotImplementedError

    def on_pin(self, block_id: int) -> None:
        raise NotImplementedError

    def pop_victim(self) -> int:
        raise NotImplementedError

    def on_hit(self, block_id: int) -> None:
        pass

    @property
    def tracks_hits(self) -> bool:
        """Whether `on_hit` does anything (callers skip the per-block call when it does not)."""
        return type(self).on_hit is not EvictionPolicy.on_hit

    def on_evicted(self, block_id: int) -> None:
        pass

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
    """vLLM's free queue: free appends to the tail, touch removes, allocation takes the head."""

    name = "lru"

    def __init__(self, num_blocks: int) -> None:
        super().__init__(num_blocks)
        self._fresh = _FreshRange(1, num_blocks)
        self._queue = _LinkedQueue()
        # The queue's link maps, bound here: pin, free and pop run for every block of every store, load and lookup
        # hit, so they edit the links directly instead of through a second method call.
        self._next, self._prev = self._queue._next, self._queue._prev

    def on_free(self, block_id: int, *, cached: bool) -> None:
        prev = self._prev
        last = prev[_TAIL]
        self._next[last] = block_id
        prev[block_id] = last
        self._next[block_id] = _TAIL
        prev[_TAIL] = block_id
        self._queue._len += 1

    def on_pin(self, block_id: int) -> None:
        fresh = self._fresh
        assert not fresh.next_id <= block_id < fresh.end, f"block {block_id} was never allocated, so it cannot be pinned"
        nxt, prev = self._next, self._prev
        before = prev.pop(block_id)
        after = nxt.pop(block_id)
        nxt[before] = after
        prev[after] = before
        self._queue._len -= 1

    def pop_victim(self) -> int:
        fresh = self._fresh
        if fresh.next_id < fresh.end:
            fresh.next_id += 1
            return fresh.next_id - 1
        # `_LinkedQueue.popleft` inlined: one victim per stored block once the fresh range is used up.
        nxt, prev = self._next, self._prev
        first = nxt[_HEAD]
        assert first != _TAIL, "pop from an empty queue"
        after = nxt.pop(first)
        del prev[first]
        nxt[_HEAD] = after
        prev[after] = _HEAD
        self._queue._len -= 1
        return first

    def __len__(self) -> int:
        return len(self._fresh) + len(self._queue)

    def __contains__(self, block_id: int) -> bool:
        return block_id in self._fresh or block_id in self._queue

    def iter_free(self, after: int | None = None) -> Iterator[int]:
        if after is None or after in self._fresh:
            yield from self._fresh.iter_after(after)
            yield from self._queue.iter_after(None)
        else:
            yield from self._queue.iter_after(after)


class SegmentedLruPolicy(EvictionPolicy):
    """Scan-resistant segmented LRU.

    A block that was hit by a lookup since it was stored is *protected* when it is freed; everything else is
    *probationary*. Victims come from empty blocks first, then probation, then protected, so a burst of one-off
    prompts only churns probation and reused prefixes survive. Protected holds at most `protected_fraction` of
    the pool; overflow is demoted to the probation tail and must be hit again to be protected again.
    """

    name = "slru"

    def __init__(self, num_blocks: int, *, protected_fraction: float = 0.8) -> None:
        super().__init__(num_blocks)
        if not 0.0 < protected_fraction < 1.0:
            raise ValueError(f"protected_fraction: must be in (0, 1), got {protected_fraction}")
        self._fresh = _FreshRange(1, num_blocks)
        self._empty = _LinkedQueue()
        self._probation = _LinkedQueue()
        self._protected = _LinkedQueue()
        self._segment_of: dict[int, _LinkedQueue] = {}
        self._reused: set[int] = set()
        self._protected_cap = max(1, int((num_blocks - 1) * protected_fraction))

    def _put(self, segment: _LinkedQueue, block_id: int) -> None:
        segment.append(block_id)
        self._segment_of[block_id] = segment

    def on_free(self, block_id: int, *, cached: bool) -> None:
        if not cached:
            self._put(self._empty, block_id)
        elif block_id in self._reused:
            self._put(self._protected, block_id)
            while len(self._protected) > self._protected_cap:
                demoted = self._protected.popleft()
                self._reused.discard(demoted)
                self._put(self._probation, demoted)
        else:
            self._put(self._probation, block_id)

    def on_pin(self, block_id: int) -> None:
        assert block_id not in self._fresh, f"block {block_id} was never allocated, so it cannot be pinned"
        self._segment_of.pop(block_id).remove(block_id)

    def pop_victim(self) -> int:
        if len(self._fresh):
            return self._fresh.pop()
        for segment in (self._empty, self._probation, self._protected):
            if len(segment):
                block_id = segment.popleft()
                del self._segment_of[block_id]
                return block_id
        raise AssertionError("pop_victim on a policy with no free block")

    def on_hit(self, block_id: int) -> None:
        self._reused.add(block_id)

    def on_evicted(self, block_id: int) -> None:
        self._reused.discard(block_id)

    def __len__(self) -> int:
        return len(self._fresh) + len(self._segment_of)

    def __contains__(self, block_id: int) -> bool:
        return block_id in self._fresh or block_id in self._segment_of

    def iter_free(self, after: int | None = None) -> Iterator[int]:
        order = [self._fresh, self._empty, self._probation, self._protected]
        if after is None:
            start = 0
        elif after in self._fresh:
            start = 0
        else:
            start = order.index(self._segment_of[after])
        for index in range(start, len(order)):
            cursor = after if index == start else None
            if isinstance(order[index], _FreshRange):
                yield from order[index].iter_after(cursor)
            else:
                yield from order[index].iter_after(cursor)


POLICIES: dict[str, type[EvictionPolicy]] = {"lru": LruPolicy, "slru": SegmentedLruPolicy}


def make_policy(name: str, num_blocks: int) -> EvictionPolicy:
    """Build a policy by name (`lru` or `slru`)."""
    try:
        return POLICIES[name](num_blocks)
    except KeyError:
        raise ValueError(f"eviction_policy: unknown policy {name!r}; valid: {', '.join(POLICIES)}") from None
