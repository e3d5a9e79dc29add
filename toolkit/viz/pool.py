"""CPU pool occupancy per group: one step as stacked bars, or every step as a timeline."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from toolkit.viz.style import STATE_COLORS, TEMPLATE, frame, group_color

FREE_LINE_COLOR = "#9D9D9D"

STATES = ("evictable", "pinned", "in flight", "other", "free")


def pool_occupancy_figure(
    rows, *, title: str = "CPU pool per group", capacity: int | None = None, num_reserved: int = 0
) -> go.Figure:
    """Stacked horizontal bars: per group, blocks evictable / pinned / in flight; the shared free blocks last.

    `rows`: (group, state, num_blocks[, lru_block_ids]) as produced by `CacheStateModel.pool_rows`. With `capacity`
    (the pool's usable blocks) the axis is fixed at it and marked, so bars do not jump between steps and a full pool
    reads as full; `num_reserved` (the null block) is named next to the mark.
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
        fig.add_trace(
            go.Bar(
                y=groups,
                x=[counts.get(g, 0) for g in groups],
                name=state,
                orientation="h",
                marker_color=STATE_COLORS[state],
                text=[counts.get(g, 0) or "" for g in groups],
                textposition="inside",
                hovertext=hover,
            )
        )
    fig.update_layout(
        barmode="stack",
        template=TEMPLATE,
        title=title,
        xaxis_title="CPU blocks (blocks)",
        yaxis=dict(autorange="reversed"),
        height=160 + 40 * len(groups),
        legend=dict(orientation="h", y=-0.25),
        margin=dict(l=60, r=20, t=50, b=40),
    )
    if capacity:
        reserved = f" (+{num_reserved} null block, never holds data)" if num_reserved else ""
        fig.update_xaxes(range=[0, capacity * 1.02], autorange=False)
        fig.add_vline(
            x=capacity,
            line=dict(color="#333333", dash="dash", width=1.5),
            annotation_text=f"capacity {capacity} blocks{reserved}",
            annotation_position="top left",
        )
    return fig


def occupancy_timeline_figure(
    rows, *, title: str = "CPU pool occupancy over steps", cursor: int | None = None, capacity: int | None = None
) -> go.Figure:
    """Used blocks per group (and the shared free blocks) against the step, from `CacheStateModel.timeline_rows`;
    `cursor` marks the step shown, `capacity` fixes the axis at the pool's usable blocks."""
    df = frame(rows)
    used = df.group_by(["step", "group"], maintain_order=True).agg(pl.col("num_blocks").sum().alias("used"))
    fig = go.Figure()
    for group in dict.fromkeys(df["group"].to_list()):
        sub = used.filter(used["group"] == group).sort("step")
        fig.add_trace(
            go.Scatter(
                x=sub["step"].to_list(),
                y=sub["used"].to_list(),
                mode="lines+markers",
                name=group,
                line_shape="hv",
                line=dict(
                    color=FREE_LINE_COLOR if group == "free" else group_color(group),
                    dash="dot" if group == "free" else "solid",
                ),
            )
        )
    fig.update_layout(
        template=TEMPLATE,
        title=title,
        xaxis_title="scheduler step (index)",
        yaxis_title="CPU blocks (blocks)",
        height=320,
        margin=dict(l=60, r=20, t=50, b=40),
    )
    if capacity:
        fig.update_yaxes(range=[0, capacity * 1.05], autorange=False)
    if cursor is not None:
        fig.add_vline(
            x=cursor,
            line=dict(color="#E45756", width=2),
            annotation_text=f"step {cursor}",
            annotation_position="top right",
        )
    return fig
