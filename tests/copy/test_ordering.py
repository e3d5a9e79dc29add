"""CPU-side checks of copy ordering: both directions wait on one compute-done event per step (fake CUDA objects).

The real race tests (a long kernel, then a write, read or zeroing of the block on the compute stream) are in
test_gpu.py; these check the wiring those tests depend on, where no CUDA exists.
"""

from __future__ import annotations

import types

import torch

from toolkit.copy import CompletionTracker, Direction, OffloadWorker, WorkerConfig
from toolkit.copy.streams import ComputeFence, CopyStreams, FailedLaunchHandle
from toolkit.core.metadata import StepMetadata, TransferBatch


class FakeEvent:
    def __init__(self, log):
        self.log, self.records, self.finished = log, 0, False

    def record(self, stream):
        self.records += 1
        self.log.append(("record", stream.name))

    def query(self):
        return self.finished


class FakeStream:
    def __init__(self, name, log):
        self.name, self.log, self.waited = name, log, []

    def wait_event(self, event):
        self.waited.append(event)
        self.log.append(("wait", self.name))


def fake_cuda():
    log, events = [], []
    made = iter(["load-stream", "store-stream"])
    compute = FakeStream("compute", log)

    def event():
        events.append(FakeEvent(log))
        return events[-1]

    cuda = types.SimpleNamespace(
        Event=event, Stream=lambda device, priority: FakeStream(next(made), log), current_stream=lambda device: compute
    )
    return cuda, log, events


def test_loads_wait_on_a_compute_done_event_like_stores():
    cuda, log, events = fake_cuda()
    streams = CopyStreams(torch.device("cuda"), cuda=cuda)
    for direction in (Direction.LOAD, Direction.STORE):
        log.clear()
        stream = streams.begin(direction, None, order_after_compute=True)
        assert log == [("record", "compute"), ("wait", stream.name)], direction
    given = FakeEvent([])
    assert streams.begin(Direction.LOAD, given, order_after_compute=True).waited[-1] is given
    log.clear()
    streams.begin(Direction.LOAD, None, order_after_compute=False)  # the race tests' control only
    assert log == []


def test_the_fence_is_one_event_recorded_again_each_step():
    cuda, log, events = fake_cuda()
    fence = ComputeFence(torch.device("cuda"), cuda=cuda)
    first, second = fence.record(), fence.record()
    assert first is second and first.records == 2 and len(events) == 1
    assert log == [("record", "compute")] * 2


def test_worker_hands_one_event_per_step_to_both_directions():
    caches = {"kv": torch.randint(-128, 128, (8, 64), dtype=torch.int8)}
    worker = OffloadWorker.from_kv_caches(kv_caches=caches, config=WorkerConfig(num_host_blocks=8, fault_inject=""))
    try:
        cuda, log, events = fake_cuda()
        worker._fence = ComputeFence(torch.device("cuda"), cuda=cuda)  # what a CUDA worker builds
        backend = worker.backends["cpu"]
        seen = []
        submit = backend.submit
        backend.submit = lambda **kw: (seen.append((kw["direction"], kw["after"])), submit(**kw))

        def batch(e, ids):
            return TransferBatch(event_id=e, device_block_ids=ids, host_block_ids=ids)

        worker.apply(StepMetadata(store=batch(0, (0, 1))))
        worker.flush()
        worker.apply(StepMetadata(load=batch(1, (0, 1)), store=batch(2, (2, 3))))
        worker.apply(StepMetadata(load=batch(3, ()), store=batch(4, ())))  # nothing moves: no event recorded
        assert [d for d, _ in seen] == [Direction.STORE, Direction.LOAD, Direction.STORE]
        assert seen[1][1] is seen[2][1] is events[0] and events[0].records == 2  # one record per moving step
        worker.flush()
        report = worker.collect()
        assert report.completed_load_event_ids == {1, 3} and report.completed_store_event_ids == {0, 2, 4}
    finally:
        worker.close()


def test_a_launch_that_failed_part_way_settles_only_after_the_enqueued_chunks():
    cuda, log, events = fake_cuda()
    streams = CopyStreams(torch.device("cuda"), cuda=cuda)
    handle = streams.finish_failed(Direction.LOAD, RuntimeError("cuMemcpyBatchAsync: CUresult 1 at descriptor 8192"))
    assert isinstance(handle, FailedLaunchHandle) and log[-1] == ("record", "load-stream")
    tracker = CompletionTracker(direction=Direction.LOAD)
    tracker.push(5, handle)
    assert tracker.poll() == [] and len(tracker) == 1  # the first chunk may still be copying: pins kept
    events[-1].finished = True
    (outcome,) = tracker.poll()
    assert outcome.event_id == 5 and not outcome.ok and "descriptor 8192" in str(outcome.error)
