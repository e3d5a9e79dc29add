"""The manager's one observer interface: subscribers see every lookup, load plan, store and step; none costs a slot."""

from __future__ import annotations

import pytest

from toolkit.core import DeviceBlockPoolModel, HybridGeometry, OffloadConfig, OffloadManager, parse_groups_spec
from toolkit.core.observer import FanOut, OffloadObserver, subscribe, unsubscribe
from toolkit.core.sim import SimEngine


class Log(OffloadObserver):
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def on_lookup(self, request_id, local_tokens, result) -> None:
        self.events.append(("lookup", request_id, result.hit_tokens))

    def on_load_planned(self, request_id, plan) -> None:
        self.events.append(("load", request_id, len(plan.device_block_ids)))

    def on_store_committed(self, store) -> None:
        self.events.append(("store", store.event_id, len(store.device_block_ids)))

    def on_step(self, step, meta) -> None:
        self.events.append(("step",))


def _rig(**config):
    geometry = HybridGeometry(groups=parse_groups_spec("full_attention:16,mamba_align:64"))
    device = DeviceBlockPoolModel(128)
    manager = OffloadManager(geometry=geometry, device_pool=device, config=OffloadConfig(num_cpu_blocks=64, **config))
    return manager, SimEngine(manager, device, chunk_tokens=64)


def _run_twice(engine: SimEngine) -> None:
    """The same prompt twice: the first stores it, the second hits it and loads."""
    tokens = list(range(1000, 1200))
    engine.add_request("first", tokens, num_decode_tokens=1)
    engine.run_until_idle()
    engine.add_request("second", tokens, num_decode_tokens=1)
    engine.run_until_idle()


def test_no_subscriber_leaves_the_slot_empty_and_subscribers_see_every_event():
    manager, engine = _rig(diagnose_lookups=False)
    assert manager.observer is None  # the emission is one attribute test, nothing is called
    first, second = Log(), Log()
    subscribe(manager, first)
    assert manager.observer is first  # one subscriber: no fan-out in between
    subscribe(manager, second)
    assert isinstance(manager.observer, FanOut)
    _run_twice(engine)
    assert first.events == second.events  # both saw the same events, in the same order
    kinds = [e[0] for e in first.events]
    assert kinds.count("lookup") == manager.miss_stats.num_lookups >= 2
    assert kinds.count("step") == engine.num_steps
    stored = sum(e[2] for e in first.events if e[0] == "store")
    loaded = [e for e in first.events if e[0] == "load"]
    assert stored > 0 and loaded and loaded[0][1] == "second" and loaded[0][2] > 0
    hits = [e for e in first.events if e[0] == "lookup" and e[1] == "second"]
    assert hits and hits[0][2] > 0
    assert manager.miss_stats.num_hit_tokens == sum(e[2] for e in first.events if e[0] == "lookup")


def test_unsubscribe_restores_the_empty_slot_and_refuses_strangers():
    manager, _ = _rig()
    first, second = Log(), Log()
    subscribe(manager, first)
    subscribe(manager, second)
    unsubscribe(manager, first)
    assert manager.observer is second
    unsubscribe(manager, second)
    assert manager.observer is None
    with pytest.raises(ValueError, match="observer: Log is not subscribed"):
        unsubscribe(manager, first)
    with pytest.raises(ValueError, match="observer: must be an OffloadObserver, got str"):
        subscribe(manager, "not an observer")


def test_a_subscriber_that_needs_per_group_reasons_turns_the_diagnosis_on():
    manager, engine = _rig(diagnose_lookups=False)

    class Reach(OffloadObserver):
        needs_lookup_diagnosis = True

        def __init__(self) -> None:
            self.reach = []

        def on_lookup(self, request_id, local_tokens, result) -> None:
            self.reach.append(result.group_reach_tokens)

    reach = subscribe(manager, Reach())
    assert manager.diagnose_lookups
    _run_twice(engine)
    assert reach.reach and all(len(r) == manager.geometry.num_groups for r in reach.reach)


class Stream(OffloadObserver):
    wants_events = True

    def __init__(self) -> None:
        self.events: list = []

    def on_event(self, event) -> None:
        self.events.append(event)


def test_the_typed_event_stream_reaches_an_observer_even_where_no_buffer_is_kept():
    from toolkit.core import events as ev

    # max_step_events=0 is the vLLM connector's setting: no buffer, so nothing is built until an observer asks.
    manager, engine = _rig(max_step_events=0)
    assert not manager.event_log.recording and manager.take_step_events() == []
    stream = subscribe(manager, Stream())
    assert manager.event_log.recording and manager.cpu.records_events
    subscribe(manager, Log())  # a second, event-less subscriber: the fan-out passes events only to who wants them
    _run_twice(engine)
    kinds = [type(e) for e in stream.events]
    assert kinds.count(ev.LookupDone) == manager.miss_stats.num_lookups
    assert ev.StoreSent in kinds and ev.StoreDone in kinds and ev.LoadSent in kinds and ev.LoadDone in kinds
    sent = {e.event_id for e in stream.events if isinstance(e, ev.StoreSent)}
    assert sent == {e.event_id for e in stream.events if isinstance(e, ev.StoreDone)}  # every store ended
    assert [e.request_id for e in stream.events if isinstance(e, ev.LoadDone)] == ["second"]
    assert all(e.to_json()["type"] == e.kind for e in stream.events)
    unsubscribe(manager, stream)
    before = len(stream.events)
    _run_twice(engine)
    assert len(stream.events) == before and not manager.event_log.recording


def test_evictions_and_failed_loads_are_events_and_the_buffer_sees_what_the_observer_sees():
    from toolkit.core import events as ev

    geometry = HybridGeometry(groups=parse_groups_spec("full_attention:16,mamba_align:64"))
    device = DeviceBlockPoolModel(256)
    manager = OffloadManager(geometry=geometry, device_pool=device, config=OffloadConfig(num_cpu_blocks=40))
    engine = SimEngine(manager, device, chunk_tokens=64, completion_delay_steps=2)
    stream = subscribe(manager, Stream())
    tokens = list(range(1000, 1200))
    engine.add_request("first", tokens, num_decode_tokens=1)
    engine.run_until_idle()
    engine.add_request("second", tokens, num_decode_tokens=1)
    meta = engine.step()
    for _ in range(20):  # the hit's load is sent within a few steps
        if meta.load is not None:
            break
        meta = engine.step()
    assert meta.load is not None
    failed = manager.fail_load_events([meta.load.event_id])
    engine.run_until_idle()
    for n in range(6):  # other prompts: the 39-block tier evicts
        engine.add_request(f"other{n}", list(range(5000 + 300 * n, 5200 + 300 * n)), num_decode_tokens=1)
        engine.run_until_idle()
    load_failed = [e for e in stream.events if isinstance(e, ev.LoadFailed)]
    assert [e.request_id for e in load_failed] == ["second"] and load_failed[0].failed_device_block_ids == failed
    assert any(isinstance(e, ev.KeysDropped) for e in stream.events)  # the failed load's CPU copies lost their keys
    evicted = [e for e in stream.events if isinstance(e, ev.BlockEvicted)]
    assert evicted and all(e.num_keys >= 1 for e in evicted)
    assert manager.take_step_events() == stream.events  # one stream: the buffer holds exactly what was emitted
