"""The dry engine's checks that need the model's geometry, made before vLLM is imported and before the run folder
exists: the geometry at the run's TP, DCP and hash unit (`geometry_layout.dry_geometry`, the checks `kvtk geometry`
makes), the device cache from the shared defaults (`defaults.dry_device`), the CPU tier against the one minimum
(`core.geometry.min_cpu_tier_bytes`), and every request against the device: one the device can never hold is
refused with the numbers (`progress_guard.geometry_min_blocks`), instead of vLLM's scheduler waiting for blocks
forever. What cannot make two variants differ is said in one line each (`defaults.variant_notices`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolkit.errors import BadInput
from toolkit.workloads.traces import Trace


@dataclass(frozen=True)
class DryPreflight:
    geometry: Any  # core.geometry.HybridGeometry at the run's hash unit
    device: Any  # defaults.DeviceSize
    notices: list[str]


def geometry_dict(geometry: Any) -> dict[str, Any]:
    """`capacity.layout_geometry`'s keys from a `HybridGeometry` (the dry layouts' and the tiny shapes' values)."""
    return {
        "scheduler_block_tokens": geometry.scheduler_block_tokens,
        "blocks_per_scheduler_block": geometry.blocks_per_scheduler_block,
        "cpu_block_bytes": geometry.block_bytes,
    }


def dry_geometry_of(config: Any) -> Any:
    from toolkit.engines.geometry_layout import dry_geometry

    return dry_geometry(
        config.model,
        tp=config.dry.tp,
        dcp=config.dry.dcp,
        hash_block_tokens=config.prefix_match_unit,
        dtype=config.dtype,
    )


def dry_preflight(config: Any, trace: Trace, cpu_bytes: int) -> DryPreflight:
    """The dry run's geometry, device and notices; raises ValueError (one line) for what could never run."""
    from toolkit.engines.geometry_layout import is_preset, parallel_notice
    from toolkit.experiments.defaults import dry_device, variant_notices
    from toolkit.models.presets import load_preset

    geometry = dry_geometry_of(config)
    device = dry_device(config, geometry.block_bytes)
    check_schedulable(trace, geometry, device.blocks, device.source)
    sched = geometry.scheduler_block_tokens
    footprint = sum(-(-trace.prompt_len(r) // sched) for r in trace.requests) * geometry.blocks_per_scheduler_block
    notices = variant_notices(config, geometry, device.blocks, cpu_bytes, footprint)
    if is_preset(config.model):  # vLLM's head-count rules for DCP, as `kvtk geometry` notes them
        notices += filter(None, [parallel_notice(load_preset(config.model), tp=config.dry.tp, dcp=config.dry.dcp)])
    return DryPreflight(geometry, device, notices)


def check_schedulable(trace: Trace, geometry: Any, device_blocks: int, source: str) -> None:
    """The first request whose KV the device cache can never hold at once raises, with what to change."""
    from toolkit.engines.progress_guard import device_token_capacity, geometry_min_blocks, never_schedulable

    usable = device_blocks - 1  # block 0 is vLLM's null block, never allocated
    for r in trace.requests:
        prompt_tokens = trace.prompt_len(r)
        tokens = prompt_tokens + max(0, r.max_tokens - 1)  # the last sampled token never gets KV
        need = geometry_min_blocks(geometry, tokens)
        if need <= usable:
            continue
        capacity = device_token_capacity(lambda t: geometry_min_blocks(geometry, t), usable, tokens)
        least_gib = (need + 1) * geometry.block_bytes / 2**30
        hint = (
            f"the device cache ({source}) is too small; give --device-gib {least_gib:.3g} or more (per rank) or "
            f"--device-blocks {need + 1} or more, or leave the request out with --max-requests"
        )
        raise BadInput(never_schedulable(r.request_id, prompt_tokens, r.max_tokens, need, usable, capacity, hint))
