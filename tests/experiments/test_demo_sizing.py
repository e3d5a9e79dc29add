"""The demo sizes its trace and CPU tier by the host rule (pure: no engine)."""

from __future__ import annotations

import pytest

from toolkit import host_cpu
from toolkit.experiments import demo
from toolkit.workloads.resolve import resolve_trace


def _prompt_lengths(trace: str) -> list[int]:
    resolved = resolve_trace(trace)
    return [resolved.prompt_len(r) for r in resolved.requests]


def test_a_host_without_native_bf16_gets_the_short_prompts_and_one_with_it_the_long_ones():
    assert demo.demo_trace(native_bf16=True) == demo.DEMO_TRACE
    assert demo.demo_trace(native_bf16=False) == demo.DEMO_TRACE_NO_NATIVE_BF16
    long, short = _prompt_lengths(demo.DEMO_TRACE), _prompt_lengths(demo.DEMO_TRACE_NO_NATIVE_BF16)
    assert long == [2564] * 4 and short == [516] * 4
    assert demo.prompt_sizes(demo.DEMO_TRACE_NO_NATIVE_BF16) == "516"
    # Still longer than the demo model's hybrid block, so the CPU tier can serve every prompt; distinct documents.
    block = 384  # kvtk geometry --model demo-qwen3-next --platform cpu
    assert min(short) > block
    trace = resolve_trace(demo.DEMO_TRACE_NO_NATIVE_BF16)
    assert len({r.parts[0] for r in trace.requests}) == 4


@pytest.mark.parametrize("cap, native", [("AVX2", False), ("AVX512_CORE_AMX", True)])
def test_the_host_rule_picks_the_sizing_from_onednn_cap(monkeypatch, cap, native):
    """ONEDNN_MAX_CPU_ISA=AVX2 is how a bf16-native machine stands in for one without: the demo follows it."""
    if not host_cpu.host_has_native_bf16(environ={}):
        pytest.skip("this CPU has no native bf16 at all: the cap cannot add it")
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
    assert host_cpu.host_has_native_bf16() is native
    assert demo.demo_trace() == (demo.DEMO_TRACE if native else demo.DEMO_TRACE_NO_NATIVE_BF16)


def test_the_cpu_tier_is_sized_to_the_trace_not_the_1_gib_default():
    # Every prompt's 384-token scheduler blocks, four block ids each (1 attention + 3 GDN groups), 768 KiB a block
    # id, twice over: 4 prompts x 7 blocks (2564 tokens) and 4 x 2 blocks (516 tokens).
    assert demo.demo_cpu_gib(demo.DEMO_MODEL, demo.DEMO_TRACE) * 2**10 == pytest.approx(2 * 4 * 7 * 4 * 0.75)
    assert demo.demo_cpu_gib(demo.DEMO_MODEL, demo.DEMO_TRACE_NO_NATIVE_BF16) * 2**10 == pytest.approx(
        2 * 4 * 2 * 4 * 0.75
    )
