"""A handful of the issue's cases through the real `kvtk` executable: exit 2, one stderr line, nothing created."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from fuzz_helpers import listing

HEADER = {"type": "header", "schema": "kvtk.trace/1", "name": "../../escape", "workload": "w", "vocab_size": 64}
REQUEST = {"type": "request", "request_id": "r", "arrival_s": 0, "prompt": [{"token_ids": [5]}], "max_tokens": 1}


def _inputs(folder) -> dict[str, str]:
    named = folder / "named.jsonl"
    named.write_text(json.dumps(HEADER) + "\n" + json.dumps(REQUEST) + "\n")
    nan = folder / "nan.jsonl"
    nan.write_text(
        json.dumps({**HEADER, "name": "ok"})
        + "\n"
        + json.dumps(REQUEST).replace('"arrival_s": 0', '"arrival_s": NaN')
        + "\n"
    )
    bomb = folder / "bomb.yaml"
    bomb.write_text("a: &a [1, 2]\nb: &b [*a, *a]\naxes: {seed: *b}\n")
    return {"named": str(named), "nan": str(nan), "bomb": str(bomb)}


CASES = [
    (["replay", "--trace", "{named}", "--out", "out"], "line 1: field 'name'"),
    (["replay", "--trace", "{nan}"], "line 2: NaN is not a number"),
    (["replay", "--trace", "fewshot:num_requests=1", "--cpu-gib", "inf", "--out", "out"], "cpu_gib"),
    (["sweep", "{bomb}", "--serial"], "line 2: YAML aliases"),
    (["geometry", "--tp", "0"], "--tp: must be an integer"),
]


@pytest.mark.parametrize("argv, needle", CASES, ids=[c[0][0] + "-" + c[1].split(":")[0] for c in CASES])
def test_kvtk_refuses_with_exit_2_one_line_and_creates_nothing(tmp_path, argv, needle):
    (tmp_path / "in").mkdir()
    paths = _inputs(tmp_path / "in")
    before = listing(tmp_path)
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"}
    done = subprocess.run(
        [sys.executable, "-m", "toolkit.cli.main", *(a.format(**paths) for a in argv)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"kvtk {argv[0]}: error: ") and needle in lines[0], done.stderr
    assert done.stdout == ""
    assert listing(tmp_path) == before  # no out/, no runs/
