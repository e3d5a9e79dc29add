"""Oracle and Belady bounds: hand-derived cases and exhaustive search on small random inputs."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit.experiments.oracle import (
    optimal_hit_tokens_bruteforce,
    oracle_reusable_tokens,
    prefix_keys,
    simulate_cache,
)


def test_prefix_keys_are_a_chain():
    a, b = prefix_keys([1, 2, 3, 4, 5], 2), prefix_keys([1, 2, 3, 9, 5], 2)
    assert len(a) == 2 and a[0] == b[0] and a[1] != b[1]


def test_oracle_hand_derived():
    shared = list(range(10, 26))  # 16 tokens = 4 units of 4
    reqs = [(prefix_keys(p, 4), len(p)) for p in (shared + [1], shared + [2], shared, list(range(50, 60)))]
    # first: nothing seen; second: all 4 units; third: capped at (16-1)//4 = 3 units; fourth: unrelated
    assert oracle_reusable_tokens(reqs, 4) == [0, 16, 12, 0]


def test_belady_keeps_what_is_reused_where_lru_does_not():
    hot, scans = [1, 2, 3, 4], [[100 + i, 200 + i] for i in range(3)]
    seq = [([1, 2], 99)] + [(s, 99) for s in scans] + [([1, 2], 99)]
    assert simulate_cache(seq, 1, 2, "belady").hit_tokens[-1] == 2
    assert simulate_cache(seq, 1, 2, "lru").hit_tokens[-1] == 0
    assert hot


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
