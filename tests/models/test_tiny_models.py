"""Tiny models: seeded weights generated once into a private cache folder, idempotent, reproducible."""

from __future__ import annotations

import hashlib
import os
import stat
import time

import pytest

from toolkit.models import ensure_model, list_models, load_entry, model_dir


def test_entries_respect_the_cpu_engine_constraints():
    names = [entry.name for entry in list_models()]
    assert {"tiny-qwen2", "tiny-qwen3-next", "demo-qwen3-next"} <= set(names)
    for entry in list_models():
        config = entry.config
        assert config["tie_word_embeddings"] is False
        assert config["head_dim"] in (32, 64, 80, 96, 112, 128)
        assert config["max_position_embeddings"] >= 4096
        if config["model_type"] == "qwen3_next":
            assert config["linear_key_head_dim"] == config["linear_value_head_dim"] == 128


def test_unknown_model_lists_the_valid_ones():
    with pytest.raises(ValueError, match="valid models: .*tiny-qwen2"):
        load_entry("no-such-model")


def test_ensure_is_private_idempotent_and_seeded(tmp_path, monkeypatch):
    monkeypatch.setenv("KVTK_MODEL_CACHE", str(tmp_path / "models"))
    path = ensure_model("tiny-qwen2")
    assert path == model_dir("tiny-qwen2") and path.name.startswith("tiny-qwen2-")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    assert all(stat.S_IMODE(os.stat(f).st_mode) == 0o600 for f in path.iterdir())
    weights = (path / "model.safetensors").read_bytes()
    start = time.perf_counter()
    assert ensure_model("tiny-qwen2") == path  # second call: found, not regenerated
    assert time.perf_counter() - start < 0.5
    # Same seed, same bytes: regenerate elsewhere and compare.
    monkeypatch.setenv("KVTK_MODEL_CACHE", str(tmp_path / "again"))
    again = ensure_model("tiny-qwen2")
    assert hashlib.sha256((again / "model.safetensors").read_bytes()).digest() == hashlib.sha256(weights).digest()
