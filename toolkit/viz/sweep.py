"""Sweep figures: one metric over the grid as heatmaps (small multiples per facet), the winner per column marked.

Input is a sweep's `results.parquet` frame (one row per cell x variant x phase, the cell's parameters as columns).
`with_ratios` adds `hit_tokens` (device + CPU tier) and `hit_fraction_of_belady`; `ttft_column` picks the modelled
TTFT column when the dry engine reports one (any `*ttft*` column with a non-zero value).
"""

from __future__ import annotations

import math

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from toolkit.viz.style import TEMPLATE, frame

# TTFT columns in order of preference (a step-time model's p50, else the per-phase median).
TTFT_COLUMNS = ("ttft_p50_s", "median_ttft_s", "mean_ttft_s")
WINNER_COLOR = "#E45756"


def with_ratios(results) -> pl.DataFrame:
    df = frame(results)
    if "local_hit_tokens" in df.columns and "external_hit_tokens" in df.columns:
        df = df.with_columns((pl.col("local_hit_tokens") + pl.col("external_hit_tokens")).alias("hit_tokens"))
        if "belady_hit_tokens" in df.columns:
            df = df.with_columns(pl.when(pl.col("belady_hit_tokens") > 0)
                                 .then(pl.col("hit_tokens") / pl.col("belady_hit_tokens"))
                                 .otherwise(None).alias("hit_fraction_of_belady"))
    return df


def ttft_column(results) -> str | None:
    df = frame(results)
    for name in TTFT_COLUMNS:
        if name in df.columns and df[name].drop_nulls().cast(pl.Float64).abs().sum() > 0:
            return name
    return None


def _label(df: pl.DataFrame, columns: list[str], name: str) -> pl.DataFrame:
    if not columns:
        return df.with_columns(pl.lit("all").alias(name))
    parts = [pl.lit(f"{c}=") + pl.col(c).cast(pl.Utf8).fill_null("-") for c in columns]
    return df.with_columns(pl.concat_str(parts, separator=", ").alias(name))


def winners(results, *, metric: str, rows: str, columns: list[str], higher_is_better: bool = True) -> pl.DataFrame:
    """Per combination of `columns`, the value of `rows` (e.g. the variant, or one axis) with the best metric."""
    df = frame(results).drop_nulls(metric)
    keys = list(columns)
    agg = df.group_by(keys + [rows], maintain_order=True).agg(pl.col(metric).mean())
    if not keys:
        return agg.sort(metric, descending=higher_is_better, maintain_order=True).head(1)
    # grid order kept (first appearance); within a column ties go to the first row
    return agg.group_by(keys, maintain_order=True).agg(
        pl.all().sort_by(metric, descending=higher_is_better, maintain_order=True).first())


def sweep_heatmap(results, *, metric: str, axes: list[str], rows: str = "variant", facet: str | None = None,
                  phase: str | None = "replay", higher_is_better: bool = True, title: str | None = None,
                  value_format: str = ".3f") -> go.Figure:
    """Heatmap of `metric`: one row per value of `rows`, one column per combination of the other `axes`, one
    subplot per value of `facet`. In every column the best row (the winner) is outlined and starred."""
    df = frame(results)
    if phase is not None and "phase" in df.columns:
        df = df.filter(pl.col("phase") == phase)
    columns = [a for a in axes if a not in (rows, facet)]
    df = _label(df, columns, "_column")
    facets = df[facet].unique(maintain_order=True).to_list() if facet else [None]
    ncols = min(len(facets), 3)
    nrows = math.ceil(len(facets) / ncols)
    fig = make_subplots(rows=nrows, cols=ncols, subplot_titles=[f"{facet}={v}" for v in facets] if facet else None,
                        horizontal_spacing=0.08, vertical_spacing=0.18)
    finite = df[metric].drop_nulls()
    zmin = float(finite.min()) if finite.len() else 0.0
    zmax = float(finite.max()) if finite.len() else 1.0
    for i, value in enumerate(facets):
        sub = df if facet is None else df.filter(pl.col(facet) == value)
        r, c = i // ncols + 1, i % ncols + 1
        x_labels = sub["_column"].unique(maintain_order=True).to_list()
        y_labels = [str(v) for v in sub[rows].unique(maintain_order=True).to_list()]
        cell = {(str(y), x): m for y, x, m in sub.group_by(rows, "_column", maintain_order=True)
                .agg(pl.col(metric).mean()).iter_rows()}
        z = [[cell.get((y, x)) for x in x_labels] for y in y_labels]
        best = {}
        for j, x in enumerate(x_labels):
            for k in range(len(y_labels)):  # ties go to the first row, as in `winners`
                v = z[k][j]
                if v is not None and (j not in best or (v > z[best[j]][j] if higher_is_better else v < z[best[j]][j])):
                    best[j] = k
        text = [[("" if z[k][j] is None else format(z[k][j], value_format)) + (" ★" if best.get(j) == k else "")
                 for j in range(len(x_labels))] for k in range(len(y_labels))]
        fig.add_trace(go.Heatmap(z=z, x=x_labels, y=y_labels, text=text, texttemplate="%{text}", zmin=zmin,
                                 zmax=zmax, colorscale="Viridis" if higher_is_better else "Viridis_r",
                                 showscale=i == 0, colorbar=dict(title=metric),
                                 hovertemplate=f"%{{y}}<br>%{{x}}<br>{metric} %{{z}}<extra></extra>"), row=r, col=c)
        for j, k in best.items():
            fig.add_shape(type="rect", x0=j - 0.5, x1=j + 0.5, y0=k - 0.5, y1=k + 0.5,
                          line=dict(color=WINNER_COLOR, width=3), row=r, col=c)
    fig.update_layout(template=TEMPLATE, height=max(320, 260 * nrows),
                      title=title or f"{metric} ({phase or 'all phases'}): best {rows} per column outlined",
                      margin=dict(l=80, r=20, t=70, b=60))
    return fig
