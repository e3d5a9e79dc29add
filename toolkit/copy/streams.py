"""CUDA streams and events of the copy path, made once per backend.

Loads and stores get their own streams so a store never queues behind a load (and vice versa), both at the
lowest priority (CUDA's priority 0 is the least urgent) so copies yield to the model's kernels. A store reads live
KV: it must wait for an event recorded on the compute stream after the step's forward, or it may copy a block
the forward is still writing (the copy stream does not otherwise order after compute).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from toolkit.copy.completion import Direction

LOWEST_PRIORITY = 0


@dataclass(frozen=True)
class CudaEventHandle:
    event: "torch.cuda.Event"

    def done(self) -> bool:
        return self.event.query()  # raises on an asynchronous CUDA error: the tracker reports it as failed

    def wait(self, timeout_s: float | None) -> bool:
        # cudaEventSynchronize has no timeout; poll instead so a flush can give up.
        import time

        end = None if timeout_s is None else time.monotonic() + timeout_s
        while not self.event.query():
            if end is not None and time.monotonic() >= end:
                return False
            time.sleep(50e-6)
        return True

    def error(self) -> BaseException | None:
        return None


class CopyStreams:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.streams = {d: torch.cuda.Stream(device=device, priority=LOWEST_PRIORITY) for d in Direction}

    def begin(self, direction: Direction, after: "torch.cuda.Event | None", order_after_compute: bool):
        """The stream to launch on, after making it wait for `after` or for the current compute stream's work."""
        stream = self.streams[direction]
        if after is not None:
            stream.wait_event(after)
        elif direction is Direction.STORE and order_after_compute:
            compute_done = torch.cuda.Event()
            compute_done.record(torch.cuda.current_stream(self.device))
            stream.wait_event(compute_done)
        return stream

    def finish(self, direction: Direction) -> CudaEventHandle:
        event = torch.cuda.Event()
        event.record(self.streams[direction])
        return CudaEventHandle(event)
