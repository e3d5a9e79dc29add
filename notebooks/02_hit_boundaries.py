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
# # 02 · Hit boundaries per group
#
# For a trace and a geometry, where does each cache group's cached **boundary** stand for a request, and where
# does the **joint hit** (the boundary every group agrees on) stop, and why? The core `OffloadManager` runs the
# trace twice on the core's engine simulator: once with **fine-grained** hits (a hit may end on any hash block)
# and once **block-aligned** (hits end on scheduler blocks, the LCM of the group blocks).
#
# Lanes run along the token axis: grey is the prompt, blue the group's boundary, the red tick the joint hit; the
# label names the group's miss reason (`toolkit.core.lookup.hybrid.MissReason`).

# %% tags=["parameters"]
groups: str = "full_attention:16,sliding_window:16/32,mamba_align:64"  # kind:block[/window] per group
hash_block_tokens: int = 16  # prefix-match unit in tokens
num_requests: int = 8  # requests of the synthetic trace (repeats, shared prefixes, fresh prompts)
segment_tokens: int = 40  # tokens per shared segment (a prompt is one to three segments)
num_cpu_blocks: int = 40  # CPU pool size in blocks, shared by all groups
num_steps: int = 40  # engine steps to run
out_dir: str = ""  # where to write the results JSON, empty for none

# %%
import polars as pl

from toolkit.core import HybridGeometry, parse_groups_spec
from toolkit.notebooks_runner import save_results
from toolkit.viz.boundaries import boundary_lanes_figure
from toolkit.viz.recorder import record_synthetic_run
from toolkit.viz.state_model import CacheStateModel
from toolkit.viz.style import show_table

geo = HybridGeometry(groups=parse_groups_spec(groups), hash_block_tokens=hash_block_tokens)
print(
    f"group blocks {geo.group_block_tokens}, hash block {geo.hash_tokens}, scheduler block "
    f"{geo.scheduler_block_tokens}, fine-grained: {geo.fine_grained.enabled} {geo.fine_grained.reason}"
)

rows = []
for mode, fine in (("fine-grained", True), ("block-aligned", False)):
    run = record_synthetic_run(
        None,
        groups=groups,
        hash_block_tokens=hash_block_tokens,
        num_requests=num_requests,
        segment_tokens=segment_tokens,
        num_cpu_blocks=num_cpu_blocks,
        num_steps=num_steps,
        fine_grained=fine,
    )
    rows += [{**r, "mode": mode} for r in CacheStateModel(run).all_boundary_rows()]
lanes = pl.DataFrame(rows)

# %% [markdown]
# ## Boundaries and joint hit, fine-grained vs block-aligned
# Dark gridlines every scheduler block, light ones every hash block.

# %%
boundary_lanes_figure(lanes, scheduler_block_tokens=geo.scheduler_block_tokens, hash_block_tokens=geo.hash_tokens)

# %% [markdown]
# ## Joint hit per request
# Requests that repeat or extend an earlier prompt should hit. Fine-grained hits can end where an earlier prompt
# ended (its tail hand-off), block-aligned ones only on scheduler blocks; the two runs also differ in timing (a hit
# is loaded instead of computed), so later requests can see different pools.

# %%
joint = (
    lanes.group_by("req_id", "mode", maintain_order=True)
    .agg(
        pl.col("joint_hit_tokens").first(),
        pl.col("prompt_tokens").first(),
        pl.col("miss_reason").filter(pl.col("miss_reason") != "").unique().sort().str.join(", ").alias("why"),
    )
    .pivot(on="mode", index=["req_id", "prompt_tokens"], values="joint_hit_tokens")
)
show_table(joint, "Joint hit per request and mode (tokens)")

# %% [markdown]
# ## A number checked by hand
# `r0-A` is one 40-token segment. Its last hash boundary is floor(40 / 16) x 16 = **32**: the engine hands off the
# Mamba state there (the prompt's tail) and attention and window blocks cover it. `r1-AB` extends that prompt, so
# fine-grained its joint hit is **32**. Block-aligned a hit must end on the scheduler block, LCM(16, 16, 64) = 64,
# and floor(32 / 64) x 64 = **0**: no hit at all.


# %%
def joint_hit(req_id, mode):
    row = lanes.filter((pl.col("req_id") == req_id) & (pl.col("mode") == mode))
    return row["joint_hit_tokens"][0]


if num_requests >= 2 and segment_tokens == 40 and hash_block_tokens == 16 and geo.scheduler_block_tokens == 64:
    assert joint_hit("r1-AB", "fine-grained") == 40 // 16 * 16 == 32
    assert joint_hit("r1-AB", "block-aligned") == 32 // 64 * 64 == 0
    print("hand-derived joint hits match: fine-grained 32, block-aligned 0")

# %%
save_results(
    out_dir,
    "02_hit_boundaries",
    {
        "scheduler_block_tokens": geo.scheduler_block_tokens,
        "fine_grained": geo.fine_grained.enabled,
        "joint_hits": joint.to_dicts(),
    },
)
