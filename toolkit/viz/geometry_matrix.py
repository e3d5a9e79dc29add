"""The preset x (DCP, hash unit) matrix: scheduler block, hit alignment, whether fine-grained hits are possible, and
the tokens a hash-aligned hit saves over a block-aligned one.

A block-aligned hit ends on a scheduler block, so it gives up to `scheduler_block - hash_block` tokens of a
matching prefix back to recompute (half that on average, prompt lengths spread evenly); a fine-grained hit ends on
the hash block and saves those tokens. Where fine-grained hits are not possible the hit alignment is the scheduler
block and nothing is saved.
"""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from toolkit.viz.style import frame, style_figure

STATUS = {"fine-grained": 2, "block-aligned": 1, "rejected": 0}
STATUS_COLORS = [
    [0.0, "#F2B8B5"],
    [0.33, "#F2B8B5"],
    [0.34, "#E5E5E5"],
    [0.66, "#E5E5E5"],
    [0.67, "#A8D5A2"],
    [1.0, "#A8D5A2"],
]


def matrix_frame(summary) -> pl.DataFrame:
    """One row per (preset, DCP, hash unit): status, scheduler block, alignment and the tokens a hit can save."""
    df = frame(summary)
    if "error" not in df.columns:
        df = df.with_columns(pl.lit("").alias("error"))
    for name in ("scheduler_block_tokens", "alignment_tokens", "fine_grained", "reason"):
        if name not in df.columns:
            df = df.with_columns(pl.lit(None).alias(name))
    rejected = pl.col("error").fill_null("") != ""
    fine = pl.col("fine_grained").fill_null(False)
    saved = pl.when(~rejected & fine).then(pl.col("scheduler_block_tokens") - pl.col("hash_block_tokens")).otherwise(0)
    return df.with_columns(
        pl.when(rejected)
        .then(pl.lit("rejected"))
        .when(fine)
        .then(pl.lit("fine-grained"))
        .otherwise(pl.lit("block-aligned"))
        .alias("status"),
        saved.alias("max_saved_tokens"),
        (saved / 2).alias("mean_saved_tokens"),
        (
            pl.lit("DCP ")
            + pl.col("dcp").cast(pl.Utf8)
            + pl.lit(", hash ")
            + pl.when(pl.col("hash_unit") == 0).then(pl.lit("default")).otherwise(pl.col("hash_unit").cast(pl.Utf8))
        ).alias("column"),
    )


def cell_text(r: dict | None) -> str:
    """One cell's text: its scheduler block and hit alignment, and the tokens a hash-aligned hit saves."""
    if r is None:
        return ""
    if r["status"] == "rejected":
        return "rejected"
    return f"block {r['scheduler_block_tokens']} / align {r['alignment_tokens']}<br>" + (
        f"saves ≤ {r['max_saved_tokens']} (mean {r['mean_saved_tokens']:.0f})"
        if r["status"] == "fine-grained"
        else "block-aligned"
    )


def geometry_matrix_figure(
    summary, *, title: str = "Where fine-grained hits pay: preset x (DCP, hash unit)"
) -> go.Figure:
    """Cells coloured by status (green: fine-grained hits possible, grey: block-aligned only, red: rejected), each
    with its scheduler block, hit alignment and the tokens a hash-aligned hit saves (up to; mean)."""
    df = matrix_frame(summary)
    columns = df.sort("dcp", "hash_unit", maintain_order=True)["column"].unique(maintain_order=True).to_list()
    presets = df["preset"].unique(maintain_order=True).to_list()
    cell = {(r["preset"], r["column"]): r for r in df.iter_rows(named=True)}
    z = [[None if cell.get((p, c)) is None else STATUS[cell[(p, c)]["status"]] for c in columns] for p in presets]
    text = [[cell_text(cell.get((p, c))) for c in columns] for p in presets]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=columns,
            y=presets,
            text=text,
            texttemplate="%{text}",
            zmin=0,
            zmax=2,
            colorscale=STATUS_COLORS,
            showscale=False,
            xgap=2,
            ygap=2,
            hovertemplate="%{y}<br>%{x}<br>%{text}<extra></extra>",
        )
    )
    fig.update_layout(
        xaxis=dict(side="top", title="DCP size (ranks), hash unit (tokens)"),
        yaxis=dict(autorange="reversed", title="preset"),
        annotations=[
            dict(
                text="green: fine-grained hits possible (tokens saved per hit against a "
                "block-aligned hit); grey: block-aligned only; red: rejected; "
                "block, align: scheduler block and hit alignment (tokens)",
                xref="paper",
                yref="paper",
                x=0,
                y=-0.02,
                yanchor="top",
                showarrow=False,
                font=dict(size=11),
            )
        ],
    )
    style_figure(fig, title=title, height=170 + 70 * len(presets))
    fig.update_layout(margin=dict(t=120), title=dict(y=0.98, yanchor="top"))
    return fig
