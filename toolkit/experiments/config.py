"""One experiment's configuration, in four sections, built the same way by the CLI, the sweep and the notebooks.

    config = ExperimentConfig.from_params({"trace": "agentic-small", "cpu_gib": 0.5, "tp": 2})
    config.validate()                 # every check `kvtk replay` makes before it starts
    config.workload.trace             # sections: workload, variant, dry, live

Top level: the engine, the model and the sizes every engine takes. `workload`: the trace and how it is sent;
`variant`: the main connector configuration and its baselines; `dry`: the dry engine's step-time model and
device sizing; `live`: the live and server engines' options. `ExperimentConfig(**flat)` takes the flat names too
(each goes to its section); `from_params` also converts text values and the command line's spellings
(`config_params.py`); the fields themselves: `config_fields.py`. `to_params()` is the flat dict a run folder's params.json holds; `ExperimentConfig(**params)` reads it back.
A config's values are checked when it is made (`config_checks.py`): a bad value raises BadInput naming the field
and the value.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from toolkit.experiments.config_checks import check_fields
from toolkit.experiments.config_fields import ENGINES, SECTION_OF, SECTIONS, ConfigFields
from toolkit.workloads.phase_names import PHASES

__all__ = ["ENGINES", "PHASES", "ExperimentConfig", "check_model", "default_prefix_match_unit"]


def default_prefix_match_unit(model: str, tp: int = 1, dcp: int = 1) -> int | None:
    """The hash unit when none is given, from the model's geometry at `tp` and `dcp` (`defaults.py`: the largest
    unit up to the platform's attention block that makes fine-grained hits possible; None where none can)."""
    from toolkit.experiments.defaults import default_prefix_match_unit as from_geometry
    from toolkit.models.names import resolve_model_name

    return from_geometry(resolve_model_name(model), tp, dcp)


@dataclass(frozen=True, kw_only=True, init=False)
class ExperimentConfig(ConfigFields):
    # the fields (`config_fields.ConfigFields`): the top-level ones first, then the sections

    def __init__(self, **values: Any) -> None:
        """Top-level fields and sections by name, or any section's field by its flat name (`trace=`, `tp=`).
        `prefix_match_unit` not given: `default_prefix_match_unit(model, tp, dcp)`, the one place that default
        lives. `model`: a preset's Hugging Face id names the preset (`models/names.py`)."""
        from toolkit.models.names import resolve_model_name

        sections = {name: values.pop(name, None) or cls() for name, cls in SECTIONS.items()}
        moved: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
        for name in [n for n in values if n in SECTION_OF]:
            moved[SECTION_OF[name]][name] = values.pop(name)
        top = {f.name for f in fields(self)} - set(SECTIONS)
        unknown = sorted(set(values) - top)
        if unknown:
            raise TypeError(f"ExperimentConfig: unexpected field(s) {', '.join(unknown)}")
        for f in fields(self):
            if f.name in SECTIONS:
                value = replace(sections[f.name], **moved[f.name])
            elif f.name == "model":
                value = resolve_model_name(values.get("model", f.default))  # a preset's Hugging Face id: the preset
            elif f.name in values:
                value = values[f.name]
            else:
                value = f.default
            object.__setattr__(self, f.name, value)
        if "prefix_match_unit" not in values:  # after the sections: the default depends on TP and DCP
            unit = default_prefix_match_unit(self.model, self.dry.tp, self.dry.dcp)
            object.__setattr__(self, "prefix_match_unit", unit)
        check_fields(self)

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> ExperimentConfig:
        """A config from flat parameters as the command line and sweep specs give them (`config_params.py`)."""
        from toolkit.experiments.config_params import canonical_params

        return cls(**canonical_params(params))

    def to_params(self) -> dict[str, Any]:
        """Every field by its flat name: what params.json holds and `from_params` reads back."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out.update(
                {g.name: getattr(value, g.name) for g in fields(value)} if f.name in SECTIONS else {f.name: value}
            )
        return out

    def replace(self, **changes: Any) -> ExperimentConfig:
        """A copy with `changes` (flat names or sections) applied; the hash unit stays as resolved."""
        return type(self)(**{**self.to_params(), **changes})

    def validate(self, *, model: bool = True) -> None:
        """Every check `kvtk replay` makes before it starts, none of them importing vLLM: the values alone (names
        from a list, ranges and caps, combinations: `config_checks.check_fields`, also made when a config is made),
        the names it gives (model, trace, baselines; a typo gets "did you mean") and (`model`) the model: the dry
        engine's geometry at this TP, DCP and hash unit (the checks `kvtk geometry` makes), or the live engine's
        dtype on this host. The server names no model. What needs the trace, a server or a file the config names
        (I/O) is checked by the run's plan before the run folder exists (`plan_checks.py`)."""
        from toolkit.experiments.input_names import check_names

        check_fields(self)  # the policy and connector among them; the baselines: check_names, with "did you mean"
        check_names(self, model=model)
        if model:
            check_model(
                self.engine, self.model, self.dtype, tp=self.dry.tp, dcp=self.dry.dcp, unit=self.prefix_match_unit
            )


def check_model(
    engine: str, model: str, dtype: str = "auto", *, tp: int = 1, dcp: int = 1, unit: int | None = None
) -> None:
    """Unknown names list the valid ones; the dry engine's geometry at `tp`, `dcp` and hash unit `unit` (one
    checker: `geometry_layout.dry_geometry`); float32 for a bf16-only architecture is refused before anything starts."""
    if engine == "dry":
        from toolkit.engines.geometry_layout import dry_geometry

        dry_geometry(model, tp=tp, dcp=dcp, hash_block_tokens=unit, dtype=dtype)
    elif engine == "live":
        from toolkit.host_cpu import live_model_dtype
        from toolkit.models.registry import load_entry

        live_model_dtype(dtype, architecture=load_entry(model).architecture)
