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
# # 01 · Block geometry of hybrid models
#
# A hybrid model's KV cache is split into **groups** (full attention, sliding window, Mamba/GDN state). Each group
# has its own **resolved block** in tokens; the **scheduler block** is their LCM (a local prefix must end on one
# before an external hit starts); the **hash block** is the prefix-match unit. A CPU hit may stop on a hash
# boundary inside a scheduler block (**fine-grained**) only under the conditions of `HybridGeometry.fine_grained`.
#
# This notebook sweeps the model presets in `data/models/` over DCP sizes and hash units, shows where the scheduler
# block (the LCM) blows up, and where fine-grained hits pay: with vLLM's default hash unit (the whole hybrid block)
# every configuration is block-aligned; a small hash unit (16) lets a CPU hit stop inside the scheduler block.

# %% tags=["parameters"]
presets: list = []  # preset names, empty for every preset in data/models
dcps: list = [1, 2, 4, 8]  # decode-context-parallel sizes to sweep
hash_units: list = [0, 16, 64]  # hash block tokens, 0 for the vLLM default (GCD of the group blocks)
platform: str = "cuda"  # attention backend rules, cuda or cpu
out_dir: str = ""  # where to write the results JSON, empty for none

# %%
import polars as pl

from toolkit.models.presets import geometry_from_preset, list_presets, load_preset
from toolkit.notebooks_runner import save_results
from toolkit.viz.geometry import geometry_sweep, geometry_table, group_blocks_figure, scheduler_block_figure
from toolkit.viz.geometry_matrix import geometry_matrix_figure, matrix_frame
from toolkit.viz.style import show_table

names = presets or list_presets()
summary, groups = geometry_sweep(names, dcps=dcps, hash_units=[h or None for h in hash_units], platform=platform)
ok = summary.filter(pl.col("error").fill_null("") == "")
print(f"{len(names)} presets, {ok.height} valid configurations, {summary.height - ok.height} rejected")

# %% [markdown]
# ## Where fine-grained hits pay: preset x (DCP, hash unit)
# Per configuration: the scheduler block, the hit alignment (where a CPU hit may stop) and, where fine-grained hits
# are possible, the tokens a hash-aligned hit saves over a block-aligned one (up to `scheduler block - hash block`,
# half that on average).

# %%
geometry_matrix_figure(summary)

# %% [markdown]
# ## Every configuration
# Bytes per block are the largest group page (one block id owns a row in every group's tensor).

# %%
geometry_table(ok.sort("preset", "dcp", "hash_unit", maintain_order=True))

# %% [markdown]
# ## Resolved block per group
# Attention blocks are raised until one attention page holds a whole state page, so hybrid models get blocks of
# hundreds of tokens; DCP multiplies full-attention blocks but not state blocks.

# %%
group_blocks_figure(
    groups.filter(pl.col("dcp").is_in([min(dcps), max(dcps)])).unique(
        ["preset", "dcp", "group_id"], keep="first", maintain_order=True
    )
)

# %% [markdown]
# ## Where the LCM blows up
# The scheduler block is the LCM of the group blocks. With DCP the full-attention block grows while state blocks do
# not, so the scheduler block grows with DCP; a fine-grained hit keeps the hit alignment at the hash block.

# %%
scheduler_block_figure(ok)

# %%
blow_up = (
    ok.group_by("preset")
    .agg(
        pl.col("scheduler_block_tokens").max().alias("max_scheduler_block"),
        pl.col("hash_blocks_per_scheduler_block").max().alias("max_hash_blocks_per_scheduler_block"),
    )
    .sort("max_hash_blocks_per_scheduler_block", descending=True)
)
show_table(blow_up, "The largest scheduler block per preset (tokens, and in hash blocks)")

# %% [markdown]
# ## Rejected configurations (and why)

# %%
show_table(
    summary.filter(pl.col("error").fill_null("") != "").select("preset", "dcp", "hash_block_tokens", "error"),
    "Rejected configurations, with the full reason",
)

# %% [markdown]
# ## A number checked by hand: Qwen3-Next-80B's attention block on CUDA
# Full attention: 2 KV heads x 256 head dim x 2 (K and V) x 2 bytes = **2048 bytes per token per layer**.
# GDN state per layer: conv state (16·128·2 + 32·128 = 8192 channels) x (kernel 4 - 1) x 2 bytes = 49 152 bytes,
# plus the recurrent state 32 heads x 128 x 128 x 2 bytes = 1 048 576 bytes: **1 097 728 bytes**.
# One attention block must hold a state page: 1 097 728 / 2048 = 536 tokens, rounded up to the 16-token kernel
# block: **544 tokens**. Twelve layers per group give 544 x 2048 x 12 = **13 369 344 bytes per block**.

# %%
hand_block_tokens = -(-((16 * 128 * 2 + 32 * 128) * 3 * 2 + 32 * 128 * 128 * 2) // (2048 * 16)) * 16
geo = geometry_from_preset(load_preset("qwen3-next-80b-a3b"), platform="cuda")
assert hand_block_tokens == 544, hand_block_tokens
assert geo.group_block_tokens[0] == hand_block_tokens, (geo.group_block_tokens, hand_block_tokens)
assert geo.block_bytes == 544 * 2048 * 12, geo.block_bytes
print(f"qwen3-next-80b-a3b: attention block {geo.group_block_tokens[0]} tokens, {geo.block_bytes} bytes per block")
# The matrix: at DCP 1 with hash unit 16 a fine-grained hit saves up to 544 - 16 = 528 tokens per hit.
matrix = matrix_frame(summary)
cell = matrix.filter((pl.col("preset") == "qwen3-next-80b-a3b") & (pl.col("dcp") == 1) & (pl.col("hash_unit") == 16))
if cell.height:
    assert cell["status"][0] == "fine-grained" and cell["max_saved_tokens"][0] == 544 - 16, cell

# %%
save_results(
    out_dir,
    "01_block_geometry",
    {
        "num_presets": len(names),
        "num_configurations": ok.height,
        "num_rejected": summary.height - ok.height,
        "qwen3_next_80b_block_tokens": geo.group_block_tokens[0],
        "qwen3_next_80b_block_bytes": geo.block_bytes,
        "summary": ok.to_dicts(),
        "matrix": matrix_frame(summary).select("preset", "dcp", "hash_unit", "status", "max_saved_tokens").to_dicts(),
    },
)
