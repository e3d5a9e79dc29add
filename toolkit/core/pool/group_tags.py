"""Which cache group each CPU block serves, for per-group usage (`CpuBlockPool.group_of`)."""

from __future__ import annotations

NO_GROUP = -1


class GroupTags:
    """Per block, the group whose data it holds or receives (`NO_GROUP`: none), and a count of blocks per group.

    A counter, not a set of block ids per group, so tagging a block touches no per-block hash table (a 1M-entry one
    misses the caches on every store); listings scan `of` instead.
    """

    __slots__ = ("of", "_counts")

    def __init__(self, num_blocks: int) -> None:
        self.of = [NO_GROUP] * num_blocks  # read directly by the pool's hot loops
        self._counts: dict[int, int] = {}

    def set(self, block_id: int, group_id: int) -> None:
        of = self.of
        old = of[block_id]
        if old == group_id:
            return
        counts = self._counts
        if old != NO_GROUP:
            counts[old] -= 1
        if group_id != NO_GROUP:
            counts[group_id] = counts.get(group_id, 0) + 1
        of[block_id] = group_id

    def num_blocks_per_group(self) -> dict[int, int]:
        """Tagged blocks per group, groups with none left out (O(groups))."""
        return {group_id: count for group_id, count in self._counts.items() if count}

    def block_ids(self, group_id: int) -> list[int]:
        """The group's blocks in id order (O(num_blocks): usage reports and snapshots only)."""
        if not self._counts.get(group_id):
            return []
        return [block_id for block_id, group in enumerate(self.of) if group == group_id]

    def tagged_block_ids(self) -> list[int]:
        """Every tagged block in id order (O(num_blocks): a reset)."""
        return [block_id for block_id, group in enumerate(self.of) if group != NO_GROUP]
