"""Issue 21, items 4-8 (folders, specs, CLI): each reported case, as a named regression test."""

from __future__ import annotations

import json
import os
import time

import pytest
from fuzz_helpers import assert_one_line, listing, mode_of

from toolkit.private_fs import create_run_dir, open_new_file, unique_dir, write_private_file

# ----- 4. existing --out folders are not trusted ------------------------------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a folder to another user")
def test_4_another_users_folder_is_refused_and_left_as_it_was(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, 65534, 65534)
    with pytest.raises(ValueError, match="belongs to another user"):
        create_run_dir(theirs)
    assert mode_of(theirs) == 0o755


def test_4_a_1777_folder_keeps_its_sticky_bit_and_a_full_one_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    create_run_dir(shared)  # empty and ours: used as it is, never chmodded
    assert mode_of(shared) == 0o1777
    (shared / "other").write_text("x")
    with pytest.raises(ValueError, match="not empty"):
        create_run_dir(shared)
    assert mode_of(shared) == 0o1777


def test_4_a_regular_file_or_a_symlink_as_out_is_refused(tmp_path):
    (tmp_path / "file").write_text("keep")
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ValueError, match="not a folder"):
        create_run_dir(tmp_path / "file")
    with pytest.raises(ValueError, match="symbolic link"):
        create_run_dir(tmp_path / "link")
    assert (tmp_path / "file").read_text() == "keep" and not (tmp_path / "elsewhere").exists()


def test_4_a_planted_vllm_log_symlink_is_never_followed(tmp_path):
    from toolkit.engines.vllm_log import VllmLogCapture

    victim = tmp_path / "victim"
    victim.write_text("precious")
    run = tmp_path / "run"
    run.mkdir()
    (run / "vllm.log").symlink_to(victim)
    with pytest.raises(ValueError, match="not empty"):  # the run folder is refused outright
        create_run_dir(run)
    with pytest.raises(OSError):  # and the log itself never opens through a link
        VllmLogCapture(run / "vllm.log").start()
    with pytest.raises(FileExistsError):  # nor does any file the toolkit writes
        open_new_file(run / "vllm.log")
    write_private_file(run / "vllm.log", "new")  # temp + rename replaces the link, not its target
    assert victim.read_text() == "precious" and not (run / "vllm.log").is_symlink()
    assert mode_of(run / "vllm.log") == 0o600


def test_4_targets_default_is_a_new_folder_of_ours_not_a_fixed_tmp_name(workdir):
    from toolkit.experiments.targets import main

    assert main(["--sections=", "--connector", "simplecpu"]) == 0
    made = list((workdir / "runs" / "targets").iterdir())
    assert len(made) == 1 and mode_of(made[0]) == 0o700
    (workdir / "in" / "x").write_text("x")
    with pytest.raises(ValueError, match="not empty"):
        main(["--sections=", "--connector", "simplecpu", "--out", str(workdir / "in")])


# ----- 5. YAML alias bomb -----------------------------------------------------------------------------------------


def test_5_a_yaml_alias_bomb_is_refused_in_milliseconds(workdir):
    from toolkit.sweep.spec import load_spec

    rows = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i, name in enumerate("bcdefghi"):
        prev = "abcdefghi"[i]
        rows.append(f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]")
    path = workdir / "in" / "bomb.yaml"
    path.write_text("\n".join(rows) + "\naxes: {seed: *i}\n")
    assert len(path.read_bytes()) < 500
    started = time.perf_counter()
    with pytest.raises(ValueError, match="line 2: YAML aliases") as info:
        load_spec(path)
    assert time.perf_counter() - started < 0.5
    assert_one_line(str(info.value))


# ----- 6. sweep cells are validated before any cell runs ----------------------------------------------------------


@pytest.mark.parametrize(
    "axes, needle",
    [
        ({"cpu_gib": [1, float("nan")]}, "cpu_gib"),
        ({"cpu_gib": [1, float("inf")]}, "cpu_gib"),
        ({"max_requests": [1, 0]}, "max_requests"),
        ({"device_gib": [1, -2]}, "device_gib"),
        ({"tp": [1, 0]}, "tp"),
        ({"time_scale": [1, float("inf")]}, "time_scale"),
        ({"trace": ["fewshot-small", "nosuch-trace"]}, "unknown trace"),
        ({"trace": ["fewshot-small", "fewshot:num_requests=0"]}, "num_requests"),
        ({"trace": ["fewshot-small", "missing.jsonl"]}, "no such file"),
        ({"gpu": ["h200", "h999"]}, "unknown GPU profile"),
        ({"gpu": ["h200", "../../x"]}, "gpu"),
    ],
)
def test_6_bad_sweep_cells_fail_up_front_naming_the_cell(warm_imports, axes, needle):
    from toolkit.sweep.spec import parse_spec, validate_cells

    with pytest.raises(ValueError, match=r"cell 1 \(") as info:
        validate_cells(parse_spec({"axes": axes, "fixed": {"phases": ["cold"]}}).cells())
    assert needle in str(info.value)
    assert_one_line(str(info.value))


# ----- 7. half-written or mixed run folders -----------------------------------------------------------------------


@pytest.mark.parametrize("change", [{"cpu_gib": 1e-9}, {"trace": "fewshot:num_requests=0"}, {"gpu": "h999"}])
def test_7_errors_found_before_the_run_leave_no_folder(warm_imports, workdir, change):
    from toolkit.experiments.runner import ExperimentConfig, run_experiment

    with pytest.raises(ValueError):
        run_experiment(ExperimentConfig(engine="dry", phases=("cold",), connector="simplecpu", **change))
    with pytest.raises(ValueError):
        run_experiment(ExperimentConfig(engine="dry", phases=("cold",), out=str(workdir / "out"), **change))
    assert listing(workdir) == {"in"}


@pytest.mark.parametrize(
    "change", [{"cpu_gib": float("nan")}, {"cpu_gib": float("inf")}, {"tp": 0}, {"max_requests": 0}]
)
def test_7_bad_config_values_are_refused_when_the_config_is_made(change):
    from toolkit.experiments.runner import ExperimentConfig

    with pytest.raises(ValueError, match=next(iter(change))):
        ExperimentConfig(engine="dry", **change)


def test_7_a_run_that_fails_midway_is_marked_failed(warm_imports, workdir, monkeypatch):
    from toolkit.experiments import runner

    def boom(*args, **kwargs):
        raise RuntimeError("engine died")

    monkeypatch.setattr(runner, "_run_variants", boom)
    with pytest.raises(RuntimeError):
        runner.run_experiment(runner.ExperimentConfig(engine="dry", phases=("cold",), out=str(workdir / "r")))
    status = json.loads((workdir / "r" / "status.json").read_text())
    assert (status["status"], status["error"]) == ("failed", "RuntimeError: engine died")
    assert status["pid"] == os.getpid()  # with its process and heartbeat (run_status.py)


def test_7_a_reused_out_is_refused_and_default_names_are_unique(workdir):
    (workdir / "in" / "summary.json").write_text("{}")
    with pytest.raises(ValueError, match="not empty"):
        create_run_dir(workdir / "in")
    first, second = unique_dir(workdir / "runs", "same-second"), unique_dir(workdir / "runs", "same-second")
    assert first != second and second.name == "same-second-2"


def test_7_sweep_folders_resume_only_our_sweeps(workdir):
    from toolkit.sweep.folder import SweepFolder

    (workdir / "in" / "x").write_text("x")
    with pytest.raises(ValueError, match="not empty"):
        SweepFolder(workdir / "in")
    with pytest.raises(ValueError, match="not a sweep folder"):
        SweepFolder(workdir / "in", resume=True)
    (workdir / "in" / "spec.json").write_text("{}")
    with pytest.raises(ValueError, match="already holds a sweep; pass --resume"):
        SweepFolder(workdir / "in")
    assert SweepFolder(workdir / "in", resume=True).path == workdir / "in"


# ----- 8. smaller items -------------------------------------------------------------------------------------------


def test_8_a_spec_with_cells_but_no_axes_runs_exactly_those_cells():
    from toolkit.sweep.spec import parse_spec

    cells = parse_spec({"fixed": {"phases": ["cold"]}, "cells": [{"seed": 1}, {"seed": 2}]}).cells()
    assert [c.params["seed"] for c in cells] == [1, 2]


@pytest.mark.parametrize(
    "name, text, needle",
    [
        ("deep.yaml", "axes: " + "[" * 500 + "]" * 500 + "\n", "nested too deeply"),
        ("deep.json", '{"axes": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        ("dup.yaml", "axes:\n  seed: [1]\n  seed: [2]\n", "line 3: duplicate key 'seed'"),
        ("dup.json", '{"axes": {"seed": [1]}, "axes": {"seed": [2]}}', "duplicate key 'axes'"),
        ("nan.json", '{"axes": {"cpu_gib": [NaN]}}', "NaN"),
    ],
)
def test_8_specs_deep_duplicated_or_nan_are_refused_on_one_line(workdir, name, text, needle):
    from toolkit.sweep.spec import load_spec

    path = workdir / "in" / name
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        load_spec(path)
    assert needle in str(info.value) and str(path) in str(info.value)
    assert_one_line(str(info.value))


def test_8_a_non_utf8_spec_names_the_file_and_line(workdir):
    from toolkit.sweep.spec import load_spec

    path = workdir / "in" / "s.yaml"
    path.write_bytes(b"axes:\n  seed: [1]\n  # caf\xe9\n")
    with pytest.raises(ValueError, match=r"s.yaml line 3: not UTF-8 \(byte 0xe9 at column 8\)"):
        load_spec(path)


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["geometry", "--tp", "0"], "--tp"),
        (["geometry", "--cpu-gib", "inf"], "--cpu-gib"),
        (["geometry", "--dcp", "0"], "--dcp"),
        (["replay", "--cpu-gib", "inf"], "cpu_gib"),
        (["sweep", "in/none.yaml"], "no such file"),
    ],
)
def test_8_cli_mistakes_are_one_line_and_exit_2(workdir, cli, argv, needle):
    rc, err = cli(*argv)
    assert rc == 2 and needle in err
    assert_one_line(err)


@pytest.mark.parametrize(
    "preset, needle",
    [
        ({"name": "bad", "attention": 3}, "preset 'bad': malformed (AttributeError"),
        ({"name": "bad", "attention": {"num_layers": "many"}}, "num_kv_heads: must be a positive integer"),
    ],
)
def test_8_a_malformed_preset_is_one_line_and_exit_2(workdir, cli, preset, needle):
    bad = workdir / "in" / "bad.json"
    bad.write_text(json.dumps(preset))
    rc, err = cli("geometry", "--model", str(bad))
    assert rc == 2 and needle in err
    assert_one_line(err)


def test_8_a_deeply_nested_preset_is_one_line_and_exit_2(workdir, cli):
    deep = workdir / "in" / "deep.json"
    deep.write_text('{"attention": ' + "[" * 100_000 + "]" * 100_000 + "}")
    rc, err = cli("geometry", "--model", str(deep))
    assert rc == 2 and "nested too deeply" in err
    assert_one_line(err)


def test_8_ray_address_must_be_one_of_rays_forms():
    from toolkit.sweep.runner import SweepOptions

    for good in ("auto", "local", "10.0.0.1:6379", "ray://head:10001"):
        SweepOptions(address=good)
    for bad in ("x; rm -rf /", "http://evil", "head", "ray://head"):
        with pytest.raises(ValueError, match="address: expected"):
            SweepOptions(address=bad)


def test_8_notebooks_list_leaves_no_temporary_notebooks(workdir, cli, monkeypatch):
    import tempfile

    temp = workdir / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    rc, _ = cli("notebooks", "--list", "--only", "01")
    assert rc == 0 and list(temp.iterdir()) == []
