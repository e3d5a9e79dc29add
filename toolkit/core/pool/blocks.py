"""The CPU block pool: ref-counted blocks, a key -> blocks multimap, a null block and a pluggable free queue.

Semantics follow vLLM's `BlockPool` (docs/reference-behaviour.md, "Block pool"):
- block 0 is the null block: never allocated, never freed, never cached;
- every block has a ref count; a block with ref count 0 is *free* and sits in the eviction policy's queue with its
  keys kept, so it is still a cache hit until the policy hands it out again;
- a block holds one *primary* key (its last hash boundary) and any number of *alias* keys (interior fine-grained
  boundaries); several blocks may hold the same key (the multimap tolerates duplicates);
- allocation takes the policy's victim and evicts its keys (recorded as a `PoolEvent`);
- lookup, touch, allocate, free and cache are O(1) per block: nothing scans the pool.

The pool also remembers a bounded set of recently evicted keys, so a lookup miss can tell "evicted" from
"never stored", and tags each used block with the cache group it serves, for per-group usage.

Fine-grained-only blocks (`mark_low`: stored only for hits inside a scheduler block) carry a low-priority hint to
the policy until a lookup hits them: they are reused first, so they never take room the block-aligned prefixes
need; `low_counts` says how many were stored, hit (promoted) and evicted unused.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Container, Iterable, Iterator, Sequence

from toolkit.core.pool.events import PoolEvent
from toolkit.core.pool.eviction import EvictionPolicy
from toolkit.core.pool.group_tags import NO_GROUP, GroupTags
from toolkit.core.pool.hinted import make_pool_policy
from toolkit.core.pool.keys import BlockKey

NULL_BLOCK_ID = 0


class CpuBlockPool:
    """A pool of `num_blocks` blocks (block 0 is the null block, so `num_blocks - 1` are usable)."""

    def __init__(
        self,
        num_blocks: int,
        *,
        policy: str | EvictionPolicy = "lru",
        num_remembered_evictions: int = 1 << 16,
        record_events: bool = True,
    ) -> None:
        if not isinstance(num_blocks, int) or isinstance(num_blocks, bool) or num_blocks < 1:
            raise ValueError(f"num_blocks: must be an integer >= 1 (block 0 is the null block), got {num_blocks!r}")
        if num_remembered_evictions < 0:
            raise ValueError(f"num_remembered_evictions: must be >= 0, got {num_remembered_evictions}")
        self.num_blocks = num_blocks
        self.policy = make_pool_policy(policy, num_blocks) if isinstance(policy, str) else policy
        # Every eviction reports to the policy; LRU keeps no history, so skip the no-op call per evicted block.
        self._on_evicted = None if type(self.policy).on_evicted is EvictionPolicy.on_evicted else self.policy.on_evicted
        self._ref = [0] * num_blocks
        self._primary: list[BlockKey | None] = [None] * num_blocks
        self._aliases: dict[int, list[BlockKey]] = {}
        # key -> its holder: the block id itself when one block holds it (nearly always), else an insertion-ordered
        # {block_id: None}. A bare int spares a million tiny dicts in a full 1M-block pool, each a cache miss to
        # create, probe and free on every store and eviction.
        self._key_to_blocks: dict[BlockKey, int | dict[int, None]] = {}
        self._tags = GroupTags(num_blocks)
        self._group = self._tags.of  # the same list: hot loops read a block's group without a call
        self._evicted_keys: OrderedDict[BlockKey, None] = OrderedDict()
        self._num_remembered = num_remembered_evictions
        self.records_events = record_events  # the event log switches it on when an observer wants events
        self._events: list[PoolEvent] = []
        self._low = bytearray(num_blocks)  # 1: fine-grained-only, not hit since stored (the policy's `low` hint)
        # stored / promoted (hit) / evicted unused; skipped_tier_full: cut from a store batch (no spare room)
        self.low_counts = {"stored": 0, "promoted": 0, "evicted_unused": 0, "skipped_tier_full": 0}
        # Called with each evicted block and its keys (primary first) before they go: a tier below demotes them
        # (`OffloadManager` sets it when a disk tier is configured; None: no tier below, no cost).
        self.on_evict: Callable[[int, tuple[BlockKey, ...]], None] | None = None
        # 1: the block was a lookup hit since its keys were stored. Kept only when a tier below asks (the disk's
        # reused-once write policy reads it at eviction); None: nothing tracked, nothing paid.
        self.hit_marks: bytearray | None = None

    # ----- sizes ---------------------------------------------------------------------------------------------

    @property
    def null_block_id(self) -> int:
        return NULL_BLOCK_ID

    @property
    def num_usable_blocks(self) -> int:
        return self.num_blocks - 1

    @property
    def num_free_blocks(self) -> int:
        """Blocks an allocation can take now (free blocks, cached or empty)."""
        return len(self.policy)

    def ref_count(self, block_id: int) -> int:
        return self._ref[block_id]

    def group_of(self, block_id: int) -> int:
        return self._group[block_id]

    # ----- keys ----------------------------------------------------------------------------------------------

    def lookup(self, key: BlockKey) -> int | None:
        """Any one block holding `key` as primary or alias, or None."""
        blocks = self._key_to_blocks.get(key)
        if blocks is None or type(blocks) is int:
            return blocks
        # `type() is int` is the hot test mypy does not narrow on (int has subclasses): a holder here is a dict.
        return next(iter(blocks))  # type: ignore[arg-type]

    def __contains__(self, key: BlockKey) -> bool:
        return key in self._key_to_blocks

    def holders(self, key: BlockKey) -> tuple[int, ...]:
        """Every block holding `key` (nearly always one; none when the key is not held)."""
        blocks = self._key_to_blocks.get(key)
        if blocks is None:
            return ()
        return (blocks,) if type(blocks) is int else tuple(blocks)  # type: ignore[arg-type]

    def is_low(self, block_id: int) -> bool:
        """Whether the block holds the low-priority hint (fine-grained-only, not hit since stored)."""
        return self._low[block_id] == 1

    @property
    def key_container(self) -> Container[object]:
        """Read-only view for hot membership probes: `key in pool.key_container` == `key in pool` (the same
        object for the pool's whole life; plain `(group_id, block_hash)` tuples probe like `BlockKey`s)."""
        return self._key_to_blocks

    def primary_key(self, block_id: int) -> BlockKey | None:
        return self._primary[block_id]

    def alias_keys(self, block_id: int) -> tuple[BlockKey, ...]:
        return tuple(self._aliases.get(block_id, ()))

    def keys_of(self, block_id: int) -> tuple[BlockKey, ...]:
        primary = self._primary[block_id]
        return ((primary,) if primary is not None else ()) + self.alias_keys(block_id)

    @property
    def evicted_key_container(self) -> Container[object]:
        """Read-only view: `key in pool.evicted_key_container` == `pool.was_evicted(key)` (same object for life)."""
        return self._evicted_keys

    def was_evicted(self, key: BlockKey) -> bool:
        """Whether `key` was cached here and evicted (remembered for the last `num_remembered_evictions` keys)."""
        return key in self._evicted_keys

    def cache(self, block_id: int, primary: BlockKey | None, aliases: Iterable[BlockKey] = ()) -> None:
        """Register keys on a pinned block (a completed store). Keys already on the block are not duplicated."""
        assert block_id != NULL_BLOCK_ID, "the null block is never cached"
        assert self._ref[block_id] > 0, f"block {block_id} must be pinned while it is cached (ref 0)"
        if primary is not None:
            if self._primary[block_id] is None:
                self._primary[block_id] = primary
                self._add_key(primary, block_id)
            elif self._primary[block_id] != primary:
                aliases = (primary, *aliases)
        if not aliases:
            return  # the common case: a completed store of a block with one key
        existing = self._aliases.get(block_id)
        for key in aliases:
            if key == self._primary[block_id] or (existing is not None and key in existing):
                continue
            if self._primary[block_id] is None:
                self._primary[block_id] = key
            else:
                existing = self._aliases.setdefault(block_id, [])
                existing.append(key)
            self._add_key(key, block_id)

    def cache_and_free(
        self, block_ids: Sequence[int], primaries: Sequence[BlockKey | None], aliases: Sequence[Sequence[BlockKey]]
    ) -> None:
        """A completed store: `cache(block_ids[i], primaries[i], aliases[i])` then `free(block_ids)`, in one pass
        over the blocks (each block's keys are registered before its store pin goes). The common case (a fresh block,
        one key) is `cache` + `free` inlined (a randomized test holds it to them); anything else calls them."""
        primary_of, key_to_blocks, evicted, refs = self._primary, self._key_to_blocks, self._evicted_keys, self._ref
        on_free, low = self.policy.on_free, self._low
        for block_id, primary, extra in zip(block_ids, primaries, aliases):
            if extra or primary is None or primary_of[block_id] is not None or block_id == NULL_BLOCK_ID:
                if block_id != NULL_BLOCK_ID:
                    self.cache(block_id, primary, extra)
                self.free((block_id,))
                continue
            ref = refs[block_id]
            assert ref > 0, f"block {block_id} must be pinned while it is cached (ref 0)"
            primary_of[block_id] = primary
            holders = key_to_blocks.get(primary)
            if holders is None:
                key_to_blocks[primary] = block_id
            else:
                self._add_holder(primary, holders, block_id)
            if primary in evicted:
                del evicted[primary]
            refs[block_id] = ref - 1
            if ref == 1:
                on_free(block_id, cached=True, low=low[block_id] == 1)  # it holds `primary` now

    def _add_key(self, key: BlockKey, block_id: int) -> None:
        holders = self._key_to_blocks.get(key)
        if holders is None:
            self._key_to_blocks[key] = block_id
        else:
            self._add_holder(key, holders, block_id)
        self._evicted_keys.pop(key, None)

    def _add_holder(self, key: BlockKey, holders: int | dict[int, None], block_id: int) -> None:
        """A second (or later) block holds `key`: promote a lone holder to an ordered dict, first holder first."""
        if type(holders) is int:
            if holders != block_id:
                self._key_to_blocks[key] = {holders: None, block_id: None}
        else:
            holders[block_id] = None  # type: ignore[index]  # not an int (see `lookup`): the ordered dict

    def drop_keys(self, block_id: int) -> tuple[BlockKey, ...]:
        """Remove every key of a block (its data is suspect, e.g. after a failed copy); it stays allocated."""
        keys = self.keys_of(block_id)
        self._remove_keys((block_id,), "dropped")
        return keys

    def _remove_keys(self, block_ids: Iterable[int], event_kind: str | None) -> None:
        """Remove every key of each block (the one key removal: eviction, a drop, a reset). A key no other block
        holds is remembered as evicted; a block that had keys is reported to the policy and, when events are
        recorded and `event_kind` is given, as one `PoolEvent` of that kind."""
        primary_of, aliases_of, key_to_blocks = self._primary, self._aliases, self._key_to_blocks
        evicted, num_remembered, on_evicted = self._evicted_keys, self._num_remembered, self._on_evicted
        low = self._low
        on_evict = self.on_evict if event_kind == "evicted" else None
        events = self._events if event_kind is not None and self.records_events else None
        kind = event_kind or ""  # read only when `events` is kept, that is with a kind
        for block_id in block_ids:
            primary = primary_of[block_id]
            aliases = aliases_of.pop(block_id, None) if aliases_of else None
            if aliases is None:
                if primary is None:
                    continue
                keys: tuple[BlockKey, ...] = (primary,)  # nearly every evicted block: one primary key
            else:
                keys = ((primary,) if primary is not None else ()) + tuple(aliases)
            if on_evict is not None:
                on_evict(block_id, keys)
            for key in keys:
                # Pop first, put back only if other blocks still hold the key: one probe of the big map, not two.
                holders = key_to_blocks.pop(key)
                if type(holders) is not int:
                    del holders[block_id]  # type: ignore[union-attr]  # not an int (see `lookup`): the ordered dict
                    if holders:
                        key_to_blocks[key] = holders
                        continue
                if num_remembered > 0:
                    # Never remembered yet: every key add forgets the key's eviction, so a held key is not in here.
                    evicted[key] = None
                    if len(evicted) > num_remembered:
                        evicted.popitem(last=False)
            primary_of[block_id] = None
            if self.hit_marks is not None:
                self.hit_marks[block_id] = 0  # read by `on_evict` above; the block's next contents start unhit
            if low[block_id]:
                low[block_id] = 0
                if event_kind == "evicted":
                    self.low_counts["evicted_unused"] += 1
            if on_evicted is not None:
                on_evicted(block_id)
            if events is not None:
                events.append(PoolEvent(kind=kind, block_id=block_id, group_id=self._group[block_id], keys=keys))

    # ----- ref counts ----------------------------------------------------------------------------------------

    def allocate(self, group_ids: Sequence[int]) -> list[int]:
        """Take one block per entry of `group_ids` (the group each block will serve), evicting victims' keys.

        Each returned block has ref count 1 and no keys. Raises ValueError when fewer blocks are free.
        """
        if len(group_ids) > len(self.policy):
            raise ValueError(
                f"group_ids: asked for {len(group_ids)} blocks but only {len(self.policy)} of "
                f"{self.num_usable_blocks} are free"
            )
        victims = self.policy.pop_victims(len(group_ids))  # one call for the batch, in the order pop_victim gives
        self._remove_keys(victims, "evicted")  # before any regrouping: an event names the group the keys served
        ref, groups, set_group = self._ref, self._group, self._tags.set
        for group_id, block_id in zip(group_ids, victims):
            assert ref[block_id] == 0, (block_id, ref[block_id])
            if groups[block_id] != group_id:
                set_group(block_id, group_id)
            ref[block_id] = 1
        return victims

    def mark_low(self, block_ids: Iterable[int]) -> None:
        """Give pinned blocks about to be cached the low-priority hint (fine-grained-only stores, see the module doc)."""
        low = self._low
        for block_id in block_ids:
            low[block_id] = 1
            self.low_counts["stored"] += 1

    def num_low_blocks(self) -> int:
        """Blocks holding the hint now (O(n): stats snapshots only)."""
        return self._low.count(1)

    def touch(self, block_ids: Iterable[int], *, hit: bool = False) -> None:
        """Add one ref to each block (a pin); a free block leaves the free queue. `hit` marks a lookup hit."""
        ref, policy, low = self._ref, self.policy, self._low
        on_pin = policy.on_pin
        on_hit = policy.on_hit if hit and policy.tracks_hits else None
        marks = self.hit_marks if hit else None
        for block_id in block_ids:
            if block_id == NULL_BLOCK_ID:
                continue
            if ref[block_id] == 0:
                on_pin(block_id)
            ref[block_id] += 1
            if hit and low[block_id]:
                low[block_id] = 0  # a fine-grained-only block earned its place: it competes like any other now
                self.low_counts["promoted"] += 1
            if on_hit is not None:
                on_hit(block_id)
            if marks is not None:
                marks[block_id] = 1

    def refresh(self, block_ids: Sequence[int]) -> None:
        """`touch(block_ids, hit=True)` then `free(reversed(block_ids))`, in one pass: each block counts a lookup hit,
        pinned ones keep their pins, and the free ones move to the most-recently-used end with the first block
        last (the local-prefix refresh, vLLM's order). Every block holds keys (a lookup found it)."""
        policy = self.policy
        if policy.tracks_hits:  # the policy reads the hit between the pin and the free: the two steps, as written
            self.touch(block_ids, hit=True)
            self.free(reversed(block_ids))
            return
        ref, low, marks = self._ref, self._low, self.hit_marks
        free_ids = []
        for block_id in reversed(block_ids):
            if block_id == NULL_BLOCK_ID:
                continue
            if low[block_id]:
                low[block_id] = 0  # a hit lifts the hint (as in `touch`)
                self.low_counts["promoted"] += 1
            if marks is not None:
                marks[block_id] = 1
            if ref[block_id] == 0:
                free_ids.append(block_id)
        if free_ids:
            policy.requeue(free_ids)

    def free(self, block_ids: Iterable[int]) -> None:
        """Drop one ref from each block; at 0 it joins the free queue's tail, keeping its keys."""
        refs, on_free, primary, aliases = self._ref, self.policy.on_free, self._primary, self._aliases
        low = self._low
        for block_id in block_ids:
            if block_id == NULL_BLOCK_ID:
                continue
            ref = refs[block_id]
            assert ref > 0, f"free of block {block_id} with ref count {ref}"
            refs[block_id] = ref - 1
            if ref == 1:
                cached = primary[block_id] is not None or block_id in aliases
                if not cached:
                    self._tags.set(block_id, NO_GROUP)
                    low[block_id] = 0
                on_free(block_id, cached=cached, low=low[block_id] == 1)

    # ----- views ---------------------------------------------------------------------------------------------

    def iter_free(self, after: int | None = None) -> Iterator[int]:
        """Free blocks in eviction order, starting after free block `after` (None: the next victim)."""
        return self.policy.iter_free(after)

    def num_used_blocks_per_group(self) -> dict[int, int]:
        """Blocks holding or receiving data, per group (pinned or cached)."""
        return self._tags.num_blocks_per_group()

    def group_block_ids(self, group_id: int) -> list[int]:
        """The group's blocks in id order (O(num_blocks): usage reports and snapshots only)."""
        return self._tags.block_ids(group_id)

    def num_pinned_blocks(self) -> int:
        """Usable blocks with a ref (O(1) from the free count)."""
        return self.num_usable_blocks - len(self.policy)

    def take_events(self) -> list[PoolEvent]:
        if not self._events:
            return []
        events, self._events = self._events, []
        return events

    def reset(self) -> bool:
        """Drop every key if no block is pinned; return False (and change nothing) otherwise."""
        if self.num_pinned_blocks():
            return False
        used = self._tags.tagged_block_ids()
        self._remove_keys(used, None)
        for block_id in used:
            self._tags.set(block_id, NO_GROUP)
        self._key_to_blocks.clear()
        self._evicted_keys.clear()
        if self.records_events:
            self._events.append(PoolEvent(kind="cleared", block_id=-1, group_id=NO_GROUP, keys=()))
        return True
