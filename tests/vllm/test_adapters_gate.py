"""Reads of vLLM internals stay in `toolkit.vllm.adapters`, only on the supported builds (no engine started)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from toolkit.vllm import adapters
from toolkit.vllm.version import SUPPORTED_TEXT


@pytest.fixture
def unsupported_vllm(monkeypatch):
    monkeypatch.setattr("toolkit.vllm.version.installed_distribution", lambda: ("vllm", "0.31.0"))
    adapters._supported_build.cache_clear()
    yield
    adapters._supported_build.cache_clear()


def _request(prompt: int, local: int, external: int):
    return SimpleNamespace(
        prefill_stats=SimpleNamespace(
            num_prompt_tokens=prompt, num_local_cached_tokens=local, num_external_cached_tokens=external
        )
    )


def test_prefill_hits_are_read_once_scheduled():
    assert adapters.prefill_hit_tokens(_request(640, 128, 512)) == (128, 512)
    assert adapters.prefill_hit_tokens(_request(0, 0, 0)) is None  # not scheduled yet
    assert adapters.prefill_hit_tokens(SimpleNamespace(prefill_stats=None)) is None  # taken by the output step
    assert adapters.prefill_hit_tokens(None) is None  # a request the scheduler no longer holds


def test_engine_core_of_an_engine_in_another_process_is_refused():
    llm = SimpleNamespace(llm_engine=SimpleNamespace(engine_core=SimpleNamespace()))  # a client, no core
    with pytest.raises(RuntimeError, match="VLLM_ENABLE_V1_MULTIPROCESSING=0"):
        adapters.engine_core(llm)
    core = object()
    assert (
        adapters.engine_core(SimpleNamespace(llm_engine=SimpleNamespace(engine_core=SimpleNamespace(engine_core=core))))
        is core
    )


def test_unsupported_builds_read_no_internals(unsupported_vllm):
    assert adapters.prefill_hit_tokens(_request(640, 128, 512)) is None
    core = SimpleNamespace(llm_engine=SimpleNamespace(engine_core=SimpleNamespace(engine_core=object())))
    with pytest.raises(RuntimeError, match="engine_core: .*only done on") as info:
        adapters.engine_core(core)
    assert SUPPORTED_TEXT in str(info.value)
