"""Behaviours beyond vLLM's SimpleCPU: miss attribution, safe partial acceptance, hand-off retry, load errors,
per-group usage, the snapshot, and scan-resistant eviction inside the manager."""

import json

from core_rig import Rig

from toolkit.core import MissReason


def _hybrid(**kw):
    kw.setdefault("cpu_blocks", 64)
    return Rig("full_attention:16,mamba_align:64", **kw)


def _write_hybrid(rig, req, *, boundaries, complete=True):
    """Store FA blocks of the whole prompt and Mamba states at `boundaries` (hand-offs of a live request)."""
    tables = rig.allocate(req.num_tokens)
    rig.mgr.prepare_load(req, tables, 0)
    rig.step((req, tables, req.num_tokens))
    req.num_computed_tokens = req.num_tokens
    rig.hash_blocks(req, tables, req.num_tokens)
    states = rig.device.allocate(len(boundaries))
    for state, boundary in zip(states, boundaries):
        rig.device.cache_block(state, rig.key(req, 1, boundary))
    meta = rig.step((req, [[], []], 1), handoffs={req.request_id: [(1, s, b) for s, b in zip(states, boundaries)]})
    if complete:
        rig.complete(meta)
    return tables, meta


# ----- miss attribution ----------------------------------------------------------------------------------------


def test_miss_attribution_never_stored_then_evicted_then_in_flight():
    rig = Rig(cpu_blocks=3)
    a = rig.request("a", 33)
    assert rig.mgr.lookup(a, 0).miss_reason is MissReason.NEVER_STORED
    rig.store_prompt(a)
    rig.store_prompt(rig.request("b", 33, seed=5))  # evicts a's blocks from the 2-block pool
    result = rig.mgr.lookup(rig.request("a2", 33), 0)
    assert result.hit_tokens == 0 and result.miss_reason is MissReason.EVICTED and result.limiting_group_id == 0
    c = rig.request("c", 33, seed=9)
    rig.store_prompt(c, complete=False)
    assert rig.mgr.lookup(rig.request("c2", 33, seed=9), 0).miss_reason is MissReason.STORE_IN_FLIGHT
    counts = rig.mgr.miss_stats.as_dict()
    assert counts["by_reason"]["evicted"] == 1 and counts["by_group"]["0"]["store_in_flight"] == 1


def test_miss_attribution_mamba_state_absent_names_the_mamba_group():
    rig = _hybrid()
    writer = rig.request("w", 129)
    _write_hybrid(rig, writer, boundaries=[64])
    result = rig.mgr.lookup(rig.request("r", 129), 0)
    assert result.hit_tokens == 64
    assert result.miss_reason is MissReason.MAMBA_STATE_ABSENT and result.limiting_group_id == 1
    assert result.group_reach_tokens == (128, 64)


def test_miss_attribution_window_incomplete_and_alignment_clamp():
    rig = Rig("full_attention:16,sliding_window:16/48", cpu_blocks=32)
    req = rig.request("w", 65)
    tables = rig.allocate(65)
    rig.mgr.prepare_load(req, tables, 0)
    rig.step((req, tables, 65))
    req.num_computed_tokens = 65
    rig.hash_blocks(req, tables, 65, groups={0})
    rig.hash_blocks(req, tables, 32, groups={1})  # the window group only has its first two blocks
    rig.complete(rig.step((req, [[], []], 1)))
    result = rig.mgr.lookup(rig.request("r", 65), 0)
    assert result.hit_tokens == 32 and result.limiting_group_id == 1
    assert result.miss_reason is MissReason.WINDOW_INCOMPLETE
    assert result.block_ids[1] == tuple(result.block_ids[1])  # null-padded window list
    clamp = Rig("full_attention:32,mamba_all:64", hash_block_tokens=16)  # coarse: scheduler block 64
    r = clamp.request("x", 100)
    assert clamp.mgr.lookup(r, 0).miss_reason is MissReason.NEVER_STORED
    lone = Rig(hash_block_tokens=8)
    short = lone.request("s", 20)  # hashes to 16, cap 19, alignment 16: nothing clamped, hit would be 16
    lone.store_prompt(short)
    assert lone.mgr.lookup(lone.request("s2", 20), 0).hit_tokens == 16


# ----- safe partial acceptance ----------------------------------------------------------------------------------


def test_partial_acceptance_declines_when_the_mamba_state_is_missing_at_the_accepted_boundary():
    rig = _hybrid()
    _write_hybrid(rig, rig.request("w", 129), boundaries=[128])
    reader = rig.request("r", 129)
    result = rig.mgr.lookup(reader, 0)
    assert result.hit_tokens == 128
    tables = rig.allocate(129)
    plan = rig.mgr.prepare_load(reader, tables, 64)  # the engine accepted only 64 tokens
    assert plan.declined and set(plan.failed_device_block_ids) == set(tables[0][:4])  # Mamba entry 0 is null
    assert rig.mgr.cpu.num_pinned_blocks() == 0 and rig.step().load is None
    assert rig.mgr.take_load_failures() == {"r": plan.failed_device_block_ids}


def test_partial_acceptance_loads_the_state_of_the_accepted_boundary():
    rig = _hybrid()
    writer = rig.request("w", 129)
    _write_hybrid(rig, writer, boundaries=[64, 128])
    reader = rig.request("r", 129)
    assert rig.mgr.lookup(reader, 0).hit_tokens == 128
    fa = rig.device.allocate(9)
    mamba = rig.device.allocate(3)
    plan = rig.mgr.prepare_load(reader, [fa, mamba], 64)
    state_64 = rig.mgr.cpu.lookup(rig.key(writer, 1, 64))
    assert not plan.declined and plan.device_block_ids == (*fa[:4], mamba[0])
    assert plan.cpu_block_ids[-1] == state_64


# ----- hand-offs when the pool is full ----------------------------------------------------------------------------


def test_handoff_waits_with_its_block_pinned_when_every_cpu_block_is_pinned():
    # The state at 32 tokens is inside a 64-token scheduler block: at "low" priority it would be skipped once the
    # tier is full of block-aligned prefixes (the next test); "equal" keeps the retry mechanics alone under test.
    rig = _hybrid(cpu_blocks=3, fine_store_priority="equal")
    reader = rig.request("a", 33)
    tables, meta = rig.store_prompt(reader, complete=False)  # both CPU blocks pinned by the in-flight store
    state = tables[1][-1]
    rig.device.cache_block(state, rig.key(reader, 1, 32))
    meta2 = rig.step((reader, [[], []], 1), handoffs={"a": [(1, state, 32)]})
    stats = rig.mgr.boundary_stats
    assert meta2.store is None and stats.pending_retry == 1 and rig.device.ref_count(state) == 2
    assert stats.published == stats.accounted()
    rig.complete(meta)
    meta3 = rig.step()
    assert meta3.store.device_block_ids == (state,)
    assert (stats.stored, stats.pending_retry, stats.num_retried_stored) == (1, 0, 1)
    rig.complete(meta3)
    assert rig.device.ref_count(state) == 1 and stats.published == stats.accounted()


def test_a_fine_grained_only_state_never_evicts_a_block_aligned_prefix():
    """The same full tier at the default priority: storing the state at 32 tokens would evict one of the prompt's
    block-aligned blocks, so it is skipped and counted, its device pin released, the prefix kept."""
    rig = _hybrid(cpu_blocks=3)
    reader = rig.request("a", 33)
    tables, meta = rig.store_prompt(reader, complete=False)
    state = tables[1][-1]
    rig.device.cache_block(state, rig.key(reader, 1, 32))
    rig.step((reader, [[], []], 1), handoffs={"a": [(1, state, 32)]})
    rig.complete(meta)
    cached_before = sorted(k for b in range(1, 3) for k in rig.mgr.cpu.keys_of(b))
    meta3 = rig.step()
    stats = rig.mgr.boundary_stats
    assert meta3.store is None
    assert (stats.stored, stats.skipped_fine_tier_full, stats.pending_retry) == (0, 1, 0)
    assert stats.published == stats.accounted()
    assert rig.mgr.cpu.low_counts["skipped_tier_full"] == 1
    assert rig.device.ref_count(state) == 1  # only the request's own reference is left
    assert sorted(k for b in range(1, 3) for k in rig.mgr.cpu.keys_of(b)) == cached_before


def test_a_fine_grained_only_state_without_spare_room_is_skipped_at_once_never_queued():
    """At "low" priority a state inside a scheduler block takes only spare room: with every CPU block pinned there is
    none, so it is skipped in the step it arrives (counted, low count too), never pinned for the retry queue."""
    rig = _hybrid(cpu_blocks=3, handoff_retry_steps=2)
    req = rig.request("a", 33)
    tables, meta = rig.store_prompt(req, complete=False)
    state = tables[1][-1]
    rig.device.cache_block(state, rig.key(req, 1, 32))
    meta2 = rig.step((req, [[], []], 1), handoffs={"a": [(1, state, 32)]})
    stats = rig.mgr.boundary_stats
    assert meta2.store is None and rig.mgr.pending_work()["handoffs_waiting"] == 0
    assert (stats.skipped_fine_tier_full, stats.pending_retry, stats.dropped_cpu_full) == (1, 0, 0)
    assert rig.mgr.cpu.low_counts["skipped_tier_full"] == 1
    assert rig.device.ref_count(state) == 1 and stats.published == stats.accounted()


def test_handoff_dropped_after_its_retry_budget_is_counted():
    rig = _hybrid(cpu_blocks=3, handoff_retry_steps=2, fine_store_priority="equal")  # retry mechanics alone
    req = rig.request("a", 33)
    tables, meta = rig.store_prompt(req, complete=False)
    state = tables[1][-1]
    rig.device.cache_block(state, rig.key(req, 1, 32))
    rig.step((req, [[], []], 1), handoffs={"a": [(1, state, 32)]})
    rig.step()
    rig.step()
    stats = rig.mgr.boundary_stats
    assert stats.dropped_cpu_full == 1 and stats.pending_retry == 0 and rig.device.ref_count(state) == 1
    assert stats.published == stats.accounted()


# ----- load errors ------------------------------------------------------------------------------------------------


def test_failed_load_releases_pins_drops_keys_and_reports_device_blocks():
    rig = Rig()
    rig.store_prompt(rig.request("w", 33))
    reader = rig.request("r", 33)
    rig.mgr.lookup(reader, 0)
    tables = rig.allocate(33)
    rig.mgr.prepare_load(reader, tables, 32)
    meta = rig.step()
    failed = rig.mgr.fail_load_events([meta.load.event_id])
    assert set(failed) == set(tables[0][:2])
    assert rig.mgr.cpu.num_pinned_blocks() == 0 and all(rig.device.ref_count(b) == 1 for b in tables[0])
    assert rig.mgr.lookup(rig.request("again", 33), 0).hit_tokens == 0  # suspect copies are gone
    assert rig.mgr.take_load_failures() == {"r": tuple(tables[0][:2])}
    assert rig.step().load_event_to_req_ids == {}


# ----- usage, snapshot, eviction policy -------------------------------------------------------------------------------


def test_usage_per_group_and_json_snapshot():
    rig = _hybrid(enable_kv_events=False)
    _write_hybrid(rig, rig.request("w", 129), boundaries=[64, 128])
    usage = {u.group_id: u.num_used_blocks for u in rig.mgr.usage()}
    assert usage == {0: 8, 1: 2}
    snap = rig.mgr.snapshot()
    json.dumps(snap)
    assert snap["groups"][0]["num_used_blocks"] == 8 and len(snap["groups"][1]["lru_block_ids"]) == 2
    assert snap["requests"]["w"]["stored_tokens"] == [128, 128]
    kinds = {e.to_json()["type"] for e in rig.mgr.take_step_events()}
    assert {"store", "handoff", "store_complete"} <= kinds and rig.mgr.take_step_events() == []


def _replay_hits(policy):
    rig = Rig(cpu_blocks=33, gpu_blocks=1024, eviction_policy=policy)
    reused = [rig.request(f"p{i}", 33, seed=i) for i in range(8)]
    for req in reused:
        rig.store_prompt(req)
    for req in reused:  # replayed once: looked up and loaded
        again = rig.request(req.request_id + "x", 33, seed=int(req.request_id[1:]))
        rig.mgr.lookup(again, 0)
        rig.mgr.prepare_load(again, rig.allocate(33), 32)
        rig.complete(rig.step())
    for i in range(40):  # a burst of one-off prompts
        rig.store_prompt(rig.request(f"o{i}", 33, seed=100 + i))
    return sum(rig.mgr.lookup(rig.request("q", 33, seed=i), 0).hit_tokens == 32 for i in range(8))


def test_scan_resistant_policy_keeps_reused_prefixes_through_the_manager():
    assert _replay_hits("lru") == 0
    assert _replay_hits("slru") >= 6


# ----- the finish-time flush ----------------------------------------------------------------------------------


def test_finish_flush_is_committed_by_the_next_step_and_yields_to_lookup_pins():
    """A finishing request's unstored blocks are pinned at once (the engine frees them next) and copied by the next
    step's store event, CPU blocks allocated there. Lookup hits in between may pin free CPU blocks: the flush is
    then cut to what is free, the cut blocks unpinned and counted, never an allocation failure."""
    rig = Rig(cpu_blocks=5)  # 4 usable
    other = rig.request("b", 33, seed=3)
    tables_b, _ = rig.store_prompt(other)  # 2 cached blocks, free: 4 free in all
    rig.finish(other, tables_b)
    a = rig.request("a", 49)
    tables = rig.allocate(49)
    rig.mgr.prepare_load(a, tables, 0)
    rig.complete(rig.step((a, tables, 49)))  # nothing confirmed before this step: nothing stored
    a.num_computed_tokens = 49
    rig.hash_blocks(a, tables, 49)
    rig.finish(a, tables)  # 3 confirmed blocks pending, pinned on the device
    assert rig.mgr.has_pending_work() and rig.mgr.num_pinned_device_blocks() == 3
    reader = rig.request("b2", 33, seed=3)
    assert rig.mgr.lookup(reader, 0).hit_tokens == 32  # pins b's 2 CPU blocks: 2 free left
    meta = rig.step()
    assert len(meta.store.device_block_ids) == 2 and rig.mgr.finish_flush.dropped_blocks == 1
    assert rig.mgr.num_pinned_device_blocks() == 2
    rig.complete(meta)
    rig.mgr.prepare_load(reader, rig.allocate(33), 0)  # declines the hit: its pins go
    assert rig.mgr.num_pinned_device_blocks() == 0 and not rig.mgr.has_pending_work()
    assert rig.mgr.lookup(rig.request("a2", 49), 0).hit_tokens == 32  # the two stored blocks serve
