"""Issue 36: bad input is refused before anything heavy (no vLLM import, no run folder), one line, exit 2; one answer
per question (the minimum CPU tier, TP/DCP validity) wherever it is asked; names with "did you mean"; presets'
Hugging Face ids as aliases; one set of defaults chosen from the model and the GPU profile."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from toolkit.cli.main import main
from toolkit.experiments.config import ExperimentConfig

QWEN = "qwen3-next-80b-a3b"
LONG_TRACE = "longdoc:num_docs=1,doc_tokens=30000,num_questions=1"  # one 30k-token prompt


def _in_fresh_python(code: str) -> dict:
    """Run `code` (which sets `out`) in a fresh interpreter: whether vLLM/torch got imported is then its own doing."""
    script = f"import json, sys\n{code}\nout['vllm'] = 'vllm' in sys.modules\nout['torch'] = 'torch' in sys.modules\n"
    script += "print(json.dumps(out))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_request_the_device_can_never_hold_is_refused_before_vllm_and_before_a_folder(tmp_path):
    out = tmp_path / "never"
    argv = ["replay", "--model", QWEN, "--tp", "4", "--trace", LONG_TRACE, "--phases", "cold"]
    argv += ["--device-blocks", "8", "--cpu-gib", "1", "--out", str(out)]
    result = _in_fresh_python(
        "import contextlib, io\nfrom toolkit.cli.main import main\nerr = io.StringIO()\n"
        f"with contextlib.redirect_stderr(err):\n    rc = main({argv!r})\n"
        "out = {'rc': rc, 'err': err.getvalue()}"
    )
    lines = result["err"].strip().splitlines()
    assert result["rc"] == 2 and len(lines) == 1, result
    # the numbers: prompt tokens, blocks needed (a 272-token block per 272 tokens of KV in the attention group, one
    # per GDN group) against the 7 usable, what to change
    from toolkit.workloads.resolve import resolve_trace

    trace = resolve_trace(LONG_TRACE)
    prompt, output = trace.prompt_len(trace.requests[0]), trace.requests[0].max_tokens
    need = -(-(prompt + output - 1) // 272) + 3
    assert f"{prompt} prompt + {output} output tokens need at least {need} device blocks" in lines[0], lines
    assert "device cache has 7" in lines[0] and f"--device-blocks {need + 1} or more" in lines[0]
    assert "could never be scheduled" in lines[0] and "--device-gib" in lines[0] and "--device-blocks" in lines[0]
    assert not result["vllm"] and not out.exists()


def test_the_config_and_its_checks_stay_light():
    result = _in_fresh_python(
        "from toolkit.experiments.config import ExperimentConfig\n"
        f"c = ExperimentConfig.from_params({{'model': '{QWEN}', 'tp': 4, 'dcp': 2}})\nc.validate()\n"
        "out = {'unit': c.prefix_match_unit}"
    )
    assert result == {"unit": 16, "vllm": False, "torch": False}


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["replay", "--model", "qwen3-next-80b"], "did you mean 'qwen3-next-80b-a3b'?"),
        (["replay", "--model", "tiny-qwen3-nxt"], "did you mean 'tiny-qwen3-next'?"),
        (["replay", "--engine", "live", "--model", "tiny-qwen3-nxt"], "did you mean 'tiny-qwen3-next'?"),
        (["replay", "--trace", "fewshot-smal"], "did you mean 'fewshot-small'?"),
        (["replay", "--baseline", "simplcpu"], "did you mean 'simplecpu'?"),
        (["geometry", "--model", "qwen3-next"], "did you mean 'qwen3-next-80b-a3b'?"),
    ],
)
def test_typos_get_did_you_mean(capsys, argv, expected):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("flag", ["--cpu-gib", "--device-gib"])
def test_a_size_too_large_to_count_in_bytes_is_bad_input(capsys, tmp_path, flag):
    """Found by the CLI fuzz test: 1e300 GiB passed the checks and overflowed when made bytes."""
    out = tmp_path / "run"
    assert main(["replay", flag, "1e300", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert flag[2:].replace("-", "_") in err and len(err.splitlines()) == 1 and not out.exists(), err


def test_a_presets_hugging_face_id_is_an_alias(capsys):
    config = ExperimentConfig.from_params({"model": "Qwen/Qwen3-Next-80B-A3B-Instruct", "tp": 4})
    assert config.model == QWEN and config.to_params()["model"] == QWEN
    config.validate()
    assert ExperimentConfig(model="qwen/qwen3-next-80b-a3b-instruct").model == QWEN  # any case
    assert main(["geometry", "--model", "Qwen/Qwen3-Next-80B-A3B-Instruct", "--tp", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["preset"] == QWEN


def _minimum(text: str) -> int:
    return int(text.split("the minimum is ")[1].split(" bytes")[0])


def test_one_minimum_cpu_tier_in_core_replay_and_geometry(capsys):
    from toolkit.core.geometry import min_cpu_tier_bytes
    from toolkit.engines.geometry_layout import preset_layout

    geometry = preset_layout(QWEN, tp=4).geometry
    expected = min_cpu_tier_bytes(geometry.block_bytes, 4)
    assert expected == 2 * geometry.block_bytes * 4  # two blocks per rank (one usable, the null block), 4 ranks
    with pytest.raises(ValueError) as core:
        geometry.cpu_capacity_blocks(expected - 1, world_size=4)
    assert main(["geometry", "--model", QWEN, "--tp", "4", "--cpu-gib", "0.02", "--world-size", "4"]) == 2
    geometry_err = capsys.readouterr().err
    argv = ["replay", "--model", QWEN, "--tp", "4", "--cpu-gib", "0.02", "--trace", "fewshot-small"]
    assert main([*argv, "--phases", "cold"]) == 2
    replay_err = capsys.readouterr().err
    assert _minimum(str(core.value)) == _minimum(geometry_err) == _minimum(replay_err) == expected
    assert f"({expected / 2**30:.4g} GiB): 2 blocks per rank" in replay_err  # in GiB and in blocks too
    geometry.cpu_capacity_blocks(expected, world_size=4)  # the minimum itself is accepted


@pytest.mark.parametrize("preset", [QWEN, "gpt-oss-20b", "kimi-linear-48b-a3b"])
def test_geometry_and_replay_accept_and_refuse_the_same_tp_dcp(preset, capsys):
    for tp in (1, 2, 3, 4, 8):
        for dcp in (1, 2, 3, 4):
            geometry_rc = main(["geometry", "--model", preset, "--tp", str(tp), "--dcp", str(dcp), "--json"])
            geometry_err = capsys.readouterr().err
            try:
                ExperimentConfig.from_params({"model": preset, "tp": tp, "dcp": dcp}).validate()
                replay_err = ""
            except ValueError as exc:
                replay_err = str(exc)
            assert (geometry_rc == 2) == bool(replay_err), (preset, tp, dcp, geometry_err, replay_err)
            if replay_err:
                assert replay_err.split(":")[0] in geometry_err, (geometry_err, replay_err)


def test_hot_alone_is_refused_in_one_line(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["replay", "--phases", "hot", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "start with cold (--phases cold,hot)" in err, err
    assert not out.exists()
    ExperimentConfig(engine="server", url="http://127.0.0.1:1", phases=("hot",)).validate(
        model=False
    )  # a server keeps its tier


def test_defaults_come_from_the_model_and_the_gpu_profile():
    from toolkit.experiments.defaults import default_device_bytes, dry_device, variant_notices
    from toolkit.experiments.preflight import dry_geometry_of

    config = ExperimentConfig.from_params({"model": QWEN, "tp": 4, "cpu_gib": 256})
    geometry = dry_geometry_of(config)
    assert config.prefix_match_unit == 16 and geometry.fine_grained.enabled  # fine-grained hits possible
    device = dry_device(config, geometry.block_bytes)
    assert device.blocks == default_device_bytes(QWEN, "h200", 4) // geometry.block_bytes > 20_000
    assert dry_device(config.replace(gpu="a100"), geometry.block_bytes).blocks < device.blocks  # 80 GiB < 141 GiB
    notes = variant_notices(config, geometry, device.blocks, 256 * 2**30)
    assert len(notes) == 1 and "CPU tier holds" in notes[0] and "inclusive" in notes[0]  # 64 GiB/rank < device
    assert variant_notices(config, geometry, device.blocks, 512 * 2**30) == []
    assert variant_notices(config, geometry, device.blocks, 256 * 2**30, footprint_blocks=1000) == []  # holds it all
    # No unit allows fine-grained hits with a sliding-window group: vLLM's default, and a notice.
    oss = ExperimentConfig.from_params({"model": "gpt-oss-20b", "baselines": ["no_fine_grained"]})
    oss_geometry = dry_geometry_of(oss)
    assert oss.prefix_match_unit is None and not oss_geometry.fine_grained.enabled
    notes = variant_notices(oss, oss_geometry, 2, 2**40)
    assert len(notes) == 1 and "print the same hits" in notes[0]
    # The tiny models keep the unit they had (128 in tiny Qwen3-Next's 640-token blocks) and 256 device blocks.
    tiny = ExperimentConfig()
    assert tiny.prefix_match_unit == 128 and dry_device(tiny, dry_geometry_of(tiny).block_bytes).blocks == 256


def test_bench_dry_takes_the_same_defaults():
    import argparse

    from toolkit.bench.dry import add_arguments, shared_defaults

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--model", "Qwen/Qwen3-Next-80B-A3B-Instruct"])
    shared_defaults(args)
    config = ExperimentConfig.from_params({"model": QWEN, "tp": args.tp})
    assert (args.model, args.prefix_match_unit) == (QWEN, config.prefix_match_unit)


def test_the_dry_tiny_models_named_before_vllm_are_the_harness_shapes():
    from toolkit.engines.geometry_layout import DRY_TINY_MODELS, dry_geometry, dry_layout
    from toolkit.engines.harness import SHAPES
    from toolkit.experiments.capacity import layout_geometry
    from toolkit.experiments.preflight import geometry_dict

    assert set(DRY_TINY_MODELS) == set(SHAPES)
    for name in SHAPES:  # the geometry checked before vLLM's import is the layout the engine runs
        assert geometry_dict(dry_geometry(name)) == layout_geometry(dry_layout(name)), name
