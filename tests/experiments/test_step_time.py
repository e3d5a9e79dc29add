"""The step-time model: GPU profiles, model shapes from presets, the roofline, and one published measurement."""

from __future__ import annotations

import pytest

from toolkit.perfmodel.step_time import (
    ScheduledWork,
    StepTimeModel,
    attended_tokens,
    build_step_model,
    list_gpus,
    load_gpu,
    shape_for_model,
    shape_from_preset,
)

# Llama-3.3-70B-Instruct's public config (meta-llama/Llama-3.3-70B-Instruct config.json): 80 layers, hidden 8192,
# 64 query heads, 8 KV heads of 128, MLP 28672, vocab 128256.
LLAMA_70B = {
    "name": "llama-3.3-70b",
    "dtype": "bfloat16",
    "attention": {"type": "full_attention", "num_layers": 80, "num_kv_heads": 8, "head_dim": 128},
    "compute": {"hidden_size": 8192, "num_attention_heads": 64, "vocab_size": 128256, "intermediate_size": 28672},
}


def test_gpu_profiles_are_the_spec_sheets_dense_numbers():
    assert set(list_gpus()) >= {"a100", "h100", "h200"}
    h200, h100, a100 = load_gpu("h200"), load_gpu("H100"), load_gpu("a100")
    assert h200.peak_bf16_flops == h100.peak_bf16_flops == 989.5e12  # 1,979 TFLOPS with sparsity, halved
    assert h200.hbm_bytes_per_s == 4.8e12 and h100.hbm_bytes_per_s == 3.35e12 and a100.hbm_bytes_per_s == 2.039e12
    assert a100.peak_fp8_flops is None and a100.pcie_bytes_per_s == 32e9 and h200.pcie_bytes_per_s == 64e9
    with pytest.raises(ValueError, match="no FP8"):
        a100.peak_flops("fp8")
    with pytest.raises(ValueError, match="valid: a100, h100, h200"):
        load_gpu("tpu")


def test_qwen3_next_shape_matches_its_published_sizes():
    shape = shape_for_model("qwen3-next-80b-a3b")
    total = (
        shape.dense_weight_params
        + shape.moe_layers * shape.num_experts * shape.expert_params
        + shape.hidden_size * shape.vocab_size
    )  # + the embedding table
    assert 77e9 < total < 82e9  # "80B total parameters"
    assert 2.8e9 < shape.linear_params_per_token < 3.6e9  # "3B active" (the embedding lookup is not a matmul)
    assert shape.moe_layers == 48 and shape.experts_per_token == 10
    assert shape.expected_experts_touched(1) == pytest.approx(10)
    assert shape.expected_experts_touched(100_000) == pytest.approx(512)


def test_attended_tokens_matches_counting():
    for context, new, window in [
        (0, 1, None),
        (0, 7, None),
        (5, 3, None),
        (0, 10, 4),
        (3, 6, 4),
        (9, 5, 4),
        (0, 4, 4),
        (2, 2, 4),
    ]:
        brute = sum(min(context + i, window or 10**9) for i in range(1, new + 1))
        assert attended_tokens(context, new, window) == brute, (context, new, window)


def test_prefill_is_compute_bound_and_superlinear_decode_is_memory_bound():
    model = build_step_model("qwen3-next-80b-a3b", gpu="h200", tp=4)
    flops, num_bytes = model.step_flops_bytes([ScheduledWork(8192, 0, True)])
    peak, hbm = model.gpu.peak_bf16_flops * 0.5, model.gpu.hbm_bytes_per_s * 0.8
    assert flops / peak > num_bytes / hbm  # prefill: compute bound
    flops, num_bytes = model.step_flops_bytes([ScheduledWork(1, 8000, True)] * 16)
    assert flops / peak < num_bytes / hbm  # decode: reading weights and KV bounds it
    short, long = model.prefill_seconds(16_384), model.prefill_seconds(131_072)
    assert long > 8 * short  # attention grows with context
    assert model.step_seconds([]) == 0.0
    # TP divides the work; the A100 is slower than the H200.
    assert build_step_model("qwen3-next-80b-a3b", gpu="h200", tp=1).prefill_seconds(8192) == pytest.approx(
        4 * model.prefill_seconds(8192)
    )
    assert build_step_model("qwen3-next-80b-a3b", gpu="a100", tp=4).prefill_seconds(8192) > model.prefill_seconds(8192)


def test_copy_rate_defaults_to_pcie_and_can_be_overridden():
    model = build_step_model("qwen3-next-80b-a3b", gpu="h200")
    assert model.copy_seconds(64e9 * 0.8) == pytest.approx(1.0)
    fast = build_step_model("qwen3-next-80b-a3b", gpu="h200", copy_bytes_per_s=25e9)
    assert fast.copy_seconds(50e9) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="compute_efficiency"):
        build_step_model("qwen3-next-80b-a3b", compute_efficiency=1.5)


def test_a_preset_without_compute_facts_is_refused_by_name():
    with pytest.raises(ValueError, match="compute: preset 'x' has no 'compute' section"):
        shape_from_preset({"name": "x", "attention": {"num_layers": 1, "num_kv_heads": 1, "head_dim": 64}})
    with pytest.raises(ValueError, match="compute.vocab_size"):
        shape_from_preset(
            {
                "name": "x",
                "attention": {"num_layers": 1, "num_kv_heads": 1, "head_dim": 64},
                "compute": {"hidden_size": 64, "num_attention_heads": 1},
            }
        )


def test_sanity_check_against_a_published_ttft():
    # NVIDIA NIM for LLMs benchmarking guide, "Performance", Llama-3.3-70b-instruct, NIM 1.8.0, 2 x H100 80G, fp8,
    # TP2, 5000 input tokens, concurrency 1: TTFT 406.77 ms
    # (https://docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance.md). One request alone is one prefill.
    model = StepTimeModel(shape=shape_from_preset(LLAMA_70B), gpu=load_gpu("h100"), tp=2, compute_dtype="fp8")
    modelled = model.prefill_seconds(5000)
    assert 0.75 < modelled / 0.40677 < 1.25, modelled


def test_a_preset_without_compute_facts_times_loads_only(tmp_path, monkeypatch):
    import json

    from toolkit.models import presets
    from toolkit.perfmodel.step_time import TransferOnlyModel, build_clock_model

    # Every shipped preset has compute facts now; a preset folder of the user's may hold one without.
    models = tmp_path / "models"
    models.mkdir()
    preset = presets.load_preset("kimi-linear-48b-a3b")
    del preset["compute"]
    (models / "no-compute.json").write_text(json.dumps(preset))
    (models / "qwen3-next-80b-a3b.json").write_text(json.dumps(presets.load_preset("qwen3-next-80b-a3b")))
    monkeypatch.setattr(presets, "presets_dir", lambda: models)
    missing = ["no-compute"]
    with pytest.warns(UserWarning, match="load time only"):
        model = build_clock_model(missing[0], gpu="h100", copy_bytes_per_s=10e9)
    assert isinstance(model, TransferOnlyModel)
    assert model.step_seconds([ScheduledWork(8192, 0, True)]) == 0.0 and model.copy_seconds(20e9) == 2.0
    assert isinstance(build_clock_model("qwen3-next-80b-a3b"), StepTimeModel)
    with pytest.raises(ValueError, match="gpu"):
        build_clock_model(missing[0], gpu="tpu")


@pytest.mark.parametrize(
    "preset, total_b, active_low_b, active_high_b",
    [
        ("gpt-oss-20b", 20.9, 2.8, 3.7),  # "21B parameters with 3.6B active" (OpenAI's model card)
        ("qwen3.5-27b", 27.0, 23.0, 27.0),  # dense
        ("jamba-mini-1.5", 52.0, 11.0, 12.5),  # "52B total, 12B active" (AI21's Jamba 1.5 announcement)
    ],
)
def test_other_presets_compute_facts_give_their_published_sizes(preset, total_b, active_low_b, active_high_b):
    shape = shape_for_model(preset)
    total = (
        shape.dense_weight_params
        + shape.moe_layers * shape.num_experts * shape.expert_params
        + shape.hidden_size * shape.vocab_size
    )
    assert abs(total / 1e9 - total_b) < 0.03 * total_b
    assert active_low_b < shape.linear_params_per_token / 1e9 < active_high_b


def test_a_sum_roofline_adds_compute_and_memory_time_and_a_bad_one_is_refused():
    from toolkit.perfmodel.step_time import GpuProfile, ScheduledWork, StepTimeModel, shape_for_model

    def model(roofline: str) -> StepTimeModel:
        gpu = GpuProfile(
            name="x",
            peak_bf16_flops=1e11,
            peak_fp8_flops=None,
            hbm_bytes_per_s=1e10,
            pcie_bytes_per_s=1e9,
            memory_bytes=1,
            roofline=roofline,
        )
        return StepTimeModel(shape=shape_for_model("tiny-qwen3-next"), gpu=gpu, overhead_s=0.001)

    work = [ScheduledWork(300, 0, True), ScheduledWork(1, 700, True)]
    flops, num_bytes = model("max").step_flops_bytes(work)
    compute, memory = flops / (1e11 * 0.5), num_bytes / (1e10 * 0.8)
    assert model("max").step_seconds(work) == pytest.approx(0.001 + max(compute, memory))
    assert model("sum").step_seconds(work) == pytest.approx(0.001 + compute + memory)
    # The decode fast path agrees with the general one under either roofline.
    for roofline in ("max", "sum"):
        m = model(roofline)
        assert m.decode_seconds([5, 700]) == pytest.approx(
            m.step_seconds([ScheduledWork(1, 5, True), ScheduledWork(1, 700, True)])
        )
    with pytest.raises(ValueError, match="roofline: must be one of max, sum, got 'min'"):
        model("min")


@pytest.mark.parametrize("model", ["qwen3-next-80b-a3b", "gpt-oss-20b"])  # full attention only; a sliding window
def test_a_decode_stretch_times_each_step_as_decode_seconds_does(model):
    """The decode stretches' series (`decode_stretch_seconds`: increments without a window, per step with one)
    against `decode_seconds` of each step, contexts one token further per step, a window crossed on the way."""
    m = StepTimeModel(shape=shape_for_model(model), gpu=load_gpu("h200"), tp=2)
    contexts = [5, 120, 700]
    series = list(m.decode_stretch_seconds(contexts, 40))
    assert len(series) == 40
    for j, seconds in enumerate(series):
        assert seconds == pytest.approx(m.decode_seconds([c + j for c in contexts]), rel=1e-12)
    assert series[-1] > series[0]  # more context read each step
    assert list(m.decode_stretch_seconds([], 5)) == [] and list(m.decode_stretch_seconds(contexts, 0)) == []
