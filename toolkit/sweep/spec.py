"""Sweep specs: fixed parameters, axes to cross, explicit extra cells; parsed with safe loaders, validated up front.

    name: eviction-by-workload          # optional, names the default sweep folder
    fixed:                              # every cell gets these
      phases: [cold, hot, pressure, replay]
      baselines: [no_offload]
    axes:                               # the cross product of these
      trace: [fewshot-small, agentic-small]
      eviction: [slru, lru]
    cells:                              # optional extra cells (fixed parameters apply; axes do not)
      - {trace: "fewshot:num_requests=64", eviction: slru}
    resources: {num_cpus: 1, memory_gib: 2}   # what one Ray task declares (optional)

Parameter names are those of `kvtk replay --engine dry` (see `params.py`). Every cell is checked by building its
`ExperimentConfig` and running replay's own checks before anything starts, so a bad value fails in seconds with
the key and the value, not hours later on a cluster. The file is read strictly (`strict_load.py`): at most 1 MiB,
UTF-8, no YAML anchors/aliases, no duplicate keys, nesting <= 64 levels; each cell's trace spec is resolved (a file
exists, a generator's parameters are in range) and its GPU profile exists before any cell runs.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.errors import BadInput
from toolkit.sweep import params as prm

TOP_LEVEL_KEYS = ("name", "description", "fixed", "axes", "cells", "resources")
RESOURCE_KEYS = ("num_cpus", "memory_gib")
DEFAULT_RESOURCES = {"num_cpus": 1.0, "memory_gib": 2.0}
MAX_CELLS = 100_000


@dataclass(frozen=True)
class Cell:
    """One experiment of the grid: its index, its parameters (fixed + its axis values), and a stable id."""

    index: int
    params: dict[str, Any]
    varying: tuple[str, ...]  # the names that differ between cells (axes and extra-cell keys)

    @property
    def key(self) -> str:
        """Content hash of the parameters: a resumed sweep finds a cell's folder by what it runs, not its index."""
        canon = json.dumps(self.params, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(canon.encode()).hexdigest()[:10]

    @property
    def cell_id(self) -> str:
        return f"cell-{self.index:03d}-{self.key}"

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={_short(self.params[k])}" for k in self.varying if k in self.params) or "(fixed)"


def _short(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "+".join(str(v) for v in value) or "-"
    return str(value)


@dataclass(frozen=True)
class SweepSpec:
    name: str
    fixed: dict[str, Any]
    axes: dict[str, list[Any]]
    extra_cells: list[dict[str, Any]]
    resources: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_RESOURCES))
    description: str = ""

    def cells(self) -> list[Cell]:
        varying = list(self.axes)
        for extra in self.extra_cells:
            varying.extend(k for k in extra if k not in varying and k not in self.fixed)
        out: list[Cell] = []
        seen: set[str] = set()
        names = list(self.axes)
        # No axes: the grid is the extra cells alone (not one fixed-only cell more); no cells: one fixed-only cell.
        combos = itertools.product(*(self.axes[n] for n in names)) if names else ([] if self.extra_cells else [()])
        for combo in combos:
            out.append(Cell(len(out), {**self.fixed, **dict(zip(names, combo))}, tuple(varying)))
        for extra in self.extra_cells:
            out.append(Cell(len(out), {**self.fixed, **extra}, tuple(varying)))
        for cell in out:
            if cell.key in seen:
                raise BadInput(f"cells: cell {cell.index} ({cell.label}) repeats an earlier cell's parameters")
            seen.add(cell.key)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "fixed": self.fixed,
            "axes": self.axes,
            "cells": self.extra_cells,
            "resources": self.resources,
        }


def load_spec(path: str | Path) -> SweepSpec:
    """Read a YAML (`.yaml`/`.yml`) or JSON spec with safe loaders and validate it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"spec: no such file {str(path)!r}")
    from toolkit.strict_load import StrictLoadError, json_loads, read_bounded, yaml_loads

    where = f"spec {path}"
    text = read_bounded(path, where)
    if path.suffix.lower() in (".yaml", ".yml"):
        data = yaml_loads(text, where)
    else:
        try:
            data = json_loads(text)
        except json.JSONDecodeError as exc:
            raise BadInput(f"{where} line {exc.lineno}: not valid JSON: {exc.msg}") from None
        except StrictLoadError as exc:
            raise BadInput(f"{where}: {exc}") from None
    return parse_spec(data, default_name=path.stem)


def parse_spec(data: Any, *, default_name: str = "sweep") -> SweepSpec:
    """Validate a spec's structure and names; values are checked per cell by `validate_cells`."""
    if not isinstance(data, dict):
        raise BadInput(f"spec: expected a mapping with keys {', '.join(TOP_LEVEL_KEYS)}, got {type(data).__name__}")
    unknown = [k for k in data if k not in TOP_LEVEL_KEYS]
    if unknown:
        raise BadInput(f"spec: unknown key {unknown[0]!r}; valid keys: {', '.join(TOP_LEVEL_KEYS)}")
    from toolkit.limits import check_name, path_component

    name = data.get("name", path_component(default_name))
    try:
        check_name(name, "name")  # it names the default sweep folder
    except ValueError:
        raise BadInput(
            f"name: expected a plain non-empty string, got {name!r:.80} (letters, digits and ._+=@,- "
            f"only, no '/' or '..')"
        ) from None
    fixed = _mapping(data.get("fixed") or {}, "fixed")
    axes_raw = _mapping(data.get("axes") or {}, "axes")
    axes: dict[str, list[Any]] = {}
    for key, values in axes_raw.items():
        if not isinstance(values, list) or not values:
            raise BadInput(f"axes.{key}: expected a non-empty list of values, got {values!r}")
        if len({json.dumps(v, sort_keys=True, default=str) for v in values}) != len(values):
            raise BadInput(f"axes.{key}: values repeat: {values!r}")
        axes[key] = values
    both = [k for k in axes if k in fixed]
    if both:
        raise BadInput(f"axes.{both[0]}: also set in fixed; a parameter is either fixed or an axis")
    cells_raw = data.get("cells") or []
    if not isinstance(cells_raw, list):
        raise BadInput(f"cells: expected a list of mappings, got {cells_raw!r}")
    extra = [_mapping(c, f"cells[{i}]") for i, c in enumerate(cells_raw)]
    for where, names in [("fixed", fixed), ("axes", axes)] + [(f"cells[{i}]", c) for i, c in enumerate(extra)]:
        for key in names:
            prm.check_names([key], f"{where}.{key}")
    if not axes and not extra:
        raise BadInput("spec: no cells: give `axes` to cross or explicit `cells`")
    total = 1
    for values in axes.values():
        total *= len(values)
    if total + len(extra) > MAX_CELLS:
        raise BadInput(f"axes: {total + len(extra)} cells, more than the limit {MAX_CELLS}")
    resources = dict(DEFAULT_RESOURCES)
    for key, value in _mapping(data.get("resources") or {}, "resources").items():
        if key not in RESOURCE_KEYS:
            raise BadInput(f"resources: unknown key {key!r}; valid keys: {', '.join(RESOURCE_KEYS)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise BadInput(f"resources.{key}: expected a positive number, got {value!r}")
        resources[key] = float(value)
    description = data.get("description", "")
    if not isinstance(description, str):
        raise BadInput(f"description: expected a string, got {description!r}")
    return SweepSpec(
        name=name.strip(), fixed=fixed, axes=axes, extra_cells=extra, resources=resources, description=description
    )


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadInput(f"{where}: expected a mapping of parameter: value, got {value!r}")
    bad = [k for k in value if not isinstance(k, str) or not k]
    if bad:
        raise BadInput(f"{where}: parameter names must be strings, got {bad[0]!r}")
    return dict(value)


def validate_cells(cells: list[Cell]) -> None:
    """Build every cell's config and run replay's checks; the first bad cell raises with its label."""
    from toolkit.perfmodel.step_time import load_gpu
    from toolkit.workloads.resolve import check_trace_spec

    checked: set[str] = set()
    for cell in cells:
        try:
            config = prm.build_config(cell.params)
            check_trace_spec(config.workload.trace)  # resolvable: a file that exists, generator parameters in range
            load_gpu(config.dry.gpu)
            # replay's checks depend on a few names only; one pass per distinct config is enough
            signature = repr(config)
            if signature not in checked:
                prm.check_config(config)
                checked.add(signature)
        except (ValueError, FileNotFoundError) as exc:
            raise BadInput(f"cell {cell.index} ({cell.label}): {exc}") from None
