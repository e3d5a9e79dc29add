"""Every preset's compute facts give its published parameter counts (total and active), within a stated tolerance.

Published numbers (model cards and announcements): Kimi-Linear "48B total, 3B activated" (MoonshotAI/Kimi-Linear
README), NVIDIA-Nemotron-Nano-9B-v2 "9B", Granite-4.0-H-Small "32B total, 9B active" (IBM's model card),
Qwen3.5-4B "4B", Qwen3-Next-80B-A3B "80B total, 3B activated", Qwen3.5-27B "27B", Jamba-Mini-1.5 "52B total,
12B active", gpt-oss-20b "21B parameters with 3.6B active" (OpenAI counts the unembedding in the active number).
"""

from __future__ import annotations

import pytest

from toolkit.models.presets import list_presets, load_preset
from toolkit.perfmodel.model_shape import parameter_counts, shape_for_model, shape_from_preset

TOLERANCE = 0.10  # the published numbers are rounded labels ("A3B", "9B"): 10% either way

# preset -> (total B, active B, the card counts the lm head in "active")
PUBLISHED = {
    "kimi-linear-48b-a3b": (48.0, 3.0, False),
    "nemotron-nano-9b-v2": (9.0, 9.0, True),  # dense: every weight is active
    "granite-4.0-h-small": (32.0, 9.0, False),
    "qwen3.5-4b": (4.0, 4.0, True),
    "qwen3-next-80b-a3b": (80.0, 3.0, False),
    "qwen3.5-27b": (27.0, 27.0, True),
    "jamba-mini-1.5": (52.0, 12.0, False),
    "gpt-oss-20b": (21.0, 3.6, True),
}


def test_every_preset_has_compute_facts_and_a_published_size():
    assert set(list_presets()) == set(PUBLISHED)
    for name in list_presets():
        assert "compute" in load_preset(name), name
        assert (
            "config.json" in load_preset(name)["compute"]["source"]
            or "same config.json" in load_preset(name)["compute"]["source"]
        ), name


@pytest.mark.parametrize("preset", sorted(PUBLISHED))
def test_compute_facts_give_the_published_total_and_active_parameters(preset):
    total_b, active_b, lm_head_counted = PUBLISHED[preset]
    counts = parameter_counts(shape_for_model(preset))
    active = counts.active + (counts.lm_head if lm_head_counted else 0.0)
    assert abs(counts.total / 1e9 - total_b) <= TOLERANCE * total_b, counts
    assert abs(active / 1e9 - active_b) <= TOLERANCE * active_b, counts
    assert counts.active <= counts.total


def test_nemotron_h_counts_its_mlp_blocks_not_its_layers():
    # Hand-derived (config.json): 25 relu2 MLP blocks of up + down = 25 * 2 * 4480 * 15680 = 3,512,320,000.
    # Mamba-2 x 27: in_proj 4480 * (2*10240 + 2*8*128 + 128) + out_proj 10240 * 4480 = 147,374,080 each.
    # Attention x 4: q 4480*5120, k+v 2*4480*1024, o 5120*4480 = 55,050,240 each.
    shape = shape_for_model("nemotron-nano-9b-v2")
    assert shape.linear_params_per_token == 3_512_320_000 + 27 * 147_374_080 + 4 * 55_050_240
    preset = load_preset("nemotron-nano-9b-v2")
    gated = {**preset, "compute": {**preset["compute"], "mlp_gated": True}}
    assert shape_from_preset(gated).linear_params_per_token - shape.linear_params_per_token == 25 * 4480 * 15680


def test_tied_embeddings_are_counted_once():
    preset = load_preset("granite-4.0-h-small")
    untied = {**preset, "compute": {**preset["compute"], "tie_word_embeddings": False}}
    tied_total = parameter_counts(shape_from_preset(preset)).total
    assert parameter_counts(shape_from_preset(untied)).total - tied_total == 4096 * 100352


def test_bad_mlp_layer_count_is_refused():
    preset = load_preset("nemotron-nano-9b-v2")
    with pytest.raises(ValueError, match="compute.num_mlp_layers"):
        shape_from_preset({**preset, "compute": {**preset["compute"], "num_mlp_layers": -1}})
