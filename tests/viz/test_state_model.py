"""The visualizer's model: stepping, request selection, and the numbers shown equal the recording's state."""

from __future__ import annotations

import pytest

from toolkit.locations import data_dir
from toolkit.viz.recording import load_recording
from toolkit.viz.state_model import CacheStateModel

HANDMADE = data_dir() / "runs" / "handmade_cache_state.jsonl"


@pytest.fixture
def model():
    return CacheStateModel.from_path(HANDMADE)


def test_stepping_moves_and_clamps_at_both_ends(model):
    assert model.step == 0 and model.num_steps == 8
    assert model.next().step == 1 and model.next().step == 2
    assert model.prev().step == 1
    assert model.go_to(99).step == 7 and model.next().step == 7
    assert model.go_to(-3).step == 0 and model.prev().step == 0
    with pytest.raises(ValueError, match="outside 0..7"):
        model.view(8)


def test_every_number_shown_equals_the_recorded_state(model):
    rec = load_recording(HANDMADE)
    for k, record in enumerate(rec.steps):
        view = model.go_to(k)
        assert view.num_free_blocks == record["pool"]["num_free_blocks"]
        for pool, entry in zip(view.pools, record["pool"]["groups"]):
            assert pool.num_used_blocks == entry["num_used_blocks"]
            assert list(pool.lru_block_ids) == entry["lru_block_ids"]  # LRU order kept, next victim first
            assert pool.num_pinned == len(entry["pinned_block_ids"])
            assert pool.num_in_flight == len(entry["in_flight_block_ids"])
        assert list(view.events) == record["events"]
        lines = model.status_lines()
        assert lines[0] == f"step {k} of 7"
        assert lines[1] == f"pool: used {19 - view.num_free_blocks}/19 free {view.num_free_blocks}"


def test_pool_rows_account_for_every_block(model):
    for k in range(model.num_steps):
        rows = model.pool_rows(k)
        assert sum(r["num_blocks"] for r in rows) == 19
        assert {r["state"] for r in rows} <= {"evictable", "pinned", "in flight", "free"}


def test_step_three_pins_the_loaded_blocks(model):
    view = model.go_to(3)
    attn, swa, gdn = view.pools
    assert (attn.num_pinned, swa.num_pinned, gdn.num_pinned) == (4, 2, 1)  # r1 loads 64 tokens: 4, window 2, 1 state
    assert attn.lru_block_ids == (5, 6)
    assert [e["kind"] for e in view.events] == ["load", "load", "load"]


def test_request_selection_keeps_the_latest_lookup(model):
    assert model.request_ids == ["r0", "r1", "r2"] and model.req_id == "r0"
    model.select("r1")
    assert model.view(2).request is None  # not looked up before step 3
    assert "r1: not looked up yet" in model.status_lines(2)[-1]
    r = model.view(5).request
    assert (r.joint_hit_tokens, r.as_of_step, r.boundaries) == (64, 3, (64, 64, 64))
    model.select("r0")
    before, after = model.view(6).request, model.view(7).request
    assert before.as_of_step == 0 and after.as_of_step == 7
    assert after.boundaries == (0, 64, 64) and after.joint_hit_tokens == 0 and after.limiting_group_ids == (0,)
    assert model.boundary_rows(7)[0]["miss_reason"] == "evicted"
    with pytest.raises(ValueError, match="unknown request 'nope'"):
        model.select("nope")


def test_eviction_step_reports_drops_with_reasons(model):
    drops = [e for e in model.view(6).events if e["kind"] == "drop"]
    assert {e["reason"] for e in drops} == {"evicted"} and sum(len(e["block_ids"]) for e in drops) == 8
