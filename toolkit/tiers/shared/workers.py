"""The shared tier's threads: `queue_depth` threads, each with one staging buffer registered with the store client,
running one blocking store call at a time.

Unlike the disk tier's I/O threads, a call here may not come back for tens of seconds (a stopped master) or ever
(a `setup` against a dead one): the tier gives up on it at its deadline, and `close` waits for the threads only
until its own deadline (they are daemons; a thread still inside a native call is left behind, never joined).

Reads and lookups go before writes (`urgent`): a read is a request waiting for its prefix, a write only keeps a
block for later, and below a disk every demotion is also written here, so a FIFO queue would put each read that
falls back from the disk behind the whole backlog of writes. A quarter of the tier's in-flight bound is left to
reads for the same reason (`SharedTier._read_reserve`).
"""

from __future__ import annotations

import ctypes
import itertools
import mmap
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class Staging:
    """One page-aligned buffer a worker packs values into and reads values into (never shared between threads)."""

    def __init__(self, size_bytes: int) -> None:
        self._map = mmap.mmap(-1, max(size_bytes, mmap.PAGESIZE))
        self.view = memoryview(self._map)
        self.address = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
        self.size_bytes = size_bytes


@dataclass(frozen=True, slots=True)
class Done:
    ticket: int
    result: Any
    error: BaseException | None
    elapsed_s: float


Job = Callable[[Staging], Any]


class StoreThreads:
    def __init__(self, queue_depth: int, staging_bytes: int, name: str) -> None:
        self.staging = [Staging(staging_bytes) for _ in range(queue_depth)]
        # (0 urgent | 1 write | 2 stop, submission order, ticket, job): urgent first, each class in order.
        self._jobs: queue.PriorityQueue[tuple[int, int, int, Job | None]] = queue.PriorityQueue()
        self._order = itertools.count()
        self._done: list[Done] = []
        self._ready = threading.Condition(threading.Lock())
        self._threads = [threading.Thread(target=self._run, args=(s,), name=f"{name}-{n}", daemon=True)
                         for n, s in enumerate(self.staging)]  # fmt: skip

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def _run(self, staging: Staging) -> None:
        while True:
            _, _, ticket, job = self._jobs.get()
            if job is None:
                return
            start = time.perf_counter()
            try:
                done = Done(ticket, job(staging), None, time.perf_counter() - start)
            except Exception as exc:  # noqa: BLE001 - a failed call is a failed completion, never a dead thread
                done = Done(ticket, None, exc, time.perf_counter() - start)
            with self._ready:
                self._done.append(done)
                self._ready.notify()

    def submit(self, ticket: int, job: Job, *, urgent: bool = False) -> None:
        self._jobs.put((0 if urgent else 1, next(self._order), ticket, job))

    def drain(self, timeout_s: float = 0.0, at_least: int = 1) -> list[Done]:
        """Finished calls: those ready now, or (with a timeout) once `at_least` are ready or `timeout_s` passed."""
        with self._ready:
            if timeout_s > 0 and len(self._done) < at_least:
                self._ready.wait_for(lambda: len(self._done) >= at_least, timeout_s)
            out, self._done = self._done, []
        return out

    def close(self, timeout_s: float) -> bool:
        """Stop the threads; True when all stopped within `timeout_s` (False: one is stuck in a store call)."""
        for _ in self._threads:  # after the queued calls, as before: a clean close finishes the writes
            self._jobs.put((2, next(self._order), 0, None))
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)
