"""CPU block pool and eviction policies."""

import pytest

from toolkit.core import BlockKey, CpuBlockPool, DeviceBlockPoolModel


def _store(pool, key, group=0):
    (block,) = pool.allocate([group])
    pool.cache(block, key)
    pool.free([block])
    return block


def test_null_block_is_never_allocated_and_usable_is_total_minus_one():
    pool = CpuBlockPool(5)
    assert pool.num_usable_blocks == 4 and pool.num_free_blocks == 4
    blocks = pool.allocate([0, 0, 0, 0])
    assert 0 not in blocks and sorted(blocks) == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="group_ids"):
        pool.allocate([0])


def test_lru_allocation_evicts_the_oldest_freed_block_and_records_the_event():
    pool = CpuBlockPool(3)
    a, b = _store(pool, BlockKey(0, "a")), _store(pool, BlockKey(0, "b"))
    (c,) = pool.allocate([0])
    assert c == a and pool.lookup(BlockKey(0, "a")) is None and pool.lookup(BlockKey(0, "b")) == b
    (event,) = pool.take_events()
    assert event.kind == "evicted" and event.keys == (BlockKey(0, "a"),)
    assert pool.was_evicted(BlockKey(0, "a")) and not pool.was_evicted(BlockKey(0, "zzz"))


def test_touch_then_free_moves_a_block_to_the_most_recent_end():
    pool = CpuBlockPool(3)
    a, b = _store(pool, BlockKey(0, "a")), _store(pool, BlockKey(0, "b"))
    pool.touch([a])
    pool.free([a])
    assert pool.allocate([0]) == [b]


def test_alias_keys_are_found_and_evicted_with_the_primary():
    pool = CpuBlockPool(2)
    (block,) = pool.allocate([0])
    pool.cache(block, BlockKey(0, "full"), [BlockKey(0, "half")])
    pool.free([block])
    assert pool.lookup(BlockKey(0, "half")) == block
    pool.allocate([1])
    assert BlockKey(0, "half") not in pool and BlockKey(0, "full") not in pool


def test_same_hash_in_two_groups_never_collides():
    pool = CpuBlockPool(4)
    a, b = _store(pool, BlockKey(0, b"h")), _store(pool, BlockKey(1, b"h"), group=1)
    assert pool.lookup(BlockKey(0, b"h")) == a and pool.lookup(BlockKey(1, b"h")) == b
    assert pool.num_used_blocks_per_group() == {0: 1, 1: 1}


def test_evicted_key_memory_is_bounded():
    pool = CpuBlockPool(2, num_remembered_evictions=2)
    for name in "abcd":
        _store(pool, BlockKey(0, name))
    assert [pool.was_evicted(BlockKey(0, n)) for n in "abcd"] == [False, True, True, False]


def test_device_model_walks_the_free_queue_from_a_cursor():
    device = DeviceBlockPoolModel(6)
    blocks = device.allocate(3)
    device.free([blocks[2], blocks[0]])
    order = list(device.iter_free_queue())
    assert order == [4, 5, blocks[2], blocks[0]]
    assert list(device.iter_free_queue(5)) == [blocks[2], blocks[0]]
    assert list(device.iter_free_queue(blocks[2])) == [blocks[0]]


def _burst(policy: str) -> float:
    """8 reused 2-block prefixes, each hit once, then 200 one-off blocks through a 48-block pool."""
    pool = CpuBlockPool(49, policy=policy)
    reused = [BlockKey(0, f"p{i}") for i in range(16)]
    for key in reused:
        _store(pool, key)
    for key in reused:  # a second request looks them up and loads them
        block = pool.lookup(key)
        pool.touch([block], hit=True)
        pool.free([block])
    for i in range(200):
        _store(pool, BlockKey(0, f"oneoff{i}"))
    return sum(key in pool for key in reused) / len(reused)


def test_lru_loses_reused_prefixes_to_a_burst_while_slru_keeps_most():
    assert _burst("lru") == 0.0
    assert _burst("slru") >= 0.75


def test_unknown_policy_is_a_value_error_naming_the_field():
    with pytest.raises(ValueError, match="eviction_policy"):
        CpuBlockPool(4, policy="fifo")


def _stored(pool: CpuBlockPool, count: int, *, low: bool, tag: str) -> list[int]:
    """Store `count` one-key blocks (allocate, cache, free), fine-grained-only ones with the low hint."""
    ids = pool.allocate([0] * count)
    if low:
        pool.mark_low(ids)
    pool.cache_and_free(ids, [BlockKey(0, f"{tag}{i}") for i in range(count)], [()] * count)
    return ids


@pytest.mark.parametrize("policy", ["lru", "slru"])
def test_fine_grained_only_blocks_are_reused_before_any_other_cached_block(policy):
    pool = CpuBlockPool(9, policy=policy)
    aligned = _stored(pool, 4, low=False, tag="a")
    fine = _stored(pool, 4, low=True, tag="f")  # freed *after* the aligned ones: LRU alone would evict aligned first
    assert pool.num_low_blocks() == 4
    victims = pool.allocate([0] * 4)
    assert sorted(victims) == sorted(fine)
    assert all(BlockKey(0, f"a{i}") in pool for i in range(4))
    assert pool.low_counts == {"stored": 4, "promoted": 0, "evicted_unused": 4, "skipped_tier_full": 0}
    assert pool.num_low_blocks() == 0
    pool.free(victims)
    assert set(aligned) <= set(pool.policy.eviction_order())


@pytest.mark.parametrize("policy", ["lru", "slru"])
def test_a_hit_lifts_the_low_priority_hint(policy):
    pool = CpuBlockPool(5, policy=policy)
    aligned = _stored(pool, 2, low=False, tag="a")
    fine = _stored(pool, 2, low=True, tag="f")
    pool.touch([fine[0]], hit=True)  # a lookup served a fine-grained hit from it
    pool.free([fine[0]])
    assert pool.low_counts["promoted"] == 1 and pool.num_low_blocks() == 1
    order = pool.policy.eviction_order()
    assert order[0] == fine[1]  # the unhit fine-only block goes first
    assert order.index(fine[0]) > order.index(fine[1])
    # ... and the promoted one now ages with the aligned blocks: it is freed last, so it is evicted after them
    # under LRU (SLRU protects it further: it was hit).
    assert order.index(fine[0]) > max(order.index(b) for b in aligned)


def test_without_low_blocks_lru_order_is_unchanged():
    pool = CpuBlockPool(6, policy="lru")
    first = _stored(pool, 3, low=False, tag="x")
    second = _stored(pool, 2, low=False, tag="y")
    assert pool.policy.eviction_order() == first + second
