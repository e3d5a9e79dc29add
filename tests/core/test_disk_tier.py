"""The disk tier below the CPU pool (scheduler side): the index's write-back and LRU, demotion on the CPU pool's
evictions, and prompts evicted from a tiny CPU tier hitting from disk through the manager and the simulator."""

from toolkit.core import DeviceBlockPoolModel, OffloadConfig, OffloadManager, parse_groups_spec
from toolkit.core.geometry import HybridGeometry
from toolkit.core.pool.blocks import CpuBlockPool
from toolkit.core.pool.disk_index import DiskIndex
from toolkit.core.pool.keys import BlockKey
from toolkit.core.sim import SimEngine


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


def _run(num_cpu_blocks: int, num_disk_blocks: int) -> tuple[OffloadManager, dict[str, int]]:
    """Four 512-token prompts run cold, then again on an empty device: the hot hits, per prompt."""
    geometry = HybridGeometry(groups=parse_groups_spec("full_attention:64,mamba_align:64"), hash_block_tokens=64)
    device = DeviceBlockPoolModel(200)
    config = OffloadConfig(num_cpu_blocks=num_cpu_blocks, num_disk_blocks=num_disk_blocks)
    manager = OffloadManager(geometry=geometry, device_pool=device, config=config)
    prompts = {f"p{i}": [1000 * i + t for t in range(512)] for i in range(4)}
    cold = SimEngine(manager, device, chunk_tokens=64)
    for request_id, prompt in prompts.items():
        cold.add_request(request_id, prompt, num_decode_tokens=2)
        cold.run_until_idle()
    device.__init__(200)
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
    from toolkit.core.load.from_disk import DiskCascade
    from toolkit.core.lookup.result import LookupResult, MissReason
    from toolkit.core.lookup.tier_index import disk_marker

    pool = CpuBlockPool(3)
    cascade = DiskCascade(pool, 4)
    cascade.index.demote((_key(7), _key(70)))
    slot = cascade.index.slot_of(_key(7))
    assert slot is not None
    hit = LookupResult(
        hit_tokens=64,
        local_tokens=0,
        max_hit_tokens=100,
        block_ids=((disk_marker(slot),),),
        group_reach_tokens=(),
        miss_reason=MissReason.NONE,
    )
    pinned = pool.allocate([0, 0])  # no free block: the promotion cannot take one
    assert cascade.promote(hit).hit_tokens == 0 and cascade.index.counts.blocks_read == 0
    pool.free(pinned)
    promoted = cascade.promote(hit)
    (block,) = promoted.block_ids[0]
    assert promoted.hit_tokens == 64 and block > 0 and pool.ref_count(block) == 0  # the caller pins it
    assert pool.lookup(_key(7)) == block and pool.lookup(_key(70)) == block  # the slot's alias came along
    assert cascade.index.counts.blocks_read == 1 and _key(7) in cascade.index  # inclusive
    cascade.note_load("r", (block,), external_tokens=64)
    assert cascade.take_load_blocks() == {"r": 1} and cascade.loaded_tokens == 64
