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
# **oracle** (an infinite tier) and **Belady** (optimal eviction at the same capacity), and the TTFT the dry engine
# models, across the axes. In each column the best variant (the winner) is outlined and starred.

# %% tags=["parameters"]
sweep_dir: str = ""  # a finished sweep folder to read, empty to run the spec below
spec: str = "eviction-by-workload"  # a spec name in data/sweeps or a path to a YAML/JSON spec
axes: dict = {}  # replaces the spec's axes when not empty (a smaller grid)
fixed: dict = {}  # merged over the spec's fixed parameters
serial: bool = True  # run the cells in this process; False: on a local Ray
max_parallel: int = 2  # Ray: cells running at once
phase: str = "replay"  # the phase the figures show
out_dir: str = ""  # where to write the results JSON and the sweep folder, empty for a temporary folder

# %%
import json
import tempfile
from pathlib import Path

import polars as pl

from toolkit.core.presets import data_dir
from toolkit.notebooks_runner import save_results
from toolkit.sweep import SweepOptions, load_spec, parse_spec, run_sweep
from toolkit.sweep.report import figure_axes
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
    result = run_sweep(parse_spec(document), SweepOptions(out=folder, serial=serial, max_parallel=max_parallel,
                                                          progress=False))
    summary = result.summary
spec_document = json.loads((folder / "spec.json").read_text())
results = with_ratios(pl.read_parquet(folder / "results.parquet"))
grid = figure_axes(spec_document)
print(f"sweep {summary['name']}: {summary['done']}/{summary['cells']} cells done, {summary['failed']} failed, "
      f"{summary['elapsed_s']:.1f} s on {summary['executor']}; axes: {', '.join(grid)}")
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
# ## Hit tokens over Belady
# Belady bounds the CPU tier alone at the same capacity (scheduler-block keys); device-local and fine-grained hits
# can take a variant above 1.

# %%
sweep_heatmap(results, metric="hit_fraction_of_belady", axes=grid, rows="variant", facet=facet, phase=phase)

# %% [markdown]
# ## Modelled TTFT
# Shown when the dry engine models time to first token (lower is better, so the minimum is the winner).

# %%
ttft = ttft_column(results)
if ttft:
    fig = sweep_heatmap(results, metric=ttft, axes=grid, rows="variant", facet=facet, phase=phase,
                        higher_is_better=False, value_format=".3g")
else:
    fig = None
    print("this sweep's dry engine reports no TTFT (every value is 0 or missing)")
fig

# %% [markdown]
# ## Winner per cell

# %%
best = winners(results.filter(pl.col("phase") == phase), metric="hit_tokens", rows="variant", columns=grid)
best

# %% [markdown]
# ## Numbers checked by hand
# Every cell ran every variant in every phase: rows = done cells x variants x phases. And in every row each prompt
# token is a device hit, a CPU hit or recomputed.

# %%
phases_run = results["phase"].n_unique()
variants_run = results["variant"].n_unique()
assert results.height == summary["done"] * variants_run * phases_run, (results.height, summary["done"])
for row in results.iter_rows(named=True):
    assert row["local_hit_tokens"] + row["external_hit_tokens"] + row["recomputed_tokens"] == row["prompt_tokens"]

# %%
save_results(out_dir, "06_sweep", {"summary": summary, "winners": best.to_dicts(),
                                   "results": results.select("cell_label", "variant", "phase", "hit_tokens",
                                                             "oracle_reusable_tokens", "belady_hit_tokens").to_dicts()})
