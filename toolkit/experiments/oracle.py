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
"""

from __future__ import annotations

import functools
import heapq
from collections import OrderedDict
from dataclasses import dataclass
from typing import Sequence

INF = float("inf")


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


@dataclass(frozen=True)
class CacheSimResult:
    hit_tokens: list[int]  # per request
    num_evictions: int

    @property
    def total_hit_tokens(self) -> int:
        return sum(self.hit_tokens)


def simulate_cache(
    requests: Sequence[tuple[Sequence[int], int]], unit: int, capacity_keys: int, policy: str = "belady"
) -> CacheSimResult:
    """Hit tokens per request of a `capacity_keys` tier under `policy` ("belady" or "lru")."""
    if capacity_keys < 0:
        raise ValueError(f"capacity_keys: must be >= 0, got {capacity_keys}")
    if policy == "belady":
        return _belady(requests, unit, capacity_keys)
    if policy == "lru":
        return _lru(requests, unit, capacity_keys)
    raise ValueError(f"policy: unknown policy {policy!r}; valid: belady, lru")


def _hits(cached, keys, prompt_len: int, unit: int) -> int:
    limit = min(len(keys), max_hit_keys(prompt_len, unit))
    hit = 0
    while hit < limit and keys[hit] in cached:
        hit += 1
    return hit * unit


def _lru(requests, unit: int, capacity: int) -> CacheSimResult:
    cache: OrderedDict[int, None] = OrderedDict()
    hits, evictions = [], 0
    for keys, prompt_len in requests:
        hits.append(_hits(cache, keys, prompt_len, unit))
        for key in reversed(keys):  # the head of the chain ends most recent
            if key in cache:
                cache.move_to_end(key)
            elif capacity:
                cache[key] = None
                if len(cache) > capacity:
                    cache.popitem(last=False)
                    evictions += 1
    return CacheSimResult(hits, evictions)


def _next_uses(requests, unit: int, counted: range | None = None) -> list[list[float]]:
    """For request r and its j-th key: the next request (after r) that could hit on the key, or INF.

    Only uses within a request's hit cap count: a key past `(prompt_len - 1) // unit` can never be a hit there;
    with `counted`, only uses by requests in that range count.
    """
    nxt: dict[int, int] = {}
    out: list[list[float]] = [[] for _ in requests]
    for r in range(len(requests) - 1, -1, -1):
        keys, prompt_len = requests[r]
        out[r] = [nxt.get(k, INF) for k in keys]
        if counted is None or r in counted:
            for k in keys[: max_hit_keys(prompt_len, unit)]:
                nxt[k] = r
    return out


def _belady(requests, unit: int, capacity: int, counted: range | None = None) -> CacheSimResult:
    """Belady over `requests`; with `counted`, hits are counted (and next uses seen) only inside that range.

    The requests before the range then only offer their keys, so the tier enters it holding the `capacity` keys
    used soonest inside it: the best state any policy could have left there (offering keys one request at a time
    keeps the soonest-used `capacity` of all offered, the same set a single bulk offer would).
    """
    next_uses = _next_uses(requests, unit, counted)
    cached: dict[int, tuple[float, int]] = {}  # key -> (next use, depth) while cached
    heap: list[tuple[float, int, int]] = []  # (-next use, -depth, key); stale entries skipped
    hits, evictions = [], 0
    for r, (keys, prompt_len) in enumerate(requests):
        if counted is not None and r >= counted.stop:
            break
        hits.append(_hits(cached, keys, prompt_len, unit) if counted is None or r in counted else 0)
        if not capacity:
            continue
        for depth, (key, use) in enumerate(zip(keys, next_uses[r])):
            cached[key] = (use, depth)
            heapq.heappush(heap, (-use, -depth, key))
        while len(cached) > capacity:
            neg_use, neg_depth, key = heapq.heappop(heap)
            if cached.get(key) == (-neg_use, -neg_depth):
                del cached[key]
                evictions += 1
        if len(heap) > 2 * len(cached) + 4096:
            # Stale entries (keys re-offered or evicted) would grow the heap with every key of the trace: at hash-
            # unit keys a whole Mooncake trace is millions. Rebuilt from the live entries: O(n) amortised, bounded.
            heap = [(-use, -depth, key) for key, (use, depth) in cached.items()]
            heapq.heapify(heap)
    return CacheSimResult(hits, evictions)


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
    """`phase_bounds` on prompts already keyed at `hash_unit` ((prefix keys, prompt length) per request): the
    runner keys each prompt once for the oracle and these bounds."""
    capacity = max(0, capacity_tokens // hash_unit)
    flat: list[tuple[list[int], int]] = []
    spans: dict[str, range] = {}
    for phase in phases:
        start = len(flat)
        flat.extend(keyed[phase])
        spans[phase] = range(start, len(flat))
    lru = simulate_cache(flat, hash_unit, capacity, "lru").hit_tokens
    out = {}
    for phase, span in spans.items():
        belady = _belady(flat, hash_unit, capacity, counted=span).hit_tokens if capacity else []
        out[phase] = {"belady": sum(belady[span.start : span.stop]), "lru": sum(lru[span.start : span.stop])}
    return out


def optimal_hit_tokens_bruteforce(requests: Sequence[tuple[Sequence[int], int]], unit: int, capacity_keys: int) -> int:
    """Exhaustive optimum over every store/evict choice (tiny inputs only): the test oracle for `_belady`."""
    from itertools import combinations

    reqs = [(tuple(k), n) for k, n in requests]

    @functools.cache
    def best(r: int, cached: frozenset) -> int:
        if r == len(reqs):
            return 0
        keys, prompt_len = reqs[r]
        gain = _hits(cached, keys, prompt_len, unit)
        pool = sorted(cached | set(keys))
        keep = min(capacity_keys, len(pool))
        return gain + max(best(r + 1, frozenset(c)) for c in combinations(pool, keep))

    return best(0, frozenset())


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
