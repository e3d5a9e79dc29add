"""What a finished (or timed-out) store call means for the counters, the completion's reason and the pause.

A job returns the store's code (an int), "ok", a verification failure's name ("checksum", "identity", ...) or
"abandoned"; an exception becomes "error: ..."; a call past its deadline is "timeout". Failures of the store itself
(timeouts, exceptions, transfer and RPC errors: codes <= -800) count toward the pause; misses, full stores, foreign
values and object-level refusals (e.g. a key another engine is writing right now) do not: the store answered.
"""

from __future__ import annotations

from typing import Any

from toolkit.tiers.shared import backend
from toolkit.tiers.shared.stats import SharedTierStats

ABANDONED = "abandoned"
TIMEOUT = "timeout"
_UNREACHABLE_CODE = -800  # -800 a transfer failed, -900 / -901 the master unreachable / timed out
_NAMES = {backend.NO_SPACE: "full", backend.NOT_FOUND: "miss", backend.BUFFER_TOO_SMALL: "corrupt: oversized"}


def count_write(s: SharedTierStats, outcome: Any, payload_bytes: int, elapsed_s: float) -> tuple[bool, bool]:
    """(served, a store failure) for a write, counted into `s`."""
    if outcome == 0:
        s.writes_ok += 1
        s.bytes_written += payload_bytes
        s.write_latency.add(elapsed_s)
        return True, False
    if outcome == backend.NO_SPACE:
        s.writes_refused_full += 1
        return False, False
    if outcome == TIMEOUT:
        s.writes_timed_out += 1
    else:
        s.writes_failed += 1
    return False, _store_failed(outcome)


def count_read(s: SharedTierStats, outcome: Any, payload_bytes: int, elapsed_s: float) -> tuple[bool, bool]:
    """(served, a store failure) for a read, counted into `s`."""
    if outcome == "ok":
        s.hits += 1
        s.bytes_loaded += payload_bytes
        s.read_latency.add(elapsed_s)
        return True, False
    if outcome == backend.NOT_FOUND:
        s.misses += 1
        return False, False
    if outcome == backend.BUFFER_TOO_SMALL:
        s.count_corrupt("oversized")
        return False, False
    if isinstance(outcome, str) and outcome not in (TIMEOUT, ABANDONED) and not outcome.startswith("error"):
        s.count_corrupt(outcome)
        return False, False
    if outcome == TIMEOUT:
        s.reads_timed_out += 1
    else:
        s.read_errors += 1
    return False, _store_failed(outcome)


def _store_failed(outcome: Any) -> bool:
    return not isinstance(outcome, int) or outcome <= _UNREACHABLE_CODE


def reason(outcome: Any) -> str:
    """The completion's reason for an outcome that was not served."""
    if isinstance(outcome, int):
        return _NAMES.get(outcome, f"store error {outcome}")
    text = str(outcome)
    return text if text in (TIMEOUT, ABANDONED) or text.startswith("error") else f"corrupt: {text}"
