"""Block geometry known before an engine starts: sizes the default CPU budget and refuses budgets under one block."""

from __future__ import annotations

from typing import Any

# The live engine's default CPU tier when no budget is given: far more than any committed trace needs on the tiny
# models (a tiny Qwen3-Next block id is well under 1 MiB), and small enough for a laptop.
LIVE_DEFAULT_CPU_BYTES = 1 << 30


def probe_geometry(config) -> dict[str, Any]:
    """scheduler_block_tokens, blocks_per_scheduler_block and cpu_block_bytes of the configured model."""
    if config.engine == "dry":
        from toolkit.engines.dry import dry_layout

        layout = dry_layout(
            config.model,
            tp=getattr(config, "tp", 1),
            dcp=getattr(config, "dcp", 1),
            dtype=getattr(config, "dtype", "auto"),
        )
        geometry = getattr(layout, "geometry", None)
        if geometry is None:  # a tiny model's harness shape: one block size, Mamba groups plus one attention group
            return {
                "scheduler_block_tokens": layout.block_tokens,
                "blocks_per_scheduler_block": layout.num_mamba_groups + 1,
                "cpu_block_bytes": layout.attention_page_bytes,
            }
        return {
            "scheduler_block_tokens": geometry.scheduler_block_tokens,
            "blocks_per_scheduler_block": geometry.blocks_per_scheduler_block,
            "cpu_block_bytes": layout.block_bytes,
        }
    # Live: the engine decides the block size at start; budget by bytes instead of sizing from the trace.
    return {
        "scheduler_block_tokens": 1,
        "blocks_per_scheduler_block": 1,
        "cpu_block_bytes": 0,
        "fixed_cpu_bytes": LIVE_DEFAULT_CPU_BYTES,
    }


def check_cpu_budget(cpu_bytes: int, block_bytes: int) -> None:
    if block_bytes and cpu_bytes < block_bytes:
        raise ValueError(
            f"cpu-gib: a CPU budget of {cpu_bytes} bytes ({cpu_bytes / 2**30:.6g} GiB) is smaller than "
            f"one block of {block_bytes} bytes; the minimum is {block_bytes} bytes "
            f"({block_bytes / 2**30:.6g} GiB)"
        )
