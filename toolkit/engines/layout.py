"""The one interface of a KV cache layout the dry engine fabricates (`Layout`), whichever kind it is.

Two kinds implement it: a model preset's (or a dense tiny model's) vLLM layout, `geometry_layout.ModelLayout`, and
the hybrid tiny model's harness shape, `harness.shapes.HarnessShape` (vLLM's own layout for it, group order
included). The harness, the dry engine and a run's model facts (`experiments/capacity.py`) read only these members,
so none of them needs to know which kind it holds.
"""

from __future__ import annotations

from typing import Any, Protocol


class Layout(Protocol):
    """A KV cache layout on one rank, as vLLM would allocate it (see the module docstring)."""

    @property
    def model(self) -> str:
        """The tiny model whose HF config stands in for vLLM's model config (no weights are read)."""
        ...

    @property
    def block_tokens(self) -> int:
        """vLLM's `cache_config.block_size`: the attention groups' spec block."""
        ...

    @property
    def scheduler_block_tokens(self) -> int:
        """Tokens of one scheduler block (every group's block fits whole in it)."""
        ...

    @property
    def blocks_per_scheduler_block(self) -> int:
        """Block ids one scheduler block takes over all groups."""
        ...

    @property
    def block_bytes(self) -> int:
        """Bytes one block id owns on one rank (the CPU tier's block)."""
        ...

    @property
    def model_dtype(self) -> str:
        """The attention cache's dtype name (torch's)."""
        ...

    @property
    def context_tokens(self) -> int | None:
        """The real model's context, given to the stand-in's config (None: the stand-in's own)."""
        ...

    def device_blocks(self, device_bytes: int) -> int:
        """vLLM's block count for `device_bytes` of KV cache per rank; `BadInput` where the layout is sized in
        blocks only."""
        ...

    def kv_cache_config(self, num_blocks: int) -> Any:
        """vLLM's `KVCacheConfig` for `num_blocks` blocks (Any: vLLM's objects are untyped here)."""
        ...

    def configure_vllm(self, vllm_config: Any) -> None:
        """Set what the layout implies on vLLM's config (parallelism, the Mamba cache mode); nothing if none."""
        ...
