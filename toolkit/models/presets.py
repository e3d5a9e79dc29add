"""Model geometry presets: public model configs reduced to the facts that decide KV-cache geometry.

A preset is a JSON file in `data/models/` (parsed with `json`, never evaluated):

    {"name": ..., "display_name": ..., "source": <URL of the public config>, "dtype": "bfloat16",
     "attention": {"type": "full_attention"|"mla", "num_layers": N, "num_kv_heads": H, "head_dim": D
                   | "kv_lora_rank": R, "rope_head_dim": P},
     "sliding_window": {"num_layers": N, "num_kv_heads": H, "head_dim": D, "window_tokens": W},   (optional)
     "state": {"type": "gdn"|"kda"|"mamba1"|"mamba2", "num_layers": N, ...shape fields..., "ssm_dtype": ...}}

`geometry_from_preset` turns one into the `HybridGeometry` vLLM would build on a platform, DCP and TP size.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit import locations
from toolkit.core.geometry import HybridGeometry
from toolkit.core.specs import CacheGroupSpec, GroupKind
from toolkit.errors import BadInput
from toolkit.models import hybrid_sizing as hs

STATE_TYPES = ("gdn", "kda", "mamba1", "mamba2")


def data_dir() -> Path:
    """The shipped `data/` folder (override with KVTK_DATA_DIR)."""
    override = os.environ.get("KVTK_DATA_DIR")
    return Path(override) if override else locations.data_dir()


def presets_dir() -> Path:
    return data_dir() / "models"


def list_presets() -> list[str]:
    return sorted(p.stem for p in presets_dir().glob("*.json"))


def load_preset(name_or_path: str) -> dict[str, Any]:
    path = Path(name_or_path)
    if not path.suffix == ".json" or not path.exists():
        path = presets_dir() / f"{name_or_path}.json"
    if not path.exists():
        raise BadInput(f"preset: unknown preset {name_or_path!r}; valid presets: {', '.join(list_presets())}")
    try:
        preset = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise BadInput(f"preset: {path} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(preset, dict) or "attention" not in preset:
        raise BadInput(f"preset: {path} has no 'attention' section")
    return preset


@dataclass(frozen=True, kw_only=True)
class PresetSizing:
    """The numbers behind a preset's geometry, for tables and the notebook."""

    attention_bytes_per_token: int
    state_page_bytes: int
    attention_block_tokens: int
    layers_per_group: int
    page_bytes_per_layer: int


def preset_sizing(
    preset: dict[str, Any], *, platform: str = "cuda", tp: int = 1, block_tokens: int | None = None
) -> PresetSizing:
    plat = hs.platform_blocks(platform)
    dtype = preset.get("dtype", "bfloat16")
    attn = preset["attention"]
    mla = attn.get("type", "full_attention") == "mla"
    if mla:
        attn_bpt = hs.mla_bytes_per_token(
            kv_lora_rank=_int(attn, "kv_lora_rank"), rope_head_dim=_int(attn, "rope_head_dim"), dtype=dtype
        )
    else:
        attn_bpt = hs.attention_bytes_per_token(
            num_kv_heads=_int(attn, "num_kv_heads"), head_dim=_int(attn, "head_dim"), dtype=dtype, tp=tp
        )
    state_bytes = state_page_bytes(preset, tp=tp, default_ssm_dtype=plat.default_ssm_dtype) if "state" in preset else 0
    block = hs.attention_block_for_state_page(
        attention_bytes_per_token=attn_bpt,
        state_page_bytes=state_bytes,
        platform=plat,
        block_tokens=block_tokens,
        mla=mla,
    )
    counts = [_int(attn, "num_layers")]
    counts += [_int(preset[k], "num_layers") for k in ("sliding_window", "state") if k in preset]
    return PresetSizing(
        attention_bytes_per_token=attn_bpt,
        state_page_bytes=state_bytes,
        attention_block_tokens=block,
        layers_per_group=hs.layer_group_size(counts),
        page_bytes_per_layer=block * attn_bpt,
    )


def state_page_bytes(preset: dict[str, Any], *, tp: int = 1, default_ssm_dtype: str | None = None) -> int:
    """Bytes of one state layer's page; an explicit `ssm_dtype` in the preset beats the platform default."""
    state = preset["state"]
    kind = state.get("type")
    conv_dtype = state.get("conv_dtype", preset.get("dtype", "bfloat16"))
    ssm_dtype = state.get("ssm_dtype", default_ssm_dtype or conv_dtype)
    if kind == "gdn":
        return hs.gdn_state_bytes(
            num_k_heads=_int(state, "num_k_heads"),
            num_v_heads=_int(state, "num_v_heads"),
            head_k_dim=_int(state, "head_k_dim"),
            head_v_dim=_int(state, "head_v_dim"),
            conv_kernel=_int(state, "conv_kernel"),
            conv_dtype=conv_dtype,
            ssm_dtype=ssm_dtype,
            tp=tp,
        )
    if kind == "kda":
        return hs.kda_state_bytes(
            num_heads=_int(state, "num_heads"),
            head_dim=_int(state, "head_dim"),
            conv_kernel=_int(state, "conv_kernel"),
            conv_dtype=conv_dtype,
            ssm_dtype=ssm_dtype,
            tp=tp,
        )
    if kind == "mamba1":
        return hs.mamba1_state_bytes(
            intermediate_size=_int(state, "intermediate_size"),
            state_size=_int(state, "state_size"),
            conv_kernel=_int(state, "conv_kernel"),
            conv_dtype=conv_dtype,
            ssm_dtype=ssm_dtype,
            tp=tp,
        )
    if kind == "mamba2":
        return hs.mamba2_state_bytes(
            intermediate_size=_int(state, "intermediate_size"),
            n_groups=_int(state, "n_groups"),
            num_heads=_int(state, "num_heads"),
            head_dim=_int(state, "head_dim"),
            state_size=_int(state, "state_size"),
            conv_kernel=_int(state, "conv_kernel"),
            conv_dtype=conv_dtype,
            ssm_dtype=ssm_dtype,
            tp=tp,
        )
    raise BadInput(f"state.type: unknown state type {kind!r}; valid: {', '.join(STATE_TYPES)}")


def geometry_from_preset(
    preset: dict[str, Any] | str,
    *,
    platform: str = "cuda",
    dcp: int = 1,
    tp: int = 1,
    hash_block_tokens: int | None = None,
    mamba_mode: str = "align",
    block_tokens: int | None = None,
    allow_fine_grained: bool = True,
) -> HybridGeometry:
    """The geometry vLLM builds for this model: groups of equal layer count, page sizes padded to one size."""
    if isinstance(preset, str):
        preset = load_preset(preset)
    if mamba_mode not in ("align", "all"):
        raise BadInput(f"mamba_mode: must be 'align' or 'all', got {mamba_mode!r}")
    sizing = preset_sizing(preset, platform=platform, tp=tp, block_tokens=block_tokens)
    group_page = sizing.layers_per_group * sizing.page_bytes_per_layer
    groups: list[CacheGroupSpec] = []

    def add(kind: GroupKind, count: int, label: str, window: int | None = None) -> None:
        for i in range(hs.num_groups_for(count, sizing.layers_per_group)):
            groups.append(
                CacheGroupSpec(
                    kind=kind,
                    block_tokens=sizing.attention_block_tokens,
                    page_bytes=group_page,
                    window_tokens=window,
                    num_layers=sizing.layers_per_group,
                    name=f"{label}{i}" if count > sizing.layers_per_group else label,
                )
            )

    attn = preset["attention"]
    add(GroupKind.MLA if attn.get("type") == "mla" else GroupKind.FULL_ATTENTION, _int(attn, "num_layers"), "attn")
    if "sliding_window" in preset:
        swa = preset["sliding_window"]
        add(GroupKind.SLIDING_WINDOW, _int(swa, "num_layers"), "swa", window=_int(swa, "window_tokens"))
    if "state" in preset:
        kind = GroupKind.MAMBA_ALIGN if mamba_mode == "align" else GroupKind.MAMBA_ALL
        add(kind, _int(preset["state"], "num_layers"), preset["state"].get("type", "state"))
    return HybridGeometry(
        groups=tuple(groups), dcp=dcp, hash_block_tokens=hash_block_tokens, allow_fine_grained=allow_fine_grained
    )


def preset_from_hf_config(config: dict[str, Any], *, name: str = "hf-config") -> dict[str, Any]:
    """A preset from a Hugging Face `config.json` of the families the tiny CPU models use (qwen2, qwen3_next)."""
    model_type = config.get("model_type")
    dtype = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32"}.get(
        str(config.get("torch_dtype") or config.get("dtype") or "bfloat16"), "bfloat16"
    )
    num_layers = _int(config, "num_hidden_layers")
    head_dim = config.get("head_dim") or _int(config, "hidden_size") // _int(config, "num_attention_heads")
    attention = {"type": "full_attention", "num_kv_heads": _int(config, "num_key_value_heads"), "head_dim": head_dim}
    if model_type in ("qwen2", "qwen3", "llama"):
        return {"name": name, "dtype": dtype, "attention": {**attention, "num_layers": num_layers}}
    if model_type == "qwen3_next":
        layer_types = config.get("layer_types")
        if layer_types:
            num_full = sum(1 for t in layer_types if t == "full_attention")
        else:
            num_full = num_layers // _int(config, "full_attention_interval")
        return {
            "name": name,
            "dtype": dtype,
            "attention": {**attention, "num_layers": num_full},
            "state": {
                "type": "gdn",
                "num_layers": num_layers - num_full,
                "num_k_heads": _int(config, "linear_num_key_heads"),
                "num_v_heads": _int(config, "linear_num_value_heads"),
                "head_k_dim": _int(config, "linear_key_head_dim"),
                "head_v_dim": _int(config, "linear_value_head_dim"),
                "conv_kernel": _int(config, "linear_conv_kernel_dim"),
            },
        }
    raise BadInput(f"model_type: {model_type!r} is not supported here; supported: qwen2, qwen3, llama, qwen3_next")


def _int(section: dict[str, Any], key: str) -> int:
    value = section.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise BadInput(f"{key}: must be a positive integer, got {value!r}")
    return value
