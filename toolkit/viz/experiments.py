"""Experiment figures: hit tokens per phase against the bounds, per-group boundaries, TTFT (box and CDF).

Phases are drawn in run order and variants in a fixed colour (`toolkit.viz.style`). A marker called a bound is
drawn only over the value it bounds: the oracle (an infinite tier) over all hits (device + CPU tier), Belady (the
same tier, optimal eviction, hash-unit keys: `oracle.phase_bounds`) over the CPU-tier hits, which are the bottom
segment of each bar so the two can be compared at a glance.
"""

from __future__ import annotations

from typing import Mapping, Protocol

import plotly.graph_objects as go
import polars as pl

from toolkit.viz.style import (
    BOUND_COLOR,
    PARTS_COLORS,
    axis_title,
    frame,
    group_color,
    group_names,
    log_axis_type,
    ordered_phases,
    sort_phases,
    style_figure,
    variant_color,
    variant_line,
)

# Bottom to top: the CPU-tier segment sits on the axis so the Belady marker compares with its top.
PARTS = (
    ("external_hit_tokens", "CPU-tier hit"),
    ("local_hit_tokens", "device hit"),
    ("recomputed_tokens", "recomputed"),
)
ORACLE_LABEL = "oracle: all hits, infinite tier"
BELADY_LABEL = "Belady: CPU-tier hits, same tier, optimal eviction (hash-unit keys)"
# A bound trace's `meta["bounds"]`: the traces whose sum at each x it bounds (the figure test checks it).
BOUND_OF = {ORACLE_LABEL: ("CPU-tier hit", "device hit"), BELADY_LABEL: ("CPU-tier hit",)}
BOUND_COLUMNS = {ORACLE_LABEL: "oracle_reusable_tokens", BELADY_LABEL: "belady_cpu_hit_tokens"}


class PhaseBoundsLike(Protocol):
    """What the figures read of a phase's bounds (`experiments.oracle.PhaseBounds`; the figures import nothing from
    the experiments, which draw with them)."""

    @property
    def belady(self) -> int | None: ...

    @property
    def lru(self) -> int | None: ...


def with_bounds(phases, bounds: Mapping[str, PhaseBoundsLike]) -> pl.DataFrame:
    """The phase frame with `belady_cpu_hit_tokens` / `lru_cpu_hit_tokens` from each phase's `PhaseBounds`."""
    df = frame(phases)
    belady = {p: b.belady for p, b in bounds.items()}
    lru = {p: b.lru for p, b in bounds.items()}
    return df.with_columns(
        pl.col("phase").replace_strict(belady, default=None, return_dtype=pl.Int64).alias("belady_cpu_hit_tokens"),
        pl.col("phase").replace_strict(lru, default=None, return_dtype=pl.Int64).alias("lru_cpu_hit_tokens"),
    )


def phase_hits_figure(
    phases, *, include_pressure: bool = False, title: str = "Prompt tokens per phase: hits against their bounds"
) -> go.Figure:
    """Stacked bars per (variant, phase): CPU-tier hit, device hit, recomputed; markers for the bounds.

    `phases`: the experiment's phase frame (variant, phase, prompt_tokens, local/external hit, recomputed,
    oracle_reusable_tokens[, belady_cpu_hit_tokens]). The pressure phase (unrelated traffic, recomputed by design)
    is left out unless `include_pressure`, so it does not dwarf the measured phases. The scheduler-block Belady
    of older run folders (`belady_hit_tokens`) bounds block-aligned hits only and is not drawn.
    """
    df = sort_phases(frame(phases))
    pressure = df.filter(pl.col("phase") == "pressure")
    if not include_pressure and pressure.height and df.height > pressure.height:
        df = df.filter(pl.col("phase") != "pressure")
        title += (
            f"<br><sup>pressure phase not drawn: {int(pressure['prompt_tokens'].max()):,} tokens of unrelated "
            "traffic per variant, recomputed by design</sup>"
        )
    x = [df["variant"].to_list(), df["phase"].to_list()]
    fig = go.Figure()
    for column, label in PARTS:
        fig.add_trace(go.Bar(x=x, y=df[column].to_list(), name=label, marker_color=PARTS_COLORS[label]))
    for label, symbol in ((ORACLE_LABEL, "line-ew-open"), (BELADY_LABEL, "x-thin-open")):
        column = BOUND_COLUMNS[label]
        if column in df.columns and df[column].null_count() < df.height:
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=df[column].to_list(),
                    mode="markers",
                    name=label,
                    meta={"bounds": list(BOUND_OF[label])},
                    marker=dict(symbol=symbol, size=26, line_width=3, color=BOUND_COLOR),
                )
            )
    fig.update_layout(barmode="stack", yaxis_title=axis_title("prompt tokens", "tokens"))
    return style_figure(fig, title=title, height=440, legend_below=True)


def group_long(requests, kinds) -> pl.DataFrame:
    """One row per (request, group) with a hit boundary: `hit_boundary_per_group` exploded, `group_id` and the
    group's name (`group_kinds` named by kind; "group i" when the kinds are unknown)."""
    df = frame(requests).filter(pl.col("hit_boundary_per_group").list.len() > 0)
    long = df.with_columns(pl.int_ranges(0, pl.col("hit_boundary_per_group").list.len()).alias("group_id")).explode(
        "hit_boundary_per_group", "group_id"
    )
    width = int(long["group_id"].max() or 0) + 1 if long.height else 0
    names = group_names(list(kinds or [])[:width] + [None] * max(0, width - len(kinds or [])))
    if not kinds:
        names = [f"group {i}" for i in range(width)]
    return long.with_columns(
        pl.col("group_id").replace_strict(dict(enumerate(names)), return_dtype=pl.Utf8).alias("group")
    )


def group_boundary_figure(
    requests, *, group_kinds=None, title: str = "Mean hit boundary per group and phase"
) -> go.Figure:
    """Mean per-group hit boundary (tokens) per phase, groups named by kind (`group_kinds` from the engine)."""
    long = group_long(requests, group_kinds)
    order = ordered_phases(long["phase"].to_list()) if long.height else []
    agg = long.group_by("variant", "phase", "group", maintain_order=True).agg(
        pl.col("hit_boundary_per_group").mean().alias("boundary")
    )
    fig = go.Figure()
    variants = agg["variant"].unique(maintain_order=True).to_list()
    for (variant, group), sub in agg.group_by("variant", "group", maintain_order=True):
        sub = sort_phases(sub)
        # colour: the group's kind; outline and pattern: the variant (the main one plain)
        fig.add_trace(
            go.Bar(
                x=sub["phase"].to_list(),
                y=sub["boundary"].to_list(),
                name=f"{variant}: {group}",
                marker=dict(
                    color=group_color(group),
                    line=dict(color=variant_color(variant), width=2),
                    pattern_shape=["", "/", ".", "x", "-"][variants.index(variant) % 5],
                ),
                legendgroup=variant,
            )
        )
    fig.update_layout(
        barmode="group",
        xaxis=dict(categoryorder="array", categoryarray=order),
        yaxis_title=axis_title("mean hit boundary", "tokens"),
    )
    return style_figure(fig, title=title, height=400)


def _ms(values) -> list[float]:
    return [v * 1000 for v in values]


WARMUP = "warmup"


def _without_warmup(df: pl.DataFrame) -> tuple[pl.DataFrame, str]:
    """The measured phases, and a note of the warm-up's TTFT (kept out of the statistics) when it was recorded."""
    warm = df.filter(pl.col("phase") == WARMUP)
    note = ""
    if warm.height:
        note = "warm-up excluded: TTFT " + ", ".join(f"{v * 1e3:.1f} ms" for v in warm["ttft_s"].to_list())
    return df.filter(pl.col("phase") != WARMUP), note


def ttft_figure(requests, *, title: str = "Time to first token per phase") -> go.Figure:
    """Boxes per variant and phase (run order), a log axis where TTFTs span two decades; a recorded warm-up
    (phase "warmup") is left out and named in the subtitle."""
    df, note = _without_warmup(sort_phases(frame(requests).drop_nulls("ttft_s")))
    title = f"{title}<br><sup>{note}</sup>" if note else title
    fig = go.Figure()
    for (variant,), sub in df.group_by(["variant"], maintain_order=True):
        fig.add_trace(
            go.Box(
                x=sub["phase"].to_list(),
                y=_ms(sub["ttft_s"]),
                name=variant,
                boxpoints="outliers",
                marker_color=variant_color(variant),
            )
        )
    fig.update_layout(
        boxmode="group",
        xaxis=dict(categoryorder="array", categoryarray=ordered_phases(df["phase"].to_list())),
        yaxis=dict(title=axis_title("TTFT", "ms"), type=log_axis_type(_ms(df["ttft_s"]))),
    )
    return style_figure(fig, title=title, height=380)


def ttft_cdf_figure(
    requests, *, phases=("cold", "hot", "replay"), title: str = "TTFT distribution per variant (CDF)"
) -> go.Figure:
    """Empirical CDF of TTFT per variant, one panel per phase (run order); a log time axis where TTFTs are wide."""
    from plotly.subplots import make_subplots

    df, note = _without_warmup(frame(requests).drop_nulls("ttft_s"))
    df = sort_phases(df.filter(pl.col("phase").is_in(list(phases))) if phases else df)
    title = f"{title}<br><sup>{note}</sup>" if note else title
    shown = ordered_phases(df["phase"].to_list())
    fig = make_subplots(
        rows=1, cols=max(1, len(shown)), shared_yaxes=True, subplot_titles=shown, horizontal_spacing=0.04
    )
    for (variant, phase), sub in df.group_by("variant", "phase", maintain_order=True):
        xs = sorted(_ms(sub["ttft_s"]))
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        fig.add_trace(
            go.Scatter(
                x=[xs[0], *xs],
                y=[0.0, *ys],
                mode="lines",
                line_shape="hv",
                name=variant,
                legendgroup=variant,
                showlegend=phase == shown[0],
                line=variant_line(variant),
            ),
            row=1,
            col=shown.index(phase) + 1,
        )
    kind = log_axis_type(_ms(df["ttft_s"]))
    for col in range(1, len(shown) + 1):  # one time scale for every panel, so phases compare at a glance
        fig.update_xaxes(
            title_text=axis_title("TTFT", "ms"), type=kind, row=1, col=col, **({"matches": "x"} if col > 1 else {})
        )
    fig.update_yaxes(title_text=axis_title("requests at or below", "fraction"), range=[0, 1.02], row=1, col=1)
    return style_figure(fig, title=title, height=380)
