"""The native I/O path: one submitter keeps up to `queue_depth` slot reads and writes in flight through kernel
AIO (aio_abi.py, requests in aio_lanes.py) and one event-loop thread reaps them, refills the queue, then verifies
the reads and commits the writes.

Why: with a thread per request (workers.py) each I/O is followed by ~35 us of Python on its thread before the next
`preadv` (2-vCPU host, measured), so at queue depth one the disk idles between reads (tier / raw 0.79 at 256 KiB).
Here the caller's `submit_read` issues `io_submit` itself when fewer than `queue_depth` requests are in flight (no
thread wake-up on the way in), and on a completion the loop thread submits the waiting requests *before* it
verifies the finished read, so the header parse and the XXH3 checksum overlap the next read.

A write's payload checksum (~15-60 us a block) is computed before it is submitted, on an I/O thread (workers.py),
not on the caller's: the caller's step does no checksum, and at queue depth one the I/O thread prepares the next
write while the kernel writes this one. Writes go this way only with `io_path` aio and `page-cache` durability:
under `auto` they stay on the I/O threads (paired runs here measured AIO writes 0.1-0.3 below the thread path at
256 KiB, ahead only at 1 MiB QD 1), and with `fdatasync` every write also waits for its flush and its synchronous
log record, which would stall the loop's reads.

Every read is verified exactly as on the thread path before its completion is handed out. A lane (aio_lanes.py) is
one request's kernel structures, header block and staging buffer; a request holds one from submit to completion,
and there are more lanes than the tier lets requests be in flight, so the refill never waits for one.

Deadlines: a request cannot be taken back from the kernel (io_cancel does not cancel O_DIRECT I/O), and a read's
destination is the caller's, so nothing is completed before the kernel is done with it. The loop wakes at least
every `TICK_S` and logs once per request in flight longer than `stuck_after_s` (counted in `stuck`); the tier's own
deadline (`wait_all`, the mover's 30 s) decides what the caller does meanwhile.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import threading
import time
from collections import deque
from functools import partial

from toolkit.errors import BadInput
from toolkit.tiers.disk import aio_abi
from toolkit.tiers.disk.aio_abi import IoEvent, Libaio, Timespec
from toolkit.tiers.disk.aio_lanes import Lane, Request, pointers
from toolkit.tiers.disk.config import IoPath
from toolkit.tiers.disk.io_ops import FileContext
from toolkit.tiers.disk.workers import HANDED, Done, Handed, IoThreads

log = logging.getLogger(__name__)
TICK_S = 1.0
OFFLOAD_FROM_QD = 3


class AioSubmitter:
    """Slot reads and writes through kernel AIO; completions go to `finish` (the tier's completion list).
    `max_waiting`: the most requests the caller may have submitted and not yet polled (the tier's max_in_flight)."""

    def __init__(self, lib: Libaio, queue_depth: int, max_waiting: int, slot_bytes: int, io: IoThreads, name: str,
                 stuck_after_s: float = 30.0) -> None:  # fmt: skip
        self._lib = lib
        self._ctx = ctypes.c_void_p(0)
        got = lib.io_setup(queue_depth, ctypes.byref(self._ctx))
        if got < 0:
            raise OSError(-got, f"io_setup: {os.strerror(-got)}")
        self._queue_depth = queue_depth
        self._finish = io.finish
        self._io = io
        # from queue depth 3 the finished requests are verified / committed on the I/O threads (both cores), as
        # the thread path does; below, the loop does it itself (no thread switch in the way of the next read)
        # (256 KiB and 1 MiB at QD 16, paired runs on this host: reads 0.78-0.79 of raw verified in the loop,
        # 1.01-1.19 on the I/O threads, the thread path 0.93-1.22)
        self._offload = queue_depth >= OFFLOAD_FROM_QD
        self._stuck_after_s = stuck_after_s
        # a request holds a lane from submit to completion, and the tier has at most max_waiting of them
        self._lanes = [Lane(n, slot_bytes) for n in range(max(max_waiting, queue_depth) + queue_depth)]
        self._free = list(reversed(self._lanes))
        self._waiting: deque[Lane] = deque()  # prepared, not yet submitted
        self._in_flight = 0
        self._closing = False
        self._cond = threading.Condition(threading.Lock())
        self._events = (IoEvent * queue_depth)()
        self.stuck = 0
        self._thread = threading.Thread(target=self._loop, name=f"{name}-aio", daemon=True)
        self._thread.start()

    def submit_read(self, ticket: int, ctx: FileContext, slot: int, key: bytes, dest: memoryview) -> None:
        """Called on the caller's thread: prepared and, when there is room, submitted at once."""
        self._enqueue(Request(ticket, ctx, slot, key, dest))

    def submit_write(
        self, ticket: int, ctx: FileContext, slot: int, seq: int, key: bytes, payload: memoryview
    ) -> Handed:
        """Called on an I/O thread (the checksum runs there); the completion comes from the loop."""
        self._enqueue(Request(ticket, ctx, slot, key, payload, write=True, seq=seq))
        return HANDED

    def _enqueue(self, req: Request) -> None:
        with self._cond:
            lane = self._free.pop() if self._free else None
        if lane is None:  # more than max_waiting requests: the tier bounds them, so this is a caller's bug
            self._finish(Done(req.ticket, None, OSError(errno.EAGAIN, "aio: more requests than lanes")))
            return
        try:
            lane.prepare(req)  # outside the lock: the loop may be refilling
        except Exception as exc:  # noqa: BLE001 - e.g. the checksum library failing: a failed completion
            with self._cond:
                self._free.append(lane)
            self._finish(Done(req.ticket, None, exc))
            return
        with self._cond:
            self._waiting.append(lane)
            was_idle = self._in_flight == 0
            failed = self._refill()
            if was_idle and self._in_flight:
                self._cond.notify()  # the loop waits on the condition while nothing is in flight
        for done in failed:
            self._finish(done)

    def _refill(self) -> list[Done]:
        """Submit waiting reads up to the queue depth (called with the lock held); the reads that failed to go."""
        room = min(self._queue_depth - self._in_flight, len(self._waiting))
        if room <= 0:
            return []
        batch = [self._waiting.popleft() for _ in range(room)]
        failed: list[Done] = []
        while batch:
            iocbs = batch[0].pointer if len(batch) == 1 else pointers(batch)
            now = time.monotonic()
            got = self._lib.io_submit(self._ctx, len(batch), iocbs)
            if got == -errno.EAGAIN and self._in_flight:  # the kernel is out of room: retried at the next reap
                self._waiting.extendleft(reversed(batch))
                return failed
            sent, batch = (batch[:got], batch[got:]) if got > 0 else ([], batch)
            for lane in sent:
                lane.request.submitted_s = now  # type: ignore[union-attr]
            self._in_flight += len(sent)
            if got <= 0:  # the first request was refused (EINVAL, EBADF...): fail it, try the rest
                lane = batch.pop(0)
                req = self._release(lane)
                req.pinned = None
                code = -got if got < 0 else errno.EIO
                failed.append(Done(req.ticket, None, OSError(code, f"io_submit: {os.strerror(code)}")))
        return failed

    def _release(self, lane: Lane) -> Request:
        req = lane.request
        assert req is not None
        lane.request = None
        self._free.append(lane)
        return req

    def _loop(self) -> None:
        tick = Timespec(int(TICK_S), int(TICK_S % 1 * 1e9))
        no_wait = Timespec(0, 0)  # libaio then reads the completion ring in user space: no system call
        verify: deque[tuple[Lane, int]] = deque()  # reaped, not yet verified
        while True:
            if not verify:
                with self._cond:
                    while not self._in_flight and not self._closing:
                        self._cond.wait()
                    if not self._in_flight:
                        return  # closing, nothing in flight
            # between two verifications, a look for completions: a read that finished while we checksummed
            # gets its successor submitted after one verification, not after the whole batch
            wait = (0, ctypes.byref(no_wait)) if verify else (1, ctypes.byref(tick))
            got = self._lib.io_getevents(self._ctx, wait[0], self._queue_depth, self._events, wait[1])
            if got == -errno.EINTR or (got == 0 and not verify):
                self._check_stuck()
                continue
            if got < 0:  # the context itself is broken: nothing more will complete
                log.error("disk tier aio: io_getevents failed (%s); reads in flight are lost", os.strerror(-got))
                return
            if got:
                verify.extend((self._lanes[self._events[n].data], int(self._events[n].res)) for n in range(got))
                with self._cond:
                    self._in_flight -= got
                    failed = self._refill()  # the disk gets its next reads before we verify the finished ones
                for done in failed:
                    self._finish(done)
            lane, res = verify.popleft()
            if self._offload:
                self._io.submit(lane.request.ticket, partial(self._complete, lane, res))  # type: ignore[union-attr]
            else:
                self._complete(lane, res)

    def _complete(self, lane: Lane, res: int) -> Handed:
        """Verify a read or commit a write, free its lane, hand out its completion."""
        done = lane.result(res)
        with self._cond:
            self._release(lane)
        self._finish(done)
        return HANDED

    def _check_stuck(self) -> None:
        now = time.monotonic()
        for lane in self._lanes:
            req = lane.request
            if req and req.submitted_s and not req.reported_stuck and now - req.submitted_s > self._stuck_after_s:
                req.reported_stuck = True
                self.stuck += 1
                log.warning(
                    "disk tier aio: a request on slot %d in flight for over %.0f s", req.slot, self._stuck_after_s
                )

    @property
    def in_flight(self) -> int:
        return self._in_flight + len(self._waiting)

    def close(self) -> None:
        """Wait for the reads in flight (the kernel owns their buffers until then), then free the context."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join()
        self._lib.io_destroy(self._ctx)


ENV = "KVTK_DISK_IO_PATH"
FALLBACKS = [0]  # tiers of this process that wanted AIO (auto) and got the thread pool: logged once, counted


def requested_path(configured: IoPath) -> IoPath:
    """The configured path; `auto` yields to the environment variable (a bad value there is BadInput)."""
    if configured is not IoPath.AUTO:
        return configured
    value = os.environ.get(ENV, "auto").strip().lower() or "auto"
    try:
        return IoPath(value)
    except ValueError:
        raise BadInput(f"{ENV}: one of auto, aio, threads, got {value!r:.40}") from None


def check_possible(configured: IoPath, direct: bool) -> None:
    """BadInput at open, before any file is made, when `aio` is forced and cannot run here."""
    if requested_path(configured) is not IoPath.AIO:
        return
    why = "" if direct else "the files are not O_DIRECT (buffered kernel AIO does not overlap)"
    if direct and aio_abi.load() is None:
        why = "libaio.so.1 is not installed"
    if why:
        raise BadInput(f"disk tier io_path: 'aio', but {why}; give 'auto' or 'threads'")


def open_submitter(configured: IoPath, direct: bool, queue_depth: int, max_waiting: int, slot_bytes: int,
               io: IoThreads, name: str) -> AioSubmitter | None:  # fmt: skip
    """The AIO submitter, or None for the thread pool: when asked for threads, when the files are not O_DIRECT
    (buffered AIO runs inside io_submit), or when libaio is absent or refuses a context (`auto`: one log line per
    process and a count; `aio`: BadInput)."""
    wanted = requested_path(configured)
    if wanted is IoPath.THREADS:
        return None
    why = "the files are not O_DIRECT (buffered kernel AIO does not overlap)" if not direct else ""
    lib = aio_abi.load() if direct else None
    if direct and lib is None:
        why = "libaio.so.1 is not installed"
    submitter = None
    if lib is not None:
        try:
            submitter = AioSubmitter(lib, queue_depth, max_waiting, slot_bytes, io, name)
        except OSError as exc:
            why = str(exc)
    if submitter is not None:
        return submitter
    if wanted is IoPath.AIO:
        raise BadInput(f"disk tier io_path: 'aio', but {why}; give 'auto' or 'threads'")
    FALLBACKS[0] += 1
    if FALLBACKS[0] == 1:
        log.warning("disk tier: I/O goes through the thread pool: %s", why)
    return None
