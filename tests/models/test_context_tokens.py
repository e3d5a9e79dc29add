"""The dry engine's stand-in HF config carries the preset model's real context length: vLLM derives the model's
limit from it instead of the tiny stand-in's 8,192 positions (every long preset run warned that positions beyond
them "lead to nan")."""

from __future__ import annotations

import pytest

from toolkit.models.context import CONTEXT_TOKENS, stand_in_overrides
from toolkit.models.presets import list_presets


def test_every_preset_has_its_context():
    assert set(CONTEXT_TOKENS) == set(list_presets())
    assert all(tokens >= 32_768 for tokens in CONTEXT_TOKENS.values())


@pytest.mark.engine
def test_a_long_preset_run_gets_the_real_context():
    from toolkit.engines.geometry_layout import dry_layout
    from toolkit.engines.harness.shapes import build_base_config

    layout = dry_layout("qwen3-next-80b-a3b")
    assert stand_in_overrides(layout.context_tokens) == {"max_position_embeddings": 262_144}
    assert dry_layout("tiny-qwen2").context_tokens is None is dry_layout("tiny-qwen3-next").context_tokens
    config = build_base_config(layout, max_model_len=100_000)
    # vLLM warns of NaN positions only for a max_model_len above the config's positions: 100,000 is now within.
    assert config.model_config.hf_config.max_position_embeddings == 262_144
    assert config.model_config.max_model_len == 100_000
    tiny = build_base_config(dry_layout("tiny-qwen2"), max_model_len=4096)
    assert tiny.model_config.hf_config.max_position_embeddings == 8192  # a tiny model keeps its own config
