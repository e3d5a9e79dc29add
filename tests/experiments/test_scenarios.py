"""Named scenarios (`kvtk replay --scenario NAME`): each builds a valid experiment at its geometry; list; one run."""

from __future__ import annotations

import json

import pytest

from toolkit.cli.main import main
from toolkit.experiments.scenarios import SCENARIOS, format_side_by_side, get_scenario


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_scenario_builds_a_valid_experiment_at_its_geometry(name):
    from toolkit.engines.dry import dry_layout
    from toolkit.workloads.resolve import check_trace_spec

    config = get_scenario(name).config()
    assert (
        config.engine == "dry"
        and config.variant.baselines == ("no_fine_grained", "simplecpu")
        and config.variant.fine_grained
    )
    check_trace_spec(config.workload.trace)
    layout = dry_layout(config.model, tp=config.dry.tp, dcp=config.dry.dcp)  # refuses a TP/DCP the preset cannot run
    assert layout.device_blocks(1 << 30) > 0
    assert config.device_blocks in (32, 512)


def test_the_scenarios_are_the_seeds_setups():
    def key(name):
        c = get_scenario(name).config()
        return c.model, c.dry.tp, c.dry.dcp, c.device_blocks, c.workload.concurrency

    assert key("seed-kimi-linear-tp8-dcp8") == ("kimi-linear-48b-a3b", 8, 8, 32, None)
    assert key("seed-qwen3.5-tp8-dcp2") == ("qwen3.5-4b", 8, 2, 32, None)
    assert key("gsm8k-20shot")[3:] == (512, 64)
    assert key("agentic-multiturn")[3:] == (512, 16)
    from toolkit.workloads.resolve import resolve_trace

    gsm8k = resolve_trace(get_scenario("gsm8k-20shot").config().workload.trace)
    assert len(gsm8k.requests) == 1319 and gsm8k.params["prefix_tokens"] == 2600


def test_list_prints_each_name_and_one_line(capsys):
    assert main(["replay", "--scenario", "list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[0] for line in lines] == list(SCENARIOS)
    assert all(len(line.split(None, 1)[1]) > 20 for line in lines)


def test_unknown_scenario_lists_the_valid_ones(capsys):
    assert main(["replay", "--scenario", "gsm9k"]) == 2
    err = capsys.readouterr().err
    assert "unknown scenario 'gsm9k'" in err and "gsm8k-20shot" in err


def test_flags_given_with_a_scenario_override_only_what_they_change():
    from toolkit.cli.main import build_parser

    args = build_parser().parse_args(
        ["replay", "--scenario", "gsm8k-20shot", "--max-requests", "8", "--concurrency", "4"]
    )
    from toolkit.cli.replay import scenario_config

    config = scenario_config(args)
    assert (config.workload.max_requests, config.workload.concurrency, config.device_blocks, config.model) == (
        8,
        4,
        512,
        "kimi-linear-48b-a3b",
    )
    assert config.prefix_match_unit is None  # the preset's (vLLM's) hash unit, not the tiny models' 128


def test_side_by_side_puts_the_variants_of_a_phase_on_one_row():
    rows = [
        {"variant": v, "phase": p, "local_hit_tokens": i, "external_hit_tokens": 10 * i, "recomputed_tokens": 1}
        for i, v in enumerate(("toolkit", "simplecpu"))
        for p in ("cold", "hot")
    ]
    text = format_side_by_side({"phases": rows, "oracle_reusable_tokens": {"cold": 5, "hot": 7}})
    lines = text.splitlines()
    assert "toolkit" in lines[0] and "simplecpu" in lines[0]
    assert lines[2].split() == ["cold", "5", "0", "/", "0", "/", "1", "1", "/", "10", "/", "1"]


@pytest.mark.engine
def test_a_small_scenario_runs_end_to_end(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        main(
            [
                "replay",
                "--scenario",
                "agentic-multiturn",
                "--max-requests",
                "6",
                "--phases",
                "cold,hot",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "local / cpu-tier / recomp" in printed and "no_fine_grained" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["concurrency"] == 16 and summary["model"] == "kimi-linear-48b-a3b"
    assert {p["variant"] for p in summary["phases"]} == {"toolkit", "no_fine_grained", "simplecpu"}
    assert all(p["requests"] == 6 for p in summary["phases"])
