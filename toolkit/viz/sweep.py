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
            df = df.with_columns(
                pl.when(pl.col("belady_hit_tokens") > 0)
                .then(pl.col("hit_tokens") / pl.col("belady_hit_tokens"))
                .otherwise(None)
                .alias("hit_fraction_of_belady")
            )
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


def _best(values: list, higher_is_better: bool) -> set[int]:
    """Indices of the best values; a tie (equal within 1e-9 relative) keeps every tied index."""
    present = [(i, v) for i, v in enumerate(values) if v is not None]
    if not present:
        return set()
    top = (max if higher_is_better else min)(v for _, v in present)
    return {i for i, v in present if math.isclose(v, top, rel_tol=1e-9, abs_tol=1e-12)}


def winners(results, *, metric: str, rows: str, columns: list[str], higher_is_better: bool = True) -> pl.DataFrame:
    """Per combination of `columns`, the value(s) of `rows` (e.g. the variant) with the best metric.

    Ties are shown as ties: `rows` then names every tied value ("toolkit = simplecpu") and `tie` is true; no row
    wins a tie by coming first.
    """
    df = frame(results).drop_nulls(metric)
    keys = list(columns)
    agg = df.group_by(keys + [rows], maintain_order=True).agg(pl.col(metric).mean())
    out = []
    groups = agg.group_by(keys, maintain_order=True) if keys else [((), agg)]
    for key, sub in groups:  # grid order kept (first appearance)
        values = sub[metric].to_list()
        best = sorted(_best(values, higher_is_better))
        names = [str(sub[rows][i]) for i in best]
        out.append({**dict(zip(keys, key)), rows: " = ".join(names), metric: values[best[0]], "tie": len(best) > 1})
    return pl.DataFrame(out, infer_schema_length=None) if out else agg.head(0).with_columns(pl.lit(False).alias("tie"))


def sweep_heatmap(
    results,
    *,
    metric: str,
    axes: list[str],
    rows: str = "variant",
    facet: str | None = None,
    phase: str | None = "replay",
    higher_is_better: bool = True,
    title: str | None = None,
    value_format: str = ".3f",
) -> go.Figure:
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
    fig = make_subplots(
        rows=nrows,
        cols=ncols,
        subplot_titles=[f"{facet}={v}" for v in facets] if facet else None,
        horizontal_spacing=0.08,
        vertical_spacing=0.18,
    )
    finite = df[metric].drop_nulls()
    zmin, zmax = (float(finite.min()), float(finite.max())) if finite.len() else (0.0, 1.0)
    for i, value in enumerate(facets):
        sub = df if facet is None else df.filter(pl.col(facet) == value)
        r, c = i // ncols + 1, i % ncols + 1
        x_labels, y_labels, z, best = heatmap_cells(sub, metric=metric, rows=rows, higher_is_better=higher_is_better)
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=x_labels,
                y=y_labels,
                text=_starred_text(z, best, value_format),
                texttemplate="%{text}",
                zmin=zmin,
                zmax=zmax,
                colorscale="Viridis" if higher_is_better else "Viridis_r",
                showscale=i == 0,
                colorbar=dict(title=metric),
                hovertemplate=f"%{{y}}<br>%{{x}}<br>{metric} %{{z}}<extra></extra>",
            ),
            row=r,
            col=c,
        )
        _outline_winners(fig, best, row=r, col=c)
    fig.update_layout(
        template=TEMPLATE,
        height=max(320, 260 * nrows),
        title=title or f"{metric} ({phase or 'all phases'}): best {rows} per column outlined (dotted: a tie)",
        margin=dict(l=80, r=20, t=70, b=60),
    )
    return fig


def heatmap_cells(sub: pl.DataFrame, *, metric: str, rows: str, higher_is_better: bool):
    """One panel's data: (column labels, row labels, z[row][column] = the mean `metric`, column -> best rows).

    Every tied best row is kept, so a tie is shown as one: no row wins a tie by coming first (as in `winners`)."""
    x_labels = sub["_column"].unique(maintain_order=True).to_list()
    y_labels = [str(v) for v in sub[rows].unique(maintain_order=True).to_list()]
    cell = {
        (str(y), x): m
        for y, x, m in sub.group_by(rows, "_column", maintain_order=True).agg(pl.col(metric).mean()).iter_rows()
    }
    z = [[cell.get((y, x)) for x in x_labels] for y in y_labels]
    best = {j: _best([z[k][j] for k in range(len(y_labels))], higher_is_better) for j in range(len(x_labels))}
    return x_labels, y_labels, z, best


def _starred_text(z: list[list], best: dict, value_format: str) -> list[list[str]]:
    """Each cell's value, starred in its column's best rows ("★ tie" where rows tie)."""
    return [
        [
            ("" if value is None else format(value, value_format))
            + ((" ★ tie" if len(best[j]) > 1 else " ★") if k in best[j] else "")
            for j, value in enumerate(row)
        ]
        for k, row in enumerate(z)
    ]


def _outline_winners(fig: go.Figure, best: dict, *, row: int, col: int) -> None:
    """A box around each column's best row (dotted where rows tie)."""
    for j, tied in best.items():
        for k in sorted(tied):
            fig.add_shape(
                type="rect",
                x0=j - 0.5,
                x1=j + 0.5,
                y0=k - 0.5,
                y1=k + 0.5,
                line=dict(color=WINNER_COLOR, width=3, dash="dot" if len(tied) > 1 else "solid"),
                row=row,
                col=col,
            )
