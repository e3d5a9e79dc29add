"""Sweep heatmaps: the winner per column is the best variant (ties to the first row; minimum for TTFT)."""

from __future__ import annotations

import polars as pl

from toolkit.viz.sweep import sweep_heatmap, ttft_column, winners, with_ratios

ROWS = [  # two cells (eviction) x two variants, replay phase; hit tokens = local + external
    {
        "eviction": "slru",
        "variant": "toolkit",
        "phase": "replay",
        "local_hit_tokens": 10,
        "external_hit_tokens": 90,
        "belady_hit_tokens": 80,
        "median_ttft_s": 0.2,
    },
    {
        "eviction": "slru",
        "variant": "simplecpu",
        "phase": "replay",
        "local_hit_tokens": 10,
        "external_hit_tokens": 50,
        "belady_hit_tokens": 80,
        "median_ttft_s": 0.1,
    },
    {
        "eviction": "lru",
        "variant": "toolkit",
        "phase": "replay",
        "local_hit_tokens": 0,
        "external_hit_tokens": 60,
        "belady_hit_tokens": 80,
        "median_ttft_s": 0.3,
    },
    {
        "eviction": "lru",
        "variant": "simplecpu",
        "phase": "replay",
        "local_hit_tokens": 0,
        "external_hit_tokens": 60,
        "belady_hit_tokens": 80,
        "median_ttft_s": 0.3,
    },
]


def test_ratios_and_winners():
    df = with_ratios(pl.DataFrame(ROWS))
    assert df["hit_tokens"].to_list() == [100, 60, 60, 60]
    assert df["hit_fraction_of_belady"].to_list() == [1.25, 0.75, 0.75, 0.75]
    best = winners(df, metric="hit_tokens", rows="variant", columns=["eviction"])
    # a tie is a tie: both variants named, no first-row winner
    assert best.select("eviction", "variant", "tie").rows() == [
        ("slru", "toolkit", False),
        ("lru", "toolkit = simplecpu", True),
    ]
    fastest = winners(df, metric="median_ttft_s", rows="variant", columns=["eviction"], higher_is_better=False)
    assert fastest["variant"].to_list() == ["simplecpu", "toolkit = simplecpu"]  # 0.3 s each in lru
    assert ttft_column(df) == "median_ttft_s"
    assert ttft_column(df.with_columns(pl.lit(0.0).alias("median_ttft_s"))) is None


def test_heatmap_outlines_the_winner_of_each_column():
    df = with_ratios(pl.DataFrame(ROWS))
    fig = sweep_heatmap(df, metric="hit_fraction_of_belady", axes=["eviction"], rows="variant")
    heat = fig.data[0]
    assert list(heat.y) == ["toolkit", "simplecpu"] and list(heat.x) == ["eviction=slru", "eviction=lru"]
    assert [list(r) for r in heat.text] == [["1.250 ★", "0.750 ★ tie"], ["0.750", "0.750 ★ tie"]]
    boxes = [(s.x0, s.y0, s.line.dash) for s in fig.layout.shapes]
    assert boxes == [(-0.5, -0.5, "solid"), (0.5, -0.5, "dot"), (0.5, 0.5, "dot")]  # column 1: both rows, dotted
