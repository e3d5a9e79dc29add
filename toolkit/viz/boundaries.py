"""Hit-boundary lanes: per request and group, how far the CPU pool covers the prompt, and the joint hit."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from toolkit.viz.style import JOINT_HIT_COLOR, TEMPLATE, frame

COVERED = "#4C78A8"
PROMPT = "#E8E8E8"


def boundary_lanes_figure(
    rows,
    *,
    title: str = "Cached boundary per group and the joint hit",
    scheduler_block_tokens: int | None = None,
    hash_block_tokens: int | None = None,
) -> go.Figure:
    """One lane per (request, group) along the token axis.

    `rows` columns: req_id, group, boundary_tokens, joint_hit_tokens, prompt_tokens, miss_reason, and optionally
    `mode` (e.g. "fine-grained" / "block-aligned"): one panel per mode, side by side. The grey lane is the prompt,
    the blue bar the group's cached boundary, the red tick the joint hit; the hover names the miss reason. With
    `scheduler_block_tokens` / `hash_block_tokens`, gridlines fall on their multiples (major / minor), so a hit
    that ends inside a scheduler block reads as such.
    """
    df = frame(rows)
    modes = list(dict.fromkeys(df["mode"].to_list())) if "mode" in df.columns else [None]
    fig = make_subplots(
        rows=1,
        cols=len(modes),
        shared_yaxes=True,
        horizontal_spacing=0.04,
        subplot_titles=[m for m in modes] if modes != [None] else None,
    )
    lanes = None
    for col, mode in enumerate(modes, start=1):
        sub = df if mode is None else df.filter(df["mode"] == mode)
        lane = [f"{r} · {g}" for r, g in zip(sub["req_id"].to_list(), sub["group"].to_list())]
        lanes = lanes or lane
        for trace in lane_traces(sub, lane, show_legend=col == 1):
            fig.add_trace(trace, 1, col)
        fig.update_xaxes(title_text="prompt position (tokens)", row=1, col=col)
        if scheduler_block_tokens:
            fig.update_xaxes(dtick=scheduler_block_tokens, gridcolor="#BBBBBB", row=1, col=col)
        if hash_block_tokens:
            fig.update_xaxes(minor=dict(dtick=hash_block_tokens, showgrid=True, gridcolor="#EEEEEE"), row=1, col=col)
    fig.update_layout(
        barmode="overlay",
        template=TEMPLATE,
        title=title,
        yaxis=dict(autorange="reversed"),
        height=120 + 28 * len(lanes or []),
        legend=dict(orientation="h", y=-0.2),
        margin=dict(l=120, r=20, t=60, b=40),
    )
    return fig


def lane_traces(sub, lane: list[str], *, show_legend: bool) -> list:
    """One panel's traces over its lanes: the prompt (grey), the cached boundary (blue, hover names the miss
    reason), the joint hit (red tick) and the miss reason as text after the boundary."""
    reasons = sub["miss_reason"].to_list() if "miss_reason" in sub.columns else [""] * len(lane)
    prompt = go.Bar(
        y=lane,
        x=sub["prompt_tokens"].to_list(),
        orientation="h",
        marker_color=PROMPT,
        name="prompt",
        showlegend=show_legend,
        legendgroup="prompt",
        hoverinfo="skip",
    )
    boundary = go.Bar(
        y=lane,
        x=sub["boundary_tokens"].to_list(),
        orientation="h",
        marker_color=COVERED,
        name="cached boundary",
        showlegend=show_legend,
        legendgroup="boundary",
        customdata=[[r or "-"] for r in reasons],
        hovertemplate="%{y}: cached to %{x} tokens<br>miss: %{customdata[0]}<extra></extra>",
    )
    joint = go.Scatter(
        y=lane,
        x=sub["joint_hit_tokens"].to_list(),
        mode="markers",
        name="joint hit",
        showlegend=show_legend,
        legendgroup="joint",
        marker=dict(symbol="line-ns-open", size=22, color=JOINT_HIT_COLOR, line_width=3),
        hovertemplate="%{y}: joint hit %{x} tokens<extra></extra>",
    )
    reason_text = go.Scatter(
        y=lane,
        x=sub["boundary_tokens"].to_list(),
        mode="text",
        text=[f"  {t}" if t else "" for t in reasons],
        textposition="middle right",
        showlegend=False,
        hoverinfo="skip",
        textfont=dict(size=10),
    )
    return [prompt, boundary, joint, reason_text]
