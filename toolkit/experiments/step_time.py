"""A roofline step-time model: how long one engine step would take on a GPU, from the model's layer shapes.

Per step (all numbers per tensor-parallel rank, i.e. divided by `tp`):

    step_s = overhead_s + max(flops / (peak_flops * compute_efficiency), bytes / (hbm_bytes_per_s * memory_efficiency))

    flops = 2 * linear_params_per_token * scheduled_tokens          projections, MLP or the routed + shared experts
          + 2 * hidden * vocab * sampled_tokens                       lm head, only where a token is sampled
          + sum over attention layers and requests of 4 * q_heads * head_dim * attended(ctx, new)   QK^T and PV
          + recurrent_flops_per_token * state_layers * scheduled_tokens                          GDN / KDA / Mamba

    bytes = weight_bytes_read(step tokens)         dense weights + the experts the step's tokens touch:
                                                   E * (1 - (1 - k / E) ** tokens) per MoE layer
          + kv_bytes_per_token * sum(context)      attention KV read per request (sliding layers: up to the window)
          + 2 * state_bytes * requests             recurrent state read and written per request

`attended(ctx, new)` = sum over the new tokens of the tokens each attends to (ctx + i, capped by a sliding window):
causal prefill is quadratic, decode linear in the context. Prefill steps are compute bound, decode steps bound by
reading weights and KV: the max picks whichever applies. Host<->device copies take `bytes / copy_bytes_per_s`
(default: the profile's PCIe bandwidth per direction times `copy_efficiency`). Not modelled: tensor-parallel
communication, kernel launch gaps beyond `overhead_s`, speculative decoding, quantised weights (`dtype_bytes`).

GPU profiles (peak dense FLOP/s, HBM and PCIe bandwidth) live in `data/gpus/*.json`, each citing its spec sheet.
Model shapes come from a preset's `compute` section (`data/models/*.json`) or a tiny model's HF config.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "fp8": 1}


# ----- GPU profiles ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class GpuProfile:
    name: str
    peak_bf16_flops: float        # dense (no sparsity), per GPU
    peak_fp8_flops: float | None  # dense; None where the GPU has no FP8 tensor cores
    hbm_bytes_per_s: float
    pcie_bytes_per_s: float       # per direction, host <-> device
    memory_bytes: int
    source: str = ""

    def peak_flops(self, dtype: str) -> float:
        if dtype == "fp8":
            if self.peak_fp8_flops is None:
                raise ValueError(f"dtype: {self.name} has no FP8 tensor cores; use bfloat16")
            return self.peak_fp8_flops
        return self.peak_bf16_flops


def gpus_dir() -> Path:
    from toolkit.core.presets import data_dir

    return data_dir() / "gpus"


def list_gpus() -> list[str]:
    return sorted(p.stem for p in gpus_dir().glob("*.json"))


def load_gpu(name: str) -> GpuProfile:
    path = gpus_dir() / f"{name.lower()}.json"
    if not path.is_file():
        raise ValueError(f"gpu: unknown GPU profile {name!r}; valid: {', '.join(list_gpus())}")
    raw = json.loads(path.read_text())
    return GpuProfile(name=raw["name"], peak_bf16_flops=float(raw["peak_bf16_dense_flops"]),
                      peak_fp8_flops=float(raw["peak_fp8_dense_flops"]) if raw.get("peak_fp8_dense_flops") else None,
                      hbm_bytes_per_s=float(raw["hbm_bytes_per_s"]), pcie_bytes_per_s=float(raw["pcie_bytes_per_s"]),
                      memory_bytes=int(raw["memory_bytes"]), source=raw.get("source", ""))


# ----- model shapes ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    """The per-token costs of one model, derived once from its layer shapes (whole model, before TP)."""

    name: str
    hidden_size: int
    vocab_size: int
    linear_params_per_token: float    # weights every token multiplies (attention/state projections, dense MLP,
                                      # routed experts a token uses, shared experts, router)
    dense_weight_params: float        # weights read by every step whatever its tokens (all but routed experts)
    attention: tuple[tuple[int, int, int, int | None], ...] = ()   # (layers, q_heads, kv_heads, window or None)
    head_dim: int = 128
    kv_bytes_per_token_layer: int = 0     # per attention layer (0 for MLA: uses mla_bytes below)
    recurrent_flops_per_token: float = 0.0   # all state layers together
    state_bytes_per_request: int = 0         # all state layers together
    moe_layers: int = 0
    num_experts: int = 0
    experts_per_token: int = 0
    expert_params: float = 0.0            # one routed expert of one layer
    dtype_bytes: int = 2
    notes: dict[str, Any] = field(default_factory=dict)

    def expected_experts_touched(self, tokens: int) -> float:
        """Distinct routed experts per MoE layer that `tokens` tokens use (uniform routing)."""
        if not self.num_experts or tokens <= 0:
            return 0.0
        return self.num_experts * (1.0 - (1.0 - self.experts_per_token / self.num_experts) ** tokens)


def _req(section: dict[str, Any], key: str, where: str) -> int:
    value = section.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{where}.{key}: must be a positive integer, got {value!r}")
    return value


def _state_costs(state: dict[str, Any], hidden: int) -> tuple[float, float, int]:
    """(projection params, recurrent FLOPs per token, state bytes) of ONE state layer, by state type."""
    kind = state.get("type")
    ssm_bytes = DTYPE_BYTES.get(state.get("ssm_dtype", "float32"), 4)
    if kind == "gdn":
        hk, hv = _req(state, "num_k_heads", "state"), _req(state, "num_v_heads", "state")
        dk, dv = _req(state, "head_k_dim", "state"), _req(state, "head_v_dim", "state")
        proj = hidden * (2 * hk * dk + 2 * hv * dv + 2 * hv) + hv * dv * hidden   # in_proj_qkvz, in_proj_ba, out
        return proj, 6.0 * hv * dk * dv, hv * dk * dv * ssm_bytes                # decay, delta update, readout
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
        rank = -(-hidden // 16)   # Mamba's default dt_rank
        proj = hidden * 2 * inner + inner * (rank + 2 * n) + rank * inner + inner * hidden
        return proj, 6.0 * inner * n, inner * n * ssm_bytes
    raise ValueError(f"state.type: the step-time model does not know {kind!r}; valid: gdn, kda, mamba1, mamba2")


def shape_from_preset(preset: dict[str, Any]) -> ModelShape:
    """A `ModelShape` from a preset with a `compute` section (hidden size, heads, MLP or MoE, vocab)."""
    name = preset.get("name", "preset")
    compute = preset.get("compute")
    if not isinstance(compute, dict):
        raise ValueError(f"compute: preset {name!r} has no 'compute' section (hidden_size, num_attention_heads, "
                         f"vocab_size, mlp or moe); the step-time model needs it")
    hidden = _req(compute, "hidden_size", "compute")
    vocab = _req(compute, "vocab_size", "compute")
    q_heads = _req(compute, "num_attention_heads", "compute")
    dtype_bytes = DTYPE_BYTES.get(preset.get("dtype", "bfloat16"), 2)
    attn = preset["attention"]
    gate = 2 if compute.get("attention_output_gate") else 1
    attention: list[tuple[int, int, int, int | None]] = []
    linear = 0.0
    num_layers = 0
    kv_bpt = 0
    head_dim = 128
    if attn.get("type") == "mla":
        layers = _req(attn, "num_layers", "attention")
        rank, rope = _req(attn, "kv_lora_rank", "attention"), _req(attn, "rope_head_dim", "attention")
        head_dim = rank + rope      # absorbed MLA attends in the latent space
        linear += layers * (hidden * (q_heads * head_dim + rank + rope) + q_heads * rank * 2 + q_heads * 128 * hidden)
        attention.append((layers, q_heads, 1, None))
        kv_bpt = (rank + rope) * dtype_bytes
        num_layers += layers
    else:
        layers, kv_heads = _req(attn, "num_layers", "attention"), _req(attn, "num_kv_heads", "attention")
        head_dim = _req(attn, "head_dim", "attention")
        linear += layers * (hidden * q_heads * head_dim * gate + 2 * hidden * kv_heads * head_dim
                            + q_heads * head_dim * hidden)
        attention.append((layers, q_heads, kv_heads, None))
        kv_bpt = 2 * kv_heads * head_dim * dtype_bytes
        num_layers += layers
    if "sliding_window" in preset:
        swa = preset["sliding_window"]
        layers, kv_heads = _req(swa, "num_layers", "sliding_window"), _req(swa, "num_kv_heads", "sliding_window")
        linear += layers * (hidden * q_heads * head_dim * gate + 2 * hidden * kv_heads * head_dim
                            + q_heads * head_dim * hidden)
        attention.append((layers, q_heads, kv_heads, _req(swa, "window_tokens", "sliding_window")))
        num_layers += layers
    recurrent, state_bytes = 0.0, 0
    if "state" in preset:
        layers = _req(preset["state"], "num_layers", "state")
        proj, flops, sbytes = _state_costs(preset["state"], hidden)
        linear += layers * proj
        recurrent, state_bytes = layers * flops, layers * sbytes
        num_layers += layers
    moe = compute.get("moe")
    moe_layers = experts = k = 0
    expert_params = 0.0
    if isinstance(moe, dict):
        experts, k = _req(moe, "num_experts", "compute.moe"), _req(moe, "experts_per_token", "compute.moe")
        moe_layers = moe.get("num_moe_layers", num_layers)
        expert_params = 3.0 * hidden * _req(moe, "expert_intermediate_size", "compute.moe")   # SwiGLU
        shared = 3.0 * hidden * moe.get("shared_expert_intermediate_size", 0)
        linear += moe_layers * (k * expert_params + shared + hidden * experts)
        dense_mlp_layers = num_layers - moe_layers
    else:
        dense_mlp_layers = num_layers
    if dense_mlp_layers:
        linear += dense_mlp_layers * 3.0 * hidden * _req(compute, "intermediate_size", "compute")
    dense_weights = linear - moe_layers * k * expert_params + hidden * vocab
    return ModelShape(name=name, hidden_size=hidden, vocab_size=vocab, linear_params_per_token=linear,
                      dense_weight_params=dense_weights, attention=tuple(attention), head_dim=head_dim,
                      kv_bytes_per_token_layer=kv_bpt, recurrent_flops_per_token=recurrent,
                      state_bytes_per_request=state_bytes, moe_layers=moe_layers, num_experts=experts,
                      experts_per_token=k, expert_params=expert_params, dtype_bytes=dtype_bytes)


def shape_from_hf_config(config: dict[str, Any], *, name: str = "hf-config") -> ModelShape:
    """The tiny models' shapes (qwen2, qwen3_next HF configs) through the preset path."""
    from toolkit.core.presets import preset_from_hf_config

    preset = preset_from_hf_config(config, name=name)
    compute: dict[str, Any] = {"hidden_size": config["hidden_size"], "vocab_size": config["vocab_size"],
                               "num_attention_heads": config["num_attention_heads"],
                               "intermediate_size": config.get("intermediate_size", 4 * config["hidden_size"])}
    if config.get("model_type") == "qwen3_next":
        compute["attention_output_gate"] = True
        compute["moe"] = {"num_experts": config["num_experts"], "experts_per_token": config["num_experts_per_tok"],
                          "expert_intermediate_size": config["moe_intermediate_size"],
                          "shared_expert_intermediate_size": config.get("shared_expert_intermediate_size", 0)}
    return shape_from_preset({**preset, "compute": compute})


def shape_for_model(model: str) -> ModelShape:
    """A preset name (`data/models/<name>.json`) or a tiny model name (`data/models/tiny/<name>.json`)."""
    from toolkit.core.presets import list_presets, load_preset, presets_dir

    if model in list_presets():
        return shape_from_preset(load_preset(model))
    tiny = presets_dir() / "tiny" / f"{model}.json"
    if tiny.is_file():
        return shape_from_hf_config(json.loads(tiny.read_text())["config"], name=model)
    raise ValueError(f"model: no shape for {model!r}; valid: presets {', '.join(list_presets())} or a tiny model")


# ----- the step model -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScheduledWork:
    """One request's share of a step: `new_tokens` computed after `context_tokens` already in its KV."""

    new_tokens: int
    context_tokens: int
    samples: bool   # a token is sampled for it at the end of the step


def attended_tokens(context: int, new: int, window: int | None = None) -> int:
    """Sum over the new tokens of how many tokens each attends to (itself included), causal, window-capped."""
    if new <= 0:
        return 0
    if window is None or context + new <= window:
        return new * context + new * (new + 1) // 2
    below = max(0, min(new, window - context))
    return below * context + below * (below + 1) // 2 + (new - below) * window


@dataclass(frozen=True, kw_only=True)
class StepTimeModel:
    shape: ModelShape
    gpu: GpuProfile
    tp: int = 1
    compute_efficiency: float = 0.5     # achieved / peak tensor FLOP/s in prefill (MFU)
    memory_efficiency: float = 0.8      # achieved / peak HBM bandwidth
    copy_efficiency: float = 0.8        # achieved / PCIe spec per direction, for CPU-tier copies
    copy_bytes_per_s: float | None = None   # overrides the PCIe rate (e.g. from `kvtk bench copy --device cuda`)
    overhead_s: float = 0.0             # fixed per-step cost (scheduling, launches)
    compute_dtype: str = "bfloat16"

    def __post_init__(self) -> None:
        for key in ("compute_efficiency", "memory_efficiency", "copy_efficiency"):
            value = getattr(self, key)
            if not 0 < value <= 1:
                raise ValueError(f"{key}: must be in (0, 1], got {value}")
        if self.tp < 1:
            raise ValueError(f"tp: must be >= 1, got {self.tp}")
        if self.copy_bytes_per_s is not None and self.copy_bytes_per_s <= 0:
            raise ValueError(f"copy_bytes_per_s: must be positive, got {self.copy_bytes_per_s}")

    @property
    def effective_copy_bytes_per_s(self) -> float:
        return self.copy_bytes_per_s or self.gpu.pcie_bytes_per_s * self.copy_efficiency

    def copy_seconds(self, num_bytes: int) -> float:
        return num_bytes / self.effective_copy_bytes_per_s

    def step_flops_bytes(self, work: list[ScheduledWork]) -> tuple[float, float]:
        """Whole-model FLOPs and HBM bytes of one step (before dividing over TP ranks)."""
        s = self.shape
        tokens = sum(w.new_tokens for w in work)
        if tokens == 0:
            return 0.0, 0.0
        sampled = sum(1 for w in work if w.samples)
        flops = 2.0 * s.linear_params_per_token * tokens + 2.0 * s.hidden_size * s.vocab_size * sampled
        flops += s.recurrent_flops_per_token * tokens
        kv_read = 0
        for layers, q_heads, _, window in s.attention:
            attended = sum(attended_tokens(w.context_tokens, w.new_tokens, window) for w in work)
            flops += 4.0 * layers * q_heads * s.head_dim * attended
            kv_read += layers * sum(min(w.context_tokens + w.new_tokens, window or 1 << 62) for w in work)
        weights = s.dense_weight_params + s.moe_layers * s.expected_experts_touched(tokens) * s.expert_params
        num_bytes = (weights * s.dtype_bytes + kv_read * s.kv_bytes_per_token_layer
                     + 2.0 * s.state_bytes_per_request * len(work))
        return flops, num_bytes

    def step_seconds(self, work: list[ScheduledWork]) -> float:
        flops, num_bytes = self.step_flops_bytes(work)
        if not flops:
            return 0.0
        compute = flops / self.tp / (self.gpu.peak_flops(self.compute_dtype) * self.compute_efficiency)
        memory = num_bytes / self.tp / (self.gpu.hbm_bytes_per_s * self.memory_efficiency)
        return self.overhead_s + max(compute, memory)

    def prefill_seconds(self, prompt_tokens: int, chunk_tokens: int = 8192) -> float:
        """One request alone: its prompt in chunks of `chunk_tokens`, the first token sampled with the last."""
        total, done = 0.0, 0
        while done < prompt_tokens:
            n = min(chunk_tokens, prompt_tokens - done)
            total += self.step_seconds([ScheduledWork(n, done, done + n == prompt_tokens)])
            done += n
        return total

    def describe(self) -> dict[str, Any]:
        return {"gpu": self.gpu.name, "tp": self.tp, "compute_efficiency": self.compute_efficiency,
                "memory_efficiency": self.memory_efficiency, "copy_bytes_per_s": self.effective_copy_bytes_per_s,
                "overhead_s": self.overhead_s, "compute_dtype": self.compute_dtype, "model_shape": self.shape.name,
                "linear_params_per_token": self.shape.linear_params_per_token}


def build_step_model(model: str, *, gpu: str = "h200", tp: int = 1, **kwargs: Any) -> StepTimeModel:
    return StepTimeModel(shape=shape_for_model(model), gpu=load_gpu(gpu), tp=tp, **kwargs)


@dataclass(frozen=True, kw_only=True)
class TransferOnlyModel:
    """For a model without compute facts (a preset with no `compute` section): steps take no time and copies take
    `bytes / copy_bytes_per_s`, so TTFT is load time only. `reason` says why; `describe()` reports it."""

    reason: str
    copy_bytes_per_s: float

    def step_seconds(self, work: list[ScheduledWork]) -> float:
        return 0.0

    def copy_seconds(self, num_bytes: int) -> float:
        return num_bytes / self.copy_bytes_per_s

    def describe(self) -> dict[str, Any]:
        return {"transfer_only": self.reason, "copy_bytes_per_s": self.copy_bytes_per_s}


def build_clock_model(model: str, *, gpu: str = "h200", tp: int = 1,
                      **kwargs: Any) -> StepTimeModel | TransferOnlyModel:
    """`build_step_model`, or a `TransferOnlyModel` (with a warning) when the model's preset lacks compute facts."""
    try:
        return build_step_model(model, gpu=gpu, tp=tp, **kwargs)
    except ValueError as exc:
        if not str(exc).startswith("compute:"):
            raise
        import warnings

        profile = load_gpu(gpu)
        rate = kwargs.get("copy_bytes_per_s") or profile.pcie_bytes_per_s * kwargs.get("copy_efficiency", 0.8)
        warnings.warn(f"step-time model: {exc}; modelled TTFT is load time only", stacklevel=2)
        return TransferOnlyModel(reason=str(exc), copy_bytes_per_s=rate)
