"""Sweep specs: structure and values are refused with the key and the value; cells expand in a stable order."""

from __future__ import annotations

import dataclasses
import io
import json
import sys

import pytest

from toolkit.cli.main import main
from toolkit.experiments.runner import ExperimentConfig
from toolkit.sweep import load_spec, parse_spec
from toolkit.sweep.executor import Progress
from toolkit.sweep.params import accepted_names, build_config
from toolkit.sweep.spec import validate_cells

GRID = {
    "fixed": {"phases": ["cold", "hot"]},
    "axes": {"trace": ["fewshot-small", "longdoc-small"], "eviction": ["slru", "lru"]},
    "cells": [{"trace": "agentic-small", "prefix_match_unit": 0}],
}


def test_cells_cross_the_axes_then_add_the_extra_cells():
    cells = parse_spec(GRID).cells()
    assert [c.label for c in cells] == [
        "trace=fewshot-small, eviction=slru",
        "trace=fewshot-small, eviction=lru",
        "trace=longdoc-small, eviction=slru",
        "trace=longdoc-small, eviction=lru",
        "trace=agentic-small, prefix_match_unit=0",
    ]
    assert all(c.params["phases"] == ["cold", "hot"] for c in cells)
    # ids are stable: the same parameters give the same key in another expansion
    assert [c.cell_id for c in cells] == [c.cell_id for c in parse_spec(json.loads(json.dumps(GRID))).cells()]
    assert len({c.key for c in cells}) == 5


def test_yaml_and_json_specs_are_read_with_safe_loaders(tmp_path):
    (tmp_path / "g.json").write_text(json.dumps(GRID))
    (tmp_path / "g.yaml").write_text(
        "fixed: {phases: [cold, hot]}\naxes:\n  trace: [fewshot-small, longdoc-small]\n"
        "  eviction: [slru, lru]\ncells:\n  - {trace: agentic-small, prefix_match_unit: 0}\n"
    )
    assert load_spec(tmp_path / "g.json").cells() == load_spec(tmp_path / "g.yaml").cells()
    (tmp_path / "evil.yaml").write_text("axes: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(ValueError, match="not valid YAML"):
        load_spec(tmp_path / "evil.yaml")
    assert load_spec(tmp_path / "g.yaml").name == "g"


@pytest.mark.parametrize(
    "spec, message",
    [
        ([1, 2], "spec: expected a mapping"),
        ({"axes": {"trace": ["fewshot-small"]}, "grid": {}}, "spec: unknown key 'grid'"),
        ({"axes": {"trace": "fewshot-small"}}, "axes.trace: expected a non-empty list of values, got 'fewshot-small'"),
        ({"axes": {"trace": []}}, "axes.trace: expected a non-empty list"),
        ({"axes": {"eviction": ["lru", "lru"]}}, "axes.eviction: values repeat"),
        ({"axes": {"evicton": ["lru"]}}, "axes.evicton: unknown parameter 'evicton'; accepted"),
        ({"fixed": {"out": "x"}, "axes": {"eviction": ["lru"]}}, "fixed.out: 'out' is set by the sweep itself"),
        ({"fixed": {"eviction": "lru"}, "axes": {"eviction": ["lru"]}}, "axes.eviction: also set in fixed"),
        ({"fixed": {"eviction": "lru"}}, "spec: no cells"),
        ({"axes": {"eviction": ["lru"]}, "resources": {"gpus": 1}}, "resources: unknown key 'gpus'"),
        ({"axes": {"eviction": ["lru"]}, "resources": {"num_cpus": 0}}, "resources.num_cpus: expected a positive"),
        ({"axes": {"eviction": ["lru"]}, "cells": [{"eviction": "lru"}]}, "cells: cell 1 .* repeats"),
        ({"axes": {"eviction": ["lru"]}, "name": "a/b"}, "name: expected a plain non-empty string, got 'a/b'"),
    ],
)
def test_bad_structure_names_the_key_and_the_value(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_spec(spec).cells()


@pytest.mark.parametrize(
    "axes, message",
    [
        (
            {"policy": ["eager", "sometimes"]},
            r"cell 1 \(policy=sometimes\): policy='sometimes': argument --policy: "
            r"invalid choice",
        ),
        ({"cpu_gib": [1, "lots"]}, r"cell 1 \(cpu_gib=lots\): cpu_gib='lots': argument --cpu-gib: invalid float"),
        ({"seed": [0, "x"]}, r"cell 1 \(seed=x\): seed: expected an integer, got 'x'"),
        ({"fine_grained": [True, "yes"]}, r"fine_grained: expected true or false, got 'yes'"),
        ({"phases": [["cold"], ["cold", "warm"]]}, r"cell 1 .*phases: unknown phase\(s\) \['warm'\]"),
        ({"baselines": [[], ["vanilla"]]}, r"cell 1 .*baseline: unknown baseline 'vanilla'"),
        ({"engine": ["dry", "live"]}, r"cell 1 \(engine=live\): engine='live': a sweep runs dry cells only"),
    ],
)
def test_bad_values_fail_before_anything_runs(axes, message):
    with pytest.raises(ValueError, match=message):
        validate_cells(parse_spec({"axes": axes}).cells())


def _replay_option_names() -> set[str]:
    """`kvtk replay`'s options by destination, less those of the command itself (scenario, json, a grid's seeds,
    SLO and Ray address) and the sweep's."""
    from toolkit.cli.main import build_parser

    replay = build_parser()._subparsers._group_actions[0].choices["replay"]
    own = {"help", "scenario", "json", "out", "progress", "seeds", "slo_ttft_ms", "slo_tpot_ms", "ray_address"}
    return {a.dest for a in replay._actions if a.option_strings and a.dest not in own}


def test_every_replay_option_and_config_field_is_an_axis():
    """Names come from `kvtk replay`'s parser and ExperimentConfig, so new replay parameters need no sweep change."""
    names = set(accepted_names())
    fields = {f.name for f in dataclasses.fields(ExperimentConfig)} - {"out", "progress"}
    assert fields <= names
    assert set(_replay_option_names()) <= names and {"cpu_gib", "baseline", "no_fine_grained"} <= names
    config = build_config(
        {
            "trace": "agentic-small",
            "cpu-gib": 0.5,
            "baselines": ["no_offload"],
            "seed": 3,
            "no_fine_grained": True,
            "prefix_match_unit": 0,
        }
    )
    # replay's own conversions apply: 0 is vLLM's default hash unit, no_fine_grained flips fine_grained
    assert (config.engine, config.workload.trace, config.cpu_gib, config.variant.baselines, config.workload.seed) == (
        "dry",
        "agentic-small",
        0.5,
        ("no_offload",),
        3,
    )
    assert config.prefix_match_unit is None and config.variant.fine_grained is False and config.out is None


def test_cli_bad_spec_exits_2_with_one_line(tmp_path, capsys):
    spec = tmp_path / "bad.yaml"
    spec.write_text("axes:\n  eviction: [slru]\n  hash_unit: [16]\n")
    assert main(["sweep", str(spec), "--serial", "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "axes.hash_unit: unknown parameter 'hash_unit'" in err[0]
    assert main(["sweep", str(tmp_path / "missing.yaml"), "--serial"]) == 2


def test_missing_ray_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    spec = tmp_path / "g.json"
    spec.write_text(json.dumps(GRID))
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as without the extra
    assert main(["sweep", str(spec), "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert "pip install .[sweep]" in err and "--serial" in err
    assert not (tmp_path / "s").exists()


def test_progress_line_counts_and_estimates():
    out = io.StringIO()
    bar = Progress(total=10, skipped=2, enabled=True, stream=out)
    bar.done, bar.failed, bar.running = 6, 1, 2
    bar.started -= 50.0  # 5 cells finished in this run in 50 s, 3 left
    assert bar.line().startswith("sweep: 6/10 done, 2 running, 1 failed | elapsed 0:00:50 | left ~0:00:30")
    bar.show()
    assert out.getvalue().endswith("\n")


def test_production_scale_parameters_are_axes_through_replay():
    """Replay's real-scale options (presets, device_gib, tp, dcp, gpu, max_requests, time_scale) need no sweep code."""
    spec = parse_spec(
        {
            "fixed": {"model": "qwen3-next-80b-a3b", "device_gib": 2, "gpu": "h200", "max_requests": 10},
            "axes": {"tp": [2, 4], "dcp": [1, 2], "time_scale": [1.0, 2.0]},
        }
    )
    cells = spec.cells()
    validate_cells(cells)  # replay's own model check accepts the preset
    with pytest.raises(ValueError, match=r"cell 0 \(tp=1, dcp=2\): dcp: 2 must divide tp 1"):  # kvtk geometry's checker
        validate_cells(parse_spec({"fixed": {"model": "qwen3-next-80b-a3b"}, "axes": {"tp": [1], "dcp": [2]}}).cells())
    config = build_config(cells[-1].params)
    assert (
        config.model,
        config.dry.tp,
        config.dry.dcp,
        config.dry.device_gib,
        config.dry.gpu,
        config.workload.time_scale,
    ) == ("qwen3-next-80b-a3b", 4, 2, 2.0, "h200", 2.0)
    with pytest.raises(ValueError, match=r"cell 0 \(model=qwen3-next-81b\): model: .*qwen3-next-81b"):
        validate_cells(parse_spec({"axes": {"model": ["qwen3-next-81b"]}}).cells())
