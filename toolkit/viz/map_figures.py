"""The fine-grained map's tables and figures, from a finished sweep of `data/sweeps/fine-grained-map.yaml`.

- `map_table(results)`: one row per cell (preset, DCP, hash unit, workload, tier) for one phase: CPU-tier tokens
  with fine-grained hits on (`tokens_on`), off (`tokens_off`) and with vLLM's SimpleCPU (`tokens_simplecpu`), the
  oracle fraction of each, modelled TTFT p50/p90 of each, and the gains `gain_vs_off` / `gain_vs_simplecpu`.
  A gain is prompt tokens NOT recomputed (`recomputed_off - recomputed_on`): a fine-grained hit loads a request's
  whole prefix from the CPU tier even where a block-aligned one would have found part of it on the device already,
  so CPU-tier tokens alone overstate it.
- `gain_heatmap(table)`: the gain over preset x (DCP, hash unit), one panel per workload x tier.
- `per_request_gains(requests)` / `gained_tokens_figure(gains)`: the distribution of tokens each request gained.
- `zero_cells(table, verdicts)`: where the gain is zero (or the corner has no cell), with the geometry explorer's
  reason, or the workload's when the geometry allows fine-grained hits.
"""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from toolkit.viz.map_grid import VARIANT_OFF, VARIANT_ON, VARIANT_SIMPLECPU, tier_label, workload_label
from toolkit.viz.style import TEMPLATE, frame

KEYS = ("model", "dcp", "prefix_match_unit", "workload", "tier")
VARIANTS = {VARIANT_ON: "on", VARIANT_OFF: "off", VARIANT_SIMPLECPU: "simplecpu"}
METRICS = {
    "external_hit_tokens": "tokens",
    "recomputed_tokens": "recomputed",
    "hit_fraction_of_oracle": "oracle_fraction",
    "ttft_p50_s": "ttft_p50_s",
    "ttft_p90_s": "ttft_p90_s",
}


def _labelled(df: pl.DataFrame) -> pl.DataFrame:
    if "cpu_gib" not in df.columns:
        df = df.with_columns(pl.lit(None, dtype=pl.Float64).alias("cpu_gib"))
    return df.with_columns(
        pl.col("trace").map_elements(workload_label, return_dtype=pl.Utf8).alias("workload"),
        pl.col("cpu_gib").map_elements(tier_label, return_dtype=pl.Utf8, skip_nulls=False).alias("tier"),
    )


def map_table(results, *, phase: str = "hot") -> pl.DataFrame:
    """One row per cell: the three variants side by side for `phase` (columns `<metric>_<on|off|simplecpu>`)."""
    df = _labelled(frame(results).filter(pl.col("phase") == phase))
    wide = None
    for variant, short in VARIANTS.items():
        part = df.filter(pl.col("variant") == variant).select(
            ["cell_id", *KEYS, "cpu_gib", "prompt_tokens", "oracle_reusable_tokens"]
            + [pl.col(m).alias(f"{name}_{short}") for m, name in METRICS.items() if m in df.columns]
        )
        if wide is None:
            wide = part
        else:
            wide = wide.join(
                part.drop([*KEYS, "cpu_gib", "prompt_tokens", "oracle_reusable_tokens"]), on="cell_id", how="left"
            )
    assert wide is not None
    return wide.with_columns(
        (pl.col("recomputed_off") - pl.col("recomputed_on")).alias("gain_vs_off"),
        (pl.col("recomputed_simplecpu") - pl.col("recomputed_on")).alias("gain_vs_simplecpu"),
    ).sort(list(KEYS))


def gain_heatmap(table: pl.DataFrame, *, metric: str = "gain_vs_off", title: str | None = None) -> go.Figure:
    """`metric` over preset (rows) x (DCP, hash unit) (columns), one panel per workload x tier."""
    df = table.with_columns(
        (
            pl.lit("dcp ") + pl.col("dcp").cast(pl.Utf8) + pl.lit(" / h") + pl.col("prefix_match_unit").cast(pl.Utf8)
        ).alias("corner")
    )
    corners = df.sort("dcp", "prefix_match_unit")["corner"].unique(maintain_order=True).to_list()
    models = df["model"].unique(maintain_order=True).to_list()
    panels = df.select("workload", "tier").unique(maintain_order=True).rows()
    fig = make_subplots(
        rows=len(panels),
        cols=1,
        subplot_titles=[f"{w}, {t} CPU tier" for w, t in panels],
        vertical_spacing=min(0.08, 0.5 / max(1, len(panels))),
    )
    peak = max(1.0, float(df[metric].abs().max() or 0))
    for i, (workload, tier) in enumerate(panels, start=1):
        sub = df.filter((pl.col("workload") == workload) & (pl.col("tier") == tier))
        lookup = {(r["model"], r["corner"]): r[metric] for r in sub.iter_rows(named=True)}
        z = [[lookup.get((m, c)) for c in corners] for m in models]
        text = [["" if v is None else f"{v:,.0f}" for v in row] for row in z]
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=corners,
                y=models,
                text=text,
                texttemplate="%{text}",
                zmin=-peak,
                zmax=peak,
                colorscale="RdBu",
                showscale=(i == 1),
                hoverongaps=False,
                colorbar={"title": "tokens"},
            ),
            row=i,
            col=1,
        )
    fig.update_layout(
        template=TEMPLATE,
        height=220 * len(panels) + 120,
        title=title or f"Prompt tokens spared ({metric}); blank: no cell (vLLM refuses the corner)",
    )
    return fig


def per_request_gains(requests, *, phase: str = "hot") -> pl.DataFrame:
    """Per request: prompt tokens fine-grained hits spared from recomputation against block-aligned hits (and
    against SimpleCPU), one row per cell x request. `requests` is the cells' `requests.parquet` rows with `cell_id` and the cell keys added."""
    df = frame(requests).filter(pl.col("phase") == phase)
    on = df.filter(pl.col("variant") == VARIANT_ON).select(
        "cell_id", "request_id", *[k for k in KEYS if k in df.columns], pl.col("recomputed_tokens").alias("on")
    )
    out = on
    for variant, name in ((VARIANT_OFF, "off"), (VARIANT_SIMPLECPU, "simplecpu")):
        other = df.filter(pl.col("variant") == variant).select(
            "cell_id", "request_id", pl.col("recomputed_tokens").alias(name)
        )
        out = out.join(other, on=["cell_id", "request_id"], how="left")
    # columns on/off/simplecpu: tokens each variant recomputed; gained = fewer recomputed than the baseline
    return out.with_columns(
        (pl.col("off") - pl.col("on")).alias("gained_vs_off"),
        (pl.col("simplecpu") - pl.col("on")).alias("gained_vs_simplecpu"),
    )


def gained_tokens_figure(gains: pl.DataFrame, *, by: str = "workload") -> go.Figure:
    """Box plots of the tokens each request gained from fine-grained hits, one box per `by` value."""
    fig = go.Figure()
    for value in gains[by].unique(maintain_order=True).to_list():
        sub = gains.filter(pl.col(by) == value)
        fig.add_trace(go.Box(y=sub["gained_vs_off"].to_list(), name=str(value), boxpoints="outliers"))
    fig.update_layout(
        template=TEMPLATE,
        yaxis_title="tokens not recomputed per request, on - off (tokens)",
        xaxis_title=by,
        title="Per-request CPU-tier tokens gained by fine-grained hits",
    )
    return fig


def zero_cells(table: pl.DataFrame, verdicts: list[dict]) -> pl.DataFrame:
    """Cells with no gain over block-aligned hits, and corners with no cell, each with why."""
    rows = []
    for v in verdicts:
        if not v["valid"] or not v["fine_grained"]:
            rows.append(
                {
                    "model": v["model"],
                    "dcp": v["dcp"],
                    "prefix_match_unit": v["prefix_match_unit"],
                    "workload": "all",
                    "tier": "all",
                    "tokens_on": None,
                    "tokens_off": None,
                    "reason": v["reason"],
                }
            )
    for r in table.filter(pl.col("gain_vs_off") <= 0).iter_rows(named=True):
        if not r["oracle_reusable_tokens"]:
            why = "workload: nothing in this phase is reusable"
        elif (r["oracle_fraction_off"] or 0) >= 0.999:
            why = "workload: block-aligned hits already reach the oracle (reusable prefixes end on scheduler blocks)"
        elif r["tokens_on"] == 0:
            why = "CPU tier: nothing of the prefix survived in the tier"
        elif r["tier"] == "tight":
            why = "tight CPU tier: the partial blocks a fine-grained hit needs were evicted first"
        else:
            why = "fine-grained on, but no hit ended between scheduler blocks"
        rows.append(
            {**{k: r[k] for k in KEYS}, "tokens_on": r["tokens_on"], "tokens_off": r["tokens_off"], "reason": why}
        )
    schema = {
        "model": pl.Utf8,
        "dcp": pl.Int64,
        "prefix_match_unit": pl.Int64,
        "workload": pl.Utf8,
        "tier": pl.Utf8,
        "tokens_on": pl.Int64,
        "tokens_off": pl.Int64,
        "reason": pl.Utf8,
    }
    return pl.DataFrame(rows, schema=schema)


def summary_table(table: pl.DataFrame) -> pl.DataFrame:
    """Per workload x tier: where it pays and how much (the shape of docs/results/2026-12-01-never-worse.md, section 6)."""
    return (
        table.group_by("workload", "tier", maintain_order=True)
        .agg(
            pl.len().alias("cells"),
            (pl.col("gain_vs_off") > 0).sum().alias("cells_gaining"),
            pl.col("gain_vs_off").sum().alias("tokens_gained_vs_off"),
            pl.col("gain_vs_simplecpu").sum().alias("tokens_gained_vs_simplecpu"),
            pl.col("tokens_on").sum().alias("cpu_tokens_on"),
            pl.col("tokens_off").sum().alias("cpu_tokens_off"),
            pl.col("tokens_simplecpu").sum().alias("cpu_tokens_simplecpu"),
            pl.col("oracle_fraction_on").mean().alias("oracle_fraction_on"),
            pl.col("oracle_fraction_off").mean().alias("oracle_fraction_off"),
            pl.col("ttft_p50_s_on").median().alias("ttft_p50_s_on"),
            pl.col("ttft_p50_s_off").median().alias("ttft_p50_s_off"),
            pl.col("ttft_p90_s_on").median().alias("ttft_p90_s_on"),
            pl.col("ttft_p90_s_off").median().alias("ttft_p90_s_off"),
        )
        .sort("workload", "tier")
    )


def read_sweep(sweep_dir) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(results, requests) of a finished map sweep: `results.parquet`, and every cell's `requests.parquet` with the
    cell's keys (from results) joined on."""
    from pathlib import Path

    sweep_dir = Path(sweep_dir)
    results = pl.read_parquet(sweep_dir / "results.parquet")
    keys = _labelled(results).select("cell_id", *KEYS).unique("cell_id", maintain_order=True)
    parts = []
    for cell_id in keys["cell_id"].to_list():
        path = sweep_dir / "cells" / cell_id / "requests.parquet"
        if path.is_file():
            parts.append(
                pl.read_parquet(
                    path, columns=["variant", "phase", "request_id", "external_hit_tokens", "recomputed_tokens"]
                ).with_columns(pl.lit(cell_id).alias("cell_id"))
            )
    requests = (
        pl.concat(parts)
        if parts
        else pl.DataFrame(
            schema={
                "variant": pl.Utf8,
                "phase": pl.Utf8,
                "request_id": pl.Utf8,
                "external_hit_tokens": pl.Int64,
                "recomputed_tokens": pl.Int64,
                "cell_id": pl.Utf8,
            }
        )
    )
    return results, requests.join(keys, on="cell_id", how="left")
