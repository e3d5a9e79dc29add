"""The linked free queues the eviction policies order blocks with: array-backed doubly linked lists of block ids,
and the never-used blocks kept as an id range.
"""

from __future__ import annotations

from array import array
from typing import Iterable, Iterator

# Per-block state lives in flat arrays indexed by block id, never in dicts: a 1M-entry dict of boxed ints misses the
# CPU caches on every probe, so a dict-based queue made each store ~1.4x dearer at 1M blocks than at 1k. An array slot
# is one unboxed 8-byte word at a fixed offset. Sentinel nodes sit at negative indices (the array's tail slots).
HEAD = -1
TAIL = -2
ABSENT = -(1 << 62)  # in `prev`: the block is in no queue (never a valid index, so a stray use fails loudly)


def link_array(num_blocks: int, num_sentinels: int) -> array[int]:
    """One link word per block plus the sentinels' slots, every entry `ABSENT` (pre-filled once, never resized)."""
    return array("q", [ABSENT]) * (num_blocks + num_sentinels)


class LinkedQueue:
    """A doubly linked list of block ids with O(1) append, remove, pop-left and walk-from-a-member.

    The link arrays may be shared by several queues (a block is in at most one of them); each queue owns its own
    pair of sentinel slots `head`/`tail`, both negative.
    """

    __slots__ = ("_next", "_prev", "_head", "_tail", "_len")

    def __init__(self, next_links: array[int], prev_links: array[int], head: int = HEAD, tail: int = TAIL) -> None:
        self._next, self._prev, self._head, self._tail = next_links, prev_links, head, tail
        next_links[head] = tail
        prev_links[tail] = head
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def append(self, block_id: int) -> None:
        nxt, prev, tail = self._next, self._prev, self._tail
        last = prev[tail]
        nxt[last] = block_id
        prev[block_id] = last
        nxt[block_id] = tail
        prev[tail] = block_id
        self._len += 1

    def remove(self, block_id: int) -> None:
        nxt, prev = self._next, self._prev
        before, after = prev[block_id], nxt[block_id]
        assert before != ABSENT, f"block {block_id} is in no queue"
        nxt[before] = after
        prev[after] = before
        prev[block_id] = ABSENT
        self._len -= 1

    def move_to_tail(self, block_ids: Iterable[int]) -> None:
        """`remove` then `append` each block (each in this queue), in order, with the links inlined: one call for a
        run of blocks (the local-prefix refresh)."""
        nxt, prev, tail = self._next, self._prev, self._tail
        for block_id in block_ids:
            before, after = prev[block_id], nxt[block_id]
            assert before != ABSENT, f"block {block_id} is in no queue"
            if after == tail:
                continue  # already the last
            nxt[before] = after
            prev[after] = before
            last = prev[tail]
            nxt[last] = block_id
            prev[block_id] = last
            nxt[block_id] = tail
            prev[tail] = block_id

    def popleft(self) -> int:
        first = self._next[self._head]
        assert first != self._tail, "pop from an empty queue"
        self.remove(first)
        return first

    def popleft_many(self, count: int) -> list[int]:
        """`popleft()` `count` times, in one call (a store batch's victims); the head's unlink is inlined."""
        nxt, prev, head, tail = self._next, self._prev, self._head, self._tail
        popped = []
        for _ in range(count):
            first = nxt[head]
            assert first != tail, "pop from an empty queue"
            after = nxt[first]
            prev[first] = ABSENT
            nxt[head] = after
            prev[after] = head
            popped.append(first)
        self._len -= count
        return popped

    def is_linked(self, block_id: int) -> bool:
        """Whether the block is in this queue or in another one sharing its link arrays."""
        return self._prev[block_id] != ABSENT

    def iter_after(self, block_id: int | None = None) -> Iterator[int]:
        nxt, tail = self._next, self._tail
        current = nxt[self._head if block_id is None else block_id]
        while current != tail:
            yield current
            current = nxt[current]


class FreshRange:
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
