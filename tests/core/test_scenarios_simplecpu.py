"""Narrated scenarios, one per behaviour of vLLM's SimpleCPU scheduler side, as vLLM's own
scheduler tests check them (rules: docs/reference-behaviour.md).

Fixture: full attention with 16-token blocks unless a test says otherwise; "n blocks" prompts have n*16+1 tokens.
"""

import pytest
from core_rig import Rig

from toolkit.core import MissReason


def _roundtrip_hit(rig, tokens, *, seed=0, local=0):
    req = rig.request("reader", tokens, seed=seed)
    return req, rig.mgr.lookup(req, local)


# 1
def test_eager_store_and_load_roundtrip():
    rig = Rig()
    rig.store_prompt(rig.request("writer", 33))  # two full blocks become confirmed, then stored
    reader, result = _roundtrip_hit(rig, 33)
    assert result.hit_tokens == 32
    plan = rig.mgr.prepare_load(reader, rig.allocate(33), 32)
    meta = rig.step()
    assert meta.load is not None and len(meta.load.device_block_ids) == len(meta.load.host_block_ids) == 2
    assert plan.cpu_block_ids == meta.load.host_block_ids


# 2 (the prompt-logprobs skip is vLLM-later; the pin-replacement rule it relies on is tested here)
def test_repeated_lookup_replaces_the_previous_pin():
    rig = Rig()
    rig.store_prompt(rig.request("writer", 33))
    reader, first = _roundtrip_hit(rig, 33)
    rig.mgr.lookup(reader, 0)
    assert all(rig.mgr.cpu.ref_count(b) == 1 for b in first.real_block_ids())
    rig.mgr.prepare_load(reader, rig.allocate(33), 0)  # engine declined: the pin goes
    assert all(rig.mgr.cpu.ref_count(b) == 0 for b in first.real_block_ids())


# 3
def test_eager_store_preserves_secondary_block_hashes():
    rig = Rig(hash_block_tokens=8)
    req = rig.request("writer", 17)
    tables = rig.allocate(17)
    rig.mgr.prepare_load(req, tables, 0)
    rig.step((req, tables, 17))
    req.num_computed_tokens = 17
    rig.hash_blocks(req, tables, 17)
    rig.device.add_alias(tables[0][0], rig.key(req, 0, 8))  # the engine registered an 8-token boundary
    rig.complete(rig.step((req, [[]], 1)))
    cpu_block = rig.mgr.cpu.lookup(rig.key(req, 0, 16))
    assert cpu_block is not None and rig.mgr.cpu.lookup(rig.key(req, 0, 8)) == cpu_block
    assert rig.mgr.cpu.primary_key(cpu_block) == rig.device.primary_key(tables[0][0])


def _computed_unsent(rig, req):
    tables = rig.allocate(req.num_tokens)
    rig.mgr.prepare_load(req, tables, 0)
    req.num_computed_tokens = req.num_tokens
    rig.hash_blocks(req, tables, req.num_tokens)
    return tables


# 4
def test_finished_eager_stores_are_batched():
    rig = Rig()
    a, b = rig.request("a", 33, seed=1), rig.request("b", 33, seed=2)
    for req in (a, b):
        rig.finish(req, _computed_unsent(rig, req))
    meta = rig.step()
    assert meta.store is not None and meta.store.num_blocks == 4
    rig.complete(meta)
    assert rig.mgr.lookup(rig.request("reader", 33, seed=1), 0).hit_tokens == 32


# 5
def test_finished_eager_store_skips_existing_cpu_cache_entries():
    rig = Rig()
    rig.store_prompt(rig.request("writer", 33))
    free_before = rig.mgr.cpu.num_free_blocks
    dup = rig.request("dup", 33)
    rig.finish(dup, _computed_unsent(rig, dup))
    assert rig.step().store is None and rig.mgr.cpu.num_free_blocks == free_before


# 6
def test_finished_eager_store_is_reported_pending_before_metadata_build():
    rig = Rig()
    req = rig.request("a", 33)
    rig.finish(req, _computed_unsent(rig, req))
    assert rig.mgr.has_pending_work()  # queued
    meta = rig.step()
    assert rig.mgr.has_pending_work()  # in flight
    rig.complete(meta)
    assert not rig.mgr.has_pending_work()


# 7
def test_finished_eager_store_caches_all_groups():
    rig = Rig("full_attention:16,sliding_window:16/64")
    req = rig.request("a", 33)
    rig.finish(req, _computed_unsent(rig, req))
    meta = rig.step()
    assert meta.store.num_blocks == 4
    rig.complete(meta)
    for group_id in (0, 1):
        for end in (16, 32):
            assert rig.key(req, group_id, end) in rig.mgr.cpu


# 8
def test_finished_eager_store_respects_cpu_capacity():
    rig = Rig(cpu_blocks=4)
    req = rig.request("a", 81)
    rig.finish(req, _computed_unsent(rig, req))
    assert rig.step().store.num_blocks == 3 == rig.mgr.cpu.num_usable_blocks


# 9
def test_reset_releases_unsubmitted_finished_stores():
    rig = Rig()
    req = rig.request("a", 33)
    rig.finish(req, _computed_unsent(rig, req))
    assert rig.mgr.reset() is True
    assert rig.mgr.cpu.num_free_blocks == rig.mgr.cpu.num_usable_blocks and rig.mgr.num_pinned_device_blocks() == 0


# 10
def test_max_hit_len_cap_drops_last_full_block():
    rig = Rig()
    rig.store_prompt(rig.request("writer", 33))
    _, result = _roundtrip_hit(rig, 32)
    assert result.hit_tokens == 16 and result.miss_reason is MissReason.LAST_TOKEN_CAP


def _lazy_rig():
    return Rig(lazy=True, gpu_blocks=9, max_num_batched_tokens=64)


# 11
def test_lazy_store_and_load_roundtrip():
    rig = _lazy_rig()
    req = rig.request("a", 33)
    tables = _computed_unsent(rig, req)
    rig.finish(req, tables)  # its hashed blocks now sit in the device free queue, near its head
    meta = rig.step()
    assert meta.store is not None and sorted(meta.store.device_block_ids) == sorted(tables[0][:2])
    rig.complete(meta)
    reader, result = _roundtrip_hit(rig, 33)
    assert result.hit_tokens == 32
    rig.mgr.prepare_load(reader, rig.allocate(33), 32)
    assert rig.step().load.num_blocks == 2


# 12
def test_eager_duplicate_store_skipped():
    rig = Rig()
    rig.store_prompt(rig.request("a", 33))
    used = rig.mgr.cpu.num_free_blocks
    _, meta = rig.store_prompt(rig.request("b", 33))
    assert meta.store is None and rig.mgr.cpu.num_free_blocks == used


# 13
def test_eager_in_flight_store_dedup_across_steps():
    rig = Rig()
    req = rig.request("a", 33)
    tables, meta = rig.store_prompt(req, complete=False)
    stored = set(meta.store.device_block_ids)
    twin = rig.request("twin", 33)
    rig.mgr.prepare_load(twin, tables, 0)
    twin.num_computed_tokens = 33
    free_before = rig.mgr.cpu.num_free_blocks
    assert rig.step((twin, tables, 1)).store is None and rig.mgr.cpu.num_free_blocks == free_before
    assert rig.mgr.in_flight.device_ids == stored
    rig.complete(meta)
    assert not rig.mgr.in_flight.device_ids


# 14
def test_lazy_duplicate_store_skipped():
    rig = _lazy_rig()
    a = rig.request("a", 33)
    rig.finish(a, _computed_unsent(rig, a))
    rig.complete(rig.step())
    free_before = rig.mgr.cpu.num_free_blocks
    b = rig.request("b", 33)
    rig.finish(b, _computed_unsent(rig, b))
    assert rig.step().store is None and rig.mgr.cpu.num_free_blocks == free_before


# 15
def test_lru_eviction_order():
    rig = Rig(cpu_blocks=5)
    a, b, c = (rig.request(n, 33, seed=i) for i, n in enumerate("abc"))
    for req in (a, b, c):
        rig.store_prompt(req)
    assert rig.key(a, 0, 16) not in rig.mgr.cpu
    assert all(rig.key(r, 0, 32) in rig.mgr.cpu for r in (b, c))


# 16
def test_touched_blocks_survive_eviction():
    rig = Rig(cpu_blocks=5)
    a, b, c = (rig.request(n, 33, seed=i) for i, n in enumerate("abc"))
    rig.store_prompt(a)
    rig.store_prompt(b)
    a_blocks = [rig.mgr.cpu.lookup(rig.key(a, 0, e)) for e in (16, 32)]
    rig.mgr.cpu.touch(a_blocks)
    rig.mgr.cpu.free(a_blocks)
    rig.store_prompt(c)
    assert rig.key(a, 0, 32) in rig.mgr.cpu and rig.key(b, 0, 32) not in rig.mgr.cpu


def _load_in_flight(rig):
    rig.store_prompt(rig.request("writer", 33))
    reader, _ = _roundtrip_hit(rig, 33)
    tables = rig.allocate(33)
    rig.mgr.prepare_load(reader, tables, 32)
    return reader, tables, rig.step()


# 17
def test_preemption_no_cpu_block_leak():
    rig = Rig()
    reader, tables, meta = _load_in_flight(rig)
    rig.mgr.request_finished(reader, tables)
    assert rig.mgr.loads.load_info("reader").finished
    rig.complete(meta)
    assert rig.mgr.cpu.num_pinned_blocks() == 0 and rig.mgr.loads.load_info("reader") is None


# 18
def test_eager_store_preemption_cleanup():
    rig = Rig()
    req = rig.request("a", 33)
    tables, meta = rig.store_prompt(req, complete=False)
    rig.mgr.request_finished(req, tables)
    assert rig.mgr.request_stores.progress("a").finished  # deferred: its store is in flight
    rig.complete(meta)
    assert "a" not in rig.mgr.request_stores


# 19
def test_inflight_finish_deferred_cleanup():
    rig = Rig()
    reader, tables, meta = _load_in_flight(rig)
    rig.mgr.request_finished(reader, tables)
    assert meta.load_event_to_req_ids[meta.load.event_id] == ("reader",)
    assert rig.step().load_event_to_req_ids == {meta.load.event_id: ("reader",)}  # still resent
    rig.complete(meta)
    assert rig.step().load_event_to_req_ids == {}


# 20
def test_multi_group_null_blocks_skipped():
    rig = Rig()
    req = rig.request("a", 33)
    tables = rig.allocate(33)
    rig.device.free([tables[0][1]])
    tables[0][1] = 0  # the second entry is the null block
    rig.mgr.prepare_load(req, tables, 0)
    rig.step((req, tables, 33))
    req.num_computed_tokens = 33
    rig.hash_blocks(req, tables, 33)
    meta = rig.step((req, [[]], 1))
    assert meta.store.device_block_ids == (tables[0][0],)
    rig.complete(meta)
    reader, result = _roundtrip_hit(rig, 33)
    assert result.hit_tokens == 16
    rig.mgr.prepare_load(reader, rig.allocate(33), 16)
    assert 0 not in rig.step().load.device_block_ids


# 21
def test_chunked_prefill_reads_live_block_ids():
    rig = Rig()
    req = rig.request("a", 65)
    tables = rig.allocate(65)
    first, second = [tables[0][:2]], [tables[0][2:]]
    rig.mgr.prepare_load(req, first, 0)
    rig.step((req, first, 32))
    req.num_computed_tokens = 32
    rig.hash_blocks(req, tables, 32)
    meta = rig.step((req, second, 33))
    assert meta.store.device_block_ids == tuple(tables[0][:2])
    req.num_computed_tokens = 65
    rig.hash_blocks(req, tables, 65)
    meta = rig.step((req, [[]], 1))
    assert meta.store.device_block_ids == tuple(tables[0][2:4]) and len(rig.mgr.request_stores) == 1


# 22
def test_partial_gpu_prefix_plus_cpu_load():
    rig = Rig()
    rig.store_prompt(rig.request("writer", 97))
    reader, result = _roundtrip_hit(rig, 97, local=32)
    assert result.hit_tokens == 64
    tables = rig.allocate(97)
    plan = rig.mgr.prepare_load(reader, tables, 32)
    assert plan.device_block_ids == tuple(tables[0][2:4])


# 23
def test_toctou_cpu_hit_evicted_between_phases_no_crash():
    rig = Rig(cpu_blocks=5)
    rig.store_prompt(rig.request("writer", 33))
    reader, result = _roundtrip_hit(rig, 33)
    for i in range(3):  # pressure between lookup and allocation
        rig.store_prompt(rig.request(f"filler{i}", 33, seed=10 + i))
    plan = rig.mgr.prepare_load(reader, rig.allocate(33), 32)
    assert len(plan.cpu_block_ids) == 2 and plan.cpu_block_ids == tuple(result.block_ids[0])


# 24
def test_reset_pending_eager_stores():
    rig = Rig()
    req = rig.request("a", 33)
    tables, meta = rig.store_prompt(req, complete=False)
    assert rig.mgr.reset() is False
    assert all(rig.device.ref_count(b) == 2 for b in meta.store.device_block_ids)  # engine + copy pin
    rig.complete(meta)
    assert rig.mgr.cpu.num_free_blocks == rig.mgr.cpu.num_usable_blocks
    assert rig.key(req, 0, 16) not in rig.mgr.cpu  # abandoned: nothing cached
    assert rig.mgr.reset() is True


# 25
def test_reset_pending_lazy_stores():
    rig = _lazy_rig()
    req = rig.request("a", 33)
    rig.finish(req, _computed_unsent(rig, req))
    meta = rig.step()
    assert rig.mgr.reset() is False and rig.mgr.lazy_cursor is None
    rig.complete(meta)
    assert rig.mgr.lookup(rig.request("r", 33), 0).hit_tokens == 0


# 26
def test_reset_pending_loads():
    rig = Rig()
    reader, tables, meta = _load_in_flight(rig)
    assert rig.mgr.reset() is False
    assert rig.step().load_event_to_req_ids == {meta.load.event_id: ("reader",)}
    rig.complete(meta)
    assert rig.mgr.reset() is True


# 27
@pytest.mark.parametrize("dcp", [1, 2, 4])
def test_cp_block_size_scaling(dcp):
    rig = Rig(dcp=dcp)
    assert rig.geo.group_block_tokens == (16 * dcp,)


# 28
@pytest.mark.parametrize("dcp", [2, 4])
def test_cp_eager_store_and_load_roundtrip(dcp):
    rig = Rig(dcp=dcp, hash_block_tokens=16)
    tokens = 16 * dcp * 2 + 1
    rig.store_prompt(rig.request("w", tokens))
    reader, result = _roundtrip_hit(rig, tokens)
    assert result.hit_tokens == 32 * dcp
    assert len(rig.mgr.prepare_load(reader, rig.allocate(tokens), result.hit_tokens).cpu_block_ids) == 2


# 29
@pytest.mark.parametrize("dcp", [2, 4])
def test_cp_effective_block_size_store_and_load(dcp):
    rig = Rig(dcp=dcp, hash_block_tokens=16)
    block = 16 * dcp
    _, meta = rig.store_prompt(rig.request("w", block + 1))
    assert meta.store.num_blocks == 1
    rig.store_prompt(rig.request("w2", 2 * block + 1))
    reader, result = _roundtrip_hit(rig, 2 * block + 1)
    tables = rig.allocate(2 * block + 1)
    plan = rig.mgr.prepare_load(reader, tables, block)
    assert plan.device_block_ids == (tables[0][0],)


# 30
def test_cp_lazy_target_blocks_scaling():
    targets = [Rig(dcp=d, lazy=True, max_num_batched_tokens=256).mgr.lazy_target_blocks for d in (1, 2, 4)]
    assert targets[0] > targets[1] > targets[2]


# 31
def test_hybrid_store_uses_resolved_group_block_sizes():
    rig = Rig("full_attention:16,mamba_all:64", dcp=2, hash_block_tokens=16)
    assert rig.geo.group_block_tokens == (32, 64)
    req = rig.request("a", 129)
    rig.store_prompt(req)
    assert rig.mgr.request_stores.progress("a").num_stored_blocks == (4, 2)


def _dcp_mixed():
    return Rig("full_attention:16,mamba_align:64", dcp=2, hash_block_tokens=16, cpu_blocks=32)


# 32
def test_dcp_mixed_cache_loads_fine_grained_external_hit():
    rig = _dcp_mixed()
    writer = rig.request("w", 200)
    tables = rig.allocate(200)
    rig.mgr.prepare_load(writer, tables, 0)
    rig.step((writer, tables, 160))
    writer.num_computed_tokens = 160
    rig.hash_blocks(writer, tables, 160)
    state = tables[1][-1]
    rig.device.cache_block(state, rig.key(writer, 1, 160))
    meta = rig.step((writer, [[], []], 40), handoffs={"w": [(1, state, 160)]})
    assert state in meta.store.device_block_ids  # stored in the step it arrives
    rig.complete(meta)
    reader, result = _roundtrip_hit(rig, 200, local=64)
    assert result.hit_tokens == 96 and rig.geo.fine_grained.enabled
    fa = rig.device.allocate(7)
    mamba = rig.device.allocate(4)
    plan = rig.mgr.prepare_load(reader, [fa, mamba], 96)
    assert plan.device_block_ids == (fa[2], fa[3], fa[4], mamba[2])


def _tail_rig():
    # FA block 32 x DCP 4 = 128 tokens, Mamba align 64, hash 16: an 80-token prompt ends inside the FA block.
    return Rig("full_attention:32,mamba_align:64", dcp=4, hash_block_tokens=16, cpu_blocks=32)


# 33
def test_finished_eager_store_caches_fa_partial_tail_for_hybrid_hit():
    rig = _tail_rig()
    writer = rig.request("w", 80)
    tables = rig.allocate(81)
    rig.mgr.prepare_load(writer, tables, 0)
    rig.step((writer, tables, 80))
    writer.num_computed_tokens = 81
    rig.device.add_alias(tables[0][0], rig.key(writer, 0, 80))  # the engine's partial-tail registration
    rig.device.cache_block(tables[1][-1], rig.key(writer, 1, 80))
    rig.complete(rig.step((writer, [[], []], 1), handoffs={"w": [(1, tables[1][-1], 80)]}))
    rig.finish(writer, tables)
    meta = rig.step()
    assert meta.store.device_block_ids == (tables[0][0],)
    rig.complete(meta)
    longer = rig.request("r", 120)  # same first 80 tokens, then more
    assert rig.mgr.lookup(longer, 0).hit_tokens == 80


# 34
def test_finished_eager_store_does_not_duplicate_completed_partial_tail():
    rig = Rig("full_attention:32,mamba_align:64", hash_block_tokens=16, cpu_blocks=32)
    req = rig.request("a", 56)  # prompt tail boundary 48 lies inside FA block 1 (32..64)
    req.block_hashes = rig.request("x", 80).block_hashes  # decode extended the hashes past 64
    tables = rig.allocate(80)
    rig.mgr.prepare_load(req, tables, 0)
    rig.step((req, tables, 56))
    rig.device.add_alias(tables[0][1], rig.key(req, 0, 48))
    req.num_computed_tokens = 66
    rig.hash_blocks(req, tables, 64)  # decode filled FA block 1
    rig.mgr.request_finished(req, tables)
    meta = rig.step()
    assert meta.store.device_block_ids.count(tables[0][1]) == 1 and meta.store.num_blocks == 2


# 35
def test_external_lookup_rejects_misaligned_local_prefix():
    rig = _dcp_mixed()
    result = rig.mgr.lookup(rig.request("r", 300), 16)
    assert result.hit_tokens == 0 and result.miss_reason is MissReason.MISALIGNED_LOCAL_PREFIX


# 36
def test_fine_grained_external_hits_require_eager_offload():
    assert Rig("full_attention:16,mamba_align:64").geo.fine_grained.enabled
    lazy = Rig("full_attention:16,mamba_align:64", lazy=True).geo.fine_grained
    assert not lazy.enabled and "lazy" in lazy.reason


# 37
def test_eager_store_does_not_scan_mamba_blocks_positionally():
    rig = Rig("full_attention:16,mamba_align:64", cpu_blocks=16)
    req = rig.request("a", 33)
    tables = rig.allocate(33)
    rig.mgr.prepare_load(req, tables, 0)
    state = tables[1][-1]
    rig.device.cache_block(state, rig.key(req, 1, 32))
    meta = rig.step((req, tables, 33), handoffs={"a": [(1, state, 32)]})
    assert meta.store.device_block_ids == (state,) and rig.mgr.request_stores.progress("a").num_stored_blocks == (0, 0)
    req.num_computed_tokens = 33
    rig.hash_blocks(req, tables, 33)
    meta = rig.step((req, [[], []], 1))
    assert meta.store.device_block_ids == tuple(tables[0][:2])
    assert rig.mgr.request_stores.progress("a").num_stored_blocks == (2, 0)
    assert rig.step((req, [[], []], 1)).store is None


# 38
def test_eager_store_scans_mamba_all_blocks_positionally():
    rig = Rig("full_attention:16,mamba_all:32", cpu_blocks=16)
    req = rig.request("a", 65)
    tables = rig.allocate(65)
    rig.mgr.prepare_load(req, tables, 0)
    assert rig.step((req, tables, 65)).store is None
    req.num_computed_tokens = 65
    rig.hash_blocks(req, tables, 65)
    meta = rig.step((req, [[], []], 1))
    assert meta.store.num_blocks == 6 and rig.mgr.request_stores.progress("a").num_stored_blocks == (4, 2)


# 39
@pytest.mark.parametrize("departure", ["preempted", "finished", "unregistered"])
def test_boundary_handoff_dropped_for_departing_request(departure):
    rig = Rig("full_attention:16,mamba_align:64", cpu_blocks=16)
    req = rig.request("a", 33)
    tables = rig.allocate(33)
    if departure != "unregistered":
        rig.mgr.prepare_load(req, tables, 0)
    state = tables[1][-1]
    rig.device.cache_block(state, rig.key(req, 1, 32))
    meta = rig.step(
        handoffs={"a": [(1, state, 32)]},
        preempted={"a"} if departure == "preempted" else (),
        finished={"a"} if departure == "finished" else (),
    )
    assert meta.store is None
    stats = rig.mgr.boundary_stats
    assert (stats.dropped_request_gone, stats.stored, stats.published) == (1, 0, 1)
    assert meta.need_flush == (departure == "preempted")


# 40
def test_boundary_handoff_keeps_block_meta_index_parallel():
    rig = Rig("full_attention:16,mamba_align:64", cpu_blocks=16, enable_kv_events=True)
    req = rig.request("a", 33)
    tables = rig.allocate(33)
    rig.mgr.prepare_load(req, tables, 0)
    rig.step((req, tables, 33))
    req.num_computed_tokens = 33
    rig.hash_blocks(req, tables, 33)
    state = tables[1][-1]
    rig.device.cache_block(state, rig.key(req, 1, 32))
    meta = rig.step((req, [[], []], 1), handoffs={"a": [(1, state, 32)]})
    transfer = rig.mgr.stores.transfer(meta.store.event_id)
    assert list(meta.store.device_block_ids) == [state, *tables[0][:2]]
    assert len(transfer.metas) == len(transfer.device_ids) == len(transfer.cpu_ids) == 3
    assert rig.mgr.stores.event_request_ids(meta.store.event_id) == ("a",)
    rig.complete(meta)
    stored = [e for e in rig.mgr.take_kv_events() if e.kind == "stored"]
    assert len(stored) == 3 and stored[1].meta.token_ids == tuple(req.all_token_ids[:16])
