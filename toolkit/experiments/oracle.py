"""Bounds on reusable tokens: the oracle (an infinite cache) and Belady (the optimum of a finite cache), and the
LRU-sim, which is no bound. Keys: `prefix_keys.py`; the simulations: `belady.py`, `lru_sim.py`.

What they count is what the achieved hits count: a request's device-cache plus CPU-tier hit tokens (vLLM's local and
external hits), at the hash unit where hits end (fine-grained CPU-tier hits end inside a scheduler block), at most
the prompt less one token. Per phase, with every earlier phase's traffic before it:

- `oracle` >= `belady` >= achieved (local + external) >= achieved CPU-tier hits, and `belady` >= `lru`.
- `oracle_reusable_tokens`: per request, the longest prefix any earlier request had (infinite cache, no timing).
- `belady` (`phase_bounds`): Belady eviction inside the phase, entered with the best state the earlier phases could
  leave, for a cache of `bound_capacity_tokens(desc)`: the device cache and the CPU tier *together*, every block
  counted as prefix-wide attention KV (Mamba states, sliding-window and chunked-local blocks counted free). Why both
  tiers: a hit is a leading run of keys held in device or CPU, and that union only gains a key when some request
  computes it (into a device block allocated when the request is scheduled), so it is a store-on-access cache of at
  most that many keys; a CPU tier alone is not (a concurrent request's blocks reach it after later lookups, the lazy
  policy copies from the device cache later still). Why Mamba free: a hybrid tier stores state only at some
  boundaries, so charging a state per scheduler block (the tier's own model) undercounts what it holds (issue 36:
  hot CPU-tier hits 2,033,728 over a "bound" of 1,556,976); charging none can only overcount, as a bound must.
  With that capacity it bounds every connector and policy; it is not a model of the tier.
- `lru` (`lru_sim.py`): an LRU tier of `tier_capacity_tokens(desc)` (the CPU tier's whole scheduler blocks, every
  group) over the whole run, split by phase: an estimate of vLLM's order, not a bound; `lru <= belady` holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from toolkit.engines.facts import EngineFacts
from toolkit.experiments.belady import belady_hits
from toolkit.experiments.lru_sim import lru_hits
from toolkit.experiments.prefix_keys import DenseRequests, KeyIds, dense, leading, max_hit_keys, prefix_keys

__all__ = [
    "CacheSimResult",
    "DenseRequests",
    "KeyIds",
    "PhaseBounds",
    "bound_capacity_tokens",
    "dense",
    "dense_oracle_tokens",
    "keyed_phase_bounds",
    "max_hit_keys",
    "oracle_reusable_tokens",
    "phase_bounds",
    "phase_hits",
    "prefix_keys",
    "simulate_cache",
    "tier_capacity_tokens",
]


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
        out.append(leading(seen[keys[: max_hit_keys(prompt_len, unit)]]) * unit)
        seen[keys] = True
    return out


@dataclass(frozen=True)
class PhaseBounds:
    """One phase's bounds on reused prompt tokens (hash-unit keys): the oracle per request, Belady and the LRU-sim
    for the phase (both None when the engine does not report its CPU tier's size: a server without the toolkit's
    connector)."""

    oracle_per_request: tuple[int, ...]
    belady: int | None = None
    lru: int | None = None

    @property
    def oracle(self) -> int:
        return sum(self.oracle_per_request)

    def totals(self) -> dict[str, int | None]:
        """The phase's `oracle`, `belady` and `lru` totals, for a JSON report."""
        return {"oracle": self.oracle, "belady": self.belady, "lru": self.lru}


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
    return CacheSimResult((belady_hits if policy == "belady" else lru_hits)(flat, ids.count, unit, capacity_keys))


def phase_bounds(
    phases: Sequence[str],
    sequence: dict[str, Sequence[Sequence[int]]],
    *,
    hash_unit: int,
    capacity_tokens: int,
    lru_capacity_tokens: int | None = None,
) -> dict[str, dict[str, int]]:
    """Per phase: `belady` and `lru` hit tokens at hash-unit keys, for a cache of `capacity_tokens`.

    `sequence[phase]`: the prompts (token ids) of each phase, the phases run in `phases` order. Keys are hash units
    because hits end on hash units (fine-grained hits inside a scheduler block); the capacity is
    `capacity_tokens // hash_unit` keys (`bound_capacity_tokens` for an engine). `belady` is a bound on each phase
    alone: Belady eviction inside the phase, entered with the best state the earlier phases could leave
    (`belady_hits`'s `counted`), so no policy's hits in that phase exceed it. `lru` is an LRU tier of
    `lru_capacity_tokens` (default `capacity_tokens`) over the whole run, split by phase.
    """
    if hash_unit <= 0:
        raise ValueError(f"hash_unit: must be positive, got {hash_unit}")
    keyed = {
        phase: [(prefix_keys(list(tokens), hash_unit), len(tokens)) for tokens in sequence[phase]] for phase in phases
    }
    return keyed_phase_bounds(
        phases, keyed, hash_unit=hash_unit, capacity_tokens=capacity_tokens, lru_capacity_tokens=lru_capacity_tokens
    )


def keyed_phase_bounds(
    phases: Sequence[str],
    keyed: Mapping[str, Sequence[tuple[list[int], int]]],
    *,
    hash_unit: int,
    capacity_tokens: int,
    lru_capacity_tokens: int | None = None,
) -> dict[str, dict[str, int]]:
    """`phase_bounds` on prompts already keyed at `hash_unit` ((prefix keys, prompt length) per request)."""
    ids, by_list = KeyIds(), dict[int, DenseRequests]()
    for phase in phases:  # a list several phases send is renamed once
        by_list.setdefault(id(keyed[phase]), dense(keyed[phase], ids))
    dense_keyed = {p: by_list[id(keyed[p])] for p in phases}
    hits = phase_hits(phases, dense_keyed, ids.count, hash_unit, capacity_tokens, lru_capacity_tokens)
    return {phase: {name: sum(per) for name, per in got.items()} for phase, got in hits.items()}


def phase_hits(
    phases: Sequence[str],
    keyed: Mapping[str, DenseRequests],
    num_ids: int,
    hash_unit: int,
    capacity_tokens: int,
    lru_capacity_tokens: int | None = None,
) -> dict[str, dict[str, list[int]]]:
    """Per phase and request: `belady` and `lru` hit tokens (see `phase_bounds`), the keys as ids < `num_ids`."""
    capacity = max(0, capacity_tokens // hash_unit)
    lru_capacity = capacity if lru_capacity_tokens is None else max(0, lru_capacity_tokens // hash_unit)
    flat: list[tuple[np.ndarray, int]] = []
    spans: dict[str, range] = {}
    for phase in phases:
        start = len(flat)
        flat.extend(keyed[phase])
        spans[phase] = range(start, len(flat))
    lru = lru_hits(flat, num_ids, hash_unit, lru_capacity)
    out = {}
    for phase, span in spans.items():
        belady = belady_hits(flat, num_ids, hash_unit, capacity, counted=span)
        out[phase] = {"belady": belady[span.start : span.stop], "lru": lru[span.start : span.stop]}
    return out


# Groups whose blocks cover a hit's whole prefix; Mamba keeps one state, sliding-window and chunked-local groups a
# window: a bound must not charge a cache for those (a tier can hold far fewer than one per scheduler block).
PREFIX_WIDE_KINDS = frozenset({"FullAttentionSpec", "MLAAttentionSpec"})


def prefix_blocks_per_scheduler_block(desc: EngineFacts) -> int:
    """Blocks a scheduler block of prefix costs at least: one per prefix-wide group block it spans (1 when the
    engine does not say its groups: no group block covers more than a scheduler block)."""
    sched, kinds, tokens = desc.scheduler_block_tokens, desc.group_kinds, desc.group_block_tokens
    if not kinds or not tokens or len(kinds) != len(tokens):
        return 1
    return max(
        1, sum(int(sched) // int(block) for kind, block in zip(kinds, tokens) if kind in PREFIX_WIDE_KINDS and block)
    )


def bound_capacity_tokens(desc: EngineFacts) -> int:
    """The Belady bound's capacity in prompt tokens: the device cache's and the CPU tier's blocks together, each a
    prefix-wide attention block (see the module docstring for why both tiers and why Mamba states count free)."""
    blocks = (desc.device_blocks or 0) + (desc.cpu_blocks or 0)
    return blocks * desc.scheduler_block_tokens // prefix_blocks_per_scheduler_block(desc)


def tier_capacity_tokens(desc: EngineFacts) -> int:
    """The CPU tier's modelled capacity in prompt tokens (the LRU-sim's): its whole scheduler blocks (all groups)."""
    return (desc.cpu_blocks or 0) // max(1, desc.blocks_per_scheduler_block) * desc.scheduler_block_tokens
