"""The shared tier's counters: every way a read is not served and a write is not stored has its own, so a store
that is down, slow, full or holding foreign values shows up as numbers, never as an exception or a hang."""

from __future__ import annotations

from dataclasses import dataclass, field

LATENCY_BUCKETS = 24  # bucket n counts calls under 2**n microseconds (the last: everything slower, ~8 s and up)


@dataclass(slots=True)
class OpLatency:
    """Served calls' time on a store thread: count, sum, max and a power-of-two histogram (for Prometheus-style
    buckets and percentiles without keeping every sample)."""

    count: int = 0
    total_s: float = 0.0
    max_s: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * LATENCY_BUCKETS)

    def add(self, elapsed_s: float) -> None:
        self.count += 1
        self.total_s += elapsed_s
        self.max_s = max(self.max_s, elapsed_s)
        self.buckets[min(LATENCY_BUCKETS - 1, max(0, int(elapsed_s * 1e6)).bit_length())] += 1

    def copy(self) -> OpLatency:
        return OpLatency(self.count, self.total_s, self.max_s, list(self.buckets))

    def merge(self, other: OpLatency) -> None:
        """Add `other`'s calls (another worker, or the next interval)."""
        self.count += other.count
        self.total_s += other.total_s
        self.max_s = max(self.max_s, other.max_s)
        self.buckets = [a + b for a, b in zip(self.buckets, other.buckets)]

    def minus(self, before: OpLatency) -> OpLatency:
        """The calls since `before` (an earlier copy of this running total); `max_s` stays the running max."""
        return OpLatency(self.count - before.count, self.total_s - before.total_s, self.max_s,
                         [a - b for a, b in zip(self.buckets, before.buckets)])  # fmt: skip

    def quantile_upper_s(self, q: float) -> float | None:
        """An upper bound of the q-quantile: the top of the bucket it falls in (None before any call)."""
        if not self.count:
            return None
        rank, seen = q * self.count, 0
        for n, in_bucket in enumerate(self.buckets):
            seen += in_bucket
            if seen >= rank:
                return min(2**n * 1e-6, self.max_s) if n < LATENCY_BUCKETS - 1 else self.max_s
        return self.max_s

    @property
    def mean_ms(self) -> float | None:
        return 1e3 * self.total_s / self.count if self.count else None


@dataclass(slots=True)
class SharedTierStats:
    hits: int = 0  # reads that verified and were copied into the destination
    misses: int = 0  # the store holds no such value
    corrupt: int = 0  # a value that failed verification (foreign identity, other key, torn, flipped, wrong size)
    read_errors: int = 0  # the store call failed (store process or master gone)
    reads_timed_out: int = 0  # not back within op_timeout_s: a miss; the late answer is dropped
    bytes_loaded: int = 0
    writes_ok: int = 0
    writes_refused_full: int = 0  # the store had no space (it evicts by itself; this write is lost)
    writes_failed: int = 0
    writes_timed_out: int = 0
    bytes_written: int = 0
    refused_busy: int = 0  # in-flight bound reached (slow calls still count against it)
    refused_unavailable: int = 0  # not connected, or paused after consecutive failures
    pauses: int = 0  # times the tier paused itself after `failures_to_pause` failures in a row
    lookups_unanswered: int = 0  # contains() answered False because the store did not answer in time
    corrupt_reasons: dict[str, int] = field(default_factory=dict)
    read_latency: OpLatency = field(default_factory=OpLatency)  # served reads, submit to the call's return
    write_latency: OpLatency = field(default_factory=OpLatency)

    def count_corrupt(self, reason: str) -> None:
        self.corrupt += 1
        self.corrupt_reasons[reason] = self.corrupt_reasons.get(reason, 0) + 1
