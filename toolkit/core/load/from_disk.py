"""A disk tier below the CPU pool, seen from the scheduler side: demotion on eviction, promotion of a hit's
disk-held blocks into CPU blocks, and which loads read from disk.

A lookup over both tiers (`TierKeyIndex` with a `DiskIndex`) reports a disk-held block as a negative id
(`disk_marker`). Before the hit is pinned, `promote` takes a CPU block for each (pinning the hit's CPU blocks
first, so the allocation's evictions never take them), registers the slot's keys on it and marks it *arriving
from disk*: from then on the load is planned exactly like a CPU hit; the engine times its disk read
(`take_load_blocks`: the disk blocks of each load planned since it was last called). A CPU block evicted before
any load used it was read for nothing (counted in the reads, in no load).

What the worker must move (`take_batch`, once per step, a `DiskBatch`): the blocks demotions wrote (their CPU
block and disk key; the block was just evicted, so the worker copies its bytes out before this step's other copies),
the slots the disk's LRU dropped, and the promotions (disk key -> fresh CPU block). A promoted block stays pinned
until every worker reported its event settled (`complete`): a hit given up before its load (declined, parked, looked
up again) can never let the block be reused while its read still writes it; a failed read drops its keys.

With a `DiskHitCost` (none by default: every hit is taken), `weigh` compares a hit's disk read with recomputing the
tokens it adds over the CPU tier's own hit, and takes the CPU-only hit (the same lookup without the disk, so every
group still hits at one boundary) when reading is slower.

A shared store below the disk (`attach_store`, the dry engine's model of CPU -> disk -> store; scheduler-side
bookkeeping only, no worker moves its bytes) is a second index, inclusive: every block written to the disk also
enters the store, a slot the disk's LRU drops stays in the store until the store's own LRU drops it, and a hit on a
block only the store holds is promoted from the store (counted and timed apart: `take_store_load_blocks`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Collection, Mapping

from toolkit.core.lookup.hybrid import HybridLookup
from toolkit.core.lookup.result import LookupResult
from toolkit.core.lookup.tier_index import TierKeyIndex, disk_slot
from toolkit.core.metadata import DiskBatch
from toolkit.core.pool.blocks import CpuBlockPool
from toolkit.core.pool.disk_index import DiskIndex, disk_key
from toolkit.core.pool.in_flight import InFlightStores
from toolkit.core.pool.keys import BlockKey

MAX_ROOM_WAITS = 256  # lookups (steps) a request repeats waiting for CPU blocks to promote into, then recomputes


@dataclass(frozen=True, slots=True)
class DiskHitCost:
    """Plain numbers from the engine layer (the core imports no tier model): a disk block's read time is
    `read_latency_s + block_bytes * read_s_per_byte`; recomputing a token takes `1 / prefill_tokens_per_s`."""

    read_s_per_byte: float
    read_latency_s: float
    block_bytes: int
    prefill_tokens_per_s: float

    def disk_read_s(self, blocks: int) -> float:
        return blocks * (self.read_latency_s + self.block_bytes * self.read_s_per_byte)

    def recompute_s(self, tokens: int) -> float:
        return tokens / self.prefill_tokens_per_s

    def worth_reading(self, blocks: int, tokens: int) -> bool:
        """Whether reading `blocks` from disk is no slower than recomputing the `tokens` they add."""
        return self.disk_read_s(blocks) <= self.recompute_s(tokens)


class DiskCascade:
    """The disk index under `cpu`, hooked to its evictions (write-back on eviction)."""

    def __init__(
        self,
        cpu: CpuBlockPool,
        num_blocks: int,
        *,
        world_size: int = 1,
        reused_once: bool = False,
        groups_on_disk: frozenset[int] | None = None,
    ) -> None:
        self.index = DiskIndex(num_blocks)
        self.store: DiskIndex | None = None  # a shared store below the disk (`attach_store`; dry engine only)
        self.store_cost: DiskHitCost | None = None  # its reads' cost for `weigh` (None: the disk's)
        self._without_store: HybridLookup | None = None  # lookups over CPU and disk only (with a store)
        self._cpu = cpu
        self._world_size = world_size
        self._demotions: list[tuple[int, bytes]] = []  # (CPU block, disk key) written since the last batch
        self._promotions: list[tuple[int, bytes]] = []  # (fresh CPU block, disk key) to read, since the last batch
        self._event_id = 0
        self._pinned: dict[int, list[int]] = {}  # disk event -> promoted CPU blocks pinned until it settles
        self._settled: dict[int, int] = {}  # disk event -> workers that reported it settled so far
        # Promoted CPU block -> the slot keys it was promoted with, until its read settled: a failed read forgets them
        # on disk even when a failed load already dropped them from the CPU block.
        self._promoted_keys: dict[int, tuple[BlockKey, ...]] = {}
        self.reads_failed = 0  # promoted blocks whose read a worker reported failed
        self.no_room_blocks = 0  # the last lookup's disk blocks that found no free CPU block (0: it found room)
        self._room_waits: dict[str, int] = {}  # request -> lookups it was asked to repeat for room
        self.lookups_waited_for_room = 0
        self._arriving: set[int] = set()  # CPU blocks promoted from disk that no planned load has used yet
        self._from_store: set[int] = set()  # those of them promoted from the store
        self._load_blocks: dict[str, int] = {}  # request -> disk blocks in its planned load, until taken
        self._store_load_blocks: dict[str, int] = {}  # request -> store blocks in its planned load, until taken
        self.loaded_blocks = 0  # disk blocks that planned loads used
        self.loaded_tokens = 0  # hit tokens those loads served, pro rata of their blocks from disk
        self.store_loaded_blocks = 0  # store blocks that planned loads used
        self.store_loaded_tokens = 0  # hit tokens those loads served, pro rata of their blocks from the store
        self.cost: DiskHitCost | None = None  # None: every disk hit is taken
        self.hits_declined_slow = 0  # hits cut to the CPU tier's own because the disk read was slower
        self.tokens_declined_slow = 0  # the tokens those cuts left to recompute
        # reused-once: an evicted block goes to disk only if it was a lookup hit while in the CPU tier
        self.evictions_not_written = 0  # blocks it kept off the disk (never reused in host memory)
        # placement: only these KV cache groups' blocks go to disk (None: every group)
        self._groups_on_disk = groups_on_disk
        self.blocks_not_placed = 0  # blocks of the other groups, kept off the disk
        if reused_once:
            cpu.hit_marks = bytearray(cpu.num_blocks)
        cpu.on_evict = self._demote_if_kept if reused_once or groups_on_disk is not None else self._demote

    def attach_store(self, num_blocks: int) -> None:
        """A shared store of `num_blocks` slots below the disk (before any lookup is built: `lookup` spans it)."""
        self.store = DiskIndex(num_blocks)

    def lookup(self, cpu_lookup: HybridLookup, in_flight: InFlightStores) -> HybridLookup:
        """A lookup of `cpu_lookup`'s geometry and options over the CPU pool and this disk tier (and its store)."""
        drop = bool(cpu_lookup.tables.drop_tokens)
        index = TierKeyIndex(self._cpu, in_flight, self.index, self.store)
        if self.store is not None:  # the same over CPU and disk only: `weigh`'s fallback when the store is slow
            without_store = TierKeyIndex(self._cpu, in_flight, self.index)
            self._without_store = HybridLookup(cpu_lookup.geometry, without_store, speculative_block_drop=drop)
        return HybridLookup(cpu_lookup.geometry, index, speculative_block_drop=drop)

    def write_through(self, block_ids: list[int]) -> None:
        """Blocks whose store just completed (write-through): each goes to disk now unless its key is there."""
        keys_of, index = self._cpu.keys_of, self.index
        for block_id in block_ids:
            keys = keys_of(block_id)
            if keys and keys[0] not in index and self._placed(block_id):
                self._demote(block_id, keys)

    def _placed(self, block_id: int) -> bool:
        groups = self._groups_on_disk
        if groups is None or self._cpu.group_of(block_id) in groups:
            return True
        self.blocks_not_placed += 1
        return False

    def _demote_if_kept(self, block_id: int, keys: tuple[BlockKey, ...]) -> None:
        """On eviction, under reused-once or a placement: the block goes to disk only if both keep it."""
        marks = self._cpu.hit_marks
        if marks is not None and not marks[block_id]:
            self.evictions_not_written += 1
        elif self._placed(block_id):
            self._demote(block_id, keys)
            return
        self._arriving.discard(block_id)
        self._from_store.discard(block_id)

    def _demote(self, block_id: int, keys: tuple[BlockKey, ...]) -> None:
        self._arriving.discard(block_id)
        self._from_store.discard(block_id)
        if self.index.demote(keys):
            store = self.store
            if store is not None:  # inclusive: every disk write also goes to the store
                store.demote(keys)
                store.dropped_keys.clear()  # no worker holds the store's bytes: nothing to tell one
            name = disk_key(keys[0])
            if name is not None:  # an unnamed block is never written: its read will miss (recompute)
                self._demotions.append((block_id, name))

    def weigh(
        self,
        result: LookupResult,
        cpu_only: Callable[[], LookupResult],
        find: Callable[[HybridLookup], LookupResult] | None = None,
    ) -> LookupResult:
        """`result`, or the CPU tier's own hit (`cpu_only()`, a lookup without the disk) when a `cost` is set and
        reading `result`'s disk blocks is slower than recomputing the tokens they add over that hit. With a store
        and `find` (the same lookup on another view), a hit the store's reads make too slow falls back to the hit
        over CPU and disk only, where that one is worth reading."""
        cost = self.cost
        if cost is None:
            return result
        lower = {b for group in result.block_ids for b in group if b < 0}
        if not lower:
            return result
        cut = cpu_only()
        added_tokens = result.hit_tokens - cut.hit_tokens
        if self._worth(cost, lower, added_tokens):
            return result
        if find is not None and self._without_store is not None and self._store_blocks(lower):
            mid = find(self._without_store)
            mid_lower = {b for group in mid.block_ids for b in group if b < 0}
            if mid.hit_tokens > cut.hit_tokens and self._worth(cost, mid_lower, mid.hit_tokens - cut.hit_tokens):
                cut = mid
        self.hits_declined_slow += 1
        self.tokens_declined_slow += result.hit_tokens - cut.hit_tokens
        return cut

    def _worth(self, cost: DiskHitCost, lower: set[int], added_tokens: int) -> bool:
        """Whether reading a hit's below-CPU blocks is no slower than recomputing the tokens they add."""
        store_blocks = self._store_blocks(lower)
        if not store_blocks or self.store_cost is None:
            return cost.worth_reading(len(lower), added_tokens)
        # both tiers' reads summed (conservative, like the per-block latency)
        read_s = cost.disk_read_s(len(lower) - store_blocks) + self.store_cost.disk_read_s(store_blocks)
        return read_s <= cost.recompute_s(added_tokens)

    def _store_blocks(self, block_ids: set[int]) -> int:
        """How many of a lookup's below-CPU block ids are store slots."""
        if self.store is None:
            return 0
        base = self.index.num_blocks
        return sum(1 for b in block_ids if -1 - b >= base)

    def _promote_slot(self, slot: int) -> tuple[BlockKey, ...]:
        """A lookup's below-CPU slot read back (the disk's, or past its slots the store's): its keys."""
        base = self.index.num_blocks
        if slot < base or self.store is None:
            return self.index.promote(slot)
        return self.store.promote(slot - base)

    def promote(self, result: LookupResult) -> LookupResult:
        """`result` with its disk-held blocks promoted into fresh CPU blocks (cached, unpinned: the caller pins
        the hit as usual). Without room in the CPU pool for them, a miss at the same local prefix."""
        cpu = self._cpu
        cpu_ids = [b for group in result.block_ids for b in group if b > 0]
        slots: dict[int, int] = {}  # slot -> group, in hit order
        for group_id, group in enumerate(result.block_ids):
            for block_id in group:
                slot = disk_slot(block_id)
                if slot is not None:
                    slots.setdefault(slot, group_id)
        if not slots:
            return result
        cpu.touch(cpu_ids)  # pinned while the allocation below evicts
        if len(slots) > cpu.num_free_blocks:
            cpu.free(cpu_ids)
            self.no_room_blocks = len(slots) + len(cpu_ids)
            return replace(result, hit_tokens=0, block_ids=tuple(() for _ in result.block_ids))
        base = self.index.num_blocks
        self.index.touch([slot for slot in slots if slot < base])
        if self.store is not None:
            self.store.touch([slot - base for slot in slots if slot >= base])
        keys = [self._promote_slot(slot) for slot in slots]  # read before the allocation's demotions
        fresh = cpu.allocate(list(slots.values()))
        promoted: dict[int, int] = {}
        for slot, block_id, slot_keys in zip(slots, fresh, keys):
            cpu.cache(block_id, slot_keys[0], slot_keys[1:])
            self._arriving.add(block_id)
            if slot >= base:
                self._from_store.add(block_id)
            promoted[-1 - slot] = block_id
            # b"": a key no disk store can hold; the worker reports its read failed (a recompute, never a wrong hit)
            self._promotions.append((block_id, disk_key(slot_keys[0]) or b""))
            self._promoted_keys[block_id] = slot_keys
        cpu.free(cpu_ids)  # `fresh` keeps its allocation's pin until the read settled (`complete`)
        blocks = tuple(tuple(promoted.get(b, b) for b in group) for group in result.block_ids)
        return replace(result, block_ids=blocks)

    def wait_for_room(self, request_id: str) -> bool:
        """After a lookup: whether its disk blocks found no free CPU block while others are pinned (loads and reads
        in flight free them within steps), so the engine should ask again next step rather than recompute; at most
        `MAX_ROOM_WAITS` times per request, and never for a hit larger than the whole pool."""
        needed, self.no_room_blocks = self.no_room_blocks, 0
        cpu = self._cpu
        waits = self._room_waits.pop(request_id, 0)
        if not needed or waits >= MAX_ROOM_WAITS or needed > cpu.num_usable_blocks or not cpu.num_pinned_blocks():
            return False
        # While promotions are being read, room is on its way (a read settles or times out on the worker): such
        # lookups do not count towards the bound, which is in lookups, not time (an idle step can take microseconds).
        self._room_waits[request_id] = waits + (0 if self._pinned else 1)
        self.lookups_waited_for_room += 1
        return True

    def forget_request(self, request_id: str) -> None:
        self._room_waits.pop(request_id, None)

    def note_load(self, request_id: str, cpu_block_ids: tuple[int, ...], external_tokens: int) -> None:
        """A planned load: which of its CPU blocks arrive from disk (their bytes are in host memory after it)."""
        arriving = self._arriving
        if not arriving or not cpu_block_ids:
            return
        from_below = sum(1 for b in cpu_block_ids if b in arriving)
        if not from_below:
            return
        arriving.difference_update(cpu_block_ids)
        from_store = sum(1 for b in cpu_block_ids if b in self._from_store) if self._from_store else 0
        from_disk = from_below - from_store
        if from_store:
            self._from_store.difference_update(cpu_block_ids)
            self._store_load_blocks[request_id] = self._store_load_blocks.get(request_id, 0) + from_store
            self.store_loaded_blocks += from_store
            self.store_loaded_tokens += external_tokens * from_store // len(cpu_block_ids)
        if from_disk:
            self._load_blocks[request_id] = self._load_blocks.get(request_id, 0) + from_disk
            self.loaded_blocks += from_disk
            self.loaded_tokens += external_tokens * from_disk // len(cpu_block_ids)

    def take_load_blocks(self) -> dict[str, int]:
        """Per request, the disk blocks of the loads planned since the last call (the engine's step: a load is
        planned and sent in the same step)."""
        blocks, self._load_blocks = self._load_blocks, {}
        return blocks

    def take_store_load_blocks(self) -> dict[str, int]:
        """`take_load_blocks` for the blocks promoted from the store."""
        blocks, self._store_load_blocks = self._store_load_blocks, {}
        return blocks

    # ----- the worker's side of the moves ------------------------------------------------------------------

    def has_moves(self) -> bool:
        """Whether the next `take_batch` has anything for the workers."""
        return bool(self._demotions or self._promotions or self.index.dropped_keys)

    def has_pending(self) -> bool:
        """Moves not yet sent, or promotions not yet settled by every worker (a drain keeps stepping)."""
        return bool(self._pinned) or self.has_moves()

    def take_batch(self) -> DiskBatch | None:
        """This step's moves for the workers (None: nothing to move)."""
        if not self.has_moves():
            return None
        self._event_id += 1
        demotions, promotions = self._demotions, self._promotions
        drops = [disk_key(key) for key in self.index.dropped_keys]
        self._demotions, self._promotions, self.index.dropped_keys = [], [], []
        if promotions:
            self._pinned[self._event_id] = [block_id for block_id, _ in promotions]
        return DiskBatch(
            event_id=self._event_id,
            drop_keys=tuple(name for name in drops if name is not None),
            demote_host_block_ids=tuple(b for b, _ in demotions),
            demote_keys=tuple(k for _, k in demotions),
            promote_host_block_ids=tuple(b for b, _ in promotions),
            promote_keys=tuple(k for _, k in promotions),
        )

    def complete(self, event_counts: Mapping[int, int], failed_host_block_ids: Collection[int] = ()) -> None:
        """Workers' reports: `{event: workers reporting it settled}` and promoted blocks whose read failed (their
        keys dropped from the CPU pool and the disk index at once). An event's pins go once every worker reported
        it; unknown events (reported twice, or after a reset) are ignored."""
        for block_id in sorted(failed_host_block_ids):
            self._cpu.drop_keys(block_id)
            keys = self._promoted_keys.pop(block_id, ())
            self.index.drop(keys)
            if self.store is not None:
                self.store.drop(keys)
            self._arriving.discard(block_id)
            self._from_store.discard(block_id)
            self.reads_failed += 1
        for event_id, count in sorted(event_counts.items()):
            if event_id not in self._pinned:
                continue
            settled = self._settled.get(event_id, 0) + count
            if settled < self._world_size:
                self._settled[event_id] = settled
                continue
            self._settled.pop(event_id, None)
            blocks = self._pinned.pop(event_id)
            for block_id in blocks:
                self._promoted_keys.pop(block_id, None)
            self._cpu.free(blocks)

    def clear(self) -> None:
        """Forget the disk tier's contents (a reset: only called with nothing pinned)."""
        self.index.clear()
        self.index.dropped_keys.clear()
        if self.store is not None:
            self.store.clear()
        self._arriving.clear()
        self._from_store.clear()
        self._load_blocks.clear()
        self._store_load_blocks.clear()
        self._demotions.clear()
        self._promotions.clear()
        self._promoted_keys.clear()
