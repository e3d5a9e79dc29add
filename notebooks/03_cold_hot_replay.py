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
# and as a **replay**. Hits per phase are set against the **oracle** (an infinite tier) and **Belady** (optimal
# eviction at the same capacity). `engine="dry"` drives vLLM's real scheduler with no model; `"live"` runs the
# real engine on a tiny model (slow on CPU). With the dry engine `model` may also be a preset of `data/models`
# (e.g. `qwen3-next-80b-a3b` with `tp=4`, `prefix_match_unit=16`): its real KV layout, and TTFT modelled by the
# step-time model on an H200 (`toolkit/experiments/step_time.py`).

# %% tags=["parameters"]
engine: str = "dry"  # dry or live
model: str = "tiny-qwen3-next"  # a tiny model, or (dry engine) a model preset of data/models
tp: int = 1  # dry engine, presets: tensor-parallel size
prefix_match_unit: int = 128  # vLLM's hash unit; must divide the model's hybrid block (16 for Qwen3-Next at TP4)
trace: str = "fewshot-small"  # a trace in data/traces or a workload name
baselines: list = []  # baseline variants to run next to the toolkit
cpu_gib: float = 0.0  # CPU tier size in GiB, 0 for twice the trace's footprint
out_dir: str = ""  # where to write the results JSON and the run folder, empty for a temporary folder

# %%
import tempfile
from pathlib import Path

import polars as pl

from toolkit.experiments import ExperimentConfig, run_experiment
from toolkit.notebooks_runner import save_results
from toolkit.viz.experiments import group_boundary_figure, phase_hits_figure, ttft_figure

run_dir = Path(out_dir or tempfile.mkdtemp(prefix="kvtk-03-")) / f"03_{engine}_{trace}"
result = run_experiment(ExperimentConfig(engine=engine, model=model, tp=tp, prefix_match_unit=prefix_match_unit,
                                         trace=trace, baselines=tuple(baselines), cpu_gib=cpu_gib or None,
                                         out=str(run_dir)))
summary = result.summary
print(f"{engine} run of {trace} on {summary['model']}: hash block {summary['hash_block_tokens']}, scheduler block "
      f"{summary['scheduler_block_tokens']}, {summary['cpu_blocks']} CPU blocks, {summary['elapsed_s']:.1f} s")
print(f"vLLM's own log (INFO and above; only its warnings are shown here): {result.paths['vllm_log']}")

# %% [markdown]
# ## Hit tokens per phase against the bounds

# %%
phase_hits_figure(result.phases)

# %% [markdown]
# ## Per group: where the hits end

# %%
group_boundary_figure(result.requests)

# %% [markdown]
# ## TTFT
# Live: measured. Dry: modelled on the virtual clock (queueing, each step's compute from the model's layer shapes,
# CPU-tier loads at PCIe speed), so a hot phase served from the CPU tier shows its real advantage.

# %%
ttft_figure(result.requests)

# %%
result.phases.select("variant", "phase", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "queue_p99_s", "e2e_p99_s")

# %% [markdown]
# ## Summary table

# %%
result.phases.select("variant", "phase", "requests", "prompt_tokens", "local_hit_tokens", "external_hit_tokens",
                     "recomputed_tokens", "oracle_reusable_tokens", "belady_hit_tokens", "hit_fraction_of_oracle",
                     "median_ttft_s")

# %% [markdown]
# ## Output identity (live engine)
# With the real engine each variant's outputs must equal the cold run's (greedy decoding); the dry engine
# produces no tokens.

# %%
if engine == "live":
    outputs = result.requests.select("variant", "phase", "request_id", "output_token_ids")
    cold = dict(zip(outputs.filter(pl.col("phase") == "cold")["request_id"],
                    outputs.filter(pl.col("phase") == "cold")["output_token_ids"].to_list()))
    same = outputs.filter(pl.col("variant") != "corrupted_kv").with_columns(
        pl.struct("request_id", "output_token_ids").map_elements(
            lambda r: cold.get(r["request_id"]) == r["output_token_ids"], return_dtype=pl.Boolean).alias("identical"))
    print(same.group_by("variant", "phase").agg(pl.col("identical").all()))

# %% [markdown]
# ## Numbers checked by hand
# Every prompt token is either a device hit, a CPU hit or recomputed, in every phase; and a CPU hit ends on a hash
# block, so the hot phase's CPU hits are a multiple of the hash block.

# %%
for row in result.phases.iter_rows(named=True):
    assert row["local_hit_tokens"] + row["external_hit_tokens"] + row["recomputed_tokens"] == row["prompt_tokens"], row
hot = result.phases.filter((pl.col("phase") == "hot") & (pl.col("variant") == "toolkit"))
if hot.height:
    assert hot["external_hit_tokens"][0] % summary["hash_block_tokens"] == 0, hot

# %%
save_results(out_dir, "03_cold_hot_replay", {"summary": summary, "phases": result.phases.to_dicts()})
