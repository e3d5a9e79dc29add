"""A run's model facts, known before an engine starts: the dry engine's layout, the block geometry that sizes the
default CPU budget (and refuses budgets under one block), and the dry engine's step-time model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from toolkit.errors import BadInput

if TYPE_CHECKING:
    from toolkit.engines.layout import Layout
    from toolkit.experiments.config import ExperimentConfig
    from toolkit.perfmodel.step_time import StepModel

# The live engine's default CPU tier when no budget is given: far more than any committed trace needs on the tiny
# models (a tiny Qwen3-Next block id is well under 1 MiB), and small enough for a laptop.
LIVE_DEFAULT_CPU_BYTES = 1 << 30


@dataclass(frozen=True)
class ModelFacts:
    """One model as a run sees it. `layout`: the dry engine's KV cache layout (None for the live and server engines,
    which decide theirs at start); `geometry`: `layout_geometry`'s keys (or `ENGINE_DECIDES`); `step_model`: the dry engine's clock model."""

    layout: Layout | None
    geometry: dict[str, Any]
    step_model: StepModel | None = None


def model_layout(model: str, tp: int = 1, dcp: int = 1, dtype: str = "auto") -> Layout:
    """The dry engine's layout for `model` (`geometry_layout.dry_layout`); a run makes it once (`model_facts`)."""
    from toolkit.engines.geometry_layout import dry_layout

    return dry_layout(model, tp=tp, dcp=dcp, dtype=dtype)


def layout_geometry(layout: Layout) -> dict[str, Any]:
    """scheduler_block_tokens, blocks_per_scheduler_block and cpu_block_bytes of a dry layout."""
    return {
        "scheduler_block_tokens": layout.scheduler_block_tokens,
        "blocks_per_scheduler_block": layout.blocks_per_scheduler_block,
        "cpu_block_bytes": layout.block_bytes,
    }


# Live and server: the engine decides the block size at start; budget by bytes instead of sizing from the trace.
ENGINE_DECIDES = {
    "scheduler_block_tokens": 1,
    "blocks_per_scheduler_block": 1,
    "cpu_block_bytes": 0,
    "fixed_cpu_bytes": LIVE_DEFAULT_CPU_BYTES,
}


def model_facts(config: ExperimentConfig) -> ModelFacts:
    """The layout, geometry and (dry) step-time model of the configured model, each built once."""
    if config.engine != "dry":
        return ModelFacts(layout=None, geometry=dict(ENGINE_DECIDES))
    from toolkit.perfmodel.step_time import build_clock_model

    layout = model_layout(config.model, config.dry.tp, config.dry.dcp, config.dtype)
    step_model = build_clock_model(
        config.model,
        gpu=config.dry.gpu,
        tp=config.dry.tp,
        compute_efficiency=config.dry.compute_efficiency,
        copy_bytes_per_s=config.dry.copy_gbps * 1e9 if config.dry.copy_gbps else None,
    )
    return ModelFacts(layout=layout, geometry=layout_geometry(layout), step_model=step_model)


def check_cpu_budget(cpu_bytes: int, block_bytes: int, world_size: int = 1) -> None:
    """A server-wide CPU budget of at least `core.geometry.min_cpu_tier_bytes` (the one formula: two blocks per
    rank), split over `world_size` ranks as the connector splits it."""
    from toolkit.core.geometry import cpu_tier_too_small, min_cpu_tier_bytes

    if block_bytes and cpu_bytes < min_cpu_tier_bytes(block_bytes, world_size):
        raise BadInput(cpu_tier_too_small("cpu_gib", cpu_bytes, block_bytes, world_size))
