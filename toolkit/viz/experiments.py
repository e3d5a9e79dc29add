"""Experiment figures: hit tokens per phase against the oracle bounds, per-group boundaries, TTFT."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from toolkit.viz.style import TEMPLATE, frame

PARTS = (("local_hit_tokens", "local (device) hit", "#72B7B2"), ("external_hit_tokens", "CPU hit", "#4C78A8"),
         ("recomputed_tokens", "recomputed", "#E5E5E5"))


def phase_hits_figure(phases, *, title: str = "Prompt tokens per phase: hits against the oracle") -> go.Figure:
    """Stacked bars per (variant, phase): local hit, CPU hit, recomputed; markers for the oracle and Belady bounds.

    `phases`: the experiment's phase frame (variant, phase, prompt_tokens, local_hit_tokens, external_hit_tokens,
    recomputed_tokens, oracle_reusable_tokens[, belady_hit_tokens]).
    """
    df = frame(phases)
    x = [df["variant"].to_list(), df["phase"].to_list()]
    fig = go.Figure()
    for column, label, color in PARTS:
        fig.add_trace(go.Bar(x=x, y=df[column].to_list(), name=label, marker_color=color))
    for column, label, symbol in (("oracle_reusable_tokens", "oracle (infinite tier)", "line-ew-open"),
                                  ("belady_hit_tokens", "Belady (same capacity)", "x-thin-open")):
        if column in df.columns:
            fig.add_trace(go.Scatter(x=x, y=(df["local_hit_tokens"] * 0 + df[column]).to_list(), mode="markers",
                                     name=label, marker=dict(symbol=symbol, size=26, line_width=3, color="#E45756")))
    fig.update_layout(barmode="stack", template=TEMPLATE, title=title, yaxis_title="tokens", height=420,
                      margin=dict(l=60, r=20, t=50, b=60))
    return fig


def group_boundary_figure(requests, *, title: str = "Mean hit boundary per group and phase") -> go.Figure:
    """Mean per-group hit boundary (tokens) per phase, from the request frame's `hit_boundary_per_group` lists."""
    df = frame(requests).filter(pl.col("hit_boundary_per_group").list.len() > 0)
    long = (df.with_columns(pl.int_ranges(0, pl.col("hit_boundary_per_group").list.len()).alias("group_id"))
            .explode("hit_boundary_per_group", "group_id")
            .group_by("variant", "phase", "group_id", maintain_order=True)
            .agg(pl.col("hit_boundary_per_group").mean().alias("boundary")))
    fig = go.Figure()
    for (variant, group_id), sub in long.group_by("variant", "group_id", maintain_order=True):
        fig.add_trace(go.Bar(x=sub["phase"].to_list(), y=sub["boundary"].to_list(), name=f"{variant} group {group_id}"))
    fig.update_layout(barmode="group", template=TEMPLATE, title=title, yaxis_title="tokens", height=380,
                      margin=dict(l=60, r=20, t=50, b=40))
    return fig


def ttft_figure(requests, *, title: str = "Time to first token per phase") -> go.Figure:
    df = frame(requests)
    fig = make_subplots(rows=1, cols=1)
    for (variant,), sub in df.group_by(["variant"], maintain_order=True):
        fig.add_trace(go.Box(x=sub["phase"].to_list(), y=(sub["ttft_s"] * 1000).to_list(), name=variant))
    fig.update_layout(boxmode="group", template=TEMPLATE, title=title, yaxis_title="TTFT (ms)", height=360,
                      margin=dict(l=60, r=20, t=50, b=40))
    return fig
