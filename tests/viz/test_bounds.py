"""Bounds that are bounds: the per-phase Belady the figures draw is at the hits' granularity (hash-unit keys) and
never below what a tier of that size could serve in the phase; the figures mark what each bound bounds."""

from __future__ import annotations

import random

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit.experiments.oracle import PhaseBounds, oracle_reusable_tokens, phase_bounds, prefix_keys, simulate_cache
from toolkit.viz.experiments import phase_hits_figure, with_bounds


def _prompts(seed: int, n: int, unit: int) -> list[list[int]]:
    """Prompts sharing prefixes of a few documents, lengths not multiples of the unit."""
    rng = random.Random(seed)
    docs = [[rng.randrange(1000) for _ in range(unit * rng.randint(1, 6))] for _ in range(3)]
    return [
        rng.choice(docs)[: unit * rng.randint(0, 6)] + [rng.randrange(1000) for _ in range(rng.randint(1, unit))]
        for _ in range(n)
    ]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 12), st.sampled_from([2, 4]))
def test_phase_bound_is_at_least_any_run_and_at_most_the_oracle(seed, capacity_units, ratio):
    unit = 4
    sched = unit * ratio
    phases = ("cold", "hot", "replay")
    sequence = {p: _prompts(seed + i, 6, unit) for i, p in enumerate(phases)}
    bounds = phase_bounds(phases, sequence, hash_unit=unit, capacity_tokens=capacity_units * unit)
    flat = [(prefix_keys(t, unit), len(t)) for p in phases for t in sequence[p]]
    coarse = [(prefix_keys(t, sched), len(t)) for p in phases for t in sequence[p]]
    # Two policies that serve the same tier over the whole run: Belady at hash-unit and at scheduler-block keys.
    fine_run = simulate_cache(flat, unit, capacity_units, "belady").hit_tokens
    coarse_run = simulate_cache(coarse, sched, capacity_units * unit // sched, "belady").hit_tokens
    seen: set[int] = set()
    for i, phase in enumerate(phases):
        span = slice(6 * i, 6 * i + 6)
        oracle = sum(oracle_reusable_tokens(flat[span], unit, seen))
        assert sum(fine_run[span]) <= bounds[phase]["belady"] <= oracle, (phase, bounds)
        assert sum(coarse_run[span]) <= bounds[phase]["belady"], (phase, bounds)
        assert bounds[phase]["lru"] <= bounds[phase]["belady"]


def test_hash_unit_bound_holds_where_the_scheduler_block_one_did_not():
    # A 14-token prompt repeated: at 4-token hash units the hit reaches 12 tokens ((14 - 1) // 4 units), at
    # 8-token scheduler-block keys only 8: the scheduler-block Belady sits below what fine-grained hits achieve.
    prompt = list(range(14))
    sequence = {"cold": [prompt], "hot": [prompt]}
    bounds = phase_bounds(("cold", "hot"), sequence, hash_unit=4, capacity_tokens=16)
    coarse = simulate_cache([(prefix_keys(prompt, 8), 14)] * 2, 8, 2, "belady").hit_tokens
    assert bounds["hot"]["belady"] == 12 and coarse[1] == 8


def test_phase_hits_figure_puts_each_bound_over_what_it_bounds():
    phases = pl.DataFrame(
        {
            "variant": ["toolkit"] * 3,
            "phase": ["replay", "cold", "hot"],
            "prompt_tokens": [100] * 3,
            "local_hit_tokens": [0, 40, 0],
            "external_hit_tokens": [64, 0, 64],
            "recomputed_tokens": [36, 60, 36],
            "oracle_reusable_tokens": [96, 40, 96],
            "belady_hit_tokens": [48, 40, 48],
        }
    )
    fig = phase_hits_figure(
        with_bounds(
            phases,
            {
                "cold": PhaseBounds((40,), belady=40, lru=40),
                "hot": PhaseBounds((96,), belady=64, lru=64),
                "replay": PhaseBounds((96,), belady=80, lru=64),
            },
        )
    )
    by_name = {t.name: t for t in fig.data}
    assert list(by_name["CPU-tier hit"].x[1]) == ["cold", "hot", "replay"]  # run order, not the frame's order
    belady = next(t for t in fig.data if t.name.startswith("Belady"))
    assert belady.meta["bounds"] == ["CPU-tier hit"] and list(belady.y) == [40, 64, 80]
    assert fig.data[0].name == "CPU-tier hit"  # the bottom segment, so its top meets the Belady marker
    # the scheduler-block Belady (48 < 64 achieved) of an older folder is never drawn as a bound
    assert not any(t.name.startswith("Belady") for t in phase_hits_figure(phases).data)
