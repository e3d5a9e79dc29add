"""The pure figure functions: right traces and numbers from small frames (no kernel, no browser)."""

from __future__ import annotations

import polars as pl

from toolkit.viz.bandwidth import bandwidth_frame, copy_bandwidth_figure
from toolkit.viz.boundaries import boundary_lanes_figure
from toolkit.viz.geometry import geometry_sweep, geometry_table_figure, group_blocks_figure, scheduler_block_figure
from toolkit.viz.pool import occupancy_timeline_figure, pool_occupancy_figure


def test_geometry_sweep_keeps_rejections_and_the_lcm():
    summary, groups = geometry_sweep(["qwen3-next-80b-a3b", "gpt-oss-20b"], dcps=[1, 4], hash_units=[None, 16])
    ok = summary.filter(pl.col("error").fill_null("") == "")
    qwen = ok.filter((pl.col("preset") == "qwen3-next-80b-a3b") & (pl.col("hash_unit") == 0))
    # DCP multiplies the 544-token attention block but not the GDN block: LCM(544 * 4, 544) = 2176
    assert dict(zip(qwen["dcp"], qwen["scheduler_block_tokens"])) == {1: 544, 4: 2176}
    rejected = summary.filter(pl.col("error").fill_null("") != "")
    assert set(rejected["preset"]) == {"gpt-oss-20b"} and set(rejected["dcp"]) == {4}  # windowed groups refuse DCP
    assert geometry_table_figure(summary).data[0].type == "table"
    assert {t.name for t in group_blocks_figure(groups).data} >= {"full_attention", "mamba_align", "sliding_window"}
    assert len(scheduler_block_figure(summary).data) == ok.select("preset", "hash_block_tokens").unique().height


def test_boundary_lanes_side_by_side_per_mode():
    rows = [
        {
            "req_id": "r",
            "group": g,
            "boundary_tokens": b,
            "joint_hit_tokens": 64,
            "prompt_tokens": 128,
            "miss_reason": m,
            "mode": mode,
        }
        for mode in ("fine-grained", "block-aligned")
        for g, b, m in (("attn", 112, ""), ("gdn", 64, "mamba"))
    ]
    fig = boundary_lanes_figure(rows)
    assert len(fig.data) == 8 and fig.layout.xaxis2 is not None
    assert list(fig.data[1].x) == [112, 64] and list(fig.data[2].x) == [64, 64]


def test_pool_figures_stack_states_per_group():
    rows = [
        {"step": s, "group": g, "state": st, "num_blocks": n}
        for s in (0, 1)
        for g, st, n in (("attn", "evictable", 2 + s), ("attn", "in flight", 1), ("free", "free", 5 - s))
    ]
    fig = pool_occupancy_figure([r for r in rows if r["step"] == 1])
    assert fig.layout.barmode == "stack" and [t.name for t in fig.data] == ["evictable", "in flight", "free"]
    timeline = occupancy_timeline_figure(rows)
    assert {t.name: list(t.y) for t in timeline.data} == {"attn": [3, 4], "free": [5, 4]}


def test_bandwidth_curves_accept_bench_json_and_draw_the_limit():
    results = {
        "results": [
            {"backend": "torch", "direction": d, "block_size_bytes": b, "gb_per_s": g}
            for d in ("d2h", "h2d")
            for b, g in ((4096, 1.0), (65536, 5.0))
        ]
    }
    df = bandwidth_frame(results)
    assert {"block_bytes", "gbps"} <= set(df.columns)
    fig = copy_bandwidth_figure(results, contiguous_gbps={"d2h": 9.5})
    assert len(fig.data) == 2 and fig.layout.xaxis.type == "log"
    assert any("9.5" in a.text for a in fig.layout.annotations)
