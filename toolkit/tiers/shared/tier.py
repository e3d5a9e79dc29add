"""The shared tier: blocks in a store that several engines read and write (Mooncake Store), with the disk tier's
shape, never blocking the caller and never raising out of a store failure.

    tier = SharedTier.connect(config)          # never raises for a store that is down: tier.available is False
    t = tier.submit_write("attn", key, payload) # an int ticket, or a Refused reason, at once
    t = tier.submit_read("attn", key, dest)     # dest: a writable buffer of the pool's payload size
    for c in tier.poll(): ...                   # completions ready now (timed-out calls included); dest valid iff c.ok
    tier.close()

It implements the worker's `LowerTier` contract (toolkit/tiers/lower.py), so the cascade's mover drives it as it
drives the disk tier. Refusals use the disk tier's reasons: BUSY (max_in_flight calls outstanding, slow ones
included: retry after a poll); a store that is unavailable (not connected, or paused after failures in a row)
refuses a write as FULL and a read as MISS, which is what they mean to the caller (nothing more to do with these
bytes; recompute), counted apart as `refused_unavailable`. `discard` removes nothing (another engine may be reading
the block; the store evicts by itself) and `held_keys` lists nothing (a shared store is asked with lookups).

A value's store key is `kvtk1/<identity digest>/<pool>/<key>`, and its header repeats all three (frame.py): two
engines whose cache identities differ never see each other's values, and a value that is not what its key says is
a counted miss. Each call runs on a worker thread with a deadline: past it the completion is a timeout (a miss, a
failed write) and the destination is never written afterwards (the copy into it is fenced by a lock). After
`failures_to_pause` failures in a row the tier refuses at once for `pause_s` (the store is down: a recompute is
cheaper than waiting), then tries again.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from toolkit.errors import BadInput
from toolkit.tiers.disk.checksum import default_checksum
from toolkit.tiers.disk.store import Completion, Refused
from toolkit.tiers.lower import LowerTier
from toolkit.tiers.shared import outcomes
from toolkit.tiers.shared.backend import StoreClient
from toolkit.tiers.shared.config import SharedTierConfig
from toolkit.tiers.shared.connecting import Reconnector, call_with_deadline
from toolkit.tiers.shared.frame import FRAME_HEADER_BYTES, FRAME_VERSION, MAX_KEY_BYTES, FrameSpec, pack_header, verify
from toolkit.tiers.shared.lookups import MAX_LOOKUP_KEYS, Lookups
from toolkit.tiers.shared.stats import SharedTierStats
from toolkit.tiers.shared.workers import Done, Staging, StoreThreads

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Pending:
    op: str
    spec: FrameSpec
    deadline: float
    copying: bool = False  # the worker is copying between staging and the caller's buffer: not abandoned now
    abandoned: bool = False


class SharedTier:
    def __init__(self, config: SharedTierConfig, link: Reconnector) -> None:
        """Use `SharedTier.connect(config)`."""
        self.config = config
        self._link = link
        self._client: StoreClient | None = None
        self._digest = config.identity.digest()
        self._checksum = default_checksum()
        self._lock = threading.Lock()  # fences the worker's copies against the caller abandoning a call
        self._pending: dict[int, _Pending] = {}
        self._lookups = Lookups()
        self._outstanding = 0  # jobs handed to the threads and not drained (abandoned ones included)
        self._drained_early: list[Completion] = []  # others' completions `contains` drained: `poll` returns them
        self._ticket = 0
        self._stats = SharedTierStats()
        self._failures_in_row = 0
        self._paused_until = 0.0
        self._threads: StoreThreads | None = None
        self._closed = False

    @classmethod
    def connect(cls, config: SharedTierConfig) -> SharedTier:
        """A connected tier, or one that refuses everything for now (`down_reason`, one log line) and reconnects
        by itself (at most every `pause_s`, off the caller's thread); never raises for a store that is down, and
        returns within about `connect_timeout_s`."""
        link = Reconnector(config)
        link.start()
        link.wait(config.connect_timeout_s)
        tier = cls(config, link)
        if not tier._take_connection():
            log.warning("shared tier: not connected (every read a miss, every write refused until it is): %s",
                        tier.down_reason)  # fmt: skip
        return tier

    # -- the API -------------------------------------------------------------------------------------------------

    @property
    def available(self) -> bool:
        return self._threads is not None and not self._closed

    @property
    def down_reason(self) -> str:
        """Why the tier is not connected ("" when it is)."""
        return "" if self.available else ("closed" if self._closed else self._link.reason)

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def discard(self, pool: str, key: bytes) -> bool:
        """Nothing is removed: one engine letting a block go says nothing about the others (False: not removed)."""
        self._spec(pool, key)
        return False

    def held_keys(self, pool: str) -> list[bytes]:
        """None listed: a shared store is asked with `submit_lookup`, not enumerated at start."""
        self.config.pool(pool)
        return []

    def submit_write(self, pool: str, key: bytes, payload: Any) -> int | Refused:
        spec = self._spec(pool, key)
        view = _view(payload, spec, "payload")
        refused = self._admit(Refused.FULL, reserve=self._read_reserve)
        if refused is not None:
            return refused
        ticket, pending = self._new("write", spec)
        client, store_key = self._client, self._store_key(spec)
        assert client is not None

        def job(staging: Staging) -> Any:
            if not self._enter_copy(pending):
                return outcomes.ABANDONED
            try:
                staging.view[FRAME_HEADER_BYTES : spec.frame_bytes] = view
            finally:
                self._leave_copy(pending)  # the caller's buffer is not read after this
            stored = staging.view[FRAME_HEADER_BYTES : spec.frame_bytes]
            pack_header(spec, self._checksum, stored, staging.view)
            return client.put_from(store_key, staging.address, spec.frame_bytes)

        self._submit(ticket, job, urgent=False)
        return ticket

    def submit_read(self, pool: str, key: bytes, dest: Any) -> int | Refused:
        spec = self._spec(pool, key)
        view = _view(dest, spec, "dest")
        if view.readonly:
            raise BadInput("shared tier read: dest must be writable")
        refused = self._admit()
        if refused is not None:
            return refused
        ticket, pending = self._new("read", spec)
        client, store_key = self._client, self._store_key(spec)
        assert client is not None

        def job(staging: Staging) -> Any:
            got = client.get_into(store_key, staging.address, spec.frame_bytes)  # larger values: -600, no copy
            if got < 0:
                return got
            reason = verify(spec, staging.view[:got])
            if reason != "ok":
                return reason
            if not self._enter_copy(pending):
                return outcomes.ABANDONED
            try:
                view[:] = staging.view[FRAME_HEADER_BYTES : spec.frame_bytes]
            finally:
                self._leave_copy(pending)
            return "ok"

        self._submit(ticket, job, urgent=True)
        return ticket

    def submit_lookup(self, pool: str, keys: list[bytes]) -> int | Refused:
        """Which of `keys` the store holds, asked without blocking: `lookup_result(ticket)` answers (lookups.py)."""
        if not 0 < len(keys) <= MAX_LOOKUP_KEYS:
            raise BadInput(f"shared tier lookup: give 1-{MAX_LOOKUP_KEYS} keys, got {len(keys)}")
        store_keys = [self._store_key(self._spec(pool, key)) for key in keys]
        refused = self._admit()
        if refused is not None:
            return refused
        assert self._client is not None
        self._ticket += 1
        lookup = self._lookups.add(self._ticket, self._client, store_keys, self.config.op_timeout_s)
        self._submit(self._ticket, lookup, urgent=True)
        return self._ticket

    def lookup_result(self, ticket: int) -> tuple[bool, ...] | None:
        """None while unanswered; then one bool per key (all False past `op_timeout_s`, counted), once."""
        result = self._lookups.result(ticket)
        self._stats.lookups_unanswered = self._lookups.unanswered
        return result

    def contains(self, pool: str, key: bytes) -> bool:
        """Whether the store holds a value under this block's key now (its contents are verified only on read).
        Blocks the caller up to `op_timeout_s` (tools and tests; the scheduler uses `submit_lookup`)."""
        ticket = self.submit_lookup(pool, [key])
        if isinstance(ticket, Refused):
            return False
        self._lookups.wait(ticket, self.config.op_timeout_s)
        result = self.lookup_result(ticket)
        while result is None:  # answered as the deadline passed: at most a moment
            time.sleep(0.001)
            result = self.lookup_result(ticket)
        # Free the lookup's in-flight slot now (else only the caller's next `poll` would, and a tool asking
        # `contains` in a loop found every ask refused as busy after `in_flight_bound` of them); what else finished
        # meanwhile is kept for that `poll`.
        give_up = time.monotonic() + 1.0  # the thread hands its Done over just after the answer: a moment
        while self._threads is not None:
            done = self._threads.drain(0.01)
            self._drained_early.extend(c for d in done if (c := self._complete(d)) is not None)
            if any(d.ticket == ticket for d in done) or time.monotonic() >= give_up:
                break
        return result[0]

    def poll(self, timeout_s: float = 0.0, at_least: int = 1) -> list[Completion]:
        """Completions ready now, then calls past their deadline as timeouts; with `timeout_s`, waiting up to that
        long for `at_least` of them (capped at what is outstanding). An engine step calls it without a timeout."""
        if self._threads is None:
            return []
        out, self._drained_early = self._drained_early, []
        want = max(1, min(at_least - len(out), self._outstanding))
        if out:
            timeout_s = 0.0  # something to return already: do not wait for more
        out += [c for done in self._threads.drain(timeout_s, want) if (c := self._complete(done)) is not None]
        now = time.monotonic()
        for ticket, pending in list(self._pending.items()):
            if now >= pending.deadline:
                with self._lock:
                    if pending.copying:
                        continue  # a copy of a few MiB: it is done in a moment, let it finish
                    pending.abandoned = True
                del self._pending[ticket]
                out.append(self._finish(ticket, pending, outcomes.TIMEOUT))
        return out

    def wait_all(self) -> list[Completion]:
        """Every completion in flight; returns within about `op_timeout_s` (calls past it complete as timeouts)."""
        out: list[Completion] = []
        while self._pending or self._drained_early:
            out.extend(self.poll(timeout_s=0.05))
        return out

    def stats(self) -> SharedTierStats:
        return copy.deepcopy(self._stats)

    def close(self) -> None:
        """Finish or time out what is in flight, stop the threads; the client is closed only when no thread is
        stuck inside it (else it is left to the process's exit: closing under a running call is not safe)."""
        if self._closed:
            return
        self.wait_all()
        self._closed = True
        self._link.close()
        threads, client = self._threads, self._client
        self._threads = None
        if threads is not None and client is not None:
            if threads.close(self.config.op_timeout_s):
                call_with_deadline(client.close, self.config.op_timeout_s)
            else:
                log.warning("shared tier: a store call is still running at close; the client is left open")

    def __enter__(self) -> SharedTier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------------------------------

    def _spec(self, pool: str, key: bytes) -> FrameSpec:
        if not isinstance(key, bytes) or not 0 < len(key) <= MAX_KEY_BYTES:
            raise BadInput(f"shared tier key: must be 1-{MAX_KEY_BYTES} bytes, got {key!r:.60}")
        return FrameSpec(key, pool, self._digest, self.config.pool(pool).payload_bytes)

    def _store_key(self, spec: FrameSpec) -> str:
        return f"kvtk{FRAME_VERSION}/{spec.identity.hex()}/{spec.pool}/{spec.key.hex()}"

    def store_key(self, pool: str, key: bytes) -> str:
        """The name a block has in the store (for tools and tests that look at the store itself)."""
        return self._store_key(self._spec(pool, key))

    def _take_connection(self) -> bool:
        """Install a connection the reconnector made, or start another attempt when one is due."""
        if self._threads is not None or self._closed:
            return self._threads is not None
        got = self._link.take()
        if got is None:
            self._link.start()
            return False
        self._client, self._threads = got.client, got.threads
        got.threads.start()
        log.info("shared tier: connected to the store at %s", self.config.master)
        return True

    @property
    def _read_reserve(self) -> int:
        """In-flight places writes leave to reads and lookups: a quarter of the bound, so a backlog of writes
        never refuses a read as busy."""
        return self.config.in_flight_bound // 4

    def _admit(self, unavailable: Refused = Refused.MISS, *, reserve: int = 0) -> Refused | None:
        if not self._take_connection() or time.monotonic() < self._paused_until:
            self._stats.refused_unavailable += 1
            return unavailable
        if self._outstanding >= self.config.in_flight_bound - reserve:
            self._stats.refused_busy += 1
            return Refused.BUSY
        return None

    def _new(self, op: str, spec: FrameSpec) -> tuple[int, _Pending]:
        self._ticket += 1
        pending = _Pending(op, spec, time.monotonic() + self.config.op_timeout_s)
        self._pending[self._ticket] = pending
        return self._ticket, pending

    def _submit(self, ticket: int, job: Any, *, urgent: bool) -> None:
        assert self._threads is not None
        self._outstanding += 1
        self._threads.submit(ticket, job, urgent=urgent)

    def _enter_copy(self, pending: _Pending) -> bool:
        with self._lock:
            if pending.abandoned:
                return False
            pending.copying = True
            return True

    def _leave_copy(self, pending: _Pending) -> None:
        with self._lock:
            pending.copying = False

    def _complete(self, done: Done) -> Completion | None:
        self._outstanding -= 1
        pending = self._pending.pop(done.ticket, None)
        if pending is None:
            return None  # a lookup (answered through Lookups), or a call already completed as a timeout: dropped
        outcome: Any = done.result if done.error is None else f"error: {done.error!r:.200}"
        return self._finish(done.ticket, pending, outcome, done.elapsed_s)

    def _finish(self, ticket: int, pending: _Pending, outcome: Any, elapsed_s: float = 0.0) -> Completion:
        spec = pending.spec
        count = outcomes.count_write if pending.op == "write" else outcomes.count_read
        ok, failed = count(self._stats, outcome, spec.payload_bytes, elapsed_s)
        self._count_failure(failed)
        return Completion(ticket, pending.op, spec.pool, spec.key, ok, "ok" if ok else outcomes.reason(outcome))

    def _count_failure(self, failed: bool) -> None:
        if not failed:
            self._failures_in_row = 0
            return
        self._failures_in_row += 1
        if self._failures_in_row >= self.config.failures_to_pause and time.monotonic() >= self._paused_until:
            self._paused_until = time.monotonic() + self.config.pause_s
            self._stats.pauses += 1
            log.warning("shared tier: %d store failures in a row; refusing for %.1f s (reads are misses)",
                        self._failures_in_row, self.config.pause_s)  # fmt: skip


def _view(buffer: Any, spec: FrameSpec, field: str) -> memoryview:
    view = memoryview(buffer).cast("B")
    if view.nbytes != spec.payload_bytes:
        raise BadInput(f"shared tier pool {spec.pool}: {field} is {view.nbytes} B, the pool's blocks are "
                       f"{spec.payload_bytes} B")  # fmt: skip
    return view


def _is_a_lower_tier(tier: SharedTier) -> LowerTier:
    return tier  # mypy checks the contract here
