"""Shared fixtures for the vLLM tests: cached engine configs for the engine-less harness, seeded prompts."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

pytest.importorskip("vllm.v1.core.sched.scheduler")


@pytest.fixture(scope="session")
def base_configs():
    """VllmConfig per harness shape, built once (reading a tiny model's config.json takes seconds)."""
    from toolkit.engines.harness import SHAPES, build_base_config

    cache = {}

    def get(shape: str):
        if shape not in cache:
            cache[shape] = build_base_config(SHAPES[shape])
        return cache[shape]

    return get


@pytest.fixture
def make_harness(base_configs):
    from toolkit.engines.harness import Harness

    def make(shape: str = "tiny-qwen3-next", **kwargs):
        return Harness(shape, base_config=base_configs(shape), **kwargs)

    return make
