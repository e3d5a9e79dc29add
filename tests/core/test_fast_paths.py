"""The hot-path shortcuts agree with the general code they stand in for."""

from __future__ import annotations

import random

from toolkit.core.pool.blocks import CpuBlockPool
from toolkit.core.pool.keys import BlockKey
from toolkit.core.store.selection import PositionalLayout, has_positional_work


def _state(pool: CpuBlockPool) -> tuple:
    # A key's holders are a bare block id (one holder) or an ordered dict of ids: compare them as id lists.
    keys = {key: [blocks] if isinstance(blocks, int) else list(blocks) for key, blocks in pool.key_container.items()}
    return (
        [pool.primary_key(b) for b in range(pool.num_blocks)],
        [pool.alias_keys(b) for b in range(pool.num_blocks)],
        keys,
        list(pool.evicted_key_container),
    )


def test_has_positional_work_is_cursor_below_confirmed_and_table():
    layout = PositionalLayout(groups=((0, 64), (2, 32)), alignment_tokens=32, hash_tokens=16)
    tables = [[1, 2, 3], [], [4, 5, 6, 7, 8]]
    assert not has_positional_work(layout, [0, 0, 0], tables, 31)  # nothing confirmed to a block end
    assert has_positional_work(layout, [0, 0, 0], tables, 32)  # group 2's first block
    assert not has_positional_work(layout, [0, 0, 1], tables, 63)
    assert has_positional_work(layout, [0, 0, 1], tables, 64)
    assert not has_positional_work(layout, [3, 0, 5], tables, 10_000)  # every table fully handled
    assert not has_positional_work(layout, [0, 0, 0], tables, -5)


def test_allocate_evicts_the_same_with_and_without_events():
    # Recording events (the visualizer's setting) or not (the connector's) must not change what eviction does.
    rng = random.Random(3)
    pools = [
        CpuBlockPool(10, record_events=True, num_remembered_evictions=5),
        CpuBlockPool(10, record_events=False, num_remembered_evictions=5),
    ]
    held: list[list[int]] = [[], []]
    for _ in range(300):
        if held[0] and rng.random() < 0.5:
            for pool, blocks in zip(pools, held):
                pool.free(blocks[:2])
                del blocks[:2]
        count = min(rng.randrange(1, 4), len(pools[0].policy))
        group_ids = [rng.randrange(2) for _ in range(count)]
        ids = [pool.allocate(group_ids) for pool in pools]
        assert ids[0] == ids[1]
        primaries = [BlockKey(0, rng.randrange(12)) if block_id % 3 else None for block_id in ids[0]]
        for pool, blocks, new in zip(pools, held, ids):
            for block_id, primary in zip(new, primaries):
                pool.cache(block_id, primary, (BlockKey(1, block_id),) if block_id % 4 == 0 else ())
            blocks.extend(new)
        assert _state(pools[0]) == _state(pools[1])
        assert [pools[0].group_of(b) for b in range(10)] == [pools[1].group_of(b) for b in range(10)]


def test_cache_and_free_equals_one_cache_per_block_then_free():
    rng = random.Random(11)
    for policy in ("lru", "slru"):
        for _ in range(50):
            pools = [CpuBlockPool(12, policy=policy, record_events=False) for _ in range(2)]
            for _round in range(4):
                ids = [pool.allocate([0] * 4) for pool in pools]
                assert ids[0] == ids[1]
                extra_pins = [b for b in ids[0] if rng.random() < 0.3]  # some blocks stay pinned by a reader
                for pool in pools:
                    pool.touch(extra_pins)
                primaries = [rng.choice([None, BlockKey(0, rng.randrange(6))]) for _ in ids[0]]
                aliases = [
                    tuple(BlockKey(0, rng.randrange(6)) for _ in range(rng.choice([0, 0, 1, 2]))) for _ in ids[0]
                ]
                for block_id, primary, extra in zip(ids[0], primaries, aliases):
                    pools[0].cache(block_id, primary, extra)
                pools[0].free(ids[0])
                pools[1].cache_and_free(ids[1], primaries, aliases)
                if _round % 2 and extra_pins:  # cache again onto a still-pinned block that already holds keys
                    again = extra_pins[:1]
                    pools[0].touch(again)
                    pools[0].cache(again[0], BlockKey(0, 9))
                    pools[0].free(again)
                    pools[1].touch(again)
                    pools[1].cache_and_free(again, [BlockKey(0, 9)], [()])
                assert _state(pools[0]) == _state(pools[1])
                assert pools[0].policy.eviction_order() == pools[1].policy.eviction_order()
                assert [pools[0].group_of(b) for b in range(12)] == [pools[1].group_of(b) for b in range(12)]
                for pool in pools:
                    pool.free(extra_pins)


def test_refresh_equals_a_hit_pin_then_a_release_in_reverse():
    """`CpuBlockPool.refresh` (the local-prefix refresh's one pass, `LruPolicy.requeue`) leaves every policy's order,
    the refs, the low-priority hints and the hit marks as `touch(hit=True)` then `free(reversed(...))` do."""
    rng = random.Random(7)
    for policy in ("lru", "slru", "lru+hints"):
        for _ in range(60):
            pools = [CpuBlockPool(16, policy=policy, record_events=False) for _ in range(2)]
            for pool in pools:
                pool.hit_marks = bytearray(16)
            for _round in range(5):
                count = min(rng.randrange(1, 6), len(pools[0].policy))
                ids = [pool.allocate([0] * count) for pool in pools]
                assert ids[0] == ids[1]
                low = [b for b in ids[0] if rng.random() < 0.3]
                keys = [BlockKey(0, rng.randrange(1 << 30)) for _ in ids[0]]
                for pool in pools:
                    pool.mark_low(low)
                    pool.cache_and_free(ids[0], keys, [()] * len(keys))
                cached = [b for b in range(1, 16) if pools[0].primary_key(b) is not None]
                pinned = rng.sample(cached, min(len(cached), rng.randrange(3)))
                chosen = rng.sample(cached, min(len(cached), rng.randrange(1, 7))) + [0] * rng.randrange(2)
                rng.shuffle(chosen)
                for pool in pools:
                    pool.touch(pinned)
                pools[0].touch(chosen, hit=True)
                pools[0].free(reversed(chosen))
                pools[1].refresh(chosen)
                assert pools[0].policy.eviction_order() == pools[1].policy.eviction_order()
                for block_id in range(16):
                    assert pools[0].ref_count(block_id) == pools[1].ref_count(block_id)
                    assert pools[0].is_low(block_id) == pools[1].is_low(block_id)
                assert pools[0].low_counts == pools[1].low_counts
                assert pools[0].hit_marks == pools[1].hit_marks
                for pool in pools:
                    pool.free(pinned)


def test_in_flight_key_set_counts_extra_holders_like_a_counter():
    """`InFlightStores.keys` is a set with a side count of extra holders: a key leaves it with its last holder,
    exactly when a multiset (`Counter`) of the in-flight blocks' keys would drop it."""
    from collections import Counter

    from toolkit.core.pool.in_flight import InFlightStores

    rng = random.Random(5)
    for _ in range(200):
        flights, reference, live = InFlightStores(), Counter(), []
        for device_id in range(rng.randrange(1, 12)):
            keys = tuple({BlockKey(0, rng.randrange(5)) for _ in range(rng.choice([1, 1, 2]))})
            flights.add(device_id, keys)
            reference.update(keys)
            live.append((device_id, keys))
            if rng.random() < 0.4:  # a store event completes: several blocks at once
                rng.shuffle(live)
                done, live = live[: rng.randrange(1, len(live) + 1)], live[rng.randrange(0, 1) :]
                live = [entry for entry in live if entry not in done]
                flights.remove_event([d for d, _ in done], [k for _, k in done])
                reference.subtract(k for _, keys in done for k in keys)
                reference = +reference
            assert flights.keys == set(reference)
            assert flights.device_ids == {d for d, _ in live}


def test_lru_policy_orders_free_blocks_like_vllms_free_queue():
    """`LruPolicy` (a linked queue behind a fresh-id range, batch pops) against the plainest model of vLLM's free
    queue: an ordered dict of free block ids, initially 1..n-1; free appends, touch removes, allocation pops the
    head."""
    from collections import OrderedDict

    from toolkit.core.pool.eviction import LruPolicy

    rng = random.Random(17)
    for num_blocks in (2, 3, 9, 40):
        policy, model = LruPolicy(num_blocks), OrderedDict.fromkeys(range(1, num_blocks))
        pinned: list[int] = []
        for _ in range(400):
            op = rng.random()
            if op < 0.35 and model:  # allocate a batch (the pool pops a store batch's victims in one call)
                count = rng.randrange(1, len(model) + 1)
                expected = [model.popitem(last=False)[0] for _ in range(count)]
                assert (
                    policy.pop_victims(count) if count > 1 or rng.random() < 0.5 else [policy.pop_victim()]
                ) == expected
                pinned += expected
            elif op < 0.7 and pinned:  # free: the ref count dropped to 0
                block_id = pinned.pop(rng.randrange(len(pinned)))
                policy.on_free(block_id, cached=rng.random() < 0.5)
                model[block_id] = None
            elif model:  # touch a free block that was allocated before (a lookup hit pins it)
                touchable = [b for b in model if b not in policy._fresh]
                if touchable:
                    block_id = rng.choice(touchable)
                    policy.on_pin(block_id)
                    del model[block_id]
                    pinned.append(block_id)
            assert len(policy) == len(model)
            assert policy.eviction_order() == list(model)
            assert all((b in policy) == (b in model) for b in range(-1, num_blocks + 1))
            if model:
                after = rng.choice(list(model))
                assert list(policy.iter_free(after)) == list(model)[list(model).index(after) + 1 :]


def _columns_run(columns: bool, seed: int) -> tuple:
    """One random trace through `SimEngine`: shared prefixes, long decodes across block ends, a small CPU tier,
    preemptions. Returns every step's transfers and the final counters."""
    from toolkit.core import DeviceBlockPoolModel, HybridGeometry, OffloadConfig, OffloadManager, parse_groups_spec
    from toolkit.core.sim import SimEngine

    rng = random.Random(seed)
    geometry = HybridGeometry(groups=parse_groups_spec("full_attention:16,mamba_align:64"), hash_block_tokens=16)
    device = DeviceBlockPoolModel(256)
    manager = OffloadManager(geometry=geometry, device_pool=device, config=OffloadConfig(num_cpu_blocks=24))
    engine = SimEngine(manager, device, chunk_tokens=48, max_running=6, completion_delay_steps=1, columns=columns)
    documents = [[rng.randrange(50_000) for _ in range(rng.randrange(40, 200))] for _ in range(4)]
    steps = []
    for index in range(24):
        prompt = rng.choice(documents) + [rng.randrange(50_000) for _ in range(rng.randrange(1, 60))]
        engine.add_request(f"r{index}", prompt, num_decode_tokens=rng.randrange(1, 90))
        for _ in range(rng.randrange(0, 12)):
            meta = engine.step()
            steps.append(
                tuple(
                    None if batch is None else (batch.device_block_ids, batch.host_block_ids)
                    for batch in (meta.store, meta.load)
                )
            )
            if engine.running and rng.random() < 0.05:
                engine.preempt(rng.choice(sorted(engine.running)))
    engine.run_until_idle()
    return steps, vars(manager.boundary_stats), manager.miss_stats.num_hit_tokens, dict(engine.hit_tokens)


def test_running_columns_skip_gives_the_same_steps_as_every_request_scheduled():
    """The column path (with its skip of running requests that cannot have work yet) selects exactly what the
    per-request path selects, step by step, under decode, pressure and preemption."""
    for seed in range(4):
        plain, columns = _columns_run(False, seed), _columns_run(True, seed)
        assert any(store is not None for store, _ in plain[0])  # the trace stores: the comparison means something
        assert columns == plain, seed


def _decode_run(columns: bool, seed: int) -> list:
    """Three requests past one prefill chunk, then decoding 1-3 tokens a step with their tables allocated ahead
    (no new block), some steps with an unconfirmed placeholder token; each step's stored device blocks. With
    `columns` the decode steps reach the manager as `RunningColumns`, else as `ScheduledRequest`s."""
    from tests.core.core_rig import Rig
    from toolkit.core import StepInput
    from toolkit.core.metadata import IDLE_STEP
    from toolkit.core.requests import RunningColumns

    rng = random.Random(seed)
    rig = Rig("full_attention:16", cpu_blocks=64, gpu_blocks=64)
    reqs = [rig.request(f"r{i}", 96, seed=seed * 10 + i) for i in range(3)]
    tables = {r.request_id: rig.allocate(96) for r in reqs}
    for r in reqs:
        rig.mgr.prepare_load(r, tables[r.request_id], 0)
    stores, first = [], True
    while live := [r for r in reqs if r.num_computed_tokens < 95]:
        counts = {
            r.request_id: min(95 - r.num_computed_tokens, rng.randrange(5, 30) if first else rng.choice((1, 1, 2, 3)))
            for r in live
        }
        if first or not columns:
            scheduled = [(r, tables[r.request_id] if first else [[]], counts[r.request_id]) for r in live]
            meta = rig.step(*scheduled)
        else:
            ids = [r.request_id for r in live]
            views = {r.request_id: r for r in live}
            running = RunningColumns(ids, [None] * len(ids), counts, set(), views)
            # As the vLLM adapter does: an idle step skips `build_step` altogether.
            meta = IDLE_STEP if rig.mgr.skips_idle_step(running) else rig.mgr.build_step(StepInput(running=running))
        first = False
        stores.append(None if meta.store is None else meta.store.device_block_ids)
        rig.complete(meta)
        for r in live:
            r.num_computed_tokens += counts[r.request_id]
            r.num_output_placeholders = rng.choice((0, 0, 1))
            rig.hash_blocks(r, tables[r.request_id], r.num_computed_tokens - r.num_output_placeholders)
    return stores


def test_decode_steps_skipped_by_the_column_path_store_the_same_blocks_at_the_same_steps():
    for seed in range(8):
        plain = _decode_run(False, seed)
        assert sum(store is not None for store in plain[1:]) >= 3  # decode steps store: the check means something
        assert _decode_run(True, seed) == plain, seed
