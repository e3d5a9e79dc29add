"""`kvtk`'s three endings of a failed command (toolkit/cli/main.py, toolkit/errors.py): bad input is one line and
exit 2, a run that could not finish is one line and exit 1, and anything else (a bug) keeps its traceback: a plain
ValueError from deep in the code is not turned into "bad input"."""

from __future__ import annotations

import json

import pytest

from toolkit.cli.main import EXIT_BAD_INPUT, EXIT_RUN_FAILED, main
from toolkit.core.geometry import HybridGeometry
from toolkit.errors import BadInput


def test_bad_input_is_one_line_naming_the_field_and_exit_2(capsys):
    assert main(["geometry", "--groups", "full_attention:sixteen"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("kvtk geometry: error: ") and "'sixteen'" in err


def test_a_plain_value_error_from_deep_code_keeps_its_traceback(monkeypatch, capsys):
    """A bug that happens to be a ValueError (here: raised where a geometry is described) is not bad input."""

    def broken(self):
        raise ValueError("an internal invariant broke")

    monkeypatch.setattr(HybridGeometry, "describe", broken)
    with pytest.raises(ValueError, match="an internal invariant broke"):
        main(["geometry", "--groups", "full_attention:16", "--json"])
    assert "error:" not in capsys.readouterr().err


def test_bad_input_raised_from_the_same_deep_place_is_exit_2(monkeypatch, capsys):
    def refuses(self):
        raise BadInput("groups: refused for this test")

    monkeypatch.setattr(HybridGeometry, "describe", refuses)
    assert main(["geometry", "--groups", "full_attention:16", "--json"]) == EXIT_BAD_INPUT
    assert capsys.readouterr().err == "kvtk geometry: error: groups: refused for this test\n"


def test_the_checks_of_user_input_raise_bad_input():
    from toolkit.core.specs import parse_groups_spec
    from toolkit.experiments.config import ExperimentConfig
    from toolkit.workloads.resolve import resolve_trace

    with pytest.raises(BadInput, match="cpu_gib"):
        ExperimentConfig(cpu_gib=-1.0)
    with pytest.raises(BadInput, match="trace"):
        resolve_trace("no-such-trace")
    with pytest.raises(BadInput, match="groups"):
        parse_groups_spec("")


@pytest.mark.engine
def test_a_stalled_run_is_one_line_and_exit_1(tmp_path, capsys):
    """A real stall: one 2000-token prompt in 8 device blocks fits the lower bound but never gets scheduled (Mamba
    align mode holds more than one block per group); the dry engine's watch ends the run."""
    trace = tmp_path / "stuck.jsonl"
    lines = [
        {"type": "header", "schema": "kvtk.trace/1", "name": "stuck", "workload": "test", "vocab_size": 2048},
        {"type": "segment", "segment_id": "long", "random": {"seed": 3, "num_tokens": 2000}},
        {"type": "request", "request_id": "stuck", "prompt": [{"segment": "long"}], "max_tokens": 1, "arrival_s": 0.0},
    ]
    trace.write_text("".join(json.dumps(line) + "\n" for line in lines))
    argv = ["replay", "--engine", "dry", "--model", "tiny-qwen3-next", "--trace", str(trace), "--phases", "cold"]
    argv += ["--device-blocks", "8", "--prefix-match-unit", "128", "--cpu-gib", "0.0625", "--out", str(tmp_path / "r")]
    assert main(argv) == EXIT_RUN_FAILED
    stderr = capsys.readouterr().err
    err = [line for line in stderr.splitlines() if line.startswith("kvtk")]
    assert err == [err[0]] and err[0].startswith("kvtk replay: failed: dry engine: ")
    assert "scheduled nothing" in err[0] and "Traceback" not in stderr
