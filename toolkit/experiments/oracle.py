"""Bounds on reusable tokens: the oracle (an infinite cache) and offline Belady eviction for a finite CPU tier.

Both work on *prefix keys*: a prompt of L tokens has floor(L / unit) keys, key i naming the prefix of i * unit
tokens (a hash chain, so key i determines keys 0..i-1). A request can reuse the longest run of leading keys that a
cache holds, capped so at least one prompt token is recomputed (the engine needs one token to produce logits).

- `oracle_reusable_tokens`: per request, the longest prefix any earlier request had (infinite tier, no timing).
- `simulate_cache(..., policy="belady")`: a tier of `capacity_keys` keys; after each request all its keys are
  offered for storage; on overflow the key whose next use lies furthest in the future goes first (never-used-again
  keys first, deeper keys of a chain before their parents on ties), and a new key may itself be the one dropped
  (bypass). With a chain's parent never used later than its child this is the optimum over all policies that
  only store keys when they are accessed, which `tests/experiments/test_oracle.py` checks by exhaustive search.
- `policy="lru"`: the same tier with least-recently-used eviction (a chain touched tail first, so tails go first).
- `phase_bounds`: the per-phase bounds the figures draw, at the granularity of the hits they bound (hash-unit keys,
  the tier's token capacity), each phase with the best tier state any earlier traffic could have left.

The simulations run on dense integer key ids (`KeyIds`) and numpy arrays, a request at a time, not a key at a time
(a whole Mooncake trace is millions of keys): LRU as last-touch stamps, Belady on runs of keys sharing a next use.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Hashable, Sequence

import numpy as np

NEVER = np.iinfo(np.int32).max  # the next use of a key no later request can hit on
_OFFERED = np.empty(0, dtype=np.int32)


def prefix_keys(token_ids: Sequence[int], unit: int) -> list[int]:
    """Chain keys of every full `unit`-token prefix (Python's tuple hash is deterministic for ints)."""
    keys = []
    h = 0x5EED
    for start in range(0, len(token_ids) - unit + 1, unit):
        h = hash((h, tuple(token_ids[start : start + unit])))
        keys.append(h)
    return keys


def max_hit_keys(prompt_len: int, unit: int) -> int:
    return max(0, (prompt_len - 1) // unit)


class KeyIds:
    """Dense integer ids (0, 1, ...) for keys, so the simulations index arrays instead of hashing every key.

    The bounds depend only on which keys are equal, so renaming keys to ids changes no answer.
    """

    def __init__(self) -> None:
        self._ids: dict = {}
        self.count = 0

    def reserve_for(self, name: Hashable, num_ids: int) -> int:
        """The first of `num_ids` consecutive ids kept for `name` (one key naming several, e.g. a block's units)."""
        first = self._ids.get(name)
        if first is None:
            first = self._ids[name] = self.count
            self.count += num_ids
        return first

    def of(self, keys: Sequence) -> np.ndarray:
        return np.array([self.reserve_for(key, 1) for key in keys], dtype=np.int64)


DenseRequests = Sequence[tuple[np.ndarray, int]]  # (key ids, prompt length) per request


def dense(requests: Sequence[tuple[Sequence, int]], ids: KeyIds) -> list[tuple[np.ndarray, int]]:
    """`requests` with their keys as `ids`; a request's keys must be distinct (a chain's are)."""
    out = [(ids.of(keys), prompt_len) for keys, prompt_len in requests]
    if any(len(np.unique(keys)) != len(keys) for keys, _ in out):
        raise ValueError("keys: a request's prefix keys must be distinct (a hash chain's are)")
    return out


def _leading(present: np.ndarray) -> int:
    """The length of the leading run of True: the keys a request can reuse."""
    return len(present) if present.all() else int(present.argmin())


def oracle_reusable_tokens(
    requests: Sequence[tuple[Sequence[int], int]], unit: int, seen: set[int] | None = None
) -> list[int]:
    """Per request (keys, prompt_len): reusable tokens with an infinite tier. `seen` carries over between phases."""
    seen = set() if seen is None else seen
    out = []
    for keys, prompt_len in requests:
        limit = min(len(keys), max_hit_keys(prompt_len, unit))
        hit = 0
        while hit < limit and keys[hit] in seen:
            hit += 1
        out.append(hit * unit)
        seen.update(keys)
    return out


def dense_oracle_tokens(requests: DenseRequests, unit: int, seen: np.ndarray) -> list[int]:
    """`oracle_reusable_tokens` on key ids; `seen[id]` (a bool array over all ids) carries over between phases."""
    out = []
    for keys, prompt_len in requests:
        out.append(_leading(seen[keys[: max_hit_keys(prompt_len, unit)]]) * unit)
        seen[keys] = True
    return out


@dataclass(frozen=True)
class CacheSimResult:
    hit_tokens: list[int]  # per request

    @property
    def total_hit_tokens(self) -> int:
        return sum(self.hit_tokens)


def simulate_cache(
    requests: Sequence[tuple[Sequence[int], int]], unit: int, capacity_keys: int, policy: str = "belady"
) -> CacheSimResult:
    """Hit tokens per request of a `capacity_keys` tier under `policy` ("belady" or "lru")."""
    if capacity_keys < 0:
        raise ValueError(f"capacity_keys: must be >= 0, got {capacity_keys}")
    if policy not in ("belady", "lru"):
        raise ValueError(f"policy: unknown policy {policy!r}; valid: belady, lru")
    flat = dense(requests, ids := KeyIds())
    return CacheSimResult((_belady if policy == "belady" else _lru)(flat, ids.count, unit, capacity_keys))


LRU_BLOCK = 4096  # touch times per counted block: finding the capacity-th latest touch scans blocks, then one


def _lru(requests: DenseRequests, num_ids: int, unit: int, capacity: int) -> list[int]:
    """An LRU tier of `capacity` keys (every key offered is stored; a chain touched tail first, so tails go first).

    Such a tier holds exactly the `capacity` most recently touched keys, so instead of moving keys in a list it
    stamps each key's last touch: a key is held while its stamp is among the `capacity` latest live stamps.
    """
    if not capacity:
        return [0] * len(requests)
    last = np.full(num_ids, -1, dtype=np.int64)  # each key's latest touch time, -1 before its first
    live = np.zeros(sum(len(keys) for keys, _ in requests) + 1, dtype=bool)  # a key's latest touch is at this time
    per_block = np.zeros(len(live) // LRU_BLOCK + 1, dtype=np.int64)  # live stamps per block of times
    hits, now, touched = [], 0, 0
    for keys, prompt_len in requests:
        cutoff = 0 if touched <= capacity else _nth_latest(live, per_block, capacity)
        hits.append(_leading(last[keys[: max_hit_keys(prompt_len, unit)]] >= cutoff) * unit)
        before = last[keys]
        before = before[before >= 0]
        touched += len(keys) - len(before)
        live[before] = False
        per_block -= np.bincount(before // LRU_BLOCK, minlength=len(per_block))
        last[keys] = np.arange(now + len(keys) - 1, now - 1, -1)  # the head of the chain ends most recent
        live[now : now + len(keys)] = True
        per_block += np.bincount(np.arange(now, now + len(keys)) // LRU_BLOCK, minlength=len(per_block))
        now += len(keys)
    return hits


def _nth_latest(live: np.ndarray, per_block: np.ndarray, n: int) -> int:
    """The time of the `n`-th latest live stamp (there are at least `n`)."""
    from_end = np.cumsum(per_block[::-1])
    back = int(np.searchsorted(from_end, n))
    block = len(per_block) - 1 - back
    rest = n - (int(from_end[back - 1]) if back else 0)
    stamps = np.flatnonzero(live[block * LRU_BLOCK : (block + 1) * LRU_BLOCK])
    return block * LRU_BLOCK + int(stamps[len(stamps) - rest])


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
        return _leading(self.run_of[keys[:limit]] >= 0)

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


def _belady(requests: DenseRequests, num_ids: int, unit: int, capacity: int, counted: range | None = None) -> list[int]:
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


def phase_bounds(
    phases: Sequence[str], sequence: dict[str, Sequence[Sequence[int]]], *, hash_unit: int, capacity_tokens: int
) -> dict[str, dict[str, int]]:
    """Per phase: `belady` and `lru` CPU-tier hit tokens at hash-unit keys, for a tier of `capacity_tokens`.

    `sequence[phase]`: the prompts (token ids) of each phase, the phases run in `phases` order. Keys are hash units
    because the CPU tier's hits end on hash units (fine-grained hits inside a scheduler block); the capacity is the
    tier's tokens, `capacity_tokens // hash_unit` keys. `belady` is a bound on each phase alone: Belady eviction
    inside the phase, entered with the best tier state the earlier phases could leave (`_belady`'s `counted`), so
    no policy's CPU-tier hits in that phase exceed it. `lru` is the LRU tier over the whole run, split by phase.
    """
    if hash_unit <= 0:
        raise ValueError(f"hash_unit: must be positive, got {hash_unit}")
    keyed = {
        phase: [(prefix_keys(list(tokens), hash_unit), len(tokens)) for tokens in sequence[phase]] for phase in phases
    }
    return keyed_phase_bounds(phases, keyed, hash_unit=hash_unit, capacity_tokens=capacity_tokens)


def keyed_phase_bounds(
    phases: Sequence[str], keyed: dict[str, Sequence[tuple[list[int], int]]], *, hash_unit: int, capacity_tokens: int
) -> dict[str, dict[str, int]]:
    """`phase_bounds` on prompts already keyed at `hash_unit` ((prefix keys, prompt length) per request)."""
    ids, by_list = KeyIds(), {}
    for phase in phases:  # a list several phases send is renamed once
        by_list.setdefault(id(keyed[phase]), dense(keyed[phase], ids))
    hits = phase_hits(phases, {p: by_list[id(keyed[p])] for p in phases}, ids.count, hash_unit, capacity_tokens)
    return {phase: {name: sum(per) for name, per in got.items()} for phase, got in hits.items()}


def phase_hits(
    phases: Sequence[str], keyed: dict[str, DenseRequests], num_ids: int, hash_unit: int, capacity_tokens: int
) -> dict[str, dict[str, list[int]]]:
    """Per phase and request: `belady` and `lru` hit tokens (see `phase_bounds`), the keys as ids < `num_ids`."""
    capacity = max(0, capacity_tokens // hash_unit)
    flat: list[tuple[np.ndarray, int]] = []
    spans: dict[str, range] = {}
    for phase in phases:
        start = len(flat)
        flat.extend(keyed[phase])
        spans[phase] = range(start, len(flat))
    lru = _lru(flat, num_ids, hash_unit, capacity)
    out = {}
    for phase, span in spans.items():
        belady = _belady(flat, num_ids, hash_unit, capacity, counted=span)
        out[phase] = {"belady": belady[span.start : span.stop], "lru": lru[span.start : span.stop]}
    return out


def tier_capacity_tokens(desc: dict) -> int:
    """The CPU tier's capacity in prompt tokens: its whole scheduler blocks (all groups) times their tokens."""
    return desc["cpu_blocks"] // max(1, desc["blocks_per_scheduler_block"]) * desc["scheduler_block_tokens"]


def experiment_bounds(config, desc: dict) -> dict[str, dict[str, int]]:
    """`phase_bounds` of an experiment (an `ExperimentConfig` and its engine description), its phases rebuilt.

    For runs whose phase frame carries the scheduler-block Belady only; the runner's own phase sequence (trace
    prompts, the pressure traffic sized from `desc`) is rebuilt, so the bound is for exactly what ran.
    """
    from toolkit.experiments.phases import phase_prompts, phase_sequence  # phases imports this module
    from toolkit.workloads.resolve import resolve_trace

    trace = resolve_trace(config.trace, max_requests=config.max_requests, time_scale=config.time_scale)
    sequence = phase_sequence(config, phase_prompts(trace), desc, trace)
    tokens = {phase: [list(r.prompt_token_ids) for r in reqs] for phase, reqs in sequence.items()}
    return phase_bounds(
        config.phases, tokens, hash_unit=desc["hash_block_tokens"], capacity_tokens=tier_capacity_tokens(desc)
    )


def folder_bounds(run_dir) -> dict[str, dict[str, int]]:
    """`experiment_bounds` of a run folder, from its `params.json` (the config and the engine description)."""
    import json
    from pathlib import Path

    from toolkit.experiments.config import ExperimentConfig

    params = json.loads((Path(run_dir) / "params.json").read_text())
    config = ExperimentConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in params["config"].items()})
    return experiment_bounds(config, params["engine"])
