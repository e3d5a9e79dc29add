"""`kvtk replay`: JSON shape and bad input."""

from __future__ import annotations

import json

import pytest

from toolkit.cli.main import main


def test_unknown_baseline_lists_the_valid_ones(capsys):
    assert main(["replay", "--baseline", "vanilla"]) == 2
    assert "valid baselines: no_offload, simplecpu, no_fine_grained, lazy" in capsys.readouterr().err


def test_unknown_model_lists_the_valid_ones(capsys):
    assert main(["replay", "--model", "gpt-17"]) == 2
    assert "valid models:" in capsys.readouterr().err


def test_a_dtype_the_live_engine_cannot_run_is_refused_before_anything_starts(tmp_path, capsys):
    out = tmp_path / "never"
    assert (
        main(["replay", "--engine", "live", "--model", "tiny-qwen3-next", "--dtype", "float32", "--out", str(out)]) == 2
    )
    err = capsys.readouterr().err
    assert "dtype: float32 is not possible for Qwen3NextForCausalLM" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
    with pytest.raises(SystemExit):  # argparse: only auto, float32, bfloat16
        main(["replay", "--dtype", "fp16"])


def test_bad_trace_line_is_refused_with_its_number(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"type": "header", "schema": "kvtk.trace/1", "name": "b", "workload": "w", "vocab_size": 50}\n'
        '{"type": "request", "request_id": "r", "arrival_s": 0, "prompt": [], "max_tokens": 1}\n'
    )
    assert main(["replay", "--trace", str(path), "--connector", "simplecpu"]) == 2
    assert "line 2: field 'prompt'" in capsys.readouterr().err


@pytest.mark.engine
def test_cpu_budget_under_one_block_says_the_minimum(capsys):
    assert main(["replay", "--cpu-gib", "0.00001", "--connector", "simplecpu"]) == 2
    assert "the minimum is 327680 bytes" in capsys.readouterr().err


@pytest.mark.engine
def test_json_has_phases_and_oracle(tmp_path, capsys, connector):
    assert (
        main(
            [
                "replay",
                "--engine",
                "dry",
                "--trace",
                "fewshot-small",
                "--phases",
                "cold,hot",
                "--connector",
                connector,
                "--out",
                str(tmp_path / "r"),
                "--json",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    out = json.loads(text[text.find("{\n") :] if not text.startswith("{") else text)
    assert [p["phase"] for p in out["phases"]] == ["cold", "hot"]
    for key in ("requests", "prompt_tokens", "local_hit_tokens", "external_hit_tokens", "recomputed_tokens"):
        assert key in out["phases"][0]
    assert set(out["oracle_reusable_tokens"]) == {"cold", "hot"}
