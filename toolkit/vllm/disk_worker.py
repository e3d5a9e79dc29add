"""The worker's side of the CPU -> disk cascade: a step's `DiskBatch` turned into I/O on a `LowerTier`.

Per step, in `apply` (at bind, before the step's loads and stores start): drops, then demotions, whose bytes (one
row of every host mirror) are gathered at once into aligned staging buffers, because the scheduler may reuse the
evicted host block in this very step; the writes go out asynchronously from staging. Then promotions: reads into
staging, scattered into the host block when they verify (`poll`, every step). A promotion of a key whose write is
still staged here is served from the staging copy. Nothing here waits on the disk: a refused submit (the tier is
busy) is retried at the next poll, a load waits (its request stays in WAITING_FOR_REMOTE_KVS) until `status` says
its host blocks landed, and a read that fails or does not verify fails the loads that needed it (recomputed).
"""

from __future__ import annotations

import logging
import mmap
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Sequence

import torch

from toolkit.core.metadata import DiskBatch
from toolkit.tiers.disk.aligned import aligned_buffer
from toolkit.tiers.disk.store import Refused
from toolkit.tiers.lower import LowerTier
from toolkit.tiers.shared.stats import OpLatency
from toolkit.vllm.tier_counts import TierCounts, split_by_tier, tier_answers

log = logging.getLogger(__name__)

PENDING, READY, FAILED = "pending", "ready", "failed"
# Staging allocated on demand up to this many bytes (at least 64 blocks): demotions past it are skipped (a future
# miss); a burst of write-through stores (a long prompt's prefill) is what fills it.
DEFAULT_MAX_STAGED_BYTES = 256 << 20
# A read still running after this is reported failed (its loads recompute): it reads into staging, never into the
# host block, so giving up on it is safe; its buffer is kept until it really ends.
DEFAULT_READ_TIMEOUT_S = 30.0
MIN_STAGED_BLOCKS = 64


@dataclass(slots=True)
class DiskMoveCounts:
    demotions_written: int = 0  # writes the tier completed
    demotions_skipped: int = 0  # no staging buffer or the tier refused: the block is not on disk (a future miss)
    promotions_read: int = 0  # reads that verified and landed in their host block
    promotions_from_staging: int = 0  # served from a write still staged here
    promotions_failed: int = 0  # missing, unreadable or not verifying: its loads recompute
    bytes_read: int = 0
    bytes_written: int = 0


@dataclass(slots=True)
class _Read:
    event_id: int
    host_block: int
    key: bytes
    buffer: int = -1  # staging index once submitted
    deadline: float = 0.0  # monotonic time past which it is reported failed (its bytes land in staging only)
    submitted_s: float = 0.0  # monotonic time of the submit (the read latency's start)
    given_up: bool = False  # reported failed at its deadline; its buffer is freed when it really completes


@dataclass(slots=True)
class _Write:
    key: bytes
    buffer: int


@dataclass(slots=True)
class _Staging:
    buffers: list[mmap.mmap] = field(default_factory=list)
    views: list[torch.Tensor] = field(default_factory=list)
    free: list[int] = field(default_factory=list)


class DiskMover:
    def __init__(
        self,
        tier: LowerTier,
        pool: str,
        mirrors: Sequence[torch.Tensor],
        *,
        max_staged_bytes: int = DEFAULT_MAX_STAGED_BYTES,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    ) -> None:
        """`mirrors`: the host mirrors' `[num_host_blocks, row_bytes]` int8 views, in region order."""
        self.tier, self.pool = tier, pool
        self._mirrors = list(mirrors)
        self._rows = [m.shape[1] for m in self._mirrors]
        self.payload_bytes = sum(self._rows)
        self._max_buffers = max(MIN_STAGED_BLOCKS, max_staged_bytes // max(1, self.payload_bytes))
        self._staging = _Staging()
        self._writes: dict[int, _Write] = {}  # ticket -> staged write
        self._queued_writes: deque[_Write] = deque()  # refused busy: retried at the next poll
        self._staged_keys: dict[bytes, int] = {}  # key -> staging buffer of a write not yet completed
        self._reads: dict[int, _Read] = {}  # ticket -> read in flight
        self._queued_reads: deque[_Read] = deque()
        self._block_state: dict[int, str] = {}  # host block -> PENDING / FAILED (absent: nothing of ours pending)
        self._event_left: dict[int, int] = {}  # disk event -> promotions not yet settled
        self._settled: list[int] = []
        self._failed: set[int] = set()
        self.counts = DiskMoveCounts()
        self._read_timeout_s = read_timeout_s
        self.read_latency = OpLatency()  # served reads: submit to the poll that saw them done
        self._unheld: list[bytes] = []  # keys of writes the tier did not keep, until the next report
        self._active = False  # something moved or was asked since the last report
        self._reported = TierCounts()  # the running total at the last report

    # ----- per step -----------------------------------------------------------------------------------------

    def apply(self, batch: DiskBatch) -> None:
        self._active = True
        for key in batch.drop_keys:
            if key not in self._staged_keys:
                self.tier.discard(self.pool, key)
        for host_block, key in zip(batch.demote_host_block_ids, batch.demote_keys):
            self._demote(host_block, key)
        for host_block, key in zip(batch.promote_host_block_ids, batch.promote_keys):
            self._promote(batch.event_id, host_block, key)
        if not batch.promote_host_block_ids:
            return
        self._event_left.setdefault(batch.event_id, 0)
        self._check_settled(batch.event_id)
        self._submit_queued()

    def status(self, host_block_ids: Sequence[int]) -> str:
        """READY when none of these host blocks waits on a promotion; FAILED when one's read failed; else PENDING."""
        states = self._block_state
        if not states:
            return READY
        found = {states.get(b) for b in host_block_ids}
        return FAILED if FAILED in found else PENDING if PENDING in found else READY

    def forget(self, host_block_ids: Sequence[int]) -> None:
        """These host blocks were written anew (a store) or their failed load was reported: no state of ours."""
        for block in host_block_ids:
            if self._block_state.get(block) == FAILED:
                del self._block_state[block]

    def poll(self) -> None:
        if self.busy:
            self._active = True
        for done in self.tier.poll():
            write = self._writes.pop(done.ticket, None)
            if write is not None:
                self._write_done(write, done.ok)
                continue
            read = self._reads.pop(done.ticket, None)
            if read is not None:
                self._read_done(read, done.ok, done.reason)
        if self._reads:
            self._give_up_late_reads()
        self._submit_queued()

    def _give_up_late_reads(self) -> None:
        now = time.monotonic()
        for read in self._reads.values():
            if not read.given_up and now > read.deadline:
                log.warning("disk tier: a read still running after %.0f s; reported failed", self._read_timeout_s)
                self._read_done(read, False, "timed out")
                read.given_up = True

    def take_report(self) -> tuple[dict[int, int], set[int]]:
        """Disk events whose promotions all settled since the last call (one count: this worker), and the host
        blocks whose read failed."""
        settled, self._settled = self._settled, []
        failed, self._failed = self._failed, set()
        return {event_id: 1 for event_id in settled}, failed

    def take_tier_counts(self, into: TierCounts | None = None) -> TierCounts | None:
        """What the tier did since the last call, added to `into` when given (a report not yet sent), else None
        when nothing moved: the mover's blocks, bytes and read latency with the tier's own answers."""
        if not self._active:
            return into
        self._active = self.busy  # in-flight work still changes the tier's counts: report again next step
        now = self.tier_totals()
        delta = now.minus(self._reported)
        self._reported = now.copy()
        if into is not None:
            into.add(delta)
            return into
        return None if delta.is_zero() else delta

    def tier_totals(self) -> TierCounts:
        """What the tier did since it opened: the mover's blocks, bytes and read latency with the tier's answers."""
        now, c = tier_answers(self.tier), self.counts
        now.blocks_read, now.blocks_read_from_staging = c.promotions_read, c.promotions_from_staging
        now.blocks_written, now.reads_failed = c.demotions_written, c.promotions_failed
        now.writes_not_held, now.bytes_read, now.bytes_written = c.demotions_skipped, c.bytes_read, c.bytes_written
        now.read_latency = self.read_latency.copy()
        split_by_tier(now, self.tier, self.payload_bytes)  # a cascade: which of its tiers served and kept blocks
        return now

    def take_unheld_keys(self) -> list[bytes]:
        """Keys of writes the tier did not keep since the last call: the scheduler drops them from its index."""
        keys, self._unheld = self._unheld, []
        return keys

    @property
    def busy(self) -> bool:
        return bool(self._writes or self._reads or self._queued_writes or self._queued_reads)

    def close(self, timeout_s: float = 30.0) -> None:
        """Finish the staged writes (a clean shutdown keeps them), then close the tier."""
        deadline = time.monotonic() + timeout_s
        while self.busy and time.monotonic() < deadline:
            if self.tier.in_flight:
                for done in self.tier.poll(timeout_s=0.05):
                    write = self._writes.pop(done.ticket, None)
                    if write is not None:
                        self._write_done(write, done.ok)
                    read = self._reads.pop(done.ticket, None)
                    if read is not None:
                        self._read_done(read, done.ok, done.reason)
            self._submit_queued()
            if self._queued_reads and not self.tier.in_flight:
                self._queued_reads.clear()  # nothing will take them any more
        self.tier.close()

    # ----- internals ----------------------------------------------------------------------------------------

    def _demote(self, host_block: int, key: bytes) -> None:
        if key in self._staged_keys:
            return  # the same bytes are on their way already (a key's KV never changes)
        buffer = self._take_buffer()
        if buffer is None:
            self.counts.demotions_skipped += 1
            self._unheld.append(key)
            return
        view, offset = self._staging.views[buffer], 0
        for mirror, row in zip(self._mirrors, self._rows):
            view[offset : offset + row].copy_(mirror[host_block])
            offset += row
        self._staged_keys[key] = buffer
        self._submit_write(_Write(key, buffer))

    def _submit_write(self, write: _Write) -> bool:
        """False when the tier is busy (the write stays queued)."""
        payload = memoryview(self._staging.buffers[write.buffer])[: self.payload_bytes]
        ticket = self.tier.submit_write(self.pool, write.key, payload)
        if ticket is Refused.BUSY:
            self._queued_writes.append(write)
            return False
        if isinstance(ticket, Refused):  # present (already stored) or full: nothing more to do with these bytes
            self._write_done(write, ticket is Refused.PRESENT, counted=False)
            if ticket is not Refused.PRESENT:
                self.counts.demotions_skipped += 1
                self._unheld.append(write.key)
            return True
        self._writes[ticket] = write
        return True

    def _write_done(self, write: _Write, ok: bool, *, counted: bool = True) -> None:
        if counted and ok:
            self.counts.demotions_written += 1
            self.counts.bytes_written += self.payload_bytes
        elif counted:
            self.counts.demotions_skipped += 1
            self._unheld.append(write.key)
        if self._staged_keys.get(write.key) == write.buffer:
            del self._staged_keys[write.key]
        self._staging.free.append(write.buffer)

    def _promote(self, event_id: int, host_block: int, key: bytes) -> None:
        staged = self._staged_keys.get(key)
        if staged is not None:
            self._scatter(self._staging.views[staged], host_block)
            self.counts.promotions_from_staging += 1
            self._block_state.pop(host_block, None)
            return
        self._event_left[event_id] = self._event_left.get(event_id, 0) + 1
        self._block_state[host_block] = PENDING
        self._queued_reads.append(_Read(event_id, host_block, key))

    def _submit_queued(self) -> None:
        while self._queued_writes:
            if not self._submit_write(self._queued_writes.popleft()):
                break  # re-queued at the tail: order among queued writes does not matter
        while self._queued_reads:
            read = self._queued_reads[0]
            if read.buffer < 0:
                buffer = self._take_buffer(for_read=True)
                if buffer is None:
                    return
                read.buffer = buffer
            dest = memoryview(self._staging.buffers[read.buffer])[: self.payload_bytes]
            ticket = self.tier.submit_read(self.pool, read.key, dest) if read.key else Refused.MISS
            if ticket is Refused.BUSY:
                return
            self._queued_reads.popleft()
            if isinstance(ticket, Refused):
                self._read_done(read, False, ticket.value)
            else:
                read.submitted_s = time.monotonic()
                read.deadline = read.submitted_s + self._read_timeout_s
                self._reads[ticket] = read

    def _read_done(self, read: _Read, ok: bool, reason: str) -> None:
        if read.given_up:  # already reported failed at its deadline: only its buffer is left to free
            self._staging.free.append(read.buffer)
            return
        if ok:
            self._scatter(self._staging.views[read.buffer], read.host_block)
            self._block_state.pop(read.host_block, None)
            self.counts.promotions_read += 1
            self.counts.bytes_read += self.payload_bytes
            self.read_latency.add(time.monotonic() - read.submitted_s)
        else:
            self._block_state[read.host_block] = FAILED
            self._failed.add(read.host_block)
            self.counts.promotions_failed += 1
            log.debug("disk tier: the read of host block %d failed (%s); its loads recompute", read.host_block, reason)
        if read.buffer >= 0 and reason != "timed out":  # a late read may still write its buffer
            self._staging.free.append(read.buffer)
        self._event_left[read.event_id] -= 1
        self._check_settled(read.event_id)

    def _check_settled(self, event_id: int) -> None:
        if self._event_left.get(event_id) == 0:
            del self._event_left[event_id]
            self._settled.append(event_id)

    def _scatter(self, staged: torch.Tensor, host_block: int) -> None:
        offset = 0
        for mirror, row in zip(self._mirrors, self._rows):
            mirror[host_block].copy_(staged[offset : offset + row])
            offset += row

    def _take_buffer(self, *, for_read: bool = False) -> int | None:
        staging = self._staging
        if staging.free:
            return staging.free.pop()
        # Reads may take one buffer past the cap: a promotion must always make progress (it holds its block pinned).
        if len(staging.buffers) >= self._max_buffers + (1 if for_read else 0):
            return None
        buffer = aligned_buffer(self.payload_bytes)
        staging.buffers.append(buffer)
        staging.views.append(torch.frombuffer(buffer, dtype=torch.int8, count=self.payload_bytes))
        return len(staging.buffers) - 1
