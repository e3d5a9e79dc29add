"""The manager's parts answer read-only queries through a request's life, and a query's answer is a copy."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
from core_rig import Rig


def test_store_queries_follow_a_store_from_commit_to_completion():
    rig = Rig()
    writer = rig.request("writer", 33)
    assert "writer" not in rig.mgr.request_stores
    tables, meta = rig.store_prompt(writer, complete=False)
    event_id = meta.store.event_id
    assert rig.mgr.stores.stores_in_flight() == (event_id,) and rig.mgr.stores.is_pending(event_id)
    assert rig.mgr.stores.event_request_ids(event_id) == ("writer",)
    transfer = rig.mgr.stores.transfer(event_id)
    assert tuple(transfer.device_ids) == meta.store.device_block_ids and set(transfer.sources) == {"positional"}
    progress = rig.mgr.request_stores.progress("writer")
    assert progress.num_stored_blocks == (2,) and progress.store_event_ids == {event_id}
    assert not progress.finished
    assert Counter(rig.mgr.held_cpu_blocks()) == Counter(meta.store.host_block_ids)
    assert Counter(rig.mgr.held_device_blocks()) == Counter(meta.store.device_block_ids)

    rig.mgr.request_finished(writer, tables)  # its store is in flight: kept, marked finished
    assert rig.mgr.request_stores.progress("writer").finished
    rig.complete(meta)
    assert not rig.mgr.stores.is_pending(event_id) and rig.mgr.stores.transfer(event_id) is None
    assert rig.mgr.stores.stores_in_flight() == () and rig.mgr.request_stores.progress("writer") is None
    assert rig.mgr.held_cpu_blocks() == [] and rig.mgr.held_device_blocks() == []


def test_load_queries_follow_a_hit_from_lookup_to_completion():
    rig = Rig()
    rig.store_prompt(rig.request("writer", 33))
    reader = rig.request("reader", 33)
    result = rig.mgr.lookup(reader, 0)
    assert rig.mgr.loads.pending_hit_ids() == {"reader"} and rig.mgr.loads.load_info("reader") is None
    assert sorted(rig.mgr.held_cpu_blocks()) == sorted(result.real_block_ids())

    tables = rig.allocate(33)
    plan = rig.mgr.prepare_load(reader, tables, 32)
    info = rig.mgr.loads.load_info("reader")
    assert not rig.mgr.loads.pending_hit_ids() and info.event_id is None and not info.abandoned
    assert info.cpu_block_ids == plan.cpu_block_ids and info.device_block_ids == plan.device_block_ids

    meta = rig.step()
    assert rig.mgr.loads.load_info("reader").event_id == meta.load.event_id
    assert rig.mgr.loads.events_in_flight() == {meta.load.event_id: ("reader",)}
    assert rig.mgr.loads.event_request_ids(meta.load.event_id) == ("reader",)
    assert rig.mgr.reset() is False  # the sent load is abandoned, its pins kept until the workers report
    assert rig.mgr.loads.load_info("reader").abandoned and rig.mgr.loads.num_tracked() == 1
    rig.complete(meta)
    assert rig.mgr.loads.load_info("reader") is None and rig.mgr.loads.num_tracked() == 0
    assert rig.mgr.loads.events_in_flight() == {} and rig.mgr.held_cpu_blocks() == []


def test_query_answers_are_copies():
    rig = Rig()
    rig.store_prompt(rig.request("writer", 33))
    reader = rig.request("reader", 33)
    rig.mgr.lookup(reader, 0)
    rig.mgr.prepare_load(reader, rig.allocate(33), 32)
    meta = rig.step()
    rig.mgr.loads.events_in_flight().clear()
    rig.mgr.held_device_blocks().clear()
    with pytest.raises(dataclasses.FrozenInstanceError):
        rig.mgr.loads.load_info("reader").event_id = None
    assert rig.mgr.loads.events_in_flight() == {meta.load.event_id: ("reader",)}
    assert rig.mgr.num_pinned_device_blocks() == len(meta.load.device_block_ids) == 2
    assert rig.mgr.pending_work()["load_events_in_flight"] == 1
    rig.complete(meta)
    assert rig.mgr.num_pinned_device_blocks() == 0 and rig.mgr.pending_work()["load_events_in_flight"] == 0
