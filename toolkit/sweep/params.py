"""A cell's parameters -> the `ExperimentConfig` that `kvtk replay --engine dry` would build for them.

A sweep runs exactly what `kvtk replay` runs: both build their config with `ExperimentConfig.from_params`, which takes
every config field and the command line's spellings (`baseline`, `no_fine_grained`, ...) and converts values as
replay's options do (`toolkit.experiments.config_params`), so an option replay learns is an axis with no change here.
Names may be spelled with `-` or `_`. `out`, `progress` and `json` belong to the sweep and are refused.
"""

from __future__ import annotations

from typing import Any

from toolkit.errors import BadInput
from toolkit.experiments.config import ExperimentConfig
from toolkit.experiments.config_params import accepted_names as config_names
from toolkit.experiments.config_params import normalize_name

RESERVED = ("out", "progress", "json", "help", "engine_args")
SWEEP_ENGINE = "dry"


def accepted_names() -> list[str]:
    return sorted(set(config_names()) - set(RESERVED))


def check_names(names, where: str) -> None:
    accepted = set(accepted_names())
    for name in names:
        key = normalize_name(name)
        if key in RESERVED:
            raise BadInput(f"{where}: {name!r} is set by the sweep itself (one run folder per cell)")
        if key not in accepted:
            raise BadInput(
                f"{where}: unknown parameter {name!r}; accepted (kvtk replay's options and "
                f"ExperimentConfig's fields): {', '.join(accepted_names())}"
            )


def build_config(params: dict[str, Any], *, out: str | None = None) -> ExperimentConfig:
    """The `ExperimentConfig` of one cell; a bad name or value raises ValueError naming both."""
    check_names(params, "parameter")
    config = ExperimentConfig.from_params({"engine": SWEEP_ENGINE, **params, "out": out, "progress": False})
    if config.engine != SWEEP_ENGINE:
        raise BadInput(f"engine={config.engine!r}: a sweep runs dry cells only (the live engine: kvtk replay)")
    return config


def check_config(config: ExperimentConfig) -> None:
    """The checks `kvtk replay` makes before it starts: variant names, and the model for the dry engine."""
    config.validate()
