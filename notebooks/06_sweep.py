# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 06 · Sweep: one question, a grid of experiments
#
# A sweep crosses the parameters of `kvtk replay --engine dry` (trace, eviction, hash unit, CPU tier size, model,
# baselines, ...) and runs one dry experiment per cell, on Ray or in this process (`kvtk sweep SPEC`). This
# notebook reads a finished sweep folder, or runs a small sweep, and shows per cell the hit tokens against the
# **oracle** (an infinite tier) and the CPU-tier hits against **Belady** (optimal eviction in a tier of the same
# size, at the hash unit the hits land on), and the TTFT the dry engine models, across the axes. In each column the
# best variant (the winner) is outlined and starred; a tie is marked as a tie (dotted outline, "tie"), never given
# to whichever row comes first.
#
# By default every cell runs a real model, Qwen3-Next-80B at TP 4 with vLLM's hash unit 16, next to vLLM without
# offload (`no_offload`) and vLLM's own CPU connector (`simplecpu`) (`fixed` below, merged over the spec's).

# %% tags=["parameters"]
sweep_dir: str = ""  # a finished sweep folder to read, empty to run the spec below
spec: str = "eviction-by-workload"  # a spec name in data/sweeps or a path to a YAML/JSON spec
axes: dict = {}  # replaces the spec's axes when not empty (a smaller grid)
# fmt: off
fixed: dict = {"model": "qwen3-next-80b-a3b", "tp": 4, "prefix_match_unit": 16, "baselines": ["no_offload", "simplecpu"]}  # merged over the spec's fixed parameters
# fmt: on
serial: bool = True  # run the cells in this process; False: on a local Ray
max_parallel: int = 2  # Ray: cells running at once
phase: str = "replay"  # the phase the figures show
out_dir: str = ""  # where to write the results JSON and the sweep folder, empty for a temporary folder

# %%
import json
import tempfile
from pathlib import Path

import polars as pl

from toolkit.models.presets import data_dir
from toolkit.notebooks_runner import captured_console, save_results
from toolkit.sweep import SweepOptions, load_spec, parse_spec, run_sweep
from toolkit.sweep.bounds import with_cell_bounds
from toolkit.sweep.report import figure_axes
from toolkit.viz.style import show_table
from toolkit.viz.sweep import sweep_heatmap, ttft_column, winners, with_ratios

if sweep_dir:
    folder = Path(sweep_dir)
    summary = json.loads((folder / "summary.json").read_text())
else:
    path = Path(spec) if Path(spec).suffix else data_dir() / "sweeps" / f"{spec}.yaml"
    document = load_spec(path).to_json()
    document["axes"] = axes or document["axes"]
    document["fixed"] = {**document["fixed"], **fixed}
    folder = Path(out_dir or tempfile.mkdtemp(prefix="kvtk-06-")) / "06_sweep"
    with captured_console() as console:
        result = run_sweep(
            parse_spec(document), SweepOptions(out=folder, serial=serial, max_parallel=max_parallel, progress=False)
        )
    console.save(folder)
    summary = result.summary
    print(console.summary(folder / "cells" / "<cell>" / "vllm.log"))
spec_document = json.loads((folder / "spec.json").read_text())
results = with_cell_bounds(with_ratios(pl.read_parquet(folder / "results.parquet")), folder)
grid = figure_axes(spec_document)
print(
    f"sweep {summary['name']}: {summary['done']}/{summary['cells']} cells done, {summary['failed']} failed, "
    f"{summary['elapsed_s']:.1f} s on {summary['executor']}; axes: {', '.join(grid)}"
)
for failed in summary["failed_cells"]:
    print(f"FAILED {failed['label']}: {failed['error']}")

# %% [markdown]
# ## Hit tokens over the oracle
# Device plus CPU-tier hit tokens divided by what an infinite cache could have served, per cell (columns) and
# variant (rows), in one small multiple per value of the first axis.

# %%
facet = grid[0] if len(grid) > 1 else None
sweep_heatmap(results, metric="hit_fraction_of_oracle", axes=grid, rows="variant", facet=facet, phase=phase)

# %% [markdown]
# ## CPU-tier hits over Belady
# Belady bounds the CPU-tier hits of a tier the same size (optimal eviction, hash-unit keys, the phase entered with
# the best state earlier phases could leave), so every value is at most 1; no_offload has no CPU tier (0).

# %%
belady_metric = "cpu_fraction_of_belady" if "cpu_fraction_of_belady" in results.columns else "hit_fraction_of_belady"
sweep_heatmap(results, metric=belady_metric, axes=grid, rows="variant", facet=facet, phase=phase)

# %% [markdown]
# ## Modelled TTFT
# Shown when the dry engine models time to first token (lower is better, so the minimum is the winner).

# %%
ttft = ttft_column(results)
if ttft:
    ttft_ms = f"{ttft.removesuffix('_s')} (ms)"
    fig = sweep_heatmap(
        results.with_columns((pl.col(ttft) * 1e3).alias(ttft_ms)),
        metric=ttft_ms,
        axes=grid,
        rows="variant",
        facet=facet,
        phase=phase,
        higher_is_better=False,
        value_format=".3g",
        title=f"Modelled {ttft_ms}, {phase} phase: the lowest per column outlined (dotted: a tie)",
    )
else:
    fig = None
    print("this sweep's dry engine reports no TTFT (every value is 0 or missing)")
fig

# %% [markdown]
# ## Winner per cell
# The variant with the most hit tokens in each cell; where variants tie, all of them (`tie` true).

# %%
best = winners(results.filter(pl.col("phase") == phase), metric="hit_tokens", rows="variant", columns=grid)
show_table(best, f"Winner per cell ({phase} phase, hit tokens)")

# %% [markdown]
# ## Numbers checked by hand
# Every cell ran every variant in every phase: rows = done cells x variants x phases. In every row each prompt
# token is a device hit, a CPU hit or recomputed, and the CPU-tier hits stay under their Belady bound.

# %%
phases_run = results["phase"].n_unique()
variants_run = results["variant"].n_unique()
assert results.height == summary["done"] * variants_run * phases_run, (results.height, summary["done"])
for row in results.iter_rows(named=True):
    assert row["local_hit_tokens"] + row["external_hit_tokens"] + row["recomputed_tokens"] == row["prompt_tokens"]
    if row.get("belady_cpu_hit_tokens") is not None:  # no achieved value above its bound
        assert row["external_hit_tokens"] <= row["belady_cpu_hit_tokens"], row

# %%
save_results(
    out_dir,
    "06_sweep",
    {
        "summary": summary,
        "winners": best.to_dicts(),
        "results": results.select(
            "cell_label", "variant", "phase", "hit_tokens", "oracle_reusable_tokens", "belady_hit_tokens"
        ).to_dicts(),
    },
)
