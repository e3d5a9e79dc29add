"""The figures a run's or a grid's report opens with: the quantity the run asks about on its own axis.

- `cpu_tier_figure`: CPU-tier hit tokens per variant and phase (not stacked under the prompt's total, where a tier's
  83k tokens vanish under 60M prompt tokens); log scale when the bars span two decades or more.
- `capacity_figure`: CPU-tier hit tokens against the tier's size, one line per variant, 95% intervals as error bars
  when seeds were folded, and the ceiling an infinite tier could reach behind the same device cache (the oracle's
  reusable tokens less the device's hits).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import plotly.graph_objects as go

from toolkit.viz.style import BOUND_COLOR, axis_title, log_axis_type, style_figure, variant_color, variant_line


@dataclass(frozen=True, slots=True)
class CapacityPoint:
    variant: str
    tier_gib: float
    cpu_tier_tokens: float
    halfwidth: float | None = None  # 95% interval half-width over seeds
    ceiling_tokens: float | None = None  # oracle less device hits: what an infinite tier could add


def _y_type(values: Sequence[float | None]) -> str:
    """Log only when every value is positive (a zero has no place on a log axis) and they span two decades."""
    if any(v is not None and v <= 0 for v in values):
        return "linear"
    return log_axis_type(values, 2.0)


def cpu_tier_figure(
    variants: Sequence[str], phases: Sequence[str], tokens: Sequence[int], *, title: str = "CPU-tier hit tokens"
) -> go.Figure:
    """One bar per (variant, phase) row, grouped by phase, coloured by variant."""
    fig = go.Figure()
    for variant in dict.fromkeys(variants):
        picked = [(p, t) for v, p, t in zip(variants, phases, tokens) if v == variant]
        fig.add_trace(
            go.Bar(
                x=[p for p, _ in picked],
                y=[t for _, t in picked],
                name=variant,
                marker_color=variant_color(variant),
                text=[f"{t:,}" for _, t in picked],
                textposition="outside",
            )
        )
    fig.update_layout(
        barmode="group",
        xaxis_title="phase",
        yaxis=dict(title=axis_title("CPU-tier hit tokens", "tokens"), type=_y_type(list(tokens)), tickformat=","),
    )
    return style_figure(fig, title=title, height=400, legend_below=True)


def capacity_figure(
    points: Sequence[CapacityPoint], *, phase: str, title: str = "CPU-tier hits against the tier's size"
) -> go.Figure:
    """CPU-tier hit tokens (y) against the tier in GiB (x), one line per variant; the ceiling dotted."""
    fig = go.Figure()
    for variant in dict.fromkeys(p.variant for p in points):
        mine = sorted((p for p in points if p.variant == variant), key=lambda p: p.tier_gib)
        errors = [p.halfwidth or 0.0 for p in mine]
        fig.add_trace(
            go.Scatter(
                x=[p.tier_gib for p in mine],
                y=[p.cpu_tier_tokens for p in mine],
                mode="lines+markers",
                name=variant,
                line=variant_line(variant),
                error_y=dict(type="data", array=errors, visible=any(errors)),
            )
        )
    ceiling = {p.tier_gib: p.ceiling_tokens for p in points if p.ceiling_tokens is not None}
    if ceiling:
        sizes = sorted(ceiling)
        fig.add_trace(
            go.Scatter(
                x=sizes,
                y=[ceiling[s] for s in sizes],
                mode="lines",
                name="ceiling: an infinite tier behind the same device cache",
                line=dict(color=BOUND_COLOR, dash="dot"),
            )
        )
    sizes = sorted({p.tier_gib for p in points})
    values = [p.cpu_tier_tokens for p in points] + list(ceiling.values())
    fig.update_layout(
        xaxis=dict(
            title=axis_title("CPU tier", "GiB"),
            type=log_axis_type(sizes, 1.0),
            tickvals=sizes,
            ticktext=[f"{s:,.4g}" for s in sizes],
        ),
        yaxis=dict(
            title=axis_title(f"CPU-tier hit tokens, {phase} phase", "tokens"), type=_y_type(values), tickformat=","
        ),
    )
    return style_figure(fig, title=title, height=420, legend_below=True)
