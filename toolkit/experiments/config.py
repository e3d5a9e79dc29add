"""One experiment's configuration, in four sections, built the same way by the CLI, the sweep and the notebooks.

    config = ExperimentConfig.from_params({"trace": "agentic-small", "cpu_gib": 0.5, "tp": 2})
    config.validate()                 # every check `kvtk replay` makes before it starts
    config.workload.trace             # sections: workload, variant, dry, live
    config.trace                      # the same value: a section's fields read through by their flat names

Top level: the engine, the model and the sizes every engine takes. `workload`: the trace and how it is sent;
`variant`: the main connector configuration and its baselines; `dry`: the dry engine's step-time model and
device sizing; `live`: the live and server engines' options. `ExperimentConfig(**flat)` takes the flat names too
(each goes to its section); `from_params` also converts text values and the command line's spellings
(`config_params.py`); the fields themselves: `config_fields.py`. `to_params()` is the flat dict a run folder's params.json holds; `ExperimentConfig(**params)` reads it back.
A config is checked when it is made: a bad value raises ValueError naming the field and the value.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from toolkit import limits
from toolkit.engines.base import DRAFTERS
from toolkit.errors import BadInput
from toolkit.experiments.config_fields import (
    ENGINES,
    FRESH_ENGINES,
    SECTION_OF,
    SECTIONS,
    DryOptions,
    LiveOptions,
    TopLevelOptions,
    VariantOptions,
    WorkloadOptions,
)
from toolkit.host_cpu import MODEL_DTYPES
from toolkit.workloads.phase_names import PHASES

__all__ = ["ENGINES", "PHASES", "ExperimentConfig", "check_model", "default_prefix_match_unit"]


def default_prefix_match_unit(model: str, tp: int = 1, dcp: int = 1) -> int | None:
    """The hash unit when none is given, from the model's geometry at `tp` and `dcp` (`defaults.py`: the largest
    unit up to the platform's attention block that makes fine-grained hits possible; None where none can)."""
    from toolkit.experiments.defaults import default_prefix_match_unit as from_geometry
    from toolkit.models.names import resolve_model_name

    return from_geometry(resolve_model_name(model), tp, dcp)


@dataclass(frozen=True, kw_only=True, init=False)
class ExperimentConfig(TopLevelOptions):
    # the top-level fields first (`TopLevelOptions`), then the sections
    workload: WorkloadOptions = field(default_factory=WorkloadOptions)
    variant: VariantOptions = field(default_factory=VariantOptions)
    dry: DryOptions = field(default_factory=DryOptions)
    live: LiveOptions = field(default_factory=LiveOptions)

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
        self.check()

    def __getattr__(self, name: str) -> Any:
        # Only called for names that are not attributes: a section's field by its flat name.
        section = SECTION_OF.get(name)
        if section is None:
            raise AttributeError(f"{type(self).__name__!s} has no field {name!r}")
        return getattr(object.__getattribute__(self, section), name)

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

    def check(self) -> None:
        """The field checks made when a config is made (names, ranges, combinations); ValueError names the field."""
        _check_engine(self)
        _check_values(self)
        limits.check_experiment_config(self)  # finite sizes within the caps, counts >= 1

    def validate(self, *, model: bool = True) -> None:
        """Every check `kvtk replay` makes before it starts, none of them importing vLLM: the fields, the names
        (model, trace, baselines; a typo gets "did you mean") and (`model`) the model: the dry engine's geometry at
        this TP, DCP and hash unit (the checks `kvtk geometry` makes), or the live engine's dtype on this host.
        The server names no model."""
        from toolkit.engines.base import variants_for
        from toolkit.experiments.input_names import check_names

        self.check()
        check_names(self, model=model)
        variants_for(
            policy=self.variant.policy,
            fine_grained=self.variant.fine_grained,
            eviction=self.variant.eviction,
            baselines=self.variant.baselines,
        )
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


def _check_engine(c: ExperimentConfig) -> None:
    if c.engine not in ENGINES:
        raise BadInput(f"engine: unknown engine {c.engine!r}; valid: {', '.join(ENGINES)}")
    url = c.live.url
    if (c.engine == "server") != (url is not None):
        raise BadInput(
            f"url: the server engine needs --url http://HOST:PORT and only it takes one "
            f"(engine {c.engine!r}, url {url!r})"
        )
    if url is not None and not (isinstance(url, str) and url.startswith(("http://", "https://")) and len(url) <= 2048):
        raise BadInput(f"url: an http:// or https:// base URL is needed, got {url!r}")
    if c.engine == "server" and c.variant.baselines:
        raise BadInput(
            f"baselines: a server is one variant (its own connector); start one server per "
            f"variant and run each (got baselines {list(c.variant.baselines)})"
        )


def _check_values(c: ExperimentConfig) -> None:
    w, d = c.workload, c.dry
    bad = [p for p in w.phases if p not in PHASES]
    if bad or not w.phases:
        raise BadInput(f"phases: unknown phase(s) {bad}; valid phases: {', '.join(PHASES)}")
    if c.engine in FRESH_ENGINES and w.phases[0] != "cold":
        raise BadInput(
            f"phases: {','.join(w.phases)} starts with {w.phases[0]}, but the {c.engine} engine starts every run "
            f"with empty caches, so nothing was stored for it to reuse ({w.phases[0]} would measure a cold run): "
            f"start with cold (--phases {','.join(['cold', *(p for p in w.phases if p != 'cold')])})"
        )
    if d.device_gib is not None and d.device_gib <= 0:
        raise BadInput(f"device_gib: must be positive, got {d.device_gib}")
    if c.cpu_gib is not None and c.cpu_gib <= 0:
        raise BadInput(f"cpu_gib: must be positive, got {c.cpu_gib}")
    if d.window is not None and d.window < 1:
        raise BadInput(f"window: must be >= 1 request in flight, got {d.window}")
    if w.concurrency is not None and not (type(w.concurrency) is int and 1 <= w.concurrency <= 4096):
        raise BadInput(f"concurrency: must be 1..4096 clients, got {w.concurrency!r}")
    if w.concurrency is not None and d.window is not None:
        raise BadInput(
            f"window/concurrency: the open-loop window ({d.window}) and closed-loop clients "
            f"({w.concurrency}) exclude each other; give one"
        )
    if not 0 < d.compute_efficiency <= 1:
        raise BadInput(f"compute_efficiency: must be in (0, 1], got {d.compute_efficiency}")
    if d.copy_gbps is not None and d.copy_gbps <= 0:
        raise BadInput(f"copy_gbps: must be positive, got {d.copy_gbps}")
    if d.speculative not in DRAFTERS:
        raise BadInput(f"speculative: unknown drafter {d.speculative!r}; valid: {', '.join(DRAFTERS)}")
    if d.speculative != "none" and c.engine != "dry":
        raise BadInput(f"speculative: only the dry engine models a drafter here (engine {c.engine!r})")
    if c.dtype not in MODEL_DTYPES:
        raise BadInput(f"dtype: unknown model dtype {c.dtype!r}; valid: {', '.join(MODEL_DTYPES)}")
