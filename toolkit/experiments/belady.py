"""Offline Belady eviction over prefix keys: the optimum of a tier of `capacity` keys (`oracle.py` sizes it).

After each request all its keys are offered for storage; on overflow the key whose next use lies furthest in the
future goes first (never-used-again keys first, deeper keys of a chain before their parents on ties), and a new key
may itself be the one dropped (bypass). With a chain's parent never used later than its child this is the optimum
over all policies that only store keys when they are accessed, which `tests/experiments/test_oracle.py` checks by
exhaustive search. The simulation works on runs of keys sharing a next use, not key by key.
"""

from __future__ import annotations

import heapq

import numpy as np

from toolkit.experiments.prefix_keys import DenseRequests, leading, max_hit_keys

NEVER = np.iinfo(np.int32).max  # the next use of a key no later request can hit on
_OFFERED = np.empty(0, dtype=np.int32)


def _next_uses(requests: DenseRequests, num_ids: int, unit: int, counted: range | None = None) -> list[np.ndarray]:
    """For request r and its j-th key: the next request (after r) that could hit on the key, or NEVER.

    Only uses within a request's hit cap count: a key past `(prompt_len - 1) // unit` can never be a hit there;
    with `counted`, only uses by requests in that range count.
    """
    following = np.full(num_ids, NEVER, dtype=np.int32)
    out: list[np.ndarray] = [following[:0]] * len(requests)
    for r in range(len(requests) - 1, -1, -1):
        keys, prompt_len = requests[r]
        out[r] = following[keys]
        if counted is None or r in counted:
            following[keys[: max_hit_keys(prompt_len, unit)]] = r
    return out


class _BeladyTier:
    """A tier of `capacity` keys that holds only keys some later request can hit on, evicting the furthest used.

    A key no later request hits on would be the first evicted on any overflow, so the keys that matter (those
    with a later use) fare the same whether it is stored or not: it is never stored. Keys are stored in *runs*,
    the consecutive keys of one request sharing a next use (a chain's next uses never decrease with depth, so a
    request has few runs); the heap orders runs by (next use, deepest live depth), furthest and deepest first.
    """

    def __init__(self, num_ids: int, capacity: int) -> None:
        self.run_of = np.full(num_ids, -1, dtype=np.int64)  # the run holding each key, -1 when not held
        self.size = 0
        self.capacity = capacity
        self.runs: list[tuple[np.ndarray, int]] = []  # (the request's keys, first depth of the run)
        self.heap: list[tuple[int, int, int]] = []  # (-next use, -deepest depth not yet evicted, run)

    def hits(self, keys: np.ndarray, limit: int) -> int:
        return leading(self.run_of[keys[:limit]] >= 0)

    def offer(self, keys: np.ndarray, uses: np.ndarray) -> None:
        """Store the request's keys with their next uses (replacing what was held for them), then evict."""
        if not len(keys):  # a prompt shorter than one key
            return
        self.size -= int(np.count_nonzero(self.run_of[keys] >= 0))
        self.run_of[keys] = -1
        edges = (np.flatnonzero(uses[1:] != uses[:-1]) + 1).tolist()
        for lo, hi in zip([0, *edges], [*edges, len(keys)]):
            use = int(uses[lo])
            if use == NEVER:
                continue
            run = len(self.runs)
            self.runs.append((keys, lo))
            self.run_of[keys[lo:hi]] = run
            self.size += hi - lo
            heapq.heappush(self.heap, (-use, 1 - hi, run))
        while self.size > self.capacity:
            self._evict_from_top_run()

    def _evict_from_top_run(self) -> None:
        """Evict from the furthest-used run its deepest keys, down to where the next run's keys come first.

        Keys are evicted in (next use, depth) order, furthest and deepest first, exactly as one heap entry per
        key would; equal (next use, depth) is the same key for chains (the key at that depth of that request).
        """
        neg_use, neg_top, run = heapq.heappop(self.heap)
        keys, lo = self.runs[run]
        top, floor = -neg_top, lo
        if self.heap and self.heap[0][0] == neg_use:  # the next run is used as late: only keys as deep as its deepest
            floor = max(lo, -self.heap[0][1])
        span = keys[floor : top + 1]
        need = self.size - self.capacity
        held = np.flatnonzero(self.run_of[span] == run)[-need:]  # skips keys re-offered since (held elsewhere)
        self.run_of[span[held]] = -1
        self.size -= len(held)
        rest = floor + int(held[0]) - 1 if len(held) == need else floor - 1
        if rest >= lo:
            heapq.heappush(self.heap, (neg_use, -rest, run))


def belady_hits(
    requests: DenseRequests, num_ids: int, unit: int, capacity: int, counted: range | None = None
) -> list[int]:
    """Hit tokens per request of Belady over `requests`; with `counted`, hits are counted (and next uses seen)
    only inside that range, and the list stops at its end.

    The requests before the range then only offer their keys, so the tier enters it holding the `capacity` keys
    used soonest inside it: the best state any policy could have left there (offering keys one request at a time
    keeps the soonest-used `capacity` of all offered, the same set a single bulk offer would).
    """
    stop = len(requests) if counted is None else counted.stop
    if not capacity:
        return [0] * stop
    requests = requests[:stop]  # later requests are outside `counted`: their uses never count
    next_uses = _next_uses(requests, num_ids, unit, counted)
    tier = _BeladyTier(num_ids, capacity)
    hits = []
    for r, (keys, prompt_len) in enumerate(requests):
        inside = counted is None or r in counted
        hits.append(tier.hits(keys, max_hit_keys(prompt_len, unit)) * unit if inside else 0)
        tier.offer(keys, next_uses[r])
        next_uses[r] = _OFFERED  # dropped once offered: memory holds only the uses still ahead
    return hits
