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
# # 07 · Where fine-grained hits pay: the map
#
# Fine-grained hits let a CPU-tier hit end on a hash block (16-256 tokens) instead of a scheduler block (528 to
# 15,360 tokens for these presets). This notebook draws `data/sweeps/fine-grained-map.yaml`: presets x DCP size x
# hash unit x workload (a Mooncake slice, multi-turn agentic, 20-shot few-shot, long documents) x a tight and an
# ample CPU tier. Each cell runs the toolkit with fine-grained hits **on**, the same connector with block-aligned
# hits only (**off**), and vLLM's own **SimpleCPU** connector, cold then hot (the hot phase replays the prompts
# after the device prefix cache is reset, so reuse comes from the CPU tier).
#
# The **gain** is prompt tokens not recomputed (off minus on): CPU-tier tokens alone overstate it, since a
# fine-grained hit loads a request's whole prefix from the CPU tier where a block-aligned one finds part of it on
# the device. Read a finished sweep (`kvtk sweep data/sweeps/fine-grained-map.yaml --serial` from the repository
# root) with `sweep_dir`, or run a few of its cells here at small size.

# %% tags=["parameters"]
sweep_dir: str = ""  # a finished fine-grained-map sweep folder, empty to run the selected cells below
models: list = ["kimi-linear-48b-a3b"]  # presets to run, empty for all
dcps: list = [1]  # DCP sizes to run, empty for all
units: list = [64]  # hash units to run, empty for all
workloads: list = ["fewshot20", "longdoc"]  # mooncake, agentic, fewshot20, longdoc, empty for all
tiers: list = ["ample"]  # tight, ample, empty for both
max_requests: int = 8  # each selected cell replays at most this many requests
phase: str = "hot"  # the phase the map shows
out_dir: str = ""  # where to write the results JSON and the sweep folder, empty for a temporary folder

# %%
import json
import tempfile
from pathlib import Path

import polars as pl

from toolkit.models.presets import data_dir
from toolkit.notebooks_runner import captured_console, save_results
from toolkit.strict_load import yaml_loads
from toolkit.sweep import SweepOptions, parse_spec, run_sweep
from toolkit.viz.map_figures import (
    gain_heatmap,
    gained_tokens_figure,
    map_table,
    per_request_gains,
    read_sweep,
    summary_table,
    zero_cells,
)
from toolkit.viz.map_grid import MOONCAKE, geometry_verdicts, shrink_spec, tier_label, workload_label
from toolkit.viz.style import show_table

if sweep_dir:
    folder = Path(sweep_dir)
else:
    spec_path = data_dir() / "sweeps" / "fine-grained-map.yaml"
    document = yaml_loads(spec_path.read_text(), str(spec_path))
    chosen = [
        i
        for i, c in enumerate(document["cells"])
        if (not models or c["model"] in models)
        and (not dcps or c["dcp"] in dcps)
        and (not units or c["prefix_match_unit"] in units)
        and (not workloads or workload_label(c["trace"]) in workloads)
        and (not tiers or tier_label(c.get("cpu_gib")) in tiers)
    ]
    small = shrink_spec(document, max_requests=max_requests, cells=chosen)
    # the Mooncake path is relative to the repository root; this notebook runs from notebooks/
    mooncake = "mooncake:" + str(data_dir().parent / MOONCAKE.split(":", 1)[1])
    small["cells"] = [{**c, "trace": mooncake if c["trace"] == MOONCAKE else c["trace"]} for c in small["cells"]]
    folder = Path(out_dir or tempfile.mkdtemp(prefix="kvtk-07-")) / "07_fine_grained_map"
    with captured_console() as console:
        run_sweep(parse_spec(small), SweepOptions(out=folder, serial=True, progress=False, report=False))
    console.save(folder)
    print(console.summary(folder / "cells" / "<cell>" / "vllm.log"))
summary = json.loads((folder / "summary.json").read_text())
results, requests = read_sweep(folder)
results = results.with_columns(pl.col("trace").map_elements(workload_label, return_dtype=pl.Utf8).alias("workload"))
print(f"{summary['done']}/{summary['cells']} cells done, {summary['failed']} failed, {summary['elapsed_s']:.1f} s")
for failed in summary["failed_cells"]:
    print(f"FAILED {failed['label']}: {failed['error']}")
table = map_table(results, phase=phase)
show_table(
    table.select(
        "model",
        "dcp",
        "prefix_match_unit",
        "workload",
        "tier",
        "tokens_on",
        "tokens_off",
        "tokens_simplecpu",
        "oracle_fraction_on",
        "oracle_fraction_off",
        "oracle_fraction_simplecpu",
        "ttft_p50_s_on",
        "ttft_p50_s_off",
        "ttft_p90_s_on",
        "ttft_p90_s_off",
        "gain_vs_off",
        "gain_vs_simplecpu",
    ),
    "Every cell of the map",
)

# %% [markdown]
# ## The gain over block-aligned hits
# Prompt tokens fine-grained hits spare from recomputation, per preset (rows) and (DCP, hash unit) (columns), one
# panel per workload and CPU tier. A blank square is a corner vLLM refuses (see the last table).

# %%
gain_heatmap(table, metric="gain_vs_off")

# %% [markdown]
# ## The gain over vLLM's SimpleCPU

# %%
gain_heatmap(table, metric="gain_vs_simplecpu", title="Prompt tokens spared against vLLM's SimpleCPU")

# %% [markdown]
# ## Per request
# How many tokens each request gained: a few long prefixes cut at a scheduler block gain much, a prefix that ends
# on a scheduler block gains nothing.

# %%
gains = per_request_gains(requests, phase=phase)
gained_tokens_figure(gains, by="workload")

# %% [markdown]
# ## Where it is zero, and why
# Corners vLLM refuses (the geometry explorer's reason, as `kvtk geometry --preset P --dcp D --hash-block H`
# prints it), corners where the geometry turns fine-grained hits off, and cells that ran with no gain (the
# workload's or the tier's reason).

# %%
verdicts = geometry_verdicts()
zeros = zero_cells(table, verdicts)
show_table(zeros, "Cells without a gain, and why")

# %% [markdown]
# ## Where it pays and how much
# Per workload and tier: cells with a gain, tokens spared against block-aligned hits and against SimpleCPU, the
# CPU-tier tokens of each variant, the mean oracle fraction and the median modelled TTFT (H200, TP 1).

# %%
headline = summary_table(table)
show_table(headline, "Where it pays and how much")

# %% [markdown]
# ## A number checked by hand
# 20-shot few-shot on Kimi-Linear at DCP 1 with a 64-token hash unit: every prompt is a 2,000-token shared prefix
# plus a 100-token question, 2,100 tokens. In the hot phase a hit stops one token short of the prompt, at 2,099
# tokens: fine-grained, on the last 64-token boundary, 2,048; block-aligned, on the last 1,920-token scheduler
# block, 1,920. So each request recomputes 128 tokens fewer, and the cell's gain is 128 x its requests.

# %%
checked = table.filter(
    (pl.col("model") == "kimi-linear-48b-a3b")
    & (pl.col("dcp") == 1)
    & (pl.col("prefix_match_unit") == 64)
    & (pl.col("workload") == "fewshot20")
)
hand = {}
for row in checked.iter_rows(named=True):
    n = results.filter(
        (pl.col("cell_id") == row["cell_id"]) & (pl.col("phase") == phase) & (pl.col("variant") == "toolkit")
    )["requests"][0]
    per_request = (2_099 // 64) * 64 - (2_099 // 1_920) * 1_920
    assert per_request == 128
    if row["tier"] == "ample":
        assert row["gain_vs_off"] == per_request * n, (row["gain_vs_off"], n)
    hand[row["tier"]] = {"requests": n, "gain_vs_off": row["gain_vs_off"], "hand_derived": per_request * n}
print(hand or "the checked cell is not in this selection")
for row in results.iter_rows(named=True):  # every prompt token is a device hit, a CPU hit or recomputed
    assert row["local_hit_tokens"] + row["external_hit_tokens"] + row["recomputed_tokens"] == row["prompt_tokens"]

# %%
save_results(
    out_dir,
    "07_fine_grained_map",
    {
        "summary": {k: summary[k] for k in ("cells", "done", "failed")},
        "hand_check": hand,
        "headline": headline.to_dicts(),
        "zero_cells": zeros.to_dicts(),
        "cells": table.to_dicts(),
    },
)
