"""CUDA streams and events of the copy path, made once per backend (or per worker, for the compute fence).

Loads and stores get their own streams so a store never queues behind a load (and vice versa), both at the
lowest priority (CUDA's priority 0 is the least urgent) so copies yield to the model's kernels. A copy stream does
not otherwise order after the compute stream, and both directions need to:

- a store reads live KV: started before the step's forward finished, it may copy a block still being written;
- a load writes device blocks the scheduler just (re)allocated: an earlier kernel may still read the block's old
  contents, and for Mamba models vLLM zeroes freshly allocated blocks on the compute stream, so a load that lands
  before the zeroing is wiped.

So every copy waits for a compute-done event recorded on the current (compute) stream when it is submitted; the
worker records one such event per step (`ComputeFence`) and hands it to both directions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import ModuleType

import torch

from toolkit.copy.completion import Direction

LOWEST_PRIORITY = 0


@dataclass(frozen=True)
class CudaEventHandle:
    event: "torch.cuda.Event"

    def done(self) -> bool:
        return self.event.query()  # raises on an asynchronous CUDA error: the tracker settles it as failed

    def wait(self, timeout_s: float | None) -> bool:
        # cudaEventSynchronize has no timeout; poll instead so a flush can give up.
        end = None if timeout_s is None else time.monotonic() + timeout_s
        while not self.event.query():
            if end is not None and time.monotonic() >= end:
                return False
            time.sleep(50e-6)
        return True

    def error(self) -> BaseException | None:
        return None


@dataclass(frozen=True)
class FailedLaunchHandle:
    """A batch whose launch failed part way: done once the stream passed the chunks enqueued before the failure.

    Until then the batch stays in flight, so its blocks stay pinned while those chunks may still be copying.
    """

    after_enqueued: CudaEventHandle
    failure: BaseException

    def done(self) -> bool:
        return self.after_enqueued.done()

    def wait(self, timeout_s: float | None) -> bool:
        return self.after_enqueued.wait(timeout_s)

    def error(self) -> BaseException | None:
        return self.failure


class ComputeFence:
    """One reusable event, recorded on the device's current (compute) stream: "compute queued so far is done".

    Re-recording is safe: a stream's `wait_event` captures the event's latest record when it is called.
    `cuda` is the `torch.cuda` namespace (tests pass a fake one: no CUDA on the CPU machines).
    """

    def __init__(self, device: torch.device, *, cuda: ModuleType = torch.cuda) -> None:
        self.device = device
        self._cuda = cuda
        self._event = cuda.Event()

    def record(self) -> "torch.cuda.Event":
        self._event.record(self._cuda.current_stream(self.device))
        return self._event


class CopyStreams:
    def __init__(self, device: torch.device, *, cuda: ModuleType = torch.cuda) -> None:
        self.device = device
        self._cuda = cuda
        self.streams = {d: cuda.Stream(device=device, priority=LOWEST_PRIORITY) for d in Direction}
        self._fence = ComputeFence(device, cuda=cuda)

    def begin(self, direction: Direction, after: "torch.cuda.Event | None", order_after_compute: bool):
        """The stream to launch on, after making it wait for `after`, else (when ordering) for the compute stream.

        Both directions are ordered alike (module docstring); `order_after_compute=False` is for benchmarks and
        for the race tests' control only.
        """
        stream = self.streams[direction]
        if after is not None:
            stream.wait_event(after)
        elif order_after_compute:
            stream.wait_event(self._fence.record())
        return stream

    def finish(self, direction: Direction) -> CudaEventHandle:
        event = self._cuda.Event()
        event.record(self.streams[direction])
        return CudaEventHandle(event)

    def finish_failed(self, direction: Direction, failure: BaseException) -> FailedLaunchHandle:
        """The handle of a batch whose launch raised `failure` after `begin` (see `FailedLaunchHandle`)."""
        try:
            return FailedLaunchHandle(self.finish(direction), failure)
        except Exception:  # the context itself is broken: nothing enqueued can still run
            raise failure from None
