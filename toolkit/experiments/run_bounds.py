"""The bounds of one experiment as it ran: the runner's phase sequence rebuilt from its config and engine description,
then bounded per phase as the runner bounds it (`phases.request_bounds`, over `oracle.py`). It sits above both, so
`oracle` needs nothing from `phases`."""

from __future__ import annotations

import json
from pathlib import Path

from toolkit.engines.facts import EngineFacts
from toolkit.experiments.config import ExperimentConfig
from toolkit.experiments.oracle import PhaseBounds
from toolkit.experiments.phases import phase_prompts, phase_sequence, request_bounds
from toolkit.workloads.resolve import resolve_trace


def experiment_bounds(config: ExperimentConfig, desc: EngineFacts) -> dict[str, PhaseBounds]:
    """Per phase the `oracle`, `belady` and `lru` of an experiment (an `ExperimentConfig` and its engine
    description): the runner's phase sequence (trace prompts, the pressure traffic sized from `desc`) rebuilt and
    bounded as the runner bounds it (`phases.request_bounds`), so the bounds are for exactly what ran."""
    trace = resolve_trace(
        config.workload.trace, max_requests=config.workload.max_requests, time_scale=config.workload.time_scale
    )
    sequence = phase_sequence(config, phase_prompts(trace), desc, trace)
    return request_bounds(config, sequence, desc)


def folder_bounds(run_dir: str | Path) -> dict[str, PhaseBounds]:
    """`experiment_bounds` of a run folder, from its `params.json` (the config and the engine description)."""
    params = json.loads((Path(run_dir) / "params.json").read_text())
    config = ExperimentConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in params["config"].items()})
    return experiment_bounds(config, EngineFacts.from_json(params["engine"]))
