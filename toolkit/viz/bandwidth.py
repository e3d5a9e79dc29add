"""Copy bandwidth curves: GB/s against block size, per backend and direction, with the contiguous limit."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from toolkit.viz.style import TEMPLATE, frame

DASHES = {"store": "solid", "d2h": "solid", "load": "dash", "h2d": "dash"}


def bandwidth_frame(results) -> pl.DataFrame:
    """Normalise `kvtk bench copy --json` rows to block_bytes, backend, direction, gbps[, contiguous_gbps].

    Accepts the bench's JSON document (rows under "rows"), a dict with a "results" list, a list of row dicts or a
    frame; columns named `gb_per_s` or `gbps` both work.
    """
    if isinstance(results, dict):
        results = results.get("rows", results.get("results", []))
    rows = results
    df = frame(rows)
    renames = {c: "gbps" for c in ("gb_per_s", "gbs", "bandwidth_gbps") if c in df.columns}
    renames.update({c: "block_bytes" for c in ("bytes_per_block", "block_size_bytes") if c in df.columns})
    return df.rename(renames)


def copy_bandwidth_figure(
    rows, *, contiguous_gbps: dict[str, float] | float | None = None, title: str = "Block copy bandwidth"
) -> go.Figure:
    """Lines of GB/s against bytes per block (log x), one per backend and direction.

    The measured contiguous copy of the same bytes is drawn dotted, per direction: from the rows' `contiguous_gbps`
    column when present (best over backends per block size), else from `contiguous_gbps` (one number or one per
    direction) as horizontal lines.
    """
    df = bandwidth_frame(rows)
    fig = go.Figure()
    if "contiguous_gbps" in df.columns and contiguous_gbps is None:
        limit = df.group_by(["direction", "block_bytes"]).agg(pl.col("contiguous_gbps").max()).sort("block_bytes")
        for (direction,), sub in limit.group_by(["direction"], maintain_order=True):
            fig.add_trace(
                go.Scatter(
                    x=sub["block_bytes"].to_list(),
                    y=sub["contiguous_gbps"].to_list(),
                    mode="lines",
                    name=f"contiguous {direction}",
                    line=dict(dash="dot", color="#555"),
                    hovertemplate="contiguous: %{y:.2f} GB/s<extra></extra>",
                )
            )
    for (backend, direction), sub in df.sort("block_bytes").group_by(["backend", "direction"], maintain_order=True):
        fig.add_trace(
            go.Scatter(
                x=sub["block_bytes"].to_list(),
                y=sub["gbps"].to_list(),
                mode="lines+markers",
                name=f"{backend} {direction}",
                line_dash=DASHES.get(direction, "solid"),
                hovertemplate="%{x} B/block: %{y:.2f} GB/s<extra>" + f"{backend} {direction}</extra>",
            )
        )
    limits = (
        contiguous_gbps
        if isinstance(contiguous_gbps, dict)
        else ({"contiguous": contiguous_gbps} if contiguous_gbps is not None else {})
    )
    for label, value in limits.items():
        fig.add_hline(
            y=value,
            line_dash="dot",
            line_color="#555",
            annotation_text=f"contiguous {label if label != 'contiguous' else ''} {value:.1f} GB/s".replace("  ", " "),
            annotation_position="top left",
        )
    fig.update_layout(
        template=TEMPLATE,
        title=title,
        xaxis=dict(type="log", title="block size (bytes)"),
        yaxis_title="copy bandwidth (GB/s)",
        height=420,
        margin=dict(l=60, r=20, t=50, b=50),
    )
    return fig
