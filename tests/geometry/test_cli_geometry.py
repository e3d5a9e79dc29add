"""`kvtk geometry` end to end, as a user runs it (a subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys


def kvtk(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", *args], capture_output=True, text=True, timeout=60)


def test_json_output_has_the_documented_fields():
    out = kvtk("geometry", "--groups", "full_attention:16,mamba_align:64", "--dcp", "2", "--hash-block", "16",
               "--local-tokens", "64", "--external-tokens", "96", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [(g["kind"], g["spec_block_tokens"], g["resolved_block_tokens"]) for g in data["groups"]] == [
        ("full_attention", 16, 32), ("mamba_align", 64, 64)]
    assert data["hash_block_tokens"] == 16 and data["scheduler_block_tokens"] == 64
    assert data["fine_grained"] == {"enabled": True, "reason": "", "blocking_group_ids": []}
    assert [(p["num_blocks"], p["gpu_start_index"]) for p in data["load_plan"]] == [(3, 2), (2, 1)]


def test_all_presets_print_as_a_table():
    out = kvtk("geometry")
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("== ") >= 7 and "Qwen3-Next-80B-A3B" in out.stdout


def test_bad_input_is_one_line_and_exit_code_2():
    out = kvtk("geometry", "--groups", "full_attention:16,mamba_align:64", "--hash-block", "48")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "hash_block_tokens" in lines[0] and "48" in lines[0]
    out = kvtk("geometry", "--preset", "gpt-oss-20b", "--cpu-gib", "0.0001")
    assert out.returncode == 2 and "the minimum is 393216 bytes" in out.stderr
