"""Model shapes for the step-time model: per-token weights, attention layers, recurrent state, experts.

A `ModelShape` is derived once from a preset's layer facts (`data/models/*.json`: its `attention`,
`sliding_window` and `state` sections, which decide the KV geometry, and its `compute` section: hidden size, query
heads, MLP or MoE, vocab, each cited to the model's `config.json`) or from a tiny model's HF config.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from toolkit.errors import BadInput

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "fp8": 1}


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    """The per-token costs of one model, derived once from its layer shapes (whole model, before TP)."""

    name: str
    hidden_size: int
    vocab_size: int
    linear_params_per_token: float  # weights every token multiplies (attention/state projections, dense MLP,
    # routed experts a token uses, shared experts, router)
    dense_weight_params: float  # weights read by every step whatever its tokens (all but routed experts)
    attention: tuple[tuple[int, int, int, int | None], ...] = ()  # (layers, q_heads, kv_heads, window or None)
    head_dim: int = 128
    kv_bytes_per_token_layer: int = 0  # per attention layer (MLA: the latent, kv_lora_rank + rope dims)
    recurrent_flops_per_token: float = 0.0  # all state layers together
    state_bytes_per_request: int = 0  # all state layers together
    moe_layers: int = 0
    num_experts: int = 0
    experts_per_token: int = 0
    expert_params: float = 0.0  # one routed expert of one layer
    dtype_bytes: int = 2
    tied_embeddings: bool = False  # the lm head is the embedding table (counted once in the totals)

    def expected_experts_touched(self, tokens: int) -> float:
        """Distinct routed experts per MoE layer that `tokens` tokens use (uniform routing)."""
        if not self.num_experts or tokens <= 0:
            return 0.0
        return self.num_experts * (1.0 - (1.0 - self.experts_per_token / self.num_experts) ** tokens)


def _req(section: dict[str, Any], key: str, where: str) -> int:
    value = section.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise BadInput(f"{where}.{key}: must be a positive integer, got {value!r}")
    return value


def _state_costs(state: dict[str, Any], hidden: int) -> tuple[float, float, int]:
    """(projection params, recurrent FLOPs per token, state bytes) of ONE state layer, by state type."""
    kind = state.get("type")
    ssm_bytes = DTYPE_BYTES.get(state.get("ssm_dtype", "float32"), 4)
    if kind == "gdn":
        hk, hv = _req(state, "num_k_heads", "state"), _req(state, "num_v_heads", "state")
        dk, dv = _req(state, "head_k_dim", "state"), _req(state, "head_v_dim", "state")
        proj = hidden * (2 * hk * dk + 2 * hv * dv + 2 * hv) + hv * dv * hidden  # in_proj_qkvz, in_proj_ba, out
        return proj, 6.0 * hv * dk * dv, hv * dk * dv * ssm_bytes  # decay, delta update, readout
    if kind == "kda":
        h, d = _req(state, "num_heads", "state"), _req(state, "head_dim", "state")
        proj = hidden * (4 * h * d + 2 * h) + h * d * hidden
        return proj, 6.0 * h * d * d, h * d * d * ssm_bytes
    if kind == "mamba2":
        inner, groups = _req(state, "intermediate_size", "state"), _req(state, "n_groups", "state")
        heads, n = _req(state, "num_heads", "state"), _req(state, "state_size", "state")
        proj = hidden * (2 * inner + 2 * groups * n + heads) + inner * hidden
        return proj, 6.0 * inner * n, inner * n * ssm_bytes
    if kind == "mamba1":
        inner, n = _req(state, "intermediate_size", "state"), _req(state, "state_size", "state")
        rank = -(-hidden // 16)  # Mamba's default dt_rank
        proj = hidden * 2 * inner + inner * (rank + 2 * n) + rank * inner + inner * hidden
        return proj, 6.0 * inner * n, inner * n * ssm_bytes
    raise BadInput(f"state.type: the step-time model does not know {kind!r}; valid: gdn, kda, mamba1, mamba2")


def shape_from_preset(preset: dict[str, Any]) -> ModelShape:
    """A `ModelShape` from a preset with a `compute` section (hidden size, heads, MLP or MoE, vocab)."""
    name = preset.get("name", "preset")
    compute = preset.get("compute")
    if not isinstance(compute, dict):
        raise BadInput(
            f"compute: preset {name!r} has no 'compute' section (hidden_size, num_attention_heads, "
            f"vocab_size, mlp or moe); the step-time model needs it"
        )
    hidden = _req(compute, "hidden_size", "compute")
    vocab = _req(compute, "vocab_size", "compute")
    dtype_bytes = DTYPE_BYTES.get(preset.get("dtype", "bfloat16"), 2)
    attn = _attention_layers(preset, compute, hidden, dtype_bytes)
    linear, num_layers = attn.linear_params, attn.num_layers
    recurrent, state_bytes = 0.0, 0
    if "state" in preset:
        layers = _req(preset["state"], "num_layers", "state")
        proj, flops, sbytes = _state_costs(preset["state"], hidden)
        linear += layers * proj
        recurrent, state_bytes = layers * flops, layers * sbytes
        num_layers += layers
    moe = _moe_layers(compute, hidden, num_layers)
    linear += moe.linear_params + _dense_mlp_params(compute, hidden, num_layers - moe.layers)
    dense_weights = linear - moe.layers * moe.experts_per_token * moe.expert_params + hidden * vocab
    return ModelShape(
        name=name,
        hidden_size=hidden,
        vocab_size=vocab,
        linear_params_per_token=linear,
        dense_weight_params=dense_weights,
        attention=tuple(attn.layers),
        head_dim=attn.head_dim,
        kv_bytes_per_token_layer=attn.kv_bytes_per_token_layer,
        recurrent_flops_per_token=recurrent,
        state_bytes_per_request=state_bytes,
        moe_layers=moe.layers,
        num_experts=moe.num_experts,
        experts_per_token=moe.experts_per_token,
        expert_params=moe.expert_params,
        dtype_bytes=dtype_bytes,
        tied_embeddings=bool(compute.get("tie_word_embeddings", False)),
    )


@dataclass(frozen=True)
class _AttentionLayers:
    layers: list[tuple[int, int, int, int | None]]  # (layers, q_heads, kv_heads, window or None)
    linear_params: float  # projections every token multiplies
    num_layers: int
    kv_bytes_per_token_layer: int  # of the full-attention layers (MLA: the latent)
    head_dim: int


def _attention_layers(
    preset: dict[str, Any], compute: dict[str, Any], hidden: int, dtype_bytes: int
) -> _AttentionLayers:
    """Full attention (GQA or MLA) and sliding-window layers: their projections, heads and KV bytes."""
    q_heads = _req(compute, "num_attention_heads", "compute")
    attn = preset["attention"]
    gate = 2 if compute.get("attention_output_gate") else 1
    layers_out: list[tuple[int, int, int, int | None]] = []
    if attn.get("type") == "mla":
        layers = _req(attn, "num_layers", "attention")
        rank, rope = _req(attn, "kv_lora_rank", "attention"), _req(attn, "rope_head_dim", "attention")
        head_dim = rank + rope  # absorbed MLA attends in the latent space
        linear = layers * (hidden * (q_heads * head_dim + rank + rope) + q_heads * rank * 2 + q_heads * 128 * hidden)
        layers_out.append((layers, q_heads, 1, None))
        kv_bpt = (rank + rope) * dtype_bytes
    else:
        layers, kv_heads = _req(attn, "num_layers", "attention"), _req(attn, "num_kv_heads", "attention")
        head_dim = _req(attn, "head_dim", "attention")
        linear = layers * (
            hidden * q_heads * head_dim * gate + 2 * hidden * kv_heads * head_dim + q_heads * head_dim * hidden
        )
        layers_out.append((layers, q_heads, kv_heads, None))
        kv_bpt = 2 * kv_heads * head_dim * dtype_bytes
    num_layers = layers
    if "sliding_window" in preset:
        swa = preset["sliding_window"]
        layers, kv_heads = _req(swa, "num_layers", "sliding_window"), _req(swa, "num_kv_heads", "sliding_window")
        linear += layers * (
            hidden * q_heads * head_dim * gate + 2 * hidden * kv_heads * head_dim + q_heads * head_dim * hidden
        )
        layers_out.append((layers, q_heads, kv_heads, _req(swa, "window_tokens", "sliding_window")))
        num_layers += layers
    return _AttentionLayers(layers_out, float(linear), num_layers, kv_bpt, head_dim)


@dataclass(frozen=True)
class _MoeLayers:
    layers: int = 0
    num_experts: int = 0
    experts_per_token: int = 0
    expert_params: float = 0.0  # one routed expert of one layer
    linear_params: float = 0.0  # per token: the routed experts it uses, shared experts, router


def _moe_layers(compute: dict[str, Any], hidden: int, num_layers: int) -> _MoeLayers:
    moe = compute.get("moe")
    if not isinstance(moe, dict):
        return _MoeLayers()
    experts, k = _req(moe, "num_experts", "compute.moe"), _req(moe, "experts_per_token", "compute.moe")
    layers = moe.get("num_moe_layers", num_layers)
    expert_params = 3.0 * hidden * _req(moe, "expert_intermediate_size", "compute.moe")  # SwiGLU
    shared = 3.0 * hidden * moe.get("shared_expert_intermediate_size", 0)
    return _MoeLayers(layers, experts, k, expert_params, layers * (k * expert_params + shared + hidden * experts))


def _dense_mlp_params(compute: dict[str, Any], hidden: int, dense_mlp_layers: int) -> float:
    # NemotronH puts its MLPs in blocks of their own (no KV cache, no state), so the count is not the layers'.
    dense_mlp_layers = compute.get("num_mlp_layers", dense_mlp_layers)
    if not isinstance(dense_mlp_layers, int) or isinstance(dense_mlp_layers, bool) or dense_mlp_layers < 0:
        raise BadInput(f"compute.num_mlp_layers: must be a non-negative integer, got {dense_mlp_layers!r}")
    if not dense_mlp_layers:
        return 0.0
    # SwiGLU (gate, up, down); NemotronH's relu2 MLP has up and down only (`mlp_gated: false`).
    matrices = 3.0 if compute.get("mlp_gated", True) else 2.0
    return dense_mlp_layers * matrices * hidden * _req(compute, "intermediate_size", "compute")


@dataclass(frozen=True)
class ParameterCounts:
    """A model's weights as model cards count them. `total`: every weight, the embedding table once when the lm head
    is tied to it. `active`: the layers' weights one token multiplies (attention/state projections, MLP or the routed
    experts it uses plus shared experts and router), without the embedding and the lm head, which is how most cards
    count "A3B"; `lm_head` is there for cards that count the unembedding too (gpt-oss). Norms, convolutions and
    biases are left out (well under 1%)."""

    total: float
    active: float
    lm_head: float


def parameter_counts(shape: ModelShape) -> ParameterCounts:
    lm_head = float(shape.hidden_size * shape.vocab_size)
    embedding = 0.0 if shape.tied_embeddings else lm_head
    all_experts = shape.moe_layers * shape.num_experts * shape.expert_params
    return ParameterCounts(
        total=shape.dense_weight_params + all_experts + embedding, active=shape.linear_params_per_token, lm_head=lm_head
    )


def shape_from_hf_config(config: dict[str, Any], *, name: str = "hf-config") -> ModelShape:
    """The tiny models' shapes (qwen2, qwen3_next HF configs) through the preset path."""
    from toolkit.models.presets import preset_from_hf_config

    preset = preset_from_hf_config(config, name=name)
    compute: dict[str, Any] = {
        "hidden_size": config["hidden_size"],
        "vocab_size": config["vocab_size"],
        "num_attention_heads": config["num_attention_heads"],
        "intermediate_size": config.get("intermediate_size", 4 * config["hidden_size"]),
    }
    if config.get("model_type") == "qwen3_next":
        compute["attention_output_gate"] = True
        compute["moe"] = {
            "num_experts": config["num_experts"],
            "experts_per_token": config["num_experts_per_tok"],
            "expert_intermediate_size": config["moe_intermediate_size"],
            "shared_expert_intermediate_size": config.get("shared_expert_intermediate_size", 0),
        }
    return shape_from_preset({**preset, "compute": compute})


def shape_for_model(model: str) -> ModelShape:
    """A preset name (`data/models/<name>.json`) or a tiny model name (`data/models/tiny/<name>.json`)."""
    from toolkit.models.presets import list_presets, load_preset, presets_dir

    if model in list_presets():
        return shape_from_preset(load_preset(model))
    tiny = presets_dir() / "tiny" / f"{model}.json"
    if tiny.is_file():
        return shape_from_hf_config(json.loads(tiny.read_text())["config"], name=model)
    raise BadInput(f"model: no shape for {model!r}; valid: presets {', '.join(list_presets())} or a tiny model")
