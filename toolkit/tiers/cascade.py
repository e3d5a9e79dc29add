"""The disk with the shared store below it: one `LowerTier` (toolkit/tiers/lower.py) over two, inclusive.

    tier = CascadeTier(disk, shared)    # a DiskTier and a SharedTier (any two LowerTiers)
    t = tier.submit_write(pool, key, payload)   # to both; one ticket, completing when both did
    t = tier.submit_read(pool, key, dest)       # the disk first; on a miss or a failed read, the store
    for c in tier.poll(): ...

Writes go to both tiers: the store is shared (other engines read what this one wrote) and the disk survives this
engine's restart. Both calls take the caller's same payload buffer, which the caller leaves untouched until the one
ticket completes, so nothing is copied here. The write counts as held when either tier kept it (the scheduler's
index may advertise the key: a read finds it in one of them) and is reported not held only when both refused or
failed. A tier that is busy for the write while the other took it is retried at the next poll (the payload is still
the caller's to keep).

Reads try the disk, then the store: on a disk miss at once, or when the disk's read fails or does not verify (the
disk drops a corrupt slot itself). Each tier verifies what it serves and writes the caller's buffer only then (the
store) or with bytes the completion reports as not ok (the disk), so the fallback read into the same buffer never
leaves unverified bytes behind an ok completion. `counts` says which tier served each read.

`discard` reaches the disk only: the store evicts by itself, and another engine may still read the block.
`held_keys` is the disk's (what a restart kept; a shared store is asked, never listed). `close` closes both.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from toolkit.tiers.disk.store import Completion, Refused
from toolkit.tiers.lower import LowerTier

POLL_SLICE_S = 0.005  # a poll with a timeout waits on one tier at a time for at most this long


@dataclass(slots=True)
class CascadeCounts:
    reads_from_upper: int = 0  # reads the upper tier (the disk) served
    reads_from_lower: int = 0  # reads the lower tier (the store) served, after the disk missed or failed
    reads_fell_back: int = 0  # reads the disk missed or failed, asked of the store
    writes_upper: int = 0  # writes the disk completed (a key it held already is neither written nor not held)
    writes_lower: int = 0
    writes_not_held_upper: int = 0  # refused or failed
    writes_not_held_lower: int = 0


@dataclass(slots=True)
class _Write:
    pool: str
    key: bytes
    payload: Any
    left: int  # tier calls not yet completed
    held: bool = False  # a tier kept it


@dataclass(slots=True)
class _Read:
    pool: str
    key: bytes
    dest: Any
    on_lower: bool = False  # the disk missed or failed: the store's read is (or is to be) in flight


class CascadeTier:
    def __init__(self, upper: LowerTier, lower: LowerTier) -> None:
        self.upper, self.lower = upper, lower
        self.counts = CascadeCounts()
        self._ticket = 0
        self._writes: dict[int, _Write] = {}
        self._reads: dict[int, _Read] = {}
        self._of_upper: dict[int, int] = {}  # the upper tier's ticket -> ours
        self._of_lower: dict[int, int] = {}
        self._retry: deque[int] = deque()  # ours, whose lower-tier call was refused busy
        self._done: list[Completion] = []  # completed outside a poll (a retry refused at once)

    # -- the LowerTier contract ---------------------------------------------------------------------------------

    def submit_write(self, pool: str, key: bytes, payload: Any) -> int | Refused:
        upper = self.upper.submit_write(pool, key, payload)
        if upper is Refused.BUSY:
            return upper
        write = _Write(pool, key, payload, left=2)
        ticket = self._new()
        self._writes[ticket] = write
        self._upper_write_started(ticket, write, upper)
        self._lower_write(ticket, write)
        if write.left == 0:  # both answered at once: the answer is the refusal, no completion comes
            self._done = [c for c in self._done if c.ticket != ticket]
            return Refused.PRESENT if write.held else Refused.FULL
        return ticket

    def submit_read(self, pool: str, key: bytes, dest: Any) -> int | Refused:
        upper = self.upper.submit_read(pool, key, dest)
        if upper is Refused.BUSY:
            return upper
        if isinstance(upper, int):
            ticket = self._new()
            self._reads[ticket] = _Read(pool, key, dest)
            self._of_upper[upper] = ticket
            return ticket
        lower = self.lower.submit_read(pool, key, dest)  # the disk does not hold it: the store may
        if isinstance(lower, Refused):
            return lower
        self.counts.reads_fell_back += 1
        ticket = self._new()
        self._reads[ticket] = _Read(pool, key, dest, on_lower=True)
        self._of_lower[lower] = ticket
        return ticket

    def poll(self, timeout_s: float = 0.0, at_least: int = 1) -> list[Completion]:
        """Completions ready now; with `timeout_s`, waiting up to that long for `at_least` of them (capped at what
        is outstanding), one tier at a time in short slices."""
        want = max(1, min(at_least, len(self._writes) + len(self._reads)))
        out = self._collect(0.0)
        deadline = time.monotonic() + timeout_s
        while len(out) < want and (self._writes or self._reads):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            out += self._collect(min(POLL_SLICE_S, left))
        return out

    def discard(self, pool: str, key: bytes) -> bool:
        return self.upper.discard(pool, key)

    def held_keys(self, pool: str) -> list[bytes]:
        return self.upper.held_keys(pool)

    @property
    def in_flight(self) -> int:
        return self.upper.in_flight + self.lower.in_flight + len(self._retry)

    def close(self) -> None:
        try:
            self.upper.close()
        finally:
            self.lower.close()

    # -- internals ----------------------------------------------------------------------------------------------

    def _new(self) -> int:
        self._ticket += 1
        return self._ticket

    def _upper_write_started(self, ticket: int, write: _Write, upper: int | Refused) -> None:
        if isinstance(upper, int):
            self._of_upper[upper] = ticket
        else:
            self._write_part(ticket, write, upper, lower=False)

    def _lower_write(self, ticket: int, write: _Write) -> None:
        lower = self.lower.submit_write(write.pool, write.key, write.payload)
        if lower is Refused.BUSY:
            self._retry.append(ticket)
        elif isinstance(lower, int):
            self._of_lower[lower] = ticket
        else:
            self._write_part(ticket, write, lower, lower=True)

    def _write_part(self, ticket: int, write: _Write, answer: bool | Refused, *, lower: bool) -> None:
        """One tier's answer to a write (its completion's ok, or a refusal at submit); the last one completes our
        ticket."""
        held = answer is True or answer is Refused.PRESENT
        c = self.counts
        if lower:
            c.writes_lower += answer is True
            c.writes_not_held_lower += not held
        else:
            c.writes_upper += answer is True
            c.writes_not_held_upper += not held
        write.held = write.held or held
        write.left -= 1
        if write.left == 0 and self._writes.pop(ticket, None) is not None:
            reason = "ok" if write.held else "not kept by either tier"
            self._done.append(Completion(ticket, "write", write.pool, write.key, write.held, reason))

    def _read_part(self, ticket: int, done: Completion, *, lower: bool) -> None:
        read = self._reads[ticket]
        if done.ok or lower:
            del self._reads[ticket]
            if done.ok:
                self.counts.reads_from_lower += lower
                self.counts.reads_from_upper += not lower
            self._done.append(Completion(ticket, "read", read.pool, read.key, done.ok, done.reason))
            return
        read.on_lower = True  # the disk's read failed or did not verify: the store's copy, into the same buffer
        self.counts.reads_fell_back += 1
        self._lower_read(ticket, read)

    def _lower_read(self, ticket: int, read: _Read) -> None:
        lower = self.lower.submit_read(read.pool, read.key, read.dest)
        if lower is Refused.BUSY:
            self._retry.append(ticket)
        elif isinstance(lower, int):
            self._of_lower[lower] = ticket
        else:
            del self._reads[ticket]
            self._done.append(Completion(ticket, "read", read.pool, read.key, False, lower.value))

    def _collect(self, wait_s: float) -> list[Completion]:
        self._retry_busy()
        upper_wait = wait_s if self.upper.in_flight else 0.0
        for done in self.upper.poll(timeout_s=upper_wait):
            self._on_done(self._of_upper.pop(done.ticket, None), done, lower=False)
        lower_wait = wait_s if not upper_wait and self.lower.in_flight else 0.0
        for done in self.lower.poll(timeout_s=lower_wait):
            self._on_done(self._of_lower.pop(done.ticket, None), done, lower=True)
        out, self._done = self._done, []
        return out

    def _on_done(self, ticket: int | None, done: Completion, *, lower: bool) -> None:
        if ticket is None:
            return
        write = self._writes.get(ticket)
        if write is not None:
            self._write_part(ticket, write, done.ok, lower=lower)
        elif ticket in self._reads:
            self._read_part(ticket, done, lower=lower)

    def _retry_busy(self) -> None:
        for _ in range(len(self._retry)):
            ticket = self._retry.popleft()
            write = self._writes.get(ticket)
            if write is not None:
                self._lower_write(ticket, write)
            elif ticket in self._reads:
                self._lower_read(ticket, self._reads[ticket])
            if self._retry and self._retry[-1] == ticket:
                return  # still busy: the rest waits for the next poll


def _is_a_lower_tier(tier: CascadeTier) -> LowerTier:
    return tier  # mypy checks the contract here
