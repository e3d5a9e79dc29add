"""Completion ordering, high-water marks, timeouts and fault injection at the worker boundary."""

from __future__ import annotations

import time

import pytest
import torch

from toolkit.copy import CompletionTracker, CopyTimeout, Direction, FaultSpec, OffloadWorker, WorkerConfig
from toolkit.copy.completion import ReadyHandle
from toolkit.copy.faults import FaultInjector
from toolkit.core.metadata import StepMetadata, TransferBatch


class FakeHandle:
    def __init__(self, error=None):
        self.finished = False
        self.failure = error

    def done(self):
        return self.finished

    def wait(self, timeout_s):
        return self.finished

    def error(self):
        return self.failure


def test_out_of_order_finishes_are_reported_in_order_once():
    tracker = CompletionTracker(direction=Direction.LOAD)
    handles = {e: FakeHandle() for e in (3, 5, 8, 9)}
    for e, h in handles.items():
        tracker.push(e, h)
    handles[8].finished = handles[9].finished = True  # later ones finish first
    assert tracker.poll() == [] and tracker.high_water_mark == -1
    handles[3].finished = True
    assert [o.event_id for o in tracker.poll()] == [3]
    assert tracker.is_settled(3) and not tracker.is_settled(5)
    handles[5].failure = RuntimeError("boom")
    handles[5].finished = True
    outcomes = tracker.poll()
    assert [(o.event_id, o.ok) for o in outcomes] == [(5, False), (8, True), (9, True)]
    assert tracker.high_water_mark == 9 and tracker.poll() == []


def test_event_ids_must_increase_per_direction():
    tracker = CompletionTracker(direction=Direction.STORE)
    tracker.push(4, ReadyHandle())
    with pytest.raises(ValueError, match="event_id"):
        tracker.push(4, ReadyHandle())


def test_an_overdue_copy_keeps_its_blocks_until_it_really_ends_then_fails():
    now = [0.0]
    tracker = CompletionTracker(direction=Direction.LOAD, timeout_s=5.0, clock=lambda: now[0])
    stuck, after = FakeHandle(), FakeHandle()
    tracker.push(1, stuck)
    tracker.push(2, after)
    after.finished = True
    assert tracker.poll() == []
    now[0] = 6.0
    # Past the deadline but still copying: settling now would let the scheduler reuse blocks it writes.
    assert tracker.poll() == [] and tracker.take_overdue() == [1] and tracker.take_overdue() == []
    assert tracker.wait_all(0.0) == [] and len(tracker) == 2  # a flush out of time leaves it in flight too
    stuck.finished = True
    outcomes = tracker.poll()
    assert isinstance(outcomes[0].error, CopyTimeout) and outcomes[0].event_id == 1
    assert outcomes[1].ok and outcomes[1].event_id == 2  # finished in time: not overdue
    assert tracker.high_water_mark == 2 and tracker.poll() == []


def test_a_handle_whose_query_raises_settles_failed_instead_of_blocking_forever():
    class Raising(FakeHandle):
        def done(self):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    tracker = CompletionTracker(direction=Direction.STORE)
    tracker.push(1, Raising())
    tracker.push(2, ReadyHandle())
    outcomes = tracker.poll()
    assert [(o.event_id, o.ok) for o in outcomes] == [(1, False), (2, True)]
    assert "illegal memory access" in str(outcomes[0].error) and len(tracker) == 0


def _worker(fault: str | None, **kw) -> OffloadWorker:
    caches = {
        "a": torch.randint(-128, 128, (16, 256), dtype=torch.int8),
        "s": torch.randint(-128, 128, (16, 1, 1, 1024), dtype=torch.int8),
    }
    return OffloadWorker.from_kv_caches(
        kv_caches=caches, config=WorkerConfig(num_host_blocks=16, fault_inject=fault, **kw)
    )


def _step(event, load=False, ids=(0, 1, 2)):
    batch = TransferBatch(event_id=event, device_block_ids=tuple(ids), host_block_ids=tuple(ids))
    return StepMetadata(load=batch) if load else StepMetadata(store=batch)


def _drain(worker):
    worker.flush()
    return worker.collect()


def test_injected_load_failures_are_failed_events_never_completions():
    worker = _worker("load:1.0")
    worker.apply(_step(0))
    worker.apply(_step(1, load=True))
    report = _drain(worker)
    assert report.completed_store_event_ids == {0}
    assert report.failed_load_event_ids == {1} and not report.completed_load_event_ids
    worker.close()


def test_every_nth_store_fails_and_the_rest_complete():
    worker = _worker("store:every=3")
    for e in range(6):
        worker.apply(_step(e, ids=(e,)))
    report = _drain(worker)
    assert report.failed_store_event_ids == {2, 5}
    assert report.completed_store_event_ids == {0, 1, 3, 4}
    worker.close()


def test_fault_spec_from_environment_is_seeded(monkeypatch):
    monkeypatch.setenv("KVTK_FAULT_INJECT", "load:0.5,seed=3")
    spec = FaultSpec.from_env()
    runs = [[inj.should_fail("load") for _ in range(20)] for inj in (FaultInjector(spec), FaultInjector(spec))]
    assert runs[0] == runs[1] and 0 < sum(runs[0]) < 20
    worker = _worker(None)  # reads the environment
    for e in range(10):
        worker.apply(_step(e, load=True, ids=(e,)))
    report = _drain(worker)
    failed = report.failed_load_event_ids
    assert failed and failed.isdisjoint(report.completed_load_event_ids)
    assert failed | report.completed_load_event_ids == set(range(10))
    worker.close()


def test_bad_fault_spec_names_the_variable():
    with pytest.raises(ValueError, match="KVTK_FAULT_INJECT"):
        FaultSpec.parse("load:every=x")
    with pytest.raises(ValueError, match="KVTK_FAULT_INJECT"):
        FaultSpec.parse("disk:0.5")


def test_corrupt_option_inverts_loaded_blocks_but_reports_completion():
    worker = _worker("corrupt:1.0")
    original = [r.view[[0, 1]].clone() for r in worker.regions]
    worker.apply(_step(0, ids=(0, 1)))
    _drain(worker)
    worker.apply(StepMetadata(load=TransferBatch(event_id=1, device_block_ids=(0, 1), host_block_ids=(0, 1))))
    report = _drain(worker)
    assert report.completed_load_event_ids == {1}
    for region, rows in zip(worker.regions, original):
        assert torch.equal(region.view[[0, 1]], torch.bitwise_not(rows))
    worker.close()


def test_launch_errors_and_timeouts_are_reported_as_failed_loads(caplog):
    worker = _worker("", copy_timeout_s=0.05)
    backend = worker.backends["cpu"]
    # A malformed batch (out-of-range id) raises inside submit: caught at the boundary.
    worker.apply(StepMetadata(load=TransferBatch(event_id=0, device_block_ids=(99,), host_block_ids=(0,))))
    # A copy past its deadline: warned about at once, reported failed once it really ended (pins kept till then).
    slow = FakeHandle()
    backend._launch = lambda **kw: slow
    worker.apply(_step(1, load=True))
    report = worker.collect()
    assert report.failed_load_event_ids == {0}
    time.sleep(0.08)
    report = worker.collect()
    assert not report.failed_load_event_ids and not report.completed_load_event_ids
    assert any("overdue" in r.message and "stay pinned" in r.message for r in caplog.records)
    slow.finished = True
    report = worker.collect()
    assert report.failed_load_event_ids == {1} and not report.completed_load_event_ids
    assert sum("failed" in r.message for r in caplog.records) >= 1
    worker.close()


def test_need_flush_settles_everything_in_flight_before_new_copies():
    worker = _worker("")
    worker.apply(_step(0, ids=tuple(range(16))))
    worker.apply(StepMetadata(need_flush=True))
    assert worker.num_in_flight == 0
    assert worker.collect().completed_store_event_ids == {0}
    worker.close()


def test_late_copies_complete_late_and_correctly():
    worker = _worker("late_store:every=1,delay_s=0.5")
    expected = [r.view[[0, 1, 2]].clone() for r in worker.regions]
    worker.apply(_step(0))
    worker.apply(StepMetadata(load=TransferBatch(event_id=0, device_block_ids=(5,), host_block_ids=(9,))))
    time.sleep(0.1)
    report = worker.collect()
    assert report.completed_load_event_ids == {0}  # loads run on their own thread, on time
    assert not report.completed_store_event_ids  # the store still sleeps on its copy thread
    assert worker.faults.injected["late_store"] == 1 and worker.faults.injected["late_load"] == 0
    report = _drain(worker)  # a flush waits for late copies like for any other
    assert report.completed_store_event_ids == {0}
    for mirror, rows in zip(worker.host.mirrors, expected):
        assert torch.equal(mirror.view[[0, 1, 2]], rows)
    worker.close()


def test_late_copy_options_are_validated():
    spec = FaultSpec.parse("late_load:0.5,delay_s=0.2,seed=4")
    assert spec.has_late_copies and spec.delay_s == 0.2
    with pytest.raises(ValueError, match="delay_s"):
        FaultSpec.parse("late_load:1.0,delay_s=-1")
    with pytest.raises(ValueError, match="bad number 'x'"):
        FaultSpec.parse("late_store:1.0,delay_s=x")
