"""The figures a reviewer looks for first: a capacity curve, boundaries against prompt length, hits over time.

- `capacity_curve_figure`: CPU-tier hit tokens against the CPU tier's size (GiB), one line per variant, with the
  Belady bound of each size (`oracle.phase_bounds`) and the oracle (an infinite tier) above them.
- `boundary_scatter_figure`: per request and group, the hit boundary against the prompt length (scales to real
  traces, where the lanes of notebook 02 do not), gridlines at scheduler-block multiples.
- `hits_over_time_figure`: CPU-tier hit tokens per request in run order through every phase (pressure included),
  one line per variant, the phases shaded.
- `alignment_loss_figure`: per group, the tokens past the last scheduler-block multiple of each boundary: what a
  block-aligned hit would give up and a fine-grained one keeps.
"""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from toolkit.viz.experiments import BELADY_LABEL, ORACLE_LABEL, group_long
from toolkit.viz.style import (
    BOUND_COLOR,
    axis_title,
    frame,
    group_color,
    log_axis_type,
    ordered_phases,
    sort_phases,
    style_figure,
    variant_color,
    variant_line,
)


def capacity_curve_figure(
    points, *, phase: str = "hot", title: str = "CPU-tier hits against the CPU tier's size"
) -> go.Figure:
    """`points`: rows (variant, cpu_gib, phase, external_hit_tokens, oracle_reusable_tokens[, belady_cpu_hit_tokens]),
    one per run and phase; the figure shows `phase`."""
    df = frame(points).filter(pl.col("phase") == phase).sort("cpu_gib", maintain_order=True)
    fig = go.Figure()
    variants = df["variant"].unique(maintain_order=True).to_list()
    for (variant,), sub in df.group_by(["variant"], maintain_order=True):
        fig.add_trace(
            go.Scatter(
                x=sub["cpu_gib"].to_list(),
                y=sub["external_hit_tokens"].to_list(),
                mode="lines+markers",
                name=variant,
                line=variant_line(variant),
            )
        )
    sizes = df.group_by("cpu_gib", maintain_order=True).agg(pl.all().first()).sort("cpu_gib")
    if "belady_cpu_hit_tokens" in sizes.columns:
        fig.add_trace(
            go.Scatter(
                x=sizes["cpu_gib"].to_list(),
                y=sizes["belady_cpu_hit_tokens"].to_list(),
                mode="lines+markers",
                name=BELADY_LABEL,
                meta={"bounds_each": variants},
                line=dict(color=BOUND_COLOR, dash="dash"),
                marker_symbol="x-thin-open",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=sizes["cpu_gib"].to_list(),
            y=sizes["oracle_reusable_tokens"].to_list(),
            mode="lines",
            name=ORACLE_LABEL,
            meta={"bounds_each": variants},
            line=dict(color=BOUND_COLOR, dash="dot"),
        )
    )
    sizes_gib = sizes["cpu_gib"].to_list()
    fig.update_layout(
        xaxis=dict(
            title=axis_title("CPU tier", "GiB"),
            type=log_axis_type(df["cpu_gib"], 1.0),
            tickvals=sizes_gib,
            ticktext=[f"{g:.3g}" for g in sizes_gib],
        ),
        yaxis_title=axis_title(f"CPU-tier hit tokens, {phase} phase", "tokens"),
    )
    return style_figure(fig, title=title, height=400, legend_below=True)


def boundary_scatter_figure(
    requests,
    *,
    group_kinds=None,
    variant: str | None = None,
    phase: str = "hot",
    scheduler_block_tokens: int | None = None,
    hash_block_tokens: int | None = None,
    title: str = "Where each group's hit ends, against prompt length",
) -> go.Figure:
    """Per request and group of one variant and phase: hit boundary (tokens) against prompt length (tokens)."""
    long = group_long(requests, group_kinds)
    if long.height:
        variant = variant or long["variant"][0]
        long = long.filter((pl.col("variant") == variant) & (pl.col("phase") == phase))
    fig = go.Figure()
    kinds = list(group_kinds or [])
    for i, (group,) in enumerate(long.select("group").unique(maintain_order=True).iter_rows()):
        sub = long.filter(pl.col("group") == group)
        kind = kinds[int(sub["group_id"][0])] if kinds and int(sub["group_id"][0]) < len(kinds) else None
        fig.add_trace(
            go.Scatter(
                x=sub["prompt_tokens"].to_list(),
                y=sub["hit_boundary_per_group"].to_list(),
                mode="markers",
                name=group,
                marker=dict(
                    color=group_color(kind),
                    size=9 - 2 * (i % 3),
                    symbol=["circle", "diamond", "square"][i % 3],
                    opacity=0.8,
                ),
            )
        )
    if long.height:
        top = int(long["prompt_tokens"].max())
        fig.add_trace(
            go.Scatter(
                x=[0, top], y=[0, top], mode="lines", name="prompt length", line=dict(color="#BBBBBB", dash="dot")
            )
        )
    grid = {"dtick": scheduler_block_tokens} if scheduler_block_tokens else {}
    fig.update_layout(
        xaxis=dict(title=axis_title("prompt length", "tokens")),
        yaxis=dict(
            title=axis_title("hit boundary", "tokens"),
            **grid,
            minor=dict(dtick=hash_block_tokens, showgrid=True) if hash_block_tokens else None,
        ),
    )
    subtitle = f"{variant}, {phase} phase" + (
        f"; gridlines every scheduler block ({scheduler_block_tokens} tokens)" if scheduler_block_tokens else ""
    )
    return style_figure(fig, title=f"{title}<br><sup>{subtitle}</sup>", height=420)


def hits_over_time_figure(requests, *, title: str = "CPU-tier hits per request, in run order") -> go.Figure:
    """CPU-tier hit tokens of each request in the order the run served them, phases shaded and named."""
    df = sort_phases(frame(requests))
    fig = go.Figure()
    spans: dict[str, tuple[int, int]] = {}
    for (variant,), sub in df.group_by(["variant"], maintain_order=True):
        xs = list(range(sub.height))
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=sub["external_hit_tokens"].to_list(),
                mode="lines",
                name=variant,
                line_shape="hvh",
                line=variant_line(variant),
            )
        )
        if not spans:
            phases = sub["phase"].to_list()
            for phase in ordered_phases(phases):
                idx = [i for i, p in enumerate(phases) if p == phase]
                spans[phase] = (idx[0], idx[-1])
    for i, (phase, (a, b)) in enumerate(spans.items()):
        fig.add_vrect(
            x0=a - 0.5,
            x1=b + 0.5,
            fillcolor="#EEEEEE" if i % 2 else "#FFFFFF",
            opacity=0.6,
            line_width=0,
            layer="below",
            annotation_text=phase,
            annotation_position="top left",
        )
    fig.update_layout(
        xaxis_title=axis_title("request, in run order", "index"), yaxis_title=axis_title("CPU-tier hit", "tokens")
    )
    return style_figure(fig, title=title, height=380)


def alignment_loss_figure(
    requests,
    *,
    group_kinds=None,
    scheduler_block_tokens: int,
    phase: str = "hot",
    title: str = "Tokens a block-aligned hit would give up, per group",
) -> go.Figure:
    """Per group, per request: `boundary mod scheduler block`, the tokens past the last scheduler-block multiple
    that a hit stopping only on scheduler blocks would recompute (what fine-grained hits keep); one box per group
    and variant reporting boundaries."""
    long = group_long(requests, group_kinds).filter(pl.col("phase") == phase)
    long = long.with_columns((pl.col("hit_boundary_per_group") % scheduler_block_tokens).alias("lost"))
    fig = go.Figure()
    for (variant, group), sub in long.group_by("variant", "group", maintain_order=True):
        fig.add_trace(
            go.Box(
                y=sub["lost"].to_list(),
                name=f"{variant}: {group}",
                boxpoints="all",
                jitter=0.4,
                marker=dict(color=group_color(group), line=dict(color=variant_color(variant), width=1)),
                line=dict(color=group_color(group)),
            )
        )
    fig.update_layout(
        yaxis=dict(title=axis_title("given up to block alignment", "tokens"), range=[0, scheduler_block_tokens]),
        showlegend=False,
    )
    return style_figure(
        fig,
        title=f"{title}<br><sup>{phase} phase; scheduler block {scheduler_block_tokens} tokens (the axis' top)</sup>",
        height=380,
    )
