"""The disk tier: fixed-size block slots in preallocated files, an async submit / poll API that never blocks the
caller's step, and an index that survives a clean restart and a crash.

    tier = DiskTier.open(config)                  # reuses the folder's store when its identity matches
    t = tier.submit_write("attn", key, payload)    # an int ticket, or a Refused reason, at once
    t = tier.submit_read("attn", key, dest)        # dest: a writable buffer of the pool's payload size
    for c in tier.poll(): ...                      # completions ready now; a read's dest is valid only if c.ok
    tier.close()                                   # waits for I/O in flight, snapshots the index

Only the caller's thread calls these; kernel AIO runs the reads and writes where it can (aio.py), `queue_depth`
I/O threads otherwise (`read_path`, `write_path` say which). A write's payload and a
read's destination must stay untouched until the completion is polled (the CPU tier pins the host block).
"""

from __future__ import annotations

import enum
import logging
import os
from dataclasses import dataclass
from typing import Any

from toolkit.errors import BadInput
from toolkit.tiers.disk import manifest as files
from toolkit.tiers.disk.aio import requested_path
from toolkit.tiers.disk.commit_log import Op, Record, write_snapshot
from toolkit.tiers.disk.config import DiskTierConfig, Durability, IoPath
from toolkit.tiers.disk.io_ops import Staging, read_slot, write_slot
from toolkit.tiers.disk.layout import MAX_KEY_BYTES
from toolkit.tiers.disk.opening import Opened, PoolState, open_tier
from toolkit.tiers.disk.policy import CpuTierEvent, WritePolicy, should_write
from toolkit.tiers.disk.stats import DiskTierStats, PoolStats
from toolkit.tiers.disk.workers import Done

log = logging.getLogger(__name__)


class Refused(enum.Enum):
    MISS = "miss"  # a read of a key the pool does not hold
    BUSY = "busy"  # max_in_flight reached: try again after a poll
    FULL = "full"  # no slot can be freed (all pinned or being written)
    PRESENT = "present"  # a write of a key already stored or being stored
    DECLINED = "declined"  # an offer the write policy does not write


@dataclass(frozen=True, slots=True)
class Completion:
    ticket: int
    op: str  # "read" | "write"
    pool: str
    key: bytes
    ok: bool
    reason: str  # "ok", or why the read was not served / the write failed


@dataclass(slots=True)
class _Pending:
    op: str
    pool: int
    key: bytes
    slot: int
    seq: int


class DiskTier:
    def __init__(self, config: DiskTierConfig, opened: Opened) -> None:
        """Use `DiskTier.open(config)`."""
        self.config = config
        self._pools = opened.pools
        self._by_name = {p.name: n for n, p in enumerate(self._pools)}
        self._io = opened.io
        self._aio = opened.aio
        self.read_path = "aio" if opened.aio is not None else "threads"
        # Writes go through AIO only when asked for (`io_path` aio): under `auto` they stay on the I/O threads,
        # where paired runs on this host measured them as fast or faster at 256 KiB (docs/results/
        # 2026-12-03-disk-aio.md); with fdatasync every write also waits for its flush and its synchronous commit
        # record, which would stall the loop's reads (aio.py)
        wanted = requested_path(config.io_path) is IoPath.AIO and config.durability is Durability.PAGE_CACHE
        self._aio_writes = self._aio if wanted else None
        self.write_path = "aio" if self._aio_writes is not None else "threads"
        self._lock_fd = opened.lock_fd
        self._log = opened.commit_log
        self.direct = opened.direct
        self._seq = opened.last_seq
        self._invalid_records = opened.invalid_records
        self._ticket = 0
        self._pending: dict[int, _Pending] = {}
        self._max_in_flight = config.max_in_flight or 4 * config.queue_depth
        slot_bytes = max(p.geometry.slot_bytes for p in self._pools)
        self._staging = Staging(slot_bytes)
        self._closed = False

    @classmethod
    def open(cls, config: DiskTierConfig) -> DiskTier:
        return cls(config, open_tier(config))

    # -- the API -------------------------------------------------------------------------------------------------

    def contains(self, pool: str, key: bytes) -> bool:
        """Whether a read of `key` would be submitted now (it may still fail verification)."""
        return self._pools[self._pool(pool)].index.slot_of(key) is not None

    def held_keys(self, pool: str) -> list[bytes]:
        """The keys a pool holds ready, least recently used first."""
        return [r.key for r in self._pools[self._pool(pool)].index.records(0)]

    def discard(self, pool: str, key: bytes) -> bool:
        """Forget a ready key (its owner let it go; logged, so a restart does not serve it). A key being written or
        read stays (its slot is busy); it ages out by the LRU. Whether it was dropped."""
        n = self._pool(pool)
        p = self._pools[n]
        slot = p.index.slot_of(key)
        if slot is None or p.index.is_pinned(slot):
            return False
        p.index.drop(key)
        p.stats.discarded += 1
        try:
            self._log.append([Record(Op.DROP, n, slot, self._next_seq(), 0, key)])
        except OSError as exc:
            log.warning("disk tier: could not log a discarded slot (%s)", exc)
        return True

    def submit_write(self, pool: str, key: bytes, payload: Any) -> int | Refused:
        n = self._pool(pool)
        p = self._pools[n]
        view = self._payload(p, payload, "payload")
        _check_key(key)
        if len(self._pending) >= self._max_in_flight:
            p.stats.refused_busy += 1
            return Refused.BUSY
        if p.index.has(key):
            p.stats.refused_present += 1
            return Refused.PRESENT
        reservation = p.index.reserve(key)
        if reservation is None:
            p.stats.refused_full += 1
            return Refused.FULL
        p.stats.evictions += reservation.evicted_key is not None
        seq = self._next_seq()
        ticket = self._submit(_Pending("write", n, key, reservation.slot, seq))
        ctx, staging, slot, aio = p.ctx, self._staging, reservation.slot, self._aio_writes
        if aio is not None:  # the checksum on an I/O thread, the write through kernel AIO
            self._io.submit(ticket, lambda: aio.submit_write(ticket, ctx, slot, seq, key, view))
        else:
            self._io.submit(ticket, lambda: write_slot(ctx, staging, slot, seq, key, view))
        return ticket

    def offer(
        self, pool: str, key: bytes, payload: Any, event: CpuTierEvent, cpu_hits: int, policy: WritePolicy
    ) -> int | Refused:
        """A CPU-tier event for a block: written when `policy` says so, else counted as declined."""
        if not should_write(policy, event, cpu_hits):
            self._pools[self._pool(pool)].stats.declined_by_policy += 1
            return Refused.DECLINED
        return self.submit_write(pool, key, payload)

    def submit_read(self, pool: str, key: bytes, dest: Any) -> int | Refused:
        n = self._pool(pool)
        p = self._pools[n]
        view = self._payload(p, dest, "dest")
        if view.readonly:
            raise BadInput("disk tier read: dest must be writable")
        if len(self._pending) >= self._max_in_flight:
            p.stats.refused_busy += 1
            return Refused.BUSY
        slot = p.index.slot_of(key)
        if slot is None:
            p.stats.misses += 1
            return Refused.MISS
        p.index.touch(key)
        p.index.pin(slot)
        ticket = self._submit(_Pending("read", n, key, slot, p.index.seq_of(slot)))
        ctx, staging = p.ctx, self._staging
        if self._aio is not None:
            self._aio.submit_read(ticket, ctx, slot, key, view)
        else:
            self._io.submit(ticket, lambda: read_slot(ctx, staging, slot, key, view))
        return ticket

    def poll(self, timeout_s: float = 0.0, at_least: int = 1) -> list[Completion]:
        """Completions ready now; with `timeout_s`, waiting up to that long for `at_least` of them (capped at what
        is in flight). An engine step calls it without a timeout."""
        at_least = max(1, min(at_least, len(self._pending)))
        return [self._complete(done) for done in self._io.drain(timeout_s, at_least)]

    def wait_all(self, timeout_s: float = 60.0) -> list[Completion]:
        """Every completion still in flight (for close, tests and the benchmark, not for an engine step)."""
        out: list[Completion] = []
        while self._pending:
            got = self.poll(timeout_s)
            if not got:
                raise TimeoutError(f"disk tier: {len(self._pending)} I/Os still in flight after {timeout_s} s")
            out.extend(got)
        return out

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def stats(self) -> DiskTierStats:
        return DiskTierStats(
            pools={p.name: PoolStats(**{f: getattr(p.stats, f) for f in PoolStats.__slots__}) for p in self._pools},
            occupancy={p.name: (len(p.index), p.geometry.num_slots) for p in self._pools},
            direct=self.direct,
            read_path=self.read_path,
            write_path=self.write_path,
            checksum=self._pools[0].ctx.checksum.name,
            log_records_invalid=self._invalid_records,
            log_records_skipped=self._log.skipped,
        )

    def close(self) -> None:
        """Finish the I/O in flight, write the index snapshot, empty the log, release the files and the lock."""
        if self._closed:
            return
        try:
            self.wait_all()
            self._snapshot()
        finally:
            self._closed = True
            if self._aio is not None:
                self._aio.close()
            self._io.close()
            self._log.close()
            for p in self._pools:
                os.close(p.ctx.fd)
            os.close(self._lock_fd)

    def __enter__(self) -> DiskTier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------------------------------

    def _pool(self, name: str) -> int:
        try:
            return self._by_name[name]
        except KeyError:
            raise BadInput(f"disk tier: no pool {name!r:.40}; pools are {sorted(self._by_name)}") from None

    @staticmethod
    def _payload(p: PoolState, buffer: Any, field: str) -> memoryview:
        view = memoryview(buffer).cast("B")
        if view.nbytes != p.geometry.payload_bytes:
            raise BadInput(
                f"disk tier pool {p.name}: {field} is {view.nbytes} B, the pool's blocks are "
                f"{p.geometry.payload_bytes} B"
            )
        return view

    def _snapshot(self) -> None:
        records = [r for n, p in enumerate(self._pools) for r in p.index.records(n)]
        write_snapshot(self.config.folder / files.SNAPSHOT, records)
        self._log.truncate()  # after the snapshot: a crash between them replays both, resolved by sequence

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _submit(self, pending: _Pending) -> int:
        self._ticket += 1
        self._pending[self._ticket] = pending
        return self._ticket

    def _complete(self, done: Done) -> Completion:
        pending = self._pending.pop(done.ticket)
        p = self._pools[pending.pool]
        if pending.op == "write":
            return self._write_done(p, pending, done)
        p.index.unpin(pending.slot)
        reason = "ok" if done.error is None and done.result is None else (done.result or repr(done.error))
        if reason == "ok":
            p.stats.hits += 1
            p.stats.bytes_loaded += p.geometry.payload_bytes
        else:
            self._read_failed(p, pending, done)
        return Completion(done.ticket, "read", p.name, pending.key, reason == "ok", reason)

    def _write_done(self, p: PoolState, pending: _Pending, done: Done) -> Completion:
        if done.error is not None:
            p.index.abort(pending.key)
            p.stats.writes_failed += 1
            log.warning("disk tier pool %s: a write failed (%s); the block is not stored", p.name, done.error)
            return Completion(done.ticket, "write", p.name, pending.key, False, repr(done.error))
        p.index.commit(pending.key, pending.slot, pending.seq, int(done.result))
        p.stats.writes_ok += 1
        p.stats.bytes_written += p.geometry.payload_bytes
        p.stats.device_bytes_written += p.geometry.slot_bytes
        return Completion(done.ticket, "write", p.name, pending.key, True, "ok")

    def _read_failed(self, p: PoolState, pending: _Pending, done: Done) -> None:
        if done.error is not None:
            p.stats.read_errors += 1
            return
        # The slot does not hold what the index says: forget it here and in the log, so a restart does not retry.
        p.stats.corrupt += 1
        if p.index.slot_of(pending.key) == pending.slot:
            p.index.drop(pending.key)
            try:
                self._log.append([Record(Op.DROP, pending.pool, pending.slot, self._next_seq(), 0, pending.key)])
            except OSError as exc:
                log.warning("disk tier: could not log a dropped slot (%s)", exc)


def _check_key(key: bytes) -> None:
    if not isinstance(key, bytes) or not 0 < len(key) <= MAX_KEY_BYTES:
        raise BadInput(f"disk tier key: must be 1-{MAX_KEY_BYTES} bytes, got {key!r:.60}")
