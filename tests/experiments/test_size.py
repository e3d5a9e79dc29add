"""`kvtk size`: the tier size that reaches 50/90/99% of an infinite tier's CPU-tier tokens.

The search on known curves (plain functions of the size: no engine), then the command on a tiny Mooncake-format
slice (the tiny model, a 16-block device cache, a handful of dry runs), then bad input: one line, exit 2, no folder.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from toolkit.cli.main import main
from toolkit.experiments.report_size import format_size_table, headline, notes
from toolkit.experiments.sizing import SizePoint, search

DEVICE_BLOCKS = 16


def curve(tokens_at, blocks_per_gib: float = 100.0):
    """A measure function over a known curve; records the sizes asked for."""
    asked: list[float] = []

    def measure(gib: float) -> SizePoint:
        asked.append(gib)
        return SizePoint(gib, tokens_at(gib), int(gib * blocks_per_gib), DEVICE_BLOCKS, f"run-{len(asked)}")

    return measure, asked


def test_each_answer_reaches_its_target_and_the_size_below_it_misses_within_the_tolerance():
    measure, asked = curve(lambda gib: int(min(gib, 64.0) * 1_000))  # linear up to 64 GiB, flat above
    infinite = SizePoint(256.0, 64_000, 25_600, DEVICE_BLOCKS, "inf")
    found = search(measure, infinite, min_gib=0.01, tolerance=0.1, max_runs=30)
    assert len(found.points) == len(asked) + 1 <= 30
    for answer, exact_gib in zip(found.answers, (32.0, 57.6, 63.36)):
        assert answer.reached is not None and answer.short is not None
        assert answer.reached.cpu_tier_tokens >= answer.target_tokens > answer.short.cpu_tier_tokens
        assert answer.short.tier_gib < exact_gib <= answer.reached.tier_gib <= exact_gib * 1.1
        assert answer.bracket_ratio is not None and answer.bracket_ratio <= 1.1
    assert not found.hit_run_cap


def test_the_run_cap_bounds_the_search_and_says_so():
    measure, asked = curve(lambda gib: int(min(gib, 64.0) * 1_000))
    infinite = SizePoint(256.0, 64_000, 25_600, DEVICE_BLOCKS, "inf")
    found = search(measure, infinite, min_gib=0.01, tolerance=0.01, max_runs=6)
    assert len(found.points) == 6 and found.hit_run_cap
    assert any("stopped at --max-runs 6" in line for line in notes(found, "cold"))


def test_no_reuse_beyond_the_device_is_said_and_no_size_is_searched():
    measure, asked = curve(lambda gib: 0)
    found = search(measure, SizePoint(8.0, 0, 800, DEVICE_BLOCKS, "inf"), min_gib=0.01)
    assert asked == [] and all(a.reached is None for a in found.answers)
    assert "no tier size helps" in format_size_table(found, "cold")


def test_the_infinite_tier_is_set_against_the_oracle():
    measure, _ = curve(lambda gib: int(min(gib, 2.0) * 150))
    infinite = SizePoint(8.0, 300, 800, DEVICE_BLOCKS, "inf", oracle_tokens=1_000, device_hit_tokens=600)
    line = next(n for n in notes(search(measure, infinite, min_gib=0.01), "cold") if n.startswith("the oracle"))
    assert "reuses 1,000 tokens" in line and "leaves 400 to a tier" in line and "serves 300 (75.0% of them)" in line


def test_a_tier_below_the_device_cache_is_warned_about():
    # 10 blocks per GiB: the 50% answer (about 1 GiB, 10 blocks) holds fewer blocks than the 16-block device.
    measure, _ = curve(lambda gib: int(min(gib, 2.0) * 1_000), blocks_per_gib=10.0)
    found = search(measure, SizePoint(8.0, 2_000, 80, DEVICE_BLOCKS, "inf"), min_gib=0.01)
    lines = [line for line in notes(found, "cold") if line.startswith("warning: at 50%")]
    assert len(lines) == 1 and "(10 at 50%) than the device cache (16)" in lines[0]
    assert "90%" not in lines[0]  # 90% of 2,000 tokens needs 1.8 GiB: 18 blocks, more than the device's 16


def test_a_disk_is_sized_against_the_dram_ceiling_and_a_share_it_cannot_reach_has_no_answer():
    # The disk below a fixed DRAM tier reaches at most 80% of what DRAM holding the trace serves.
    measure, asked = curve(lambda gib: int(min(gib, 16.0) * 50), blocks_per_gib=0.5)  # DRAM below the device
    ceiling = SizePoint(64.0, 1_000, 6_400, DEVICE_BLOCKS, "ceiling")
    base = SizePoint(1.0, 100, 100, DEVICE_BLOCKS, "dram alone")
    found = search(measure, measure(64.0), min_gib=0.01, ceiling=ceiling, base=base, max_runs=30)
    fifty, ninety = found.answers[0], found.answers[1]
    assert fifty.target_tokens == 500 and fifty.reached is not None and 10.0 <= fifty.reached.tier_gib <= 11.0
    assert ninety.reached is None  # 900 tokens: more than the largest disk's 800
    lines = notes(found, "cold")
    assert any(line.startswith("no disk size reaches 90%, 99%") for line in lines)
    assert any("1 GiB of DRAM alone serves 100 (10.0%)" in line for line in lines)
    assert "disk GiB" in format_size_table(found, "cold")
    assert any(line.endswith("comes through the disk below it") for line in lines)
    assert not any(line.startswith("warning:") for line in lines)  # the DRAM is fixed: nothing to warn about


def test_a_target_the_fixed_tiers_reach_alone_is_answered_without_searching_below():
    # DRAM and disk alone serve 600 of the ceiling's 1,000: 50% needs no store, 90% does (a store of 9+ GiB).
    measure, asked = curve(lambda gib: 600 + int(min(gib, 20.0) * 20))
    ceiling = SizePoint(64.0, 1_000, 6_400, DEVICE_BLOCKS, "ceiling")
    base = SizePoint(1.0, 600, 100, DEVICE_BLOCKS, "dram and disk alone")
    found = replace(
        search(measure, measure(64.0), min_gib=0.01, ceiling=ceiling, base=base, fractions=(0.5, 0.9)),
        tier="store",
        above="1 GiB of DRAM and a 4 GiB disk",
    )
    fifty, ninety = found.answers
    assert fifty.reached is not None and fifty.reached.tier_gib == 0 and fifty.short is None
    assert ninety.reached is not None and 15.0 <= ninety.reached.tier_gib <= 16.5
    assert min(asked) == 8.0  # the halving stopped below 900, not chasing the 500 the tiers above already serve
    lines = notes(found, "cold")
    assert "50%: reached by 1 GiB of DRAM and a 4 GiB disk alone, with no store" in lines
    assert not any("reached by the smallest size tried" in line for line in lines)
    assert "50% with no store" in headline(found, "cold") and "90% at " in headline(found, "cold")


def write_slice(path: Path) -> Path:
    """8 requests in two families of shared 512-token prefix blocks, each with an own block."""
    lines = []
    for i in range(8):
        ids = ([0, 1, 2] if i % 2 else [5, 6]) + [100 + i]
        lines.append({"timestamp": i * 200, "input_length": len(ids) * 512 - 64, "output_length": 4, "hash_ids": ids})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.mark.engine
def test_kvtk_size_prints_the_table_and_its_answers_are_the_runs_own_numbers(tmp_path, capsys):
    out = tmp_path / "size"
    argv = ["size", "--trace", str(write_slice(tmp_path / "slice.jsonl")), "--device-blocks", str(DEVICE_BLOCKS)]
    assert main([*argv, "--targets", "50,99", "--tolerance-pct", "40", "--max-runs", "4", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "target % of infinite" in printed and "falls short at GiB" in printed and "the oracle (an" in printed
    document = json.loads((out / "size.json").read_text())
    assert 2 <= len(document["points"]) <= 4
    for point in document["points"]:  # every point is a finished run folder whose cold phase says the same
        summary = json.loads((Path(point["run_dir"]) / "summary.json").read_text())
        cold = next(p for p in summary["phases"] if p["phase"] == "cold")
        assert cold["external_hit_tokens"] == point["cpu_tier_tokens"]
    infinite = document["infinite"]["cpu_tier_tokens"]
    assert infinite > 0  # the 16-block device evicts, so the tier serves the trace's shared prefixes
    for answer in document["answers"]:
        assert answer["reached"]["cpu_tier_tokens"] >= answer["fraction"] * infinite
        if answer["short"] is not None:
            assert answer["short"]["cpu_tier_tokens"] < answer["fraction"] * infinite
    assert 'id="fig-size"' in (out / "report.html").read_text()


@pytest.mark.engine
def test_kvtk_size_tier_disk_sizes_a_disk_below_a_dram_tier(tmp_path, capsys):
    out = tmp_path / "size-disk"
    argv = ["size", "--trace", str(write_slice(tmp_path / "slice.jsonl")), "--device-blocks", str(DEVICE_BLOCKS)]
    argv += ["--tier", "disk", "--cpu-gib", "0.003", "--disk-load-rule", "always", "--targets", "50"]
    assert main([*argv, "--max-runs", "3", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "disk GiB" in printed and "0.003 GiB of DRAM alone serves" in printed
    document = json.loads((out / "size.json").read_text())
    assert document["ceiling"]["run_dir"].endswith("00-infinite") and document["base"]["tier_gib"] == 0.003
    for point in document["points"]:  # each a run with the DRAM tier fixed and its disk of the size recorded
        config = json.loads((Path(point["run_dir"]) / "params.json").read_text())["config"]
        assert float(config["cpu_gib"]) == 0.003 and float(config["disk_gib"]) == point["tier_gib"]


@pytest.mark.engine
def test_kvtk_size_tier_store_sizes_a_store_below_dram_and_a_disk(tmp_path, capsys):
    out = tmp_path / "size-store"
    argv = ["size", "--trace", str(write_slice(tmp_path / "slice.jsonl")), "--device-blocks", str(DEVICE_BLOCKS)]
    argv += ["--tier", "store", "--cpu-gib", "0.003", "--disk-gib", "0.002", "--disk-load-rule", "always"]
    assert main([*argv, "--targets", "50", "--max-runs", "3", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "store GiB" in printed and "0.003 GiB of DRAM and a 0.002 GiB disk alone serve" in printed
    document = json.loads((out / "size.json").read_text())
    assert document["ceiling"]["run_dir"].endswith("00-infinite")
    base = json.loads((Path(document["base"]["run_dir"]) / "params.json").read_text())["config"]
    assert base.get("store_gib") is None and float(base["disk_gib"]) == 0.002  # the tiers above alone
    for point in document["points"]:  # each a run with DRAM and disk fixed and its store of the size recorded
        config = json.loads((Path(point["run_dir"]) / "params.json").read_text())["config"]
        assert float(config["cpu_gib"]) == 0.003 and float(config["disk_gib"]) == 0.002
        assert float(config["store_gib"]) == point["tier_gib"] >= 1 / 64  # the smallest store a run takes


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--cpu-gib", "4"], "--cpu-gib 4: kvtk size finds the tier size"),
        (["--tp", "1,2"], "--tp 1,2: kvtk size takes one value"),
        (["--engine", "live"], "--engine live: kvtk size runs the dry engine"),
        (["--targets", "50,150"], "--targets 50,150: each in (0, 100]"),
        (["--tolerance-pct", "0"], "--tolerance-pct 0: must be in (0, 100]"),
        (["--tier", "disk"], "--tier disk: give the DRAM tier above the disk with --cpu-gib"),
        (["--disk-gib", "64"], "--disk-gib 64: kvtk size finds sizes"),
        (["--tier", "store", "--cpu-gib", "4"], "--tier store: give the disk tier above the store with --disk-gib"),
        (["--tier", "store", "--cpu-gib", "4", "--disk-gib", "8", "--store-gib", "2"], "--store-gib 2"),
        (["--trace", "/nonexistent/trace.jsonl"], "/nonexistent/trace.jsonl"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_no_folder(tmp_path, capsys, extra, words):
    out = tmp_path / "size"
    assert main(["size", "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]
    assert not out.exists()
