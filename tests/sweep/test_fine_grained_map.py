"""The shipped fine-grained map: the spec is the grid `toolkit.viz.map_grid` builds, every cell validates, a few
cells really run at CI size, and the map's tables and figures read them."""

from __future__ import annotations

import polars as pl
import pytest

from toolkit.models.presets import data_dir
from toolkit.strict_load import yaml_loads
from toolkit.sweep import SweepOptions, load_spec, parse_spec, run_sweep
from toolkit.sweep.spec import validate_cells
from toolkit.viz import map_grid as mg
from toolkit.viz.map_figures import (
    gain_heatmap,
    gained_tokens_figure,
    map_table,
    per_request_gains,
    read_sweep,
    summary_table,
    zero_cells,
)

SPEC = data_dir() / "sweeps" / "fine-grained-map.yaml"
REPO = data_dir().parent
HAS_MOONCAKE = (REPO / mg.MOONCAKE.split(":", 1)[1]).is_file()


@pytest.fixture
def at_repo_root(monkeypatch):
    monkeypatch.chdir(REPO)  # the Mooncake cells name their trace relative to the repository root


def document() -> dict:
    return yaml_loads(SPEC.read_text(), str(SPEC))


def test_spec_expands_to_every_valid_corner_x_workload_x_tier(at_repo_root):
    corners = [v for v in mg.geometry_verdicts() if v["valid"]]
    # TP = DCP. Kimi-Linear's blocks (1,920 tokens at TP 1; attention 2,048 and KDA 1,024/512/256 at TP 2/4/8)
    # take hash 16 and 64 everywhere and 256 from DCP 2 on; the others' 528/1,312/544-token (and smaller) state
    # blocks take 16 only.
    assert len(corners) == 11 + 4 * 4
    cells = load_spec(SPEC).cells()
    assert len(cells) == len(corners) * len(mg.WORKLOADS) * len(mg.TIERS) == 216
    assert all(c.params["tp"] == c.params["dcp"] for c in cells)
    seen = {
        (
            c.params["model"],
            c.params["dcp"],
            c.params["prefix_match_unit"],
            mg.workload_label(c.params["trace"]),
            mg.tier_label(c.params.get("cpu_gib")),
        )
        for c in cells
    }
    assert len(seen) == len(cells)
    assert {s[3] for s in seen} == set(mg.WORKLOADS) and {s[4] for s in seen} == set(mg.TIERS)
    assert all(c.params["baselines"] == ["no_fine_grained", "simplecpu"] for c in cells)


@pytest.mark.skipif(not HAS_MOONCAKE, reason="the Mooncake trace is not in ../shared/traces/mooncake")
def test_shipped_spec_is_what_the_builder_writes(at_repo_root):
    assert document()["cells"] == mg.build_spec()["cells"]


def test_every_cell_validates(at_repo_root):
    cells = load_spec(SPEC).cells()
    if not HAS_MOONCAKE:
        cells = [c for c in cells if not c.params["trace"].startswith("mooncake:")]
    validate_cells(cells)


def test_tight_tier_is_a_quarter_of_the_distinct_blocks():
    from toolkit.workloads.resolve import resolve_trace

    # Two few-shot prompts of 2,000 + 100 tokens in 1,920-token blocks: one shared first block, two partial ones.
    trace = resolve_trace("fewshot:num_requests=2,prefix_tokens=2000,question_tokens=100")
    assert mg.distinct_prompt_blocks(trace, 1920) == 3
    # Kimi-Linear, DCP 1: 4 groups x one 15,482,880-byte block per 1,920 tokens; 48 requests -> 1 + 48 blocks;
    # a quarter: 12.25 blocks.
    spec, _ = mg.WORKLOADS["fewshot20"]
    assert mg.tight_cpu_gib("kimi-linear-48b-a3b", 1, spec, None) == float(f"{12.25 * 4 * 15_482_880 / 2**30:.3g}")


def test_refused_corners_carry_the_geometry_reason():
    verdicts = {(v["model"], v["dcp"], v["prefix_match_unit"]): v for v in mg.geometry_verdicts()}
    refused = verdicts[("nemotron-nano-9b-v2", 1, 64)]
    assert (
        not refused["valid"]
        and "hash block 64 does not divide group 0 (attn) block of 1312 tokens" in refused["reason"]
    )
    assert not verdicts[("kimi-linear-48b-a3b", 1, 256)]["valid"]
    assert verdicts[("kimi-linear-48b-a3b", 8, 256)]["reason"] == "fine-grained on"
    assert verdicts[("kimi-linear-48b-a3b", 8, 256)]["scheduler_block_tokens"] == 2_048


@pytest.mark.engine
def test_three_cells_run_serially_at_ci_size(tmp_path, at_repo_root):
    doc = document()
    pick = [
        i
        for i, c in enumerate(doc["cells"])
        if (c["model"], c["dcp"], c["prefix_match_unit"]) == ("kimi-linear-48b-a3b", 1, 64)
        and mg.workload_label(c["trace"]) in ("fewshot20", "agentic")
    ]
    small = mg.shrink_spec(doc, max_requests=6, cells=pick[:3])
    result = run_sweep(parse_spec(small), SweepOptions(out=tmp_path / "map", serial=True, progress=False, report=False))
    assert result.summary["done"] == 3 and result.summary["failed"] == 0
    results, requests = read_sweep(tmp_path / "map")
    table = map_table(results)
    assert table.height == 3 and set(table["workload"]) <= {"fewshot20", "agentic"}
    fewshot = table.filter((pl.col("workload") == "fewshot20") & (pl.col("tier") == "ample"))
    if fewshot.height:
        # hand-derived: (2,099 // 64) * 64 - (2,099 // 1,920) * 1,920 = 128 tokens a request, 6 requests
        assert fewshot["gain_vs_off"][0] == 6 * 128
    gains = per_request_gains(requests)
    assert gains.height == 3 * 6 or gains.height == sum(
        results.filter((pl.col("phase") == "hot") & (pl.col("variant") == "toolkit"))["requests"]
    )
    assert gains["gained_vs_off"].min() >= 0
    for fig in (gain_heatmap(table), gained_tokens_figure(gains)):
        assert fig.data
    assert summary_table(table).height >= 1


def test_tables_and_figures_on_a_synthetic_frame():
    rows = []
    for cell, (model, unit, workload, tier, on, off) in enumerate(
        [("kimi-linear-48b-a3b", 64, "fewshot20", "ample", 52, 180), ("qwen3.5-4b", 16, "longdoc", "tight", 100, 100)]
    ):
        trace = mg.WORKLOADS[workload][0]
        for variant, recomputed in (("toolkit", on), ("no_fine_grained", off), ("simplecpu", off)):
            rows.append(
                {
                    "cell_id": f"c{cell}",
                    "variant": variant,
                    "phase": "hot",
                    "model": model,
                    "dcp": 1,
                    "prefix_match_unit": unit,
                    "trace": trace,
                    "cpu_gib": 1.0 if tier == "tight" else None,
                    "prompt_tokens": 2100,
                    "oracle_reusable_tokens": 2048,
                    "external_hit_tokens": 2100 - recomputed,
                    "recomputed_tokens": recomputed,
                    "hit_fraction_of_oracle": (2100 - recomputed) / 2048,
                    "ttft_p50_s": 0.1,
                    "ttft_p90_s": 0.2,
                }
            )
    table = map_table(pl.DataFrame(rows))
    assert table["gain_vs_off"].to_list() == [128, 0] and table["tier"].to_list() == ["ample", "tight"]
    zeros = zero_cells(
        table,
        [
            {
                "model": "gpt-oss-20b",
                "dcp": 1,
                "prefix_match_unit": 16,
                "valid": True,
                "fine_grained": False,
                "reason": "fine-grained off: sliding window",
            }
        ],
    )
    assert zeros["reason"].to_list() == [
        "fine-grained off: sliding window",
        "tight CPU tier: the partial blocks a fine-grained hit needs were evicted first",
    ]
    assert gain_heatmap(table).data[0].type == "heatmap"
