"""Environment changes are undone where they are made (issue 40): the dry engine lets vLLM accept a model length
past the tiny model's 8192 positions while it builds its config, and leaves the process's environment as it was."""

from __future__ import annotations

import os

import pytest

from toolkit.engines.base import VariantSpec
from toolkit.scoped_env import scoped_env


def test_scoped_env_restores_a_value_and_an_absence(monkeypatch):
    monkeypatch.setenv("KVTK_TEST_SET", "before")
    monkeypatch.delenv("KVTK_TEST_UNSET", raising=False)
    with pytest.raises(RuntimeError):
        with scoped_env(KVTK_TEST_SET="during", KVTK_TEST_UNSET="during"):
            assert os.environ["KVTK_TEST_SET"] == os.environ["KVTK_TEST_UNSET"] == "during"
            raise RuntimeError("the block fails")
    assert os.environ["KVTK_TEST_SET"] == "before" and "KVTK_TEST_UNSET" not in os.environ


@pytest.mark.engine
def test_the_dry_engine_leaves_no_vllm_variable_behind(monkeypatch):
    from toolkit.engines.dry import DryEngine

    monkeypatch.delenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", raising=False)
    engine = DryEngine(
        VariantSpec(name="toolkit"),
        model="tiny-qwen3-next",
        cpu_bytes=64 << 20,
        num_gpu_blocks=64,
        max_model_len=16384,
        prefix_match_unit=128,
    )
    assert engine.max_model_len == 16384  # vLLM accepted the long length, so the variable was seen
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN" not in os.environ
