"""A roofline step-time model: how long one engine step would take on a GPU, from the model's layer shapes.

Per step (all numbers per tensor-parallel rank, i.e. divided by `tp`):

    step_s = overhead_s + max(flops / (peak_flops * compute_efficiency), bytes / (hbm_bytes_per_s * memory_efficiency))

(a profile with `"roofline": "sum"`, as `kvtk calibrate` fits for a CPU, adds the two instead of taking the max)

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
Model shapes (`model_shape.py`) come from a preset's `compute` section (`data/models/*.json`) or a tiny model's HF
config.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Protocol

from toolkit.errors import BadInput
from toolkit.perfmodel.model_shape import (  # noqa: F401  (re-exported: the step model's inputs)
    DTYPE_BYTES,
    ModelShape,
    shape_for_model,
    shape_from_hf_config,
    shape_from_preset,
)

# ----- GPU profiles ---------------------------------------------------------------------------------------------


ROOFLINES = ("max", "sum")


@dataclass(frozen=True, kw_only=True)
class GpuProfile:
    name: str
    peak_bf16_flops: float  # dense (no sparsity), per GPU
    peak_fp8_flops: float | None  # dense; None where the GPU has no FP8 tensor cores
    hbm_bytes_per_s: float
    pcie_bytes_per_s: float  # per direction, host <-> device
    memory_bytes: int
    source: str = ""
    step_overhead_s: float = 0.0  # fixed cost per step: 0 for spec-sheet GPUs, fitted by `kvtk calibrate`
    copy_latency_s: float = 0.0  # fixed cost per CPU-tier load, before its bytes move (fitted, as above)
    # How a step's compute and memory times combine: "max" where they overlap (a GPU streams weights while its
    # tensor cores work), "sum" where one core runs one op at a time and each op waits for its own bytes (a
    # CPU profile from `kvtk calibrate`).
    roofline: str = "max"

    def __post_init__(self) -> None:
        if self.roofline not in ROOFLINES:
            raise BadInput(f"roofline: must be one of {', '.join(ROOFLINES)}, got {self.roofline!r}")

    def peak_flops(self, dtype: str) -> float:
        if dtype == "fp8":
            if self.peak_fp8_flops is None:
                raise BadInput(f"dtype: {self.name} has no FP8 tensor cores; use bfloat16")
            return self.peak_fp8_flops
        return self.peak_bf16_flops


def gpus_dir() -> Path:
    from toolkit.models.presets import data_dir

    return data_dir() / "gpus"


def list_gpus() -> list[str]:
    return sorted(p.stem for p in gpus_dir().glob("*.json"))


def load_gpu(name: str) -> GpuProfile:
    """A profile by name (`data/gpus/NAME.json`) or by path (`PROFILE.json`, e.g. from `kvtk calibrate`)."""
    if name.endswith(".json") or "/" in name:
        path = Path(name).expanduser()
        if not path.is_file():
            raise BadInput(f"gpu: no profile file {str(path)!r}")
    else:
        path = gpus_dir() / f"{name.lower()}.json"
        if not path.is_file():
            raise BadInput(
                f"gpu: unknown GPU profile {name!r}; valid: {', '.join(list_gpus())}, or a PROFILE.json path"
            )
    try:
        raw = json.loads(path.read_text())
        return GpuProfile(
            name=raw["name"],
            peak_bf16_flops=float(raw["peak_bf16_dense_flops"]),
            peak_fp8_flops=float(raw["peak_fp8_dense_flops"]) if raw.get("peak_fp8_dense_flops") else None,
            hbm_bytes_per_s=float(raw["hbm_bytes_per_s"]),
            pcie_bytes_per_s=float(raw["pcie_bytes_per_s"]),
            memory_bytes=int(raw["memory_bytes"]),
            source=raw.get("source", ""),
            step_overhead_s=float(raw.get("step_overhead_s", 0.0)),
            copy_latency_s=float(raw.get("copy_latency_s", 0.0)),
            roofline=str(raw.get("roofline", "max")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise BadInput(f"gpu: {path} is not a GPU profile ({type(exc).__name__}: {exc})") from None


# ----- the step model -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScheduledWork:
    """One request's share of a step: `new_tokens` computed after `context_tokens` already in its KV."""

    new_tokens: int
    context_tokens: int
    samples: bool  # a token is sampled for it at the end of the step


def attended_tokens(context: int, new: int, window: int | None = None) -> int:
    """Sum over the new tokens of how many tokens each attends to (itself included), causal, window-capped."""
    if new <= 0:
        return 0
    if window is None or context + new <= window:
        return new * context + new * (new + 1) // 2
    below = max(0, min(new, window - context))
    return below * context + below * (below + 1) // 2 + (new - below) * window


class StepModel(Protocol):
    """What the dry engine's clock asks of a step model (`StepTimeModel`, `TransferOnlyModel`, both frozen): one
    step's seconds, a decode step's, a copy's (`copy_seconds(0)` is the fixed latency), and the run's record."""

    def step_seconds(self, work: list[ScheduledWork]) -> float: ...

    def decode_seconds(self, contexts: list[int]) -> float: ...

    def copy_seconds(self, num_bytes: int) -> float: ...

    def describe(self) -> dict[str, Any]: ...


@dataclass(frozen=True, kw_only=True)
class StepTimeModel:
    shape: ModelShape
    gpu: GpuProfile
    tp: int = 1
    compute_efficiency: float = 0.5  # achieved / peak tensor FLOP/s in prefill (MFU)
    memory_efficiency: float = 0.8  # achieved / peak HBM bandwidth
    copy_efficiency: float = 0.8  # achieved / PCIe spec per direction, for CPU-tier copies
    copy_bytes_per_s: float | None = None  # overrides the PCIe rate (e.g. from `kvtk bench copy --device cuda`)
    overhead_s: float = 0.0  # fixed per-step cost (scheduling, launches)
    compute_dtype: str = "bfloat16"

    def __post_init__(self) -> None:
        for key in ("compute_efficiency", "memory_efficiency", "copy_efficiency"):
            value = getattr(self, key)
            if not 0 < value <= 1:
                raise BadInput(f"{key}: must be in (0, 1], got {value}")
        if self.tp < 1:
            raise BadInput(f"tp: must be >= 1, got {self.tp}")
        if self.copy_bytes_per_s is not None and self.copy_bytes_per_s <= 0:
            raise BadInput(f"copy_bytes_per_s: must be positive, got {self.copy_bytes_per_s}")

    @property
    def effective_copy_bytes_per_s(self) -> float:
        return self.copy_bytes_per_s or self.gpu.pcie_bytes_per_s * self.copy_efficiency

    def copy_seconds(self, num_bytes: int) -> float:
        return self.gpu.copy_latency_s + num_bytes / self.effective_copy_bytes_per_s

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
        num_bytes = (
            weights * s.dtype_bytes + kv_read * s.kv_bytes_per_token_layer + 2.0 * s.state_bytes_per_request * len(work)
        )
        return flops, num_bytes

    def step_seconds(self, work: list[ScheduledWork]) -> float:
        flops, num_bytes = self.step_flops_bytes(work)
        if not flops:
            return 0.0
        return self._roofline_seconds(flops, num_bytes)

    def _roofline_seconds(self, flops: float, num_bytes: float) -> float:
        """One step's time from its whole-model FLOPs and bytes: split over the TP ranks, combined as the profile's
        roofline says (`step_seconds` and `decode_seconds` both end here, so they agree bit for bit)."""
        compute = flops / self.tp / (self.gpu.peak_flops(self.compute_dtype) * self.compute_efficiency)
        memory = num_bytes / self.tp / (self.gpu.hbm_bytes_per_s * self.memory_efficiency)
        if self.gpu.roofline == "sum":
            return self.overhead_s + compute + memory
        return self.overhead_s + max(compute, memory)

    def decode_seconds(self, contexts: list[int]) -> float:
        """`step_seconds` of a decode-only step (one new, sampled token per request after `contexts` tokens),
        with the same floating-point operations in the same order, without building `ScheduledWork`s."""
        if not contexts:
            return 0.0
        flops, num_bytes = self._decode_flops_bytes(contexts)
        if not flops:
            return 0.0
        return self._roofline_seconds(flops, num_bytes)

    def decode_stretch_seconds(self, contexts: list[int], steps: int) -> Iterator[float]:
        """`decode_seconds` of `steps` consecutive decode steps from `contexts`, each a token further per request
        (the dry engine's decode stretches). Without sliding windows a step's FLOPs and bytes grow by the same
        amount each step (every request attends to one token more), so step j is the first step's plus j
        increments; with a window, step by step. Lazy: a stretch cut short by an arrival computes no more."""
        if steps <= 0 or not contexts:
            return iter(())
        s = self.shape
        if any(window is not None for *_, window in s.attention):
            return (self.decode_seconds([c + j for c in contexts]) for j in range(steps))
        flops, num_bytes = self._decode_flops_bytes(contexts)
        if not flops:
            return iter([0.0] * steps)
        tokens = len(contexts)
        d_flops = sum(4.0 * layers * q_heads * s.head_dim * tokens for layers, q_heads, _, _ in s.attention)
        d_bytes = sum(layers * tokens for layers, *_ in s.attention) * s.kv_bytes_per_token_layer
        roofline = self._roofline_seconds
        return (roofline(flops + j * d_flops, num_bytes + j * d_bytes) for j in range(steps))

    def _decode_flops_bytes(self, contexts: list[int]) -> tuple[float, float]:
        s = self.shape
        tokens = len(contexts)
        flops = 2.0 * s.linear_params_per_token * tokens + 2.0 * s.hidden_size * s.vocab_size * tokens
        flops += s.recurrent_flops_per_token * tokens
        kv_read = 0
        for layers, q_heads, _, window in s.attention:
            # One new token attends to min(context + 1, window) tokens, and reads that much KV.
            attended = sum(contexts) + tokens if window is None else sum(min(c + 1, window) for c in contexts)
            flops += 4.0 * layers * q_heads * s.head_dim * attended
            kv_read += layers * attended
        weights = s.dense_weight_params + s.moe_layers * s.expected_experts_touched(tokens) * s.expert_params
        num_bytes = (
            weights * s.dtype_bytes + kv_read * s.kv_bytes_per_token_layer + 2.0 * s.state_bytes_per_request * tokens
        )
        return flops, num_bytes

    def prefill_seconds(self, prompt_tokens: int, chunk_tokens: int = 8192) -> float:
        """One request alone: its prompt in chunks of `chunk_tokens`, the first token sampled with the last."""
        total, done = 0.0, 0
        while done < prompt_tokens:
            n = min(chunk_tokens, prompt_tokens - done)
            total += self.step_seconds([ScheduledWork(n, done, done + n == prompt_tokens)])
            done += n
        return total

    def describe(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu.name,
            "tp": self.tp,
            "compute_efficiency": self.compute_efficiency,
            "memory_efficiency": self.memory_efficiency,
            "copy_bytes_per_s": self.effective_copy_bytes_per_s,
            "overhead_s": self.overhead_s,
            "compute_dtype": self.compute_dtype,
            "model_shape": self.shape.name,
            "linear_params_per_token": self.shape.linear_params_per_token,
        }


def build_step_model(model: str, *, gpu: str = "h200", tp: int = 1, **kwargs: Any) -> StepTimeModel:
    """The step model of `model` on the profile `gpu` (a name or a PROFILE.json path); the profile's fitted
    per-step overhead applies unless `overhead_s` is given."""
    profile = load_gpu(gpu)
    kwargs.setdefault("overhead_s", profile.step_overhead_s)
    return StepTimeModel(shape=shape_for_model(model), gpu=profile, tp=tp, **kwargs)


@dataclass(frozen=True, kw_only=True)
class TransferOnlyModel:
    """For a model without compute facts (a preset with no `compute` section): steps take no time and copies take
    `bytes / copy_bytes_per_s`, so TTFT is load time only. `reason` says why; `describe()` reports it."""

    reason: str
    copy_bytes_per_s: float

    def step_seconds(self, work: list[ScheduledWork]) -> float:
        return 0.0

    def decode_seconds(self, contexts: list[int]) -> float:
        return 0.0

    def copy_seconds(self, num_bytes: int) -> float:
        return num_bytes / self.copy_bytes_per_s

    def describe(self) -> dict[str, Any]:
        return {"transfer_only": self.reason, "copy_bytes_per_s": self.copy_bytes_per_s}


def build_clock_model(
    model: str, *, gpu: str = "h200", tp: int = 1, **kwargs: Any
) -> StepTimeModel | TransferOnlyModel:
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
