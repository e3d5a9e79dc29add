"""Oracle and Belady bounds: hand-derived cases, exhaustive search on small random inputs, and the array
simulations against the per-key reference they replaced (one heap entry or list move per key)."""

from __future__ import annotations

import functools
import heapq
import json
from collections import OrderedDict
from dataclasses import replace
from itertools import combinations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit.engines.base import PhaseRequest
from toolkit.engines.facts import EngineFacts
from toolkit.experiments.oracle import (
    KeyIds,
    bound_capacity_tokens,
    dense,
    dense_oracle_tokens,
    keyed_phase_bounds,
    max_hit_keys,
    oracle_reusable_tokens,
    phase_bounds,
    prefix_keys,
    simulate_cache,
    tier_capacity_tokens,
)
from toolkit.experiments.phases import keyed, phase_prompts
from toolkit.workloads.mooncake import parse_mooncake_lines


def _hits(cached, keys, prompt_len: int, unit: int) -> int:
    limit = min(len(keys), max_hit_keys(prompt_len, unit))
    hit = 0
    while hit < limit and keys[hit] in cached:
        hit += 1
    return hit * unit


def optimal_hit_tokens_bruteforce(requests, unit: int, capacity_keys: int) -> int:
    """Exhaustive optimum over every store/evict choice (tiny inputs only): the test oracle for Belady."""
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


def reference_lru(requests, unit: int, capacity: int) -> list[int]:
    """The LRU tier key by key: an ordered dict, the chain touched tail first."""
    cache: OrderedDict = OrderedDict()
    hits = []
    for keys, prompt_len in requests:
        hits.append(_hits(cache, keys, prompt_len, unit))
        for key in reversed(keys):
            if key in cache:
                cache.move_to_end(key)
            elif capacity:
                cache[key] = None
                if len(cache) > capacity:
                    cache.popitem(last=False)
    return hits


def _reference_next_uses(requests, unit: int, counted: range | None) -> list[list[float]]:
    nxt: dict = {}
    out: list[list[float]] = [[] for _ in requests]
    for r in range(len(requests) - 1, -1, -1):
        keys, prompt_len = requests[r]
        out[r] = [nxt.get(k, float("inf")) for k in keys]
        if counted is None or r in counted:
            for k in keys[: max_hit_keys(prompt_len, unit)]:
                nxt[k] = r
    return out


def reference_belady(requests, unit: int, capacity: int, counted: range | None = None) -> list[int]:
    """Belady key by key: every offered key stored, one heap entry per key (furthest next use, deepest first)."""
    next_uses = _reference_next_uses(requests, unit, counted)
    cached: dict = {}
    heap: list = []
    hits = []
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
    return hits


def test_prefix_keys_are_a_chain():
    a, b = prefix_keys([1, 2, 3, 4, 5], 2), prefix_keys([1, 2, 3, 9, 5], 2)
    assert len(a) == 2 and a[0] == b[0] and a[1] != b[1]


def test_oracle_hand_derived():
    shared = list(range(10, 26))  # 16 tokens = 4 units of 4
    reqs = [(prefix_keys(p, 4), len(p)) for p in (shared + [1], shared + [2], shared, list(range(50, 60)))]
    # first: nothing seen; second: all 4 units; third: capped at (16-1)//4 = 3 units; fourth: unrelated
    assert oracle_reusable_tokens(reqs, 4) == [0, 16, 12, 0]


def test_belady_keeps_what_is_reused_where_lru_does_not():
    scans = [[100 + i, 200 + i] for i in range(3)]
    seq = [([1, 2], 99)] + [(s, 99) for s in scans] + [([1, 2], 99)]
    assert simulate_cache(seq, 1, 2, "belady").hit_tokens[-1] == 2
    assert simulate_cache(seq, 1, 2, "lru").hit_tokens[-1] == 0


def _chain_requests(draw_paths, length_extra):
    # Requests are paths in a small prefix tree: key = the tuple of branch choices so far.
    reqs = []
    for path, extra in zip(draw_paths, length_extra):
        keys = [hash(tuple(path[: i + 1])) for i in range(len(path))]
        reqs.append((keys, len(path) + extra))
    return reqs


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 1), min_size=1, max_size=3), min_size=1, max_size=5),
    st.lists(st.integers(0, 1), min_size=5, max_size=5),
    st.integers(0, 3),
)
def test_belady_matches_the_exhaustive_optimum(paths, extra, capacity):
    reqs = _chain_requests(paths, extra)
    belady = simulate_cache(reqs, 1, capacity, "belady").total_hit_tokens
    assert belady == optimal_hit_tokens_bruteforce(reqs, 1, capacity)
    assert simulate_cache(reqs, 1, capacity, "lru").total_hit_tokens <= belady
    assert belady <= sum(oracle_reusable_tokens(reqs, 1))


# Larger trees than the exhaustive search can take: many requests sharing deep prefixes, so runs of equal next
# use split, re-offers leave stale entries and evictions stop inside runs.
_trees = st.lists(
    st.tuples(st.lists(st.integers(0, 2), min_size=1, max_size=12), st.integers(0, 3)), min_size=1, max_size=40
)


@settings(max_examples=300, deadline=None)
@given(_trees, st.integers(0, 20), st.integers(1, 3), st.data())
def test_array_simulations_match_the_per_key_reference(tree, capacity, unit, data):
    reqs = [([hash(tuple(path[: i + 1])) for i in range(len(path))], len(path) * unit + extra) for path, extra in tree]
    assert simulate_cache(reqs, unit, capacity, "lru").hit_tokens == reference_lru(reqs, unit, capacity)
    assert simulate_cache(reqs, unit, capacity, "belady").hit_tokens == reference_belady(reqs, unit, capacity)
    start = data.draw(st.integers(0, len(reqs) - 1))
    span = range(start, data.draw(st.integers(start + 1, len(reqs))))
    phases = {"before": reqs[:start], "inside": reqs[span.start : span.stop], "after": reqs[span.stop :]}
    got = keyed_phase_bounds(tuple(phases), phases, hash_unit=unit, capacity_tokens=capacity * unit)["inside"]
    assert got["belady"] == sum(reference_belady(reqs, unit, capacity, counted=span))
    assert got["lru"] == sum(reference_lru(reqs, unit, capacity)[span.start : span.stop])
    ids = KeyIds()
    flat = dense(reqs, ids)
    assert dense_oracle_tokens(flat, unit, np.zeros(ids.count, dtype=bool)) == oracle_reusable_tokens(reqs, unit)


def test_repeated_keys_in_one_request_are_refused():
    with pytest.raises(ValueError, match="distinct"):
        simulate_cache([([1, 2, 1], 9)], 1, 2, "lru")


def _mooncake(rows) -> list:
    lines = [json.dumps({"timestamp": 0, "input_length": n, "output_length": 1, "hash_ids": ids}) for ids, n in rows]
    return phase_prompts(parse_mooncake_lines(lines))


@pytest.mark.parametrize("unit", [16, 100, 272, 512, 700])
def test_block_chain_keys_name_the_same_prefixes_as_token_keys(unit):
    prompts = _mooncake(
        [([0, 1, 2], 1500), ([0, 1, 3], 1100), ([0, 1], 1024), ([0], 10), ([4, 1, 2], 1536), ([0, 1, 2, 5], 1600)]
    )
    as_lists = [PhaseRequest(r.request_id, list(r.prompt_token_ids), r.max_tokens) for r in prompts]
    by_blocks, by_tokens = keyed(prompts, unit), keyed(as_lists, unit)
    pairs = {}
    for (a, n), (b, m) in zip(by_blocks, by_tokens):
        assert n == m and len(a) == len(b) == n // unit
        for x, y in zip(a.tolist(), b.tolist()):
            assert pairs.setdefault(x, y) == y  # equal block keys are equal token keys
    assert len(set(pairs.values())) == len(pairs)  # and different ones different


QWEN3_NEXT_TP4 = EngineFacts(  # the dry engine's description in issue 36's run (Qwen3-Next-80B, TP 4, 256/75 GiB)
    engine="dry",
    model="qwen3-next-80b-a3b",
    variant={},
    hash_block_tokens=16,
    scheduler_block_tokens=272,
    group_block_tokens=(272, 272, 272, 272),
    group_kinds=("FullAttentionSpec", "MambaSpec", "MambaSpec", "MambaSpec"),
    blocks_per_scheduler_block=4,
    cpu_block_bytes=0,
    device_blocks=24094,
    cpu_blocks=20560,
)


def test_the_bound_counts_both_tiers_and_charges_only_prefix_wide_groups():
    # One attention block per scheduler block: every block of both tiers covers 272 tokens; the LRU-sim keeps the
    # tier's own model (four blocks per scheduler block, CPU only).
    assert bound_capacity_tokens(QWEN3_NEXT_TP4) == (24094 + 20560) * 272
    assert tier_capacity_tokens(QWEN3_NEXT_TP4) == 20560 // 4 * 272
    # Two full-attention groups at half the block: four blocks per scheduler block; a sliding-window group is free.
    two = replace(
        QWEN3_NEXT_TP4,
        group_block_tokens=(136, 136, 272, 272),
        group_kinds=("FullAttentionSpec", "MLAAttentionSpec", "SlidingWindowSpec", "MambaSpec"),
    )
    assert bound_capacity_tokens(two) == (24094 + 20560) * 272 // 4
    # An engine that does not say its groups: no block covers more than a scheduler block.
    unknown = replace(QWEN3_NEXT_TP4, group_block_tokens=None, group_kinds=None, device_blocks=None, cpu_blocks=10)
    assert bound_capacity_tokens(unknown) == 10 * 272


def test_a_phase_bound_is_never_below_a_larger_caches_share_nor_the_lru_sim():
    # The shape: the tier's own model (four blocks per scheduler block) is smaller than what the tier holds;
    # the bound at the larger capacity is at least Belady at the smaller one, and the LRU-sim at the smaller one.
    doc = list(range(40))
    sequence = {"cold": [doc + [100 + i] for i in range(4)], "hot": [doc + [200 + i] for i in range(4)]}
    small = phase_bounds(("cold", "hot"), sequence, hash_unit=4, capacity_tokens=8)
    large = phase_bounds(("cold", "hot"), sequence, hash_unit=4, capacity_tokens=40, lru_capacity_tokens=8)
    assert large["hot"]["belady"] == 4 * 40 > small["hot"]["belady"]
    assert large["hot"]["lru"] == small["hot"]["lru"] <= small["hot"]["belady"]
