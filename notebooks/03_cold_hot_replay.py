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
# # 03 · Cold, hot, pressure, replay
#
# The experiment of `toolkit.experiments`: a trace runs **cold** (empty caches), **hot** (device prefix cache
# reset, so hits must come from the CPU tier), under **pressure** (unrelated traffic evicts part of the CPU tier)
# and as a **replay**, for the toolkit and its baselines: **no_offload** (vLLM without a CPU tier) and
# **simplecpu** (vLLM's own CPU connector). Hits are set against two bounds, each drawn over what it bounds: the
# **oracle** (an infinite tier) over all hits, and **Belady** (optimal eviction in a tier of the same size, keys at
# the hash unit the hits land on) over the CPU-tier hits.
#
# The default is a real model: Qwen3-Next-80B at TP 4 on the dry engine (vLLM's real scheduler, no model; TTFT
# modelled by the step-time model on an H200, `toolkit/perfmodel/step_time.py`), with `kvtk replay`'s defaults
# (`toolkit/experiments/defaults.py`, one source): the hash unit that makes fine-grained hits possible (16 here)
# and a device cache per rank of the H200's memory less the weights. `engine="live"` runs the real engine on a
# tiny model (`model="tiny-qwen3-next"`, `tp=1`; slow on CPU); `engine="server"` replays against a running vLLM
# server at `url`.

# %% tags=["parameters"]
engine: str = "dry"  # dry, live or server
model: str = "qwen3-next-80b-a3b"  # a model preset of data/models (dry), or a tiny model (live)
tp: int = 4  # dry engine, presets: tensor-parallel size
prefix_match_unit: int = None  # vLLM's hash unit; None: kvtk replay's default for the model, 0: vLLM's (whole block)
device_gib: float = 0.0  # dry, presets: KV-cache GiB per rank, 0 for the default (the GPU profile less the weights)
device_blocks: int = 0  # device KV-cache blocks (overrides device_gib), 0 for the default
trace: str = "fewshot-small"  # a trace in data/traces or a workload name
max_requests: int = 0  # the trace's first N requests, 0 for all
baselines: list = ["no_offload", "simplecpu"]  # baseline variants to run next to the toolkit
cpu_gib: float = 0.0  # CPU tier size in GiB, 0 for twice the trace's footprint
capacity_gib: list = [0.1, 0.2, 0.4, 0.8]  # CPU tier sizes of the capacity curve (cold + hot each), [] for none
url: str = None  # server engine: the vLLM server's base URL (http://HOST:PORT); None for dry and live
out_dir: str = ""  # where to write the results JSON and the run folder, empty for a temporary folder

# %%
import json
import tempfile
from dataclasses import replace
from pathlib import Path

import polars as pl

from toolkit.experiments import ExperimentConfig, run_experiment
from toolkit.experiments.plan import plan
from toolkit.experiments.run_bounds import folder_bounds
from toolkit.experiments.runner import execute
from toolkit.limits import path_component
from toolkit.models.presets import list_presets
from toolkit.notebooks_runner import captured_console, save_results
from toolkit.viz.experiments import group_boundary_figure, phase_hits_figure, ttft_cdf_figure, ttft_figure, with_bounds
from toolkit.viz.run_figures import (
    alignment_loss_figure,
    boundary_scatter_figure,
    capacity_curve_figure,
    hits_over_time_figure,
)
from toolkit.viz.style import show_table, sort_phases

if engine == "live" and model in list_presets():
    raise ValueError(
        f"model: {model!r} is a preset (dry engine only); the live engine runs a tiny model on CPU: "
        "model='tiny-qwen3-next', tp=1"
    )
root = Path(out_dir or tempfile.mkdtemp(prefix="kvtk-03-"))
run_dir = root / path_component(f"03_{engine}_{trace}")  # a trace spec may hold a colon and a path
config = ExperimentConfig.from_params(  # as `kvtk replay` and the sweep build theirs (0: vLLM's hash unit)
    {
        "engine": engine,
        "model": model,
        "tp": tp,
        "prefix_match_unit": prefix_match_unit,
        "device_gib": device_gib or None,
        "device_blocks": device_blocks or None,
        "trace": trace,
        "max_requests": max_requests or None,
        "baselines": tuple(baselines),
        "cpu_gib": cpu_gib or None,
        "url": url,
        "out": str(run_dir),
    }
)
with captured_console() as console:
    run_plan = plan(config)  # every check before anything heavy, as `kvtk replay` makes them
    result = execute(run_plan)
console.save(run_dir)
for notice in run_plan.notices:  # variants of this run that cannot differ, and why
    print(notice)
summary = result.summary
engine_desc = json.loads((run_dir / "params.json").read_text())["engine"]
kinds = engine_desc.get("group_kinds")
phases = sort_phases(with_bounds(result.phases, folder_bounds(run_dir)))
print(
    f"{engine} run of {trace} on {summary['model']}: hash block {summary['hash_block_tokens']}, scheduler block "
    f"{summary['scheduler_block_tokens']}, {summary['cpu_blocks']} CPU blocks "
    f"({summary['cpu_bytes'] / 2**30:.2f} GiB), {summary['elapsed_s']:.1f} s"
)
print(console.summary(result.paths["vllm_log"]))

# %% [markdown]
# ## The headline: time to first token, hot against cold
# Median TTFT per variant (dry: modelled on the virtual clock; live: measured). Hot hits come from the CPU tier, so
# the toolkit's hot phase should beat no_offload's, which recomputes what its reset device cache lost.

# %%
ttft = phases.filter(pl.col("phase").is_in(["cold", "hot", "replay"])).select(
    "variant",
    "phase",
    (pl.col("ttft_p50_s") * 1e3).alias("TTFT p50 (ms)"),
    (pl.col("ttft_p90_s") * 1e3).alias("TTFT p90 (ms)"),
    (pl.col("ttft_p99_s") * 1e3).alias("TTFT p99 (ms)"),
    (pl.col("queue_p99_s") * 1e3).alias("queue p99 (ms)"),
    (pl.col("e2e_p99_s") * 1e3).alias("e2e p99 (ms)"),
)
for (variant,), sub in ttft.group_by(["variant"], maintain_order=True):
    by_phase = dict(zip(sub["phase"], sub["TTFT p50 (ms)"]))
    if by_phase.get("cold") and by_phase.get("hot"):
        print(
            f"{variant:<12} TTFT p50: cold {by_phase['cold']:.2f} ms, hot {by_phase['hot']:.2f} ms "
            f"(hot/cold {by_phase['hot'] / by_phase['cold']:.2f})"
        )
show_table(ttft, "TTFT percentiles per variant and phase")

# %% [markdown]
# ## Hit tokens per phase against the bounds
# Bottom segment: CPU-tier hits, under the Belady marker; the whole hit (CPU tier + device) under the oracle. The
# pressure phase (unrelated traffic, recomputed by design) is left out here; it is in the timeline below.

# %%
phase_hits_figure(phases)

# %% [markdown]
# ## Capacity curve
# CPU-tier hit tokens of the hot phase against the CPU tier's size: one run (cold, then hot) per size and variant,
# each size with its own Belady bound. no_offload has no CPU tier, so it stays at zero.

# %%
points = [phases.with_columns(pl.lit(summary["cpu_bytes"] / 2**30).alias("cpu_gib"))]
for gib in capacity_gib:
    size_dir = root / path_component(f"03_capacity_{gib}")
    with captured_console():
        sized = run_experiment(replace(config, cpu_gib=gib, phases=("cold", "hot"), out=str(size_dir)))
    points.append(with_bounds(sized.phases, folder_bounds(size_dir)).with_columns(pl.lit(float(gib)).alias("cpu_gib")))
capacity = pl.concat(
    [
        p.select(
            "variant", "phase", "cpu_gib", "external_hit_tokens", "oracle_reusable_tokens", "belady_cpu_hit_tokens"
        )
        for p in points
    ]
)
capacity_curve_figure(capacity, phase="hot")

# %% [markdown]
# ## TTFT: distribution per variant
# The CDF shows every request (a slow first request cannot flatten the rest); the boxes per phase below it. Where
# TTFTs span two decades the time axis is logarithmic.

# %%
ttft_cdf_figure(result.requests)

# %%
ttft_figure(result.requests)

# %% [markdown]
# ## Per group: where the hits end
# Each request's hit boundary per cache group against its prompt length (hot phase, the toolkit), gridlines every
# scheduler block; then the mean per group and phase.

# %%
boundary_scatter_figure(
    result.requests,
    group_kinds=kinds,
    phase="hot",
    scheduler_block_tokens=summary["scheduler_block_tokens"],
    hash_block_tokens=summary["hash_block_tokens"],
)

# %%
group_boundary_figure(result.requests, group_kinds=kinds)

# %% [markdown]
# ## Hits over time
# CPU-tier hits of every request in the order the run served them: the pressure phase's unrelated traffic evicts
# part of the tier, and the replay shows what survived.

# %%
hits_over_time_figure(result.requests)

# %% [markdown]
# ## Tokens lost to alignment, per group
# How far past the last scheduler block each group's boundary reaches: tokens a hit allowed to stop only on
# scheduler blocks would recompute, which the toolkit's fine-grained hits (on hash units) keep.

# %%
alignment_loss_figure(result.requests, group_kinds=kinds, scheduler_block_tokens=summary["scheduler_block_tokens"])

# %% [markdown]
# ## Summary table

# %%
show_table(
    phases.select(
        "variant",
        "phase",
        "requests",
        "prompt_tokens",
        "local_hit_tokens",
        "external_hit_tokens",
        "recomputed_tokens",
        "oracle_reusable_tokens",
        "belady_cpu_hit_tokens",
        "hit_fraction_of_oracle",
    ),
    "Tokens per variant and phase",
)

# %% [markdown]
# ## Output identity (live engine)
# With the real engine each variant's outputs must equal the cold run's (greedy decoding); the dry engine
# produces no tokens.

# %%
if engine == "live":
    outputs = result.requests.select("variant", "phase", "request_id", "output_token_ids")
    cold = dict(
        zip(
            outputs.filter(pl.col("phase") == "cold")["request_id"],
            outputs.filter(pl.col("phase") == "cold")["output_token_ids"].to_list(),
        )
    )
    same = outputs.filter(pl.col("variant") != "corrupted_kv").with_columns(
        pl.struct("request_id", "output_token_ids")
        .map_elements(lambda r: cold.get(r["request_id"]) == r["output_token_ids"], return_dtype=pl.Boolean)
        .alias("identical")
    )
    print(same.group_by("variant", "phase", maintain_order=True).agg(pl.col("identical").all()))

# %% [markdown]
# ## Numbers checked by hand
# Every prompt token is either a device hit, a CPU hit or recomputed, in every phase; a CPU hit ends on a hash
# block, so the hot phase's CPU hits are a multiple of the hash block; and no achieved value exceeds its bound.

# %%
for row in phases.iter_rows(named=True):
    assert row["local_hit_tokens"] + row["external_hit_tokens"] + row["recomputed_tokens"] == row["prompt_tokens"], row
    assert row["local_hit_tokens"] + row["external_hit_tokens"] <= row["oracle_reusable_tokens"], row
    # Belady bounds every hit the two tiers can serve (device and CPU), so the order is total:
    assert row["local_hit_tokens"] + row["external_hit_tokens"] <= row["belady_cpu_hit_tokens"], row
    assert row["belady_cpu_hit_tokens"] <= row["oracle_reusable_tokens"], row
hot = phases.filter((pl.col("phase") == "hot") & (pl.col("variant") == "toolkit"))
if hot.height:
    assert hot["external_hit_tokens"][0] % summary["hash_block_tokens"] == 0, hot

# %%
save_results(
    out_dir, "03_cold_hot_replay", {"summary": summary, "phases": phases.to_dicts(), "capacity": capacity.to_dicts()}
)
