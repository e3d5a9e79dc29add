"""Block geometry known before an engine starts: sizes the default CPU budget and refuses budgets under one block."""

from __future__ import annotations

from typing import Any

# The live engine's default CPU tier when no budget is given: far more than any committed trace needs on the tiny
# models (a tiny Qwen3-Next block id is well under 1 MiB), and small enough for a laptop.
LIVE_DEFAULT_CPU_BYTES = 1 << 30


def probe_geometry(config) -> dict[str, Any]:
    """scheduler_block_tokens, blocks_per_scheduler_block and cpu_block_bytes of the configured model."""
    if config.engine == "dry":
        from toolkit.vllm.harness import SHAPES

        if config.model not in SHAPES:
            raise ValueError(f"model: the dry engine has no shape for {config.model!r}; valid: {', '.join(SHAPES)}")
        shape = SHAPES[config.model]
        return {"scheduler_block_tokens": shape.block_tokens,
                "blocks_per_scheduler_block": shape.num_mamba_groups + 1,
                "cpu_block_bytes": shape.attention_page_bytes}
    # Live: the engine decides the block size at start; budget by bytes instead of sizing from the trace.
    return {"scheduler_block_tokens": 1, "blocks_per_scheduler_block": 1, "cpu_block_bytes": 0,
            "fixed_cpu_bytes": LIVE_DEFAULT_CPU_BYTES}


def check_cpu_budget(cpu_bytes: int, block_bytes: int) -> None:
    if block_bytes and cpu_bytes < block_bytes:
        raise ValueError(f"cpu-gib: a CPU budget of {cpu_bytes} bytes ({cpu_bytes / 2**30:.6g} GiB) is smaller than "
                         f"one block of {block_bytes} bytes; the minimum is {block_bytes} bytes "
                         f"({block_bytes / 2**30:.6g} GiB)")
