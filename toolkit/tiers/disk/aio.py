"""The native read path: one submitter keeps up to `queue_depth` slot reads in flight through kernel AIO
(aio_abi.py) and one event-loop thread reaps them, refills the queue, then verifies.

Why: with a thread per request (workers.py) each read is followed by ~35 us of Python on its thread before the
next `preadv` (2-vCPU host, measured), so at queue depth one the disk idles between reads (tier / raw 0.79 at
256 KiB). Here the caller's `submit` issues `io_submit` itself when fewer than `queue_depth` reads are in
flight (no thread wake-up on the way in), and on a completion the loop thread submits the waiting reads *before*
it verifies the finished one, so the header parse and the XXH3 checksum (~40 us at 256 KiB) overlap the next read.

Every read is verified exactly as on the thread path (`io_ops.verify`: header, identity, key, payload checksum)
before its completion is handed out; a payload whose destination is not aligned goes through the lane's staging
buffer and is copied only once verified. A lane is one request's kernel structures and header buffer: there are
2 x `queue_depth` of them, so a lane whose read is being verified is never reused by the refill.

Deadlines: a read cannot be taken back from the kernel (io_cancel does not cancel O_DIRECT reads), and its
destination is the caller's, so a read is never completed before the kernel is done with it. The loop wakes at
least every `TICK_S` and logs once per read that has been in flight longer than `stuck_after_s` (counted in
`stuck`); the tier's own deadline (`wait_all`, the mover's 30 s) decides what the caller does meanwhile.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from toolkit.errors import BadInput
from toolkit.tiers.disk import aio_abi
from toolkit.tiers.disk.aio_abi import IOCB_CMD_PREADV, IoCb, IoEvent, IoVec, Libaio, Timespec
from toolkit.tiers.disk.aligned import aligned_buffer, is_aligned
from toolkit.tiers.disk.config import ReadPath
from toolkit.tiers.disk.io_ops import FileContext, verify
from toolkit.tiers.disk.layout import HEADER_BYTES, HEADER_USED_BYTES
from toolkit.tiers.disk.workers import Done

log = logging.getLogger(__name__)
TICK_S = 1.0


@dataclass(slots=True)
class _Read:
    ticket: int
    ctx: FileContext
    slot: int
    key: bytes
    dest: memoryview
    submitted_s: float = 0.0
    direct: bool = False  # read straight into `dest` (else through the lane's staging buffer)
    pinned: object = None  # the ctypes view that exposes `dest`'s address: alive while the kernel may write it
    reported_stuck: bool = False


def _pointers(lanes: list[_Lane]) -> ctypes.Array[ctypes.c_void_p]:
    return (ctypes.c_void_p * len(lanes))(*[ctypes.addressof(lane.iocb) for lane in lanes])


class _Lane:
    """One request's iocb, iovec pair and header block (the padded staging buffer is made on first need)."""

    def __init__(self, number: int, slot_bytes: int) -> None:
        self.number = number
        self.iocb = IoCb()
        self.pointer = (ctypes.c_void_p * 1)(ctypes.addressof(self.iocb))  # io_submit's array of one
        self.iov = (IoVec * 2)()
        self.buffer = memoryview(aligned_buffer(HEADER_BYTES))
        self.staging: memoryview | None = None
        self._slot_bytes = slot_bytes
        self._keep = [ctypes.c_char.from_buffer(self.buffer)]  # addresses of our own buffers stay valid
        self.iov[0].iov_base = ctypes.addressof(self._keep[0])
        self.iov[0].iov_len = HEADER_BYTES
        self.read: _Read | None = None

    def prepare(self, read: _Read) -> None:
        geometry = read.ctx.geometry
        read.direct = geometry.payload_pad_bytes() == 0 and is_aligned(read.dest)
        if read.direct:
            read.pinned = ctypes.c_char.from_buffer(read.dest)
            payload_address = ctypes.addressof(read.pinned)
        else:
            if self.staging is None:
                self.staging = memoryview(aligned_buffer(self._slot_bytes - HEADER_BYTES))
                self._keep.append(ctypes.c_char.from_buffer(self.staging))
            payload_address = ctypes.addressof(self._keep[1])
        self.iov[1].iov_base = payload_address
        self.iov[1].iov_len = geometry.slot_bytes - HEADER_BYTES
        cb = self.iocb
        cb.aio_data, cb.aio_lio_opcode, cb.aio_fildes = self.number, IOCB_CMD_PREADV, read.ctx.fd
        cb.aio_buf, cb.aio_nbytes, cb.aio_offset = ctypes.addressof(self.iov), 2, geometry.offset(read.slot)
        self.read = read

    def result(self, res: int) -> Done:
        """The completion of this lane's read, verified (runs on the loop thread, after the refill)."""
        read = self.read
        assert read is not None
        read.pinned = None  # the kernel is done with `dest`: release its buffer export
        geometry = read.ctx.geometry
        if res < 0:
            return Done(read.ticket, None, OSError(-res, f"aio read: {os.strerror(-res)}"))
        if res != geometry.slot_bytes:
            return Done(read.ticket, f"short read: {res} of {geometry.slot_bytes} bytes", None)
        header = bytes(self.buffer[:HEADER_USED_BYTES])
        if read.direct:
            return Done(read.ticket, verify(read.ctx, header, read.key, read.dest), None)
        assert self.staging is not None
        padded = self.staging[: geometry.payload_bytes]
        failed = verify(read.ctx, header, read.key, padded)
        if failed is None:
            read.dest[:] = padded
        return Done(read.ticket, failed, None)


class AioReads:
    """Slot reads through kernel AIO; completions go to `finish` (the tier's completion list). `max_waiting`: the
    most reads the caller may have submitted and not yet polled (the tier's max_in_flight)."""

    def __init__(self, lib: Libaio, queue_depth: int, max_waiting: int, slot_bytes: int,
                 finish: Callable[[Done], None], name: str, stuck_after_s: float = 30.0) -> None:  # fmt: skip
        self._lib = lib
        self._ctx = ctypes.c_void_p(0)
        got = lib.io_setup(queue_depth, ctypes.byref(self._ctx))
        if got < 0:
            raise OSError(-got, f"io_setup: {os.strerror(-got)}")
        self._queue_depth = queue_depth
        self._finish = finish
        self._stuck_after_s = stuck_after_s
        # every read waiting or in flight holds a lane, and so does each one being verified (at most queue_depth)
        self._lanes = [_Lane(n, slot_bytes) for n in range(max(max_waiting, queue_depth) + queue_depth)]
        self._free = list(reversed(self._lanes))
        self._waiting: deque[_Lane] = deque()  # prepared, not yet submitted
        self._in_flight = 0
        self._closing = False
        self._cond = threading.Condition(threading.Lock())
        self._events = (IoEvent * queue_depth)()
        self.stuck = 0
        self._thread = threading.Thread(target=self._loop, name=f"{name}-aio", daemon=True)
        self._thread.start()

    def submit(self, ticket: int, ctx: FileContext, slot: int, key: bytes, dest: memoryview) -> None:
        with self._cond:
            lane = self._free.pop() if self._free else None
        if lane is None:  # more than max_waiting reads: the tier bounds them, so this is a caller's bug
            self._finish(Done(ticket, None, OSError(errno.EAGAIN, "aio: more reads than lanes")))
            return
        lane.prepare(_Read(ticket, ctx, slot, key, dest))  # outside the lock: the loop may be refilling
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
            pointers = batch[0].pointer if len(batch) == 1 else _pointers(batch)
            now = time.monotonic()
            got = self._lib.io_submit(self._ctx, len(batch), pointers)
            if got == -errno.EAGAIN and self._in_flight:  # the kernel is out of room: retried at the next reap
                self._waiting.extendleft(reversed(batch))
                return failed
            sent, batch = (batch[:got], batch[got:]) if got > 0 else ([], batch)
            for lane in sent:
                lane.read.submitted_s = now  # type: ignore[union-attr]
            self._in_flight += len(sent)
            if got <= 0:  # the first request was refused (EINVAL, EBADF...): fail it, try the rest
                lane = batch.pop(0)
                read = self._release(lane)
                read.pinned = None
                code = -got if got < 0 else errno.EIO
                failed.append(Done(read.ticket, None, OSError(code, f"io_submit: {os.strerror(code)}")))
        return failed

    def _release(self, lane: _Lane) -> _Read:
        read = lane.read
        assert read is not None
        lane.read = None
        self._free.append(lane)
        return read

    def _loop(self) -> None:
        tick = Timespec(int(TICK_S), int(TICK_S % 1 * 1e9))
        no_wait = Timespec(0, 0)  # libaio then reads the completion ring in user space: no system call
        verify: deque[tuple[_Lane, int]] = deque()  # reaped, not yet verified
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
            done = lane.result(res)
            with self._cond:
                self._release(lane)
            self._finish(done)

    def _check_stuck(self) -> None:
        now = time.monotonic()
        for lane in self._lanes:
            read = lane.read
            if read and read.submitted_s and not read.reported_stuck and now - read.submitted_s > self._stuck_after_s:
                read.reported_stuck = True
                self.stuck += 1
                log.warning(
                    "disk tier aio: a read of slot %d in flight for over %.0f s", read.slot, self._stuck_after_s
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


ENV = "KVTK_DISK_READ_PATH"
FALLBACKS = [0]  # tiers of this process that wanted AIO (auto) and got the thread pool: logged once, counted


def requested_path(configured: ReadPath) -> ReadPath:
    """The configured path; `auto` yields to the environment variable (a bad value there is BadInput)."""
    if configured is not ReadPath.AUTO:
        return configured
    value = os.environ.get(ENV, "auto").strip().lower() or "auto"
    try:
        return ReadPath(value)
    except ValueError:
        raise BadInput(f"{ENV}: one of auto, aio, threads, got {value!r:.40}") from None


def check_possible(configured: ReadPath, direct: bool) -> None:
    """BadInput at open, before any file is made, when `aio` is forced and cannot run here."""
    if requested_path(configured) is not ReadPath.AIO:
        return
    why = "" if direct else "the files are not O_DIRECT (buffered kernel AIO does not overlap)"
    if direct and aio_abi.load() is None:
        why = "libaio.so.1 is not installed"
    if why:
        raise BadInput(f"disk tier read_path: 'aio', but {why}; give 'auto' or 'threads'")


def open_reads(configured: ReadPath, direct: bool, queue_depth: int, max_waiting: int, slot_bytes: int,
               finish: Callable[[Done], None], name: str) -> AioReads | None:  # fmt: skip
    """The AIO submitter, or None for the thread pool: when asked for threads, when the files are not O_DIRECT
    (buffered AIO runs inside io_submit), or when libaio is absent or refuses a context (`auto`: one log line per
    process and a count; `aio`: BadInput)."""
    wanted = requested_path(configured)
    if wanted is ReadPath.THREADS:
        return None
    why = "the files are not O_DIRECT (buffered kernel AIO does not overlap)" if not direct else ""
    lib = aio_abi.load() if direct else None
    if direct and lib is None:
        why = "libaio.so.1 is not installed"
    reads = None
    if lib is not None:
        try:
            reads = AioReads(lib, queue_depth, max_waiting, slot_bytes, finish, name)
        except OSError as exc:
            why = str(exc)
    if reads is not None:
        return reads
    if wanted is ReadPath.AIO:
        raise BadInput(f"disk tier read_path: 'aio', but {why}; give 'auto' or 'threads'")
    FALLBACKS[0] += 1
    if FALLBACKS[0] == 1:
        log.warning("disk tier: reads go through the thread pool: %s", why)
    return None
