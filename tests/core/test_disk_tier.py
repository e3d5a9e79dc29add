"""The disk tier below the CPU pool (scheduler side): the index's write-back and LRU, demotion on the CPU pool's
evictions, and prompts evicted from a tiny CPU tier hitting from disk through the manager and the simulator."""

import pytest

from toolkit.core import DeviceBlockPoolModel, OffloadConfig, OffloadManager, parse_groups_spec
from toolkit.core.geometry import HybridGeometry
from toolkit.core.pool.blocks import CpuBlockPool
from toolkit.core.pool.disk_index import DiskIndex, block_key_of, disk_key
from toolkit.core.pool.keys import BlockKey
from toolkit.core.sim import SimEngine
from toolkit.errors import BadInput


def _key(i: int, group: int = 0) -> BlockKey:
    return BlockKey(group, f"h{i}")


def test_the_index_writes_a_block_once_and_keeps_the_most_recent_within_its_capacity():
    index = DiskIndex(3)
    assert index.demote((_key(1), _key(101))) and index.demote((_key(2),)) and index.demote((_key(3),))
    assert not index.demote((_key(1), _key(102)))  # clean: already on disk, nothing written; a new alias kept
    assert _key(102) in index and index.counts.blocks_clean == 1
    assert index.demote((_key(4),))  # full: the least recently used slot (key 2, since 1 was touched) goes
    assert _key(2) not in index and _key(1) in index and _key(3) in index and _key(4) in index
    assert index.counts.blocks_dropped == 1 and index.counts.blocks_written == 4 and len(index) == 3
    slot = index.slot_of(_key(1))
    assert slot is not None and index.promote(slot)[0] == _key(1)  # inclusive: still on disk after the read
    assert _key(1) in index and index.counts.write_amplification() == 4.0


def test_disk_keys_name_blocks_persistently_and_refuse_what_they_cannot_name():
    for key in (BlockKey(3, b"\x00" * 32), BlockKey(0, "h1"), BlockKey(65535, -(1 << 100))):
        name = disk_key(key)
        assert name is not None and len(name) <= 64 and block_key_of(name) == key
    assert disk_key(BlockKey(0, b"x" * 62)) is None and disk_key(BlockKey(0, 1.5)) is None  # too long, untyped
    assert block_key_of(b"zz") is None and block_key_of(b"i\x00\x00abc") is None


def test_the_cpu_pool_demotes_exactly_what_it_evicts():
    pool, demoted = CpuBlockPool(3), []  # two usable blocks
    pool.on_evict = lambda block_id, keys: demoted.append(keys)
    for i in range(4):
        (block,) = pool.allocate([0])
        pool.cache(block, _key(i))
        pool.free([block])
    assert demoted == [(_key(0),), (_key(1),)]  # LRU order; nothing evicted is lost to a tier below
    (block,) = pool.allocate([0])
    pool.drop_keys(block)  # a drop is not an eviction: suspect data is never demoted
    assert len(demoted) == 3


def _run(num_cpu_blocks: int, num_disk_blocks: int, hot_cost=None, **options) -> tuple[OffloadManager, dict[str, int]]:
    """Four 512-token prompts run cold, then again on an empty device: the hot hits, per prompt. `hot_cost`: a
    disk read cost (seconds per byte, `_cost`) set on the cascade for the hot phase only."""
    geometry = HybridGeometry(groups=parse_groups_spec("full_attention:64,mamba_align:64"), hash_block_tokens=64)
    device = DeviceBlockPoolModel(200)
    config = OffloadConfig(num_cpu_blocks=num_cpu_blocks, num_disk_blocks=num_disk_blocks, **options)
    manager = OffloadManager(geometry=geometry, device_pool=device, config=config)
    prompts = {f"p{i}": [1000 * i + t for t in range(512)] for i in range(4)}
    cold = SimEngine(manager, device, chunk_tokens=64)
    for request_id, prompt in prompts.items():
        cold.add_request(request_id, prompt, num_decode_tokens=2)
        cold.run_until_idle()
    device.__init__(200)
    if hot_cost is not None:
        assert manager.disk is not None
        manager.disk.cost = _cost(hot_cost)
    hot = SimEngine(manager, device, chunk_tokens=512)
    for request_id, prompt in prompts.items():
        hot.add_request(f"hot-{request_id}", prompt, num_decode_tokens=2)
        hot.run_until_idle()
    return manager, hot.hit_tokens


def test_a_prompt_evicted_from_a_tiny_cpu_tier_hits_from_disk():
    cpu_only, cpu_hits = _run(num_cpu_blocks=20, num_disk_blocks=0)
    manager, hits = _run(num_cpu_blocks=20, num_disk_blocks=200)
    assert cpu_hits["hot-p0"] == 0  # evicted by the later prompts: the CPU tier alone misses
    assert all(hit == 448 for hit in hits.values())  # every prompt up to its last hash block, from either tier
    disk = manager.disk
    assert disk is not None and disk.loaded_blocks > 0 and disk.loaded_tokens > 0
    counts = disk.index.counts
    assert counts.blocks_read >= disk.loaded_blocks and counts.blocks_written > 0
    assert manager.held_cpu_blocks() == [] and manager.num_pinned_device_blocks() == 0  # nothing left pinned
    assert cpu_only.disk is None


def test_write_through_puts_every_stored_block_on_disk_and_eviction_writes_nothing_more():
    """What a restart needs: with write-through the disk holds what the CPU tier holds too (write-back would hold
    only what the CPU tier evicted, nothing at all here)."""
    back, _ = _run(num_cpu_blocks=100, num_disk_blocks=200)
    through, hits = _run(num_cpu_blocks=100, num_disk_blocks=200, disk_write_policy="write-through")
    assert back.disk is not None and len(back.disk.index) == 0  # nothing was evicted: nothing written back
    assert through.disk is not None and all(hit == 448 for hit in hits.values())
    stored = {keys[0] for b in range(1, 100) if (keys := through.cpu.keys_of(b))}
    assert stored and all(key in through.disk.index for key in stored)
    assert through.disk.index.counts.blocks_written == len(through.disk.index)  # each block written once
    small, _ = _run(num_cpu_blocks=20, num_disk_blocks=200, disk_write_policy="write-through")
    assert small.disk is not None and small.disk.index.counts.blocks_clean > 0  # evictions: already on disk


def test_a_disk_tier_changes_nothing_while_the_cpu_tier_holds_everything():
    """num_disk_blocks=0 builds no tier and hooks nothing; and a disk tier under a CPU tier that evicts nothing
    gives the same hits and the same CPU pool as none."""
    manager, hits = _run(num_cpu_blocks=100, num_disk_blocks=0)
    with_disk, disk_hits = _run(num_cpu_blocks=100, num_disk_blocks=50)
    assert manager.disk is None and manager.cpu.on_evict is None
    assert with_disk.disk is not None and len(with_disk.disk.index) == 0  # nothing was evicted, nothing written
    assert hits == disk_hits and manager.snapshot() == with_disk.snapshot()
    assert all(hit == 448 for hit in hits.values())


def test_a_promotion_takes_a_cpu_block_or_gives_a_miss_when_every_block_is_pinned():
    from toolkit.core.load.from_disk import MAX_ROOM_WAITS, DiskCascade

    pool = CpuBlockPool(3)
    cascade = DiskCascade(pool, 4)
    cascade.index.demote((_key(7), _key(70)))
    assert cascade.index.slot_of(_key(7)) is not None
    hit = _disk_hit(cascade, 7)
    pinned = pool.allocate([0, 0])  # no free block: the promotion cannot take one
    assert cascade.promote(hit).hit_tokens == 0 and cascade.index.counts.blocks_read == 0
    assert cascade.wait_for_room("r")  # blocks are pinned (loads, reads in flight): ask again next step
    assert not cascade.wait_for_room("r")  # this lookup found room (or had no disk blocks): no waiting
    for _ in range(MAX_ROOM_WAITS):
        cascade.promote(hit)
        assert cascade.wait_for_room("q")
    cascade.promote(hit)
    assert not cascade.wait_for_room("q")  # bounded: the request recomputes
    pool.free(pinned)
    promoted = cascade.promote(hit)
    (block,) = promoted.block_ids[0]
    assert promoted.hit_tokens == 64 and block > 0 and pool.ref_count(block) == 1  # pinned until its read lands
    assert pool.lookup(_key(7)) == block and pool.lookup(_key(70)) == block  # the slot's alias came along
    assert cascade.index.counts.blocks_read == 1 and _key(7) in cascade.index  # inclusive
    cascade.note_load("r", (block,), external_tokens=64)
    assert cascade.take_load_blocks() == {"r": 1} and cascade.loaded_tokens == 64
    batch = cascade.take_batch()
    assert batch is not None and batch.promote_host_block_ids == (block,)
    assert block_key_of(batch.promote_keys[0]) == _key(7) and cascade.has_pending()
    cascade.complete({batch.event_id: 1})
    assert pool.ref_count(block) == 0 and not cascade.has_pending()  # settled: the pin goes, the keys stay
    assert pool.lookup(_key(7)) == block


def test_an_evicted_block_is_named_for_the_worker_in_the_step_that_reuses_it():
    """Write-back: the block the allocation evicts is demoted in the same batch the reuse is in, so the worker copies
    its bytes out before any copy of that step can overwrite it; a block already on disk is not written again."""
    from toolkit.core.load.from_disk import DiskCascade

    pool = CpuBlockPool(3)  # two usable blocks
    cascade = DiskCascade(pool, 2)
    for i in range(3):
        (block,) = pool.allocate([0])
        pool.cache(block, _key(i), (_key(100 + i),))
        pool.free([block])
    batch = cascade.take_batch()  # block of key 0 was evicted by the third allocation
    assert batch is not None and len(batch.demote_host_block_ids) == 1 and not batch.promote_host_block_ids
    assert [block_key_of(k) for k in batch.demote_keys] == [_key(0)] and cascade.take_batch() is None
    for i in range(3, 5):  # two more evictions: the disk's two slots fill, then its LRU slot (key 0) goes
        (block,) = pool.allocate([0])
        pool.cache(block, _key(i))
        pool.free([block])
    batch = cascade.take_batch()
    assert batch is not None and [block_key_of(k) for k in batch.drop_keys] == [_key(0)]
    assert [block_key_of(k) for k in batch.demote_keys] == [_key(1), _key(2)]


def test_a_failed_read_drops_the_keys_and_a_failed_load_keeps_the_disk_copy():
    from toolkit.core.load.from_disk import DiskCascade

    pool = CpuBlockPool(4)
    cascade = DiskCascade(pool, 4)
    for i in (7, 8):
        cascade.index.demote((_key(i),))
    promoted = [cascade.promote(_disk_hit(cascade, i)).block_ids[0][0] for i in (7, 8)]
    batch = cascade.take_batch()
    assert batch is not None and batch.promote_host_block_ids == tuple(promoted)
    pool.drop_keys(promoted[0])  # what a failed CPU -> device load does to its CPU blocks (data suspect)
    pool.drop_keys(promoted[1])  # its load failed too, and the engine reported that first
    cascade.complete({batch.event_id: 1}, failed_host_block_ids=[promoted[1]])  # the second block's read failed
    assert _key(7) in cascade.index and pool.lookup(_key(7)) is None  # the disk copy stays: it was never read wrong
    assert _key(8) not in cascade.index and pool.lookup(_key(8)) is None and cascade.reads_failed == 1
    assert all(pool.ref_count(b) == 0 for b in promoted) and not cascade.has_pending()


def _disk_hit(cascade, i: int):
    from toolkit.core.lookup.result import LookupResult, MissReason
    from toolkit.core.lookup.tier_index import disk_marker

    slot = cascade.index.slot_of(_key(i))
    return LookupResult(
        hit_tokens=64,
        local_tokens=0,
        max_hit_tokens=100,
        block_ids=((disk_marker(slot),),),
        group_reach_tokens=(),
        miss_reason=MissReason.NONE,
    )


def _cost(read_s_per_byte: float):
    """A 1 MiB block against recomputing at 1M tokens/s (a 64-token block: 64 us)."""
    from toolkit.core.load.from_disk import DiskHitCost

    return DiskHitCost(
        read_s_per_byte=read_s_per_byte, read_latency_s=1e-6, block_bytes=1 << 20, prefill_tokens_per_s=1e6
    )


def test_a_slow_disk_cuts_a_hit_to_the_largest_cpu_held_boundary_and_a_fast_one_keeps_it():
    """Full attention's first four blocks and the Mamba state at 256 tokens in the CPU pool, the next three blocks
    and the state at 448 on disk: the joint hit is 448 tokens over both tiers, 256 over the CPU pool alone."""
    from toolkit.core.load.from_disk import DiskCascade
    from toolkit.core.lookup.hybrid import HybridLookup
    from toolkit.core.lookup.tier_index import TierKeyIndex
    from toolkit.core.pool.in_flight import InFlightStores

    geometry = HybridGeometry(groups=parse_groups_spec("full_attention:64,mamba_align:64"), hash_block_tokens=64)
    hashes = [f"h{i}" for i in range(8)]
    pool = CpuBlockPool(32)
    cascade = DiskCascade(pool, 16)
    for group, index in [(0, 0), (0, 1), (0, 2), (0, 3), (1, 3)]:
        (block,) = pool.allocate([group])
        pool.cache(block, BlockKey(group, hashes[index]))
        pool.free([block])
    for group, index in [(0, 4), (0, 5), (0, 6), (1, 6)]:
        cascade.index.demote((BlockKey(group, hashes[index]),))
    in_flight = InFlightStores()
    cpu_lookup = HybridLookup(geometry, TierKeyIndex(pool, in_flight))
    both = cascade.lookup(cpu_lookup, in_flight)

    def find(lookup: HybridLookup):
        return lookup.find(block_hashes=hashes, num_tokens=513, local_tokens=0, diagnose=False)

    joint = find(both)
    assert joint.hit_tokens == 448 and find(cpu_lookup).hit_tokens == 256
    assert cascade.weigh(joint, lambda: find(cpu_lookup)) is joint  # no cost (the default): taken as it is
    cascade.cost = _cost(1e-11)  # 4 disk blocks, 10.5 us each: 42 us against 192 tokens' 192 us
    assert cascade.weigh(joint, lambda: find(cpu_lookup)) is joint and cascade.hits_declined_slow == 0
    cascade.cost = _cost(1e-9)  # 1 ms a block: 4 ms against 192 us
    cut = cascade.weigh(joint, lambda: find(cpu_lookup))
    assert cut.hit_tokens == 256 and all(b >= 0 for group in cut.block_ids for b in group)  # no disk block left
    assert cascade.hits_declined_slow == 1 and cascade.tokens_declined_slow == 192
    assert cascade.promote(cut) == cut and cascade.index.counts.blocks_read == 0  # nothing read from disk


def _weighed_hot_run(cost) -> tuple[OffloadManager, dict[str, int]]:
    """`_run` under a 20-block CPU tier and a disk, the hot phase with `cost` on the cascade."""
    return _run(num_cpu_blocks=20, num_disk_blocks=200, hot_cost=cost)


def test_through_the_manager_a_slow_disk_gives_the_cpu_tiers_own_hits_and_a_fast_one_changes_nothing():
    _, cpu_only_hits = _run(num_cpu_blocks=20, num_disk_blocks=0)
    default, default_hits = _weighed_hot_run(None)
    fast, fast_hits = _weighed_hot_run(1e-11)  # 10 us a block: reading beats recomputing
    slow, slow_hits = _weighed_hot_run(1e-9)  # 1 ms a block: recomputing beats reading
    assert all(hit == 448 for hit in default_hits.values())  # as without a cost: every hit taken, from either tier
    assert fast_hits == default_hits and fast.snapshot() == default.snapshot()
    assert fast.disk is not None and fast.disk.hits_declined_slow == 0 and default.disk is not None
    assert fast.disk.loaded_blocks == default.disk.loaded_blocks > 0
    assert slow.disk is not None and slow.disk.hits_declined_slow > 0 and slow.disk.loaded_blocks == 0
    assert slow_hits == cpu_only_hits and sum(slow_hits.values()) < sum(default_hits.values())
    cut = sum(default_hits.values()) - sum(slow_hits.values())
    assert slow.disk.tokens_declined_slow == cut and slow.disk.index.counts.blocks_read == 0
    assert slow.held_cpu_blocks() == [] and slow.num_pinned_device_blocks() == 0


def test_a_lookup_held_back_for_cpu_room_says_so_not_device_pool_tight():
    """The manager names why a request must wait: its disk blocks finding every CPU block pinned is not the parking
    rule's device-pool-tight deferral (the connector counts only the latter as `lookups_deferred_device_pool_tight`)."""
    from toolkit.core.load.deferral import Deferred

    manager, _ = _run(num_cpu_blocks=20, num_disk_blocks=200)
    assert manager.disk is not None
    device = DeviceBlockPoolModel(200)
    sim = SimEngine(manager, device, chunk_tokens=512)
    sim.add_request("again", [t for t in range(512)], num_decode_tokens=2)  # p0's prompt: on disk, not on the CPU
    view = sim.waiting[0].view
    pinned = manager.cpu.allocate([0] * manager.cpu.num_free_blocks)
    assert manager.lookup_for_load(view, 0, final_tokens=514) is Deferred.CPU_ROOM_FOR_DISK
    assert manager.disk.lookups_waited_for_room == 1 and manager.parking.num_deferred == 0
    manager.cpu.free(pinned)
    assert manager.lookup_for_load(view, 0, final_tokens=514) == 448  # room again: the hit, from disk


def test_reused_once_writes_only_blocks_hit_while_in_the_cpu_tier():
    """Under reused-once a one-shot prompt never reaches the disk; a prompt hit once in host memory does, and hits
    from disk after its eviction. Write-back writes both (every eviction)."""
    geometry = HybridGeometry(groups=parse_groups_spec("full_attention:64,mamba_align:64"), hash_block_tokens=64)
    prompts = {f"p{i}": [1000 * i + t for t in range(512)] for i in range(4)}
    results = {}
    for policy in ("write-back", "reused-once"):
        device = DeviceBlockPoolModel(200)
        config = OffloadConfig(num_cpu_blocks=20, num_disk_blocks=200, disk_write_policy=policy)
        manager = OffloadManager(geometry=geometry, device_pool=device, config=config)
        sim = SimEngine(manager, device, chunk_tokens=64)
        for request_id in ("p0", "again-p0"):  # p0 twice on an empty device: its second run hits the CPU tier
            sim.add_request(request_id, prompts["p0"], num_decode_tokens=2)
            sim.run_until_idle()
            device.__init__(200)
        for request_id in ("p1", "p2", "p3"):  # one-shot prompts: they evict p0 and each other
            sim.add_request(request_id, prompts[request_id], num_decode_tokens=2)
            sim.run_until_idle()
        assert sim.hit_tokens["again-p0"] == 448
        device.__init__(200)
        hot = SimEngine(manager, device, chunk_tokens=512)
        for request_id in ("p0", "p1"):
            hot.add_request(f"hot-{request_id}", prompts[request_id], num_decode_tokens=2)
            hot.run_until_idle()
        assert manager.disk is not None
        results[policy] = (manager.disk, hot.hit_tokens)
    back, back_hits = results["write-back"]
    once, once_hits = results["reused-once"]
    assert back.evictions_not_written == 0 and once.evictions_not_written > 0
    assert 0 < once.index.counts.blocks_written < back.index.counts.blocks_written
    assert back_hits == {"hot-p0": 448, "hot-p1": 448}  # both prompts from disk
    assert once_hits["hot-p0"] == 448 and once_hits["hot-p1"] < 448  # the reused prompt only


def test_a_placement_keeps_other_groups_off_the_disk_and_their_hits_in_host_memory():
    """disk_groups="attention": Mamba states never reach the disk, so a prompt evicted from the CPU tier finds its
    attention blocks on disk but no state at any boundary and misses; "all" hits it from disk."""
    all_groups, all_hits = _run(num_cpu_blocks=20, num_disk_blocks=200)
    attention, attention_hits = _run(num_cpu_blocks=20, num_disk_blocks=200, disk_groups="attention")
    assert all_hits["hot-p0"] == 448 and attention_hits["hot-p0"] == 0
    assert attention.disk is not None and all_groups.disk is not None
    assert attention.disk.blocks_not_placed > 0 and all_groups.disk.blocks_not_placed == 0
    on_disk = {key.group_id for key in attention.disk.index.primary_keys()}
    assert on_disk == {0}  # group 0 is full attention, group 1 the Mamba states (`_run`'s geometry)
    with pytest.raises(BadInput, match="disk_groups"):
        OffloadConfig(num_cpu_blocks=20, num_disk_blocks=200, disk_groups="sliding")
