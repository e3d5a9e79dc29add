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
# # 05 · Copy bandwidth
#
# How fast do KV blocks move between the device pool and the host mirror, per copy backend and direction, and how
# does that fall off with block size? Each curve is a backend's GB/s for one batch of non-consecutive blocks; the
# dotted line is one **contiguous** copy of the same bytes between the same buffers, measured in the same run: the
# practical limit. Numbers come from `kvtk bench copy --json` (run here at a small size, or read from a file).

# %% tags=["parameters"]
results_json: str = ""  # a saved `kvtk bench copy --json` output, empty to run the benchmark here
device: str = "cpu"  # cpu or cuda
block_kib: list = [4, 16, 64, 256, 1024]  # block sizes in KiB
batch_mib: int = 32  # bytes per batch in MiB
repeats: int = 3  # best of this many runs
ids: str = "random"  # block id pattern to plot, random or consecutive
out_dir: str = ""  # where to write the results JSON, empty for none

# %%
import json
import subprocess
import sys
from pathlib import Path

import polars as pl

from toolkit.notebooks_runner import save_results
from toolkit.viz.bandwidth import bandwidth_frame, copy_bandwidth_figure
from toolkit.viz.style import show_table

if results_json:
    bench = json.loads(Path(results_json).read_text())
else:
    cmd = [
        sys.executable,
        "-m",
        "toolkit.cli.main",
        "bench",
        "copy",
        "--json",
        "--device",
        device,
        "--batch-mib",
        str(batch_mib),
        "--repeats",
        str(repeats),
        "--block-kib",
        *map(str, block_kib),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True)
    bench = json.loads(done.stdout)
rows = bandwidth_frame(bench)
print(
    f"{bench['device']}: {bench['batch_bytes'] >> 20} MiB per batch, best of {bench['repeats']}, "
    f"{rows.height} rows in {bench['seconds']:.1f} s; target: {bench.get('target', '-')}"
)

# %% [markdown]
# ## GB/s against block size

# %%
curves = rows.filter((pl.col("ids") == ids) & (pl.col("case") != "mixed"))
copy_bandwidth_figure(curves, title=f"Block copy bandwidth on {bench['device']} ({ids} ids)")

# %% [markdown]
# ## Ratio to the contiguous copy, and the mixed hybrid batch
# The mixed case is one block = 8 attention pages of 16 KiB + one 1 MiB state page.

# %%
show_table(
    rows.select(
        "case",
        "ids",
        "direction",
        "backend",
        "block_bytes",
        "num_blocks",
        pl.col("gbps").round(2),
        pl.col("contiguous_gbps").round(2),
        pl.col("ratio").round(2),
    ).sort("case", "ids", "direction", "backend"),
    "Every case (GB/s; ratio to the contiguous copy)",
)

# %% [markdown]
# ## Numbers checked by hand
# A batch of `batch_mib` MiB in blocks of 64 KiB is 32 x 1024 / 64 = 512 blocks at the default size (at least 8);
# the ratio is the backend's rate over the contiguous rate.

# %%
batch_bytes = bench["batch_bytes"]
for row in rows.filter(pl.col("case") != "mixed").iter_rows(named=True):
    assert row["num_blocks"] == max(8, batch_bytes // row["block_bytes"]), row
    assert abs(row["ratio"] - row["gbps"] / row["contiguous_gbps"]) < 1e-6 * max(1.0, row["ratio"]), row
if 64 in block_kib and batch_mib == 32:
    assert rows.filter(pl.col("block_bytes") == 64 * 1024)["num_blocks"][0] == 32 * 1024 // 64 == 512

# %%
best = (
    curves.group_by("direction", "block_bytes")
    .agg(pl.col("gbps").max(), pl.col("ratio").max())
    .sort("direction", "block_bytes")
)
save_results(
    out_dir,
    "05_copy_bandwidth",
    {"device": bench["device"], "batch_bytes": batch_bytes, "best": best.to_dicts(), "bench": bench},
)
show_table(best, "Best rate per direction and block size (GB/s)")
