"""A shared store below the disk tier, modelled on the scheduler side (`DiskCascade.attach_store`): inclusive of the
disk, it keeps what the disk's LRU drops, lookups span CPU, disk and store, and reads are counted per tier."""

from toolkit.core import DeviceBlockPoolModel, OffloadConfig, OffloadManager, parse_groups_spec
from toolkit.core.geometry import HybridGeometry
from toolkit.core.load.from_disk import DiskHitCost
from toolkit.core.lookup.tier_index import TierKeyIndex, disk_marker
from toolkit.core.pool.blocks import CpuBlockPool
from toolkit.core.pool.disk_index import DiskIndex
from toolkit.core.pool.in_flight import InFlightStores
from toolkit.core.pool.keys import BlockKey
from toolkit.core.sim import SimEngine


def _cost(read_s_per_byte: float) -> DiskHitCost:
    """A 1 MiB block against recomputing at 1M tokens/s (a 64-token block: 64 us)."""
    return DiskHitCost(
        read_s_per_byte=read_s_per_byte, read_latency_s=1e-6, block_bytes=1 << 20, prefill_tokens_per_s=1e6
    )


def _run(
    num_disk_blocks: int, num_store_blocks: int = 0, costs: tuple[float, float] | None = None
) -> tuple[OffloadManager, dict[str, int]]:
    """Four 512-token prompts (16 blocks each over two groups) run cold through a 20-block CPU tier, then again on
    an empty device: the hot hits, per prompt. `costs`: the disk's and the store's read seconds per byte, weighed
    in the hot phase."""
    geometry = HybridGeometry(groups=parse_groups_spec("full_attention:64,mamba_align:64"), hash_block_tokens=64)
    device = DeviceBlockPoolModel(200)
    config = OffloadConfig(num_cpu_blocks=20, num_disk_blocks=num_disk_blocks)
    manager = OffloadManager(geometry=geometry, device_pool=device, config=config)
    if num_store_blocks:
        manager.attach_store(num_store_blocks)
    prompts = {f"p{i}": [1000 * i + t for t in range(512)] for i in range(4)}
    cold = SimEngine(manager, device, chunk_tokens=64)
    for request_id, prompt in prompts.items():
        cold.add_request(request_id, prompt, num_decode_tokens=2)
        cold.run_until_idle()
    device.__init__(200)
    if costs is not None:
        assert manager.disk is not None
        manager.disk.cost, manager.disk.store_cost = _cost(costs[0]), _cost(costs[1])
    hot = SimEngine(manager, device, chunk_tokens=512)
    for request_id, prompt in prompts.items():
        hot.add_request(f"hot-{request_id}", prompt, num_decode_tokens=2)
        hot.run_until_idle()
    return manager, hot.hit_tokens


def test_a_store_below_a_small_disk_serves_what_the_disk_dropped_and_reads_are_split():
    _, disk_alone = _run(24)
    manager, cascade = _run(24, num_store_blocks=200)
    _, one_big_tier = _run(200)  # a single lower tier of the store's size
    assert sum(disk_alone.values()) < sum(cascade.values()) == sum(one_big_tier.values())
    assert all(hit == 448 for hit in cascade.values())  # every prompt to its last hash block, through the tiers
    disk = manager.disk
    assert disk is not None and disk.store is not None
    assert disk.index.counts.blocks_read > 0 and disk.store.counts.blocks_read > 0  # both tiers read
    assert disk.index.counts.blocks_dropped > 0 and disk.store.counts.blocks_dropped == 0
    assert all(key in disk.store for key in disk.index.primary_keys())  # inclusive: the disk's blocks are held below
    assert (
        disk.loaded_blocks + disk.store_loaded_blocks == disk.index.counts.blocks_read + disk.store.counts.blocks_read
    )
    # Per request, what the engine's clock reads from each tier (nobody took them here: every load's blocks).
    assert sum(disk.take_store_load_blocks().values()) == disk.store_loaded_blocks > 0
    assert sum(disk.take_load_blocks().values()) == disk.loaded_blocks > 0 and disk.store_loaded_tokens > 0


def test_without_a_store_nothing_changes():
    manager, hits = _run(24)
    assert manager.disk is not None and manager.disk.store is None
    assert manager.disk.store_loaded_blocks == 0 and manager.disk.take_store_load_blocks() == {}
    assert hits == _run(24, num_store_blocks=0)[1]


def test_the_lookup_marks_store_slots_past_the_disks_and_prefers_the_disks_copy():
    cpu, disk, store = CpuBlockPool(4), DiskIndex(3), DiskIndex(5)
    a, b = BlockKey(0, "a"), BlockKey(0, "b")
    store.demote((a,))
    store.demote((b,))
    disk.demote((b,))
    index = TierKeyIndex(cpu, InFlightStores(), disk, store)
    store_slot = store.slot_of(a)
    assert store_slot is not None and index.lookup(a) == disk_marker(3 + store_slot)
    assert index.lookup(b) == disk_marker(disk.slot_of(b) or 0) and index.lookup(BlockKey(0, "c")) is None
    assert a in index.key_container and b in index.key_container and BlockKey(0, "c") not in index.key_container


def test_a_store_slower_than_recomputing_falls_back_to_the_disks_hit_not_the_cpu_tiers():
    fast, slow = 1e-12, 1e-6  # a 1 MiB block: ~1 us against 64 us of recompute; ~1 s
    _, disk_alone = _run(24, costs=(fast, fast))
    manager, weighed = _run(24, num_store_blocks=200, costs=(fast, slow))
    _, both_fast = _run(24, num_store_blocks=200, costs=(fast, fast))
    assert weighed == disk_alone and sum(disk_alone.values()) > 0  # the disk's blocks still read, the store's not
    assert sum(both_fast.values()) > sum(weighed.values())
    disk = manager.disk
    assert disk is not None and disk.store is not None and disk.hits_declined_slow > 0
    assert disk.store_loaded_blocks == 0 and disk.loaded_blocks > 0
