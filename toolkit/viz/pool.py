"""CPU pool occupancy per group: one step as stacked bars, or every step as a timeline."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from toolkit.viz.style import STATE_COLORS, TEMPLATE, frame

STATES = ("evictable", "pinned", "in flight", "other", "free")


def pool_occupancy_figure(rows, *, title: str = "CPU pool per group") -> go.Figure:
    """Stacked horizontal bars: per group, blocks evictable / pinned / in flight; the shared free blocks last.

    `rows`: (group, state, num_blocks[, lru_block_ids]) as produced by `CacheStateModel.pool_rows`.
    """
    df = frame(rows)
    groups = list(dict.fromkeys(df["group"].to_list()))
    fig = go.Figure()
    for state in STATES:
        sub = df.filter(df["state"] == state)
        if sub.height == 0:
            continue
        counts = dict(zip(sub["group"].to_list(), sub["num_blocks"].to_list()))
        hover = None
        if "lru_block_ids" in sub.columns and state == "evictable":
            lru = dict(zip(sub["group"].to_list(), sub["lru_block_ids"].to_list()))
            hover = [f"LRU first: {lru.get(g, '')}" for g in groups]
        fig.add_trace(go.Bar(
            y=groups, x=[counts.get(g, 0) for g in groups], name=state, orientation="h",
            marker_color=STATE_COLORS[state], text=[counts.get(g, 0) or "" for g in groups],
            textposition="inside", hovertext=hover,
        ))
    fig.update_layout(barmode="stack", template=TEMPLATE, title=title, xaxis_title="blocks",
                      yaxis=dict(autorange="reversed"), height=140 + 40 * len(groups),
                      legend=dict(orientation="h", y=-0.25), margin=dict(l=60, r=20, t=50, b=40))
    return fig


def occupancy_timeline_figure(rows, *, title: str = "CPU pool occupancy over steps") -> go.Figure:
    """Used blocks per group (and the shared free blocks) against the step, from `CacheStateModel.timeline_rows`."""
    df = frame(rows)
    used = (df
            .group_by(["step", "group"], maintain_order=True).agg(pl.col("num_blocks").sum().alias("used")))
    fig = go.Figure()
    for group in dict.fromkeys(df["group"].to_list()):
        sub = used.filter(used["group"] == group).sort("step")
        fig.add_trace(go.Scatter(x=sub["step"].to_list(), y=sub["used"].to_list(), mode="lines+markers",
                                 name=group, line_shape="hv"))
    fig.update_layout(template=TEMPLATE, title=title, xaxis_title="step", yaxis_title="blocks",
                      height=320, margin=dict(l=60, r=20, t=50, b=40))
    return fig
