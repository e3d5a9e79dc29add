"""A sweep's results with each cell's bound: the Belady bound of every cell's run folder joined to its rows, for the
sweep figures (`toolkit.viz.sweep`), which draw what they are given and compute no bounds themselves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from toolkit.experiments.run_bounds import folder_bounds
from toolkit.viz.style import frame


def with_cell_bounds(results: Any, folder: str | Path) -> pl.DataFrame:
    """`belady_cpu_hit_tokens` per cell and phase (`run_bounds.folder_bounds` of each cell's run folder: hash-unit keys,
    the bound of CPU-tier hits) and `cpu_fraction_of_belady` = CPU-tier hits / that bound (at most 1)."""
    df = frame(results)
    rows = []
    for cell_id in df["cell_id"].unique(maintain_order=True).to_list():
        cell_dir = Path(folder) / "cells" / cell_id
        if (cell_dir / "params.json").exists():
            rows += [
                {"cell_id": cell_id, "phase": p, "belady_cpu_hit_tokens": b.belady}
                for p, b in folder_bounds(cell_dir).items()
            ]
    if not rows:
        return df
    bounds = pl.DataFrame(rows, schema={"cell_id": pl.Utf8, "phase": pl.Utf8, "belady_cpu_hit_tokens": pl.Int64})
    return df.join(bounds, on=["cell_id", "phase"], how="left", maintain_order="left").with_columns(
        pl.when(pl.col("belady_cpu_hit_tokens") > 0)
        .then(pl.col("external_hit_tokens") / pl.col("belady_cpu_hit_tokens"))
        .otherwise(None)
        .alias("cpu_fraction_of_belady")
    )
