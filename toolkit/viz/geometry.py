"""Block geometry across presets, DCP sizes and hash units: tables and bars, and where the LCM blows up.

`geometry_sweep` turns presets into two tidy frames (one row per configuration, one per group) by asking the core;
the figure functions only read those frames.
"""

from __future__ import annotations

from typing import Iterable

import plotly.graph_objects as go
import polars as pl

from toolkit.viz.style import TEMPLATE, axis_title, frame, group_color, show_table


def describe_rows(label: str, describe: dict, **extra) -> tuple[dict, list[dict]]:
    """One summary row and the per-group rows of a `HybridGeometry.describe()` dict."""
    fg = describe["fine_grained"]
    summary = {
        "preset": label,
        **extra,
        "dcp": describe["dcp"],
        "hash_block_tokens": describe["hash_block_tokens"],
        "scheduler_block_tokens": describe["scheduler_block_tokens"],
        "alignment_tokens": describe["alignment_tokens"],
        "block_bytes": describe["block_bytes"],
        "hash_blocks_per_scheduler_block": describe["scheduler_block_tokens"] // describe["hash_block_tokens"],
        "fine_grained": bool(fg["enabled"]),
        "reason": fg["reason"] or "eligible",
        "error": "",
    }
    groups = [
        {
            "preset": label,
            **extra,
            "dcp": describe["dcp"],
            "hash_block_tokens": describe["hash_block_tokens"],
            "group_id": g["group_id"],
            "group": g["name"],
            "kind": g["kind"],
            "spec_block_tokens": g["spec_block_tokens"],
            "resolved_block_tokens": g["resolved_block_tokens"],
            "page_bytes": g["page_bytes"],
        }
        for g in describe["groups"]
    ]
    return summary, groups


def geometry_sweep(
    presets: Iterable[str | dict],
    *,
    dcps: Iterable[int] = (1,),
    hash_units: Iterable[int | None] = (None,),
    platform: str = "cuda",
    tp: int = 1,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(summary, groups) frames for every preset x DCP x hash unit; invalid combinations keep a row with `error`.

    `hash_unit` is the requested hash block (0: vLLM's default, the GCD), `hash_block_tokens` the resolved one.
    """
    from toolkit.models.presets import geometry_from_preset

    summaries, group_rows = [], []
    for preset in presets:
        label = preset if isinstance(preset, str) else preset.get("name", "preset")
        for dcp in dcps:
            for hash_unit in hash_units:
                try:
                    geo = geometry_from_preset(preset, platform=platform, dcp=dcp, tp=tp, hash_block_tokens=hash_unit)
                except ValueError as exc:
                    summaries.append(
                        {
                            "preset": label,
                            "hash_unit": hash_unit or 0,
                            "dcp": dcp,
                            "hash_block_tokens": hash_unit or 0,
                            "error": str(exc),
                        }
                    )
                    continue
                summary, groups = describe_rows(label, geo.describe(), hash_unit=hash_unit or 0)
                summaries.append(summary)
                group_rows.extend(groups)
    return pl.DataFrame(summaries, infer_schema_length=None), pl.DataFrame(group_rows, infer_schema_length=None)


def geometry_table_figure(summary, *, title: str = "Geometry per configuration") -> go.Figure:
    """A table: preset, DCP, hash/scheduler/alignment tokens, bytes per block, fine-grained and why."""
    df = frame(summary)
    if "error" in df.columns:
        df = df.filter(pl.col("error").fill_null("") == "")
    cols = [
        "preset",
        "dcp",
        "hash_block_tokens",
        "scheduler_block_tokens",
        "alignment_tokens",
        "block_bytes",
        "fine_grained",
        "reason",
    ]
    header = ["preset", "DCP", "hash block", "scheduler block", "hit alignment", "bytes/block", "fine-grained", "why"]
    fig = go.Figure(
        go.Table(
            columnwidth=[2, 0.6, 1, 1.2, 1.1, 1.2, 1, 5],
            header=dict(values=header, fill_color="#4C78A8", font=dict(color="white"), align="left"),
            cells=dict(values=[df[c].to_list() for c in cols], align="left", height=24),
        )
    )
    # Rows grow with their wrapped text: size the figure by the lines of the longest cell of each row, so no row is
    # cut off below the figure's edge.
    lines = [max(1, -(-len(str(r)) // 60)) for r in df["reason"].to_list()]
    fig.update_layout(title=title, height=120 + sum(20 * n + 8 for n in lines), margin=dict(l=10, r=10, t=50, b=10))
    return fig


GEOMETRY_HEADERS = {
    "preset": "preset",
    "dcp": "DCP",
    "hash_block_tokens": "hash block (tokens)",
    "scheduler_block_tokens": "scheduler block (tokens)",
    "alignment_tokens": "hit alignment (tokens)",
    "block_bytes": "bytes per block",
    "fine_grained": "fine-grained",
    "reason": "why",
}


def geometry_table(summary, caption: str = "Geometry per configuration"):
    """`geometry_table_figure`'s columns as a whole table (every row, the full reason), for notebooks and reports."""
    df = frame(summary)
    if "error" in df.columns:
        df = df.filter(pl.col("error").fill_null("") == "")
    return show_table(df.select(list(GEOMETRY_HEADERS)).rename(GEOMETRY_HEADERS), caption)


def group_blocks_figure(groups, *, title: str = "Resolved block per group (tokens)") -> go.Figure:
    """Bars of resolved block tokens per group, coloured by kind, one cluster per preset (and DCP if several)."""
    df = frame(groups)
    several_dcp = df["dcp"].n_unique() > 1
    x = [f"{p} dcp{d}" if several_dcp else p for p, d in zip(df["preset"].to_list(), df["dcp"].to_list())]
    df = df.with_columns(pl.Series("config", x))
    fig = go.Figure()
    for kind in dict.fromkeys(df["kind"].to_list()):
        sub = df.filter(pl.col("kind") == kind)
        fig.add_trace(
            go.Bar(
                x=[sub["config"].to_list(), sub["group"].to_list()],
                y=sub["resolved_block_tokens"].to_list(),
                name=kind,
                marker_color=group_color(kind),
                customdata=sub["page_bytes"].to_list(),
                hovertemplate="%{x}: %{y} tokens/block, %{customdata} bytes/block<extra>" + kind + "</extra>",
            )
        )
    fig.update_layout(
        template=TEMPLATE,
        title=title,
        yaxis=dict(type="log", title=axis_title("resolved block", "tokens")),
        height=420,
        margin=dict(l=60, r=20, t=50, b=80),
    )
    return fig


def scheduler_block_figure(summary, *, title: str = "Scheduler block (LCM of group blocks) against DCP") -> go.Figure:
    """Scheduler block tokens against DCP, one line per preset and hash unit (log y): where the LCM blows up."""
    df = frame(summary)
    if "error" in df.columns:
        df = df.filter(pl.col("error").fill_null("") == "")
    fig = go.Figure()
    for (preset, hash_unit), sub in df.sort("dcp").group_by(["preset", "hash_block_tokens"], maintain_order=True):
        fig.add_trace(
            go.Scatter(
                x=sub["dcp"].to_list(),
                y=sub["scheduler_block_tokens"].to_list(),
                mode="lines+markers",
                name=f"{preset} (hash {hash_unit})",
                customdata=sub["hash_blocks_per_scheduler_block"].to_list(),
                hovertemplate="DCP %{x}: scheduler block %{y} tokens = %{customdata} hash blocks<extra></extra>",
            )
        )
    fig.update_layout(
        template=TEMPLATE,
        title=title,
        xaxis=dict(type="log", title=axis_title("DCP size", "ranks"), dtick=0.30103),
        yaxis=dict(type="log", title="scheduler block (tokens)"),
        height=420,
        margin=dict(l=60, r=20, t=50, b=50),
    )
    return fig
