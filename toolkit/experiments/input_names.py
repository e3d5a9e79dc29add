"""Names a run's config gives, checked before anything heavy, with a "did you mean" for a typo (`models/names.py`):
the model for its engine, the trace (a committed name, a generator, `mooncake:PATH`, a file) and the baselines.
No vLLM, no trace is read or generated here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolkit.errors import BadInput
from toolkit.models.names import unknown_name


def check_names(config: Any, *, model: bool = True) -> None:
    """ValueError, one line naming the field, for the first unknown name."""
    _check_baselines(config.variant.baselines)
    _check_trace(config.workload.trace)
    if model:
        check_model_name(config.engine, config.model)


def check_model_name(engine: str, model: str) -> None:
    if engine == "dry":
        from toolkit.engines.geometry_layout import check_dry_model

        check_dry_model(model)
    elif engine == "live":
        from toolkit.models.registry import MODELS_DATA_DIR

        valid = sorted(p.stem for p in MODELS_DATA_DIR.glob("*.json"))
        if model not in valid:
            raise BadInput(unknown_name("model", "model", model, valid))


def _check_baselines(baselines: tuple[str, ...]) -> None:
    from toolkit.engines.base import BASELINES

    for name in baselines:
        if name not in BASELINES:
            raise BadInput(unknown_name("baseline", "baseline", name, BASELINES))


def _check_trace(spec: Any) -> None:
    """A bare word that names no committed trace, generator or file: unknown, with the closest name. Everything
    else (`kind:...`, paths) is checked by the trace's own resolution."""
    from toolkit.workloads.registry import TRACE_SPECS
    from toolkit.workloads.resolve import committed_traces, traces_dir

    if not isinstance(spec, str) or not spec or ":" in spec or "/" in spec or spec.endswith(".jsonl"):
        return
    if spec in TRACE_SPECS or (traces_dir() / f"{spec}.jsonl").is_file() or Path(spec).is_file():
        return
    committed = committed_traces()
    listed = (
        f"{', '.join(committed) or '-'} (committed); {', '.join(g + '[:key=value,...]' for g in TRACE_SPECS)} "
        f"(generators); mooncake:PATH; mooncake-tiled:COPIES:PATH; or a path to a .jsonl file"
    )
    raise BadInput(unknown_name("trace", "trace", spec, [*committed, *TRACE_SPECS], listed))
