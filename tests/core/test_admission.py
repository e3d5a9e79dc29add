"""The store admission rule (`StoreBatch.admit`, the one implementation every store path uses) against a plain
model of the rule, and the hand-off intake's counters."""

from __future__ import annotations

import random

from toolkit.core.pool.blocks import CpuBlockPool
from toolkit.core.pool.device_pool import DeviceBlockPoolModel
from toolkit.core.pool.in_flight import InFlightStores
from toolkit.core.pool.keys import BlockKey
from toolkit.core.requests import Handoff
from toolkit.core.stats import BoundaryStoreStats, HandoffOutcome
from toolkit.core.store.handoffs import HandoffIntake
from toolkit.core.store.selection import Admission, StoreBatch, StoreState


def _model(
    device, cpu_keys, flight_ids, flight_keys, also, capacity, taken, device_ids, stop_when_full, adds=None, groups=None
):
    """The rule as the reference behaviour states it, one block at a time, on plain sets (`adds[i]` False: block i
    is classified only; `groups[i]`: the group block i is read for, its key must be of that group)."""
    outcomes, added = [], []
    for index, device_id in enumerate(device_ids):
        if stop_when_full and taken + len(added) >= capacity:
            break
        primary = device.primary_key(device_id) if device_id != device.null_block_id else None
        if device_id == device.null_block_id:
            outcome = Admission.NULL_BLOCK
        elif primary is None or (groups is not None and primary.group_id != groups[index]):
            outcome = Admission.NOT_HASHED
        elif device_id in flight_ids or device_id in also or primary in flight_keys:
            outcome = Admission.IN_FLIGHT
        elif primary in cpu_keys:
            outcome = Admission.ALREADY_CACHED
        elif adds is not None and not adds[index]:
            outcome = Admission.READY  # classified only: nothing changes
        elif taken + len(added) >= capacity:
            outcome = Admission.NO_ROOM
        else:
            outcome = Admission.READY
            keys = (primary, *device.alias_keys(device_id))
            flight_ids.add(device_id)
            flight_keys.update(keys)
            added.append((device_id, keys, groups[index] if groups is not None else None))
        outcomes.append(outcome)
    return outcomes, added


def test_admit_equals_the_rule_on_random_blocks():
    rng = random.Random(23)
    for _ in range(300):
        device = DeviceBlockPoolModel(16)
        ids = device.allocate(15)
        for block_id in ids:  # some blocks unhashed, some sharing a key, some with an alias
            if rng.random() < 0.8:
                device.cache_block(block_id, BlockKey(rng.randrange(2), rng.randrange(8)))
                if rng.random() < 0.2:
                    device.add_alias(block_id, BlockKey(0, 100 + block_id))
        cpu = CpuBlockPool(8, record_events=False)
        held = cpu.allocate([0] * 3)
        for block_id in held:
            cpu.cache(block_id, BlockKey(rng.randrange(2), rng.randrange(8)))
        cpu.free(held)
        in_flight = InFlightStores()
        for block_id in rng.sample(ids, 2):
            in_flight.add(block_id, device.primary_key(block_id) and (device.primary_key(block_id),) or ())
        also = set(rng.sample(ids, rng.randrange(3)))
        capacity = rng.randrange(0, 8)
        batch = StoreBatch(capacity, in_flight)
        candidates = [rng.choice([*ids, 0]) for _ in range(rng.randrange(12))]
        stop_when_full = rng.random() < 0.5
        adds = [rng.random() < 0.6 for _ in candidates] if rng.random() < 0.5 else None
        # Mostly the group of the block's key; sometimes another group's (a stale table's id, now another group's).
        groups = [
            rng.randrange(2) if rng.random() < 0.2 or device.primary_key(d) is None else device.primary_key(d).group_id
            for d in candidates
        ]
        flight_ids, flight_keys = set(in_flight.device_ids), set(in_flight.keys)
        expected, added = _model(
            device,
            cpu.key_container,
            flight_ids,
            flight_keys,
            also,
            capacity,
            0,
            candidates,
            stop_when_full,
            adds,
            groups,
        )
        outcomes = batch.admit(
            device,
            cpu,
            candidates,
            groups,
            source="test",
            request_id="r",
            also_in_flight=also,
            stop_when_full=stop_when_full,
            adds=adds,
        )
        assert outcomes == expected
        assert batch.device_ids == [d for d, _, _ in added] and batch.keys == [k for _, k, _ in added]
        assert batch.group_ids == [g for _, _, g in added] and batch.sources == ["test"] * len(added)
        assert all(keys[0].group_id == group for _, keys, group in added)  # never another group's key
        assert list(batch.request_ids) == (["r"] if added else [])
        assert in_flight.device_ids == flight_ids and in_flight.keys == flight_keys
        assert len(batch) <= capacity


def test_handoff_outcomes_are_counted_by_name_and_account_for_every_handoff():
    device = DeviceBlockPoolModel(12)
    ids = device.allocate(8)
    for index, block_id in enumerate(ids[:6]):
        device.cache_block(block_id, BlockKey(1, index))
    cpu = CpuBlockPool(4, record_events=False)
    held = cpu.allocate([1])
    cpu.cache(held[0], BlockKey(1, 0))  # ids[0]'s key is on the CPU already
    cpu.free(held)
    batch = StoreBatch(2, InFlightStores())
    states = {"a": StoreState.empty(2), "b": StoreState.empty(2)}
    intake = HandoffIntake(max_waiting=1, max_retry_steps=2)
    stats, events = BoundaryStoreStats(), []
    handoffs = {
        "a": [Handoff(1, ids[0], 64), Handoff(1, ids[1], 128), Handoff(1, 0, 192), Handoff(1, ids[6], 256)],
        "b": [
            Handoff(1, ids[2], 64),
            Handoff(1, ids[1], 64),
            Handoff(1, ids[3], 128),
            Handoff(1, ids[4], 192),
            Handoff(1, ids[3], 256),
        ],
        "gone": [Handoff(1, ids[5], 64)],
    }
    pinned, accepted = intake.take(
        handoffs=handoffs,
        states=states,
        gone_request_ids={"gone"},
        device=device,
        cpu=cpu,
        batch=batch,
        stats=stats,
        events=events,
    )
    assert [e.outcome for e in events] == [
        "skipped_already_cached",
        "stored",
        "dropped_null_block",
        "dropped_not_hashed",
        "stored",
        "skipped_in_flight",
        "pending_retry",
        "dropped_cpu_full",
        "skipped_in_flight",
        "dropped_request_gone",
    ]
    assert pinned == [ids[3]] and batch.device_ids == [ids[1], ids[2]]
    # The intake reports what it accepted; the records are written only by their owner (`RequestStores`).
    assert accepted == [("a", 1, 128), ("b", 1, 64)]
    assert states["a"].handoff_boundary_tokens == [0, 0] and states["b"].handoff_boundary_tokens == [0, 0]
    assert (stats.published, stats.stored, stats.pending_retry, stats.dropped_cpu_full) == (10, 2, 1, 1)
    assert stats.accounted() == stats.published
    # Next step: the waiting hand-off is stored from the queue, and leaves the gauge.
    next_batch, retried = StoreBatch(2, InFlightStores()), []
    release = intake.retry(device=device, cpu=cpu, batch=next_batch, stats=stats, events=retried)
    assert release == [ids[3]] and next_batch.device_ids == [ids[3]]
    assert [e.outcome for e in retried] == [HandoffOutcome.STORED.value]
    assert (stats.stored, stats.pending_retry, stats.num_retried_stored) == (3, 0, 1)
    assert stats.accounted() == stats.published


def test_every_handoff_outcome_has_its_counter():
    stats = BoundaryStoreStats()
    for count, outcome in enumerate(HandoffOutcome, start=1):
        stats.record(outcome, count)
        assert getattr(stats, outcome.value) == count
    assert stats.published == stats.accounted() == sum(range(1, len(HandoffOutcome) + 1))
