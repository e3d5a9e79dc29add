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
# # 04 · Cache-state visualizer
#
# Step through a recorded run of the offload manager: the CPU pool per group (evictable in LRU order, pinned by a
# load in flight, stores in flight, free), the selected request's cached boundary per group with the joint hit, and
# the step's events (stores, loads, hand-offs, drops with their reasons).
#
# A recording is a JSON Lines file, schema `kvtk.cache_state/1` (see `toolkit/viz/recording.py`). `run_dir` opens a
# run folder of your own: `kvtk replay --record-cache-state` (dry or live engine) writes its `cache_state.jsonl`
# (`kvtk notebooks --only 04 -p run_dir runs/<run>`). With `run_dir` and `recording` empty this notebook records a
# synthetic run: the core `OffloadManager` driven by the core's engine simulator over the device-pool model
# (`toolkit.viz.recorder`); `data/runs/handmade_cache_state.jsonl` is a small hand-made one.

# %% tags=["parameters"]
run_dir: str = ""  # a kvtk replay run folder recorded with --record-cache-state, empty for none
recording: str = ""  # path of a .jsonl recording, empty to record a synthetic run (when run_dir is empty too)
synthetic_steps: int = 30  # steps of the synthetic run (when one is recorded)
start_step: int = -1  # step shown first; -1: the busiest (most blocks moved), also what the HTML report shows
out_dir: str = ""  # where to write the results JSON, empty for none

# %%
from pathlib import Path

from toolkit.locations import data_dir
from toolkit.notebooks_runner import save_results
from toolkit.viz.recorder import record_synthetic_run
from toolkit.viz.recording import dump_recording
from toolkit.viz.state_model import CacheStateModel
from toolkit.viz.widget import CacheStateWidget

HANDMADE = data_dir() / "runs" / "handmade_cache_state.jsonl"
if run_dir:  # a kvtk replay run folder: its cache_state.jsonl
    model = CacheStateModel.from_run_dir(run_dir)
    source = f"{model.recording.header['source']} (run folder {run_dir})"
elif recording:
    source = recording
    model = CacheStateModel.from_path(recording)
else:  # the core OffloadManager driven by SimEngine over the device-pool model, through a synthetic trace
    run = record_synthetic_run(None, num_steps=synthetic_steps)
    source = run.header["source"]
    if out_dir:
        dump_recording(run, Path(out_dir) / "synthetic_cache_state.jsonl")
    model = CacheStateModel(run)
print(f"{source}: {model.num_steps} steps, groups {model.group_names}, {len(model.request_ids)} requests")
if model.recording.header.get("truncated"):
    print(model.recording.header["truncated"])

# %% [markdown]
# ## The visualizer
# Drag the slider, press play, or step with the buttons; pick a request to see its boundaries. The framed text
# states the step and each group's pool counts.

# %%
widget = CacheStateWidget(model)
if start_step < 0:
    widget.show_busiest_step()  # the report's static snapshot shows this step, not step 0 (an empty pool)
else:
    widget.slider.value = min(start_step, model.num_steps - 1)
widget

# %% [markdown]
# ## Occupancy over the whole run (static, also in the HTML report)

# %%
from toolkit.viz.pool import occupancy_timeline_figure

occupancy_timeline_figure(model.timeline_rows(), capacity=model.view().num_cpu_blocks)

# %% [markdown]
# ## A number checked by hand (the hand-made recording)
# The CPU pool has 19 blocks shared by every group. Requests r0 (96 tokens) and r1 (128 tokens, sharing 64) leave
# 96/16 + 32/16 = 8 attention blocks, as many sliding-window blocks and 2 GDN states: 18 used, 1 free. r2's 64-token
# prompt needs 64/16 = 4 attention + 4 window blocks + 1 state = 9 blocks, so step 6 evicts 9 - 1 = 8 blocks (the
# least recently used attention and window blocks), and r0, looked up again at step 7, misses on attention.

# %%
hand = CacheStateModel.from_path(HANDMADE)
evicted = sum(len(e["block_ids"]) for e in hand.view(6).events if e["kind"] == "drop")
assert evicted == (96 // 16 + 32 // 16) * 2 + 2 + (64 // 16 * 2 + 1) - 19 == 8, evicted
hand.select("r0")
assert hand.view(7).request.joint_hit_tokens == 0 and hand.view(7).request.limiting_group_ids == (0,)
for k in range(model.num_steps):  # the pool never loses a block
    v = model.view(k)
    assert sum(p.num_used_blocks for p in v.pools) + v.num_free_blocks == v.num_cpu_blocks, k

# %%
final = model.view(model.num_steps - 1)
save_results(
    out_dir,
    "04_cache_state",
    {
        "recording": str(source),
        "num_steps": model.num_steps,
        "shown_step": model.step,
        "busiest_step": model.busiest_step(),
        "groups": model.group_names,
        "final_used_blocks": {p.name: p.num_used_blocks for p in final.pools},
        "final_free_blocks": final.num_free_blocks,
        "num_events": sum(len(model.view(k).events) for k in range(model.num_steps)),
    },
)
