"""A cell's parameters -> the `ExperimentConfig` that `kvtk replay --engine dry` would build for them.

A sweep must run exactly what `kvtk replay` runs, and every option replay learns must work as a sweep axis without
touching this package. So the accepted names are read from the two places replay's configuration comes from, never
from a list kept here:

- the options of `kvtk replay`'s own argument parser (`trace`, `cpu_gib`, `eviction`, `baseline`, `no_fine_grained`,
  and whatever is added later): a cell's values are turned into that command line, parsed by that parser and mapped
  by `toolkit.cli.replay.config_from_args`, so conversions (such as `prefix_match_unit: 0` meaning vLLM's default)
  are replay's own;
- the fields of `ExperimentConfig` that have no option (`seed`, `max_num_seqs`, `pressure_evict_fraction`, ...),
  coerced by their annotated types and set with `dataclasses.replace`.

Names may be spelled with `-` or `_`. `out`, `progress` and `json` belong to the sweep and are refused.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import types
import typing
from functools import lru_cache
from typing import Any

RESERVED = ("out", "progress", "json", "help", "engine_args")
SWEEP_ENGINE = "dry"


class _RaisingParser(argparse.ArgumentParser):
    """Replay's parser, but a bad value raises instead of printing usage and exiting."""

    def error(self, message: str) -> typing.NoReturn:
        raise ValueError(message)


@lru_cache(maxsize=1)
def replay_parser() -> argparse.ArgumentParser:
    from toolkit.cli import replay

    root = _RaisingParser(prog="kvtk", add_help=False)
    sub = root.add_subparsers(dest="command")
    replay.register(sub)
    return sub.choices["replay"]


def replay_options() -> dict[str, argparse.Action]:
    """Replay's options by destination name (`cpu_gib`, `baseline`, ...)."""
    return {a.dest: a for a in replay_parser()._actions if a.option_strings and a.dest not in RESERVED}


def config_fields() -> dict[str, Any]:
    """`ExperimentConfig` fields by name -> resolved type annotation."""
    from toolkit.experiments.runner import ExperimentConfig

    hints = typing.get_type_hints(ExperimentConfig)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(ExperimentConfig) if f.name not in RESERVED}


def accepted_names() -> list[str]:
    return sorted(set(replay_options()) | set(config_fields()))


def normalize_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"parameter name: expected a non-empty string, got {name!r}")
    return name.replace("-", "_")


def check_names(names, where: str) -> None:
    accepted = set(accepted_names())
    for name in names:
        key = normalize_name(name)
        if key in RESERVED:
            raise ValueError(f"{where}: {name!r} is set by the sweep itself (one run folder per cell)")
        if key not in accepted:
            raise ValueError(
                f"{where}: unknown parameter {name!r}; accepted (kvtk replay's options and "
                f"ExperimentConfig's fields): {', '.join(accepted_names())}"
            )


def _argv_for(action: argparse.Action, value: Any) -> list[str]:
    flag = next((s for s in action.option_strings if s.startswith("--")), action.option_strings[0])
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {value!r}")
        return [flag] if value == isinstance(action, argparse._StoreTrueAction) else []
    if isinstance(action, argparse._AppendAction):
        items = value if isinstance(value, (list, tuple)) else [value]
        return [part for item in items for part in (flag, _text(item))]
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [flag, ",".join(_text(v) for v in value)]
    return [flag, _text(value)]


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        raise ValueError(f"expected a scalar, got {value!r}")
    return str(value)


def _coerce(name: str, annotation: Any, value: Any) -> Any:
    """A spec value for a config field without a replay option, checked against the field's annotation."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(name, arg, value)
            except ValueError as exc:
                errors.append(str(exc))
        raise ValueError(errors[0] if errors else f"{name}: bad value {value!r}")
    if origin is tuple:
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)):
            raise ValueError(f"{name}: expected a list, got {value!r}")
        inner = args[0] if args else Any
        return tuple(_coerce(name, inner, v) for v in items if not (isinstance(v, str) and not v.strip()))
    if annotation is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{name}: expected true or false, got {value!r}")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name}: expected an integer, got {value!r}")
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{name}: expected a number, got {value!r}")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise ValueError(f"{name}: expected a string, got {value!r}")
        return value.strip()
    return value


def build_config(params: dict[str, Any], *, out: str | None = None):
    """The `ExperimentConfig` of one cell; a bad name or value raises ValueError naming both."""
    options = replay_options()
    fields = config_fields()
    argv = ["--engine", SWEEP_ENGINE]
    direct: dict[str, Any] = {}
    for raw, value in params.items():
        name = normalize_name(raw)
        check_names([raw], "parameter")
        if name in options:
            try:
                argv += _argv_for(options[name], value)
            except ValueError as exc:
                raise ValueError(f"{raw}={value!r}: {exc}") from None
        else:
            direct[name] = _coerce(name, fields[name], value)
    try:
        args = replay_parser().parse_args(argv)
    except ValueError as exc:
        raise ValueError(f"{_culprit(exc, params)}: {exc}") from None
    from toolkit.cli.replay import config_from_args

    config = config_from_args(args)
    if config.engine != SWEEP_ENGINE:
        raise ValueError(f"engine={config.engine!r}: a sweep runs dry cells only (the live engine: kvtk replay)")
    config = dataclasses.replace(config, **direct, out=out, progress=False)
    return config


def _culprit(exc: ValueError, params: dict[str, Any]) -> str:
    """Which key=value argparse complained about (its message names the option, e.g. 'argument --eviction')."""
    text = str(exc)
    for raw, value in params.items():
        if f"--{normalize_name(raw).replace('_', '-')}" in text or f"--{normalize_name(raw)}" in text:
            return f"{raw}={value!r}"
    return "parameters " + ", ".join(f"{k}={v!r}" for k, v in params.items())


def check_config(config) -> None:
    """The checks `kvtk replay` makes before it starts: variant names, and the model for the dry engine."""
    from toolkit.cli import replay
    from toolkit.engines.base import variants_for

    _call_with_config(variants_for, config)
    check_model = getattr(replay, "_check_model", None)
    if check_model is not None:
        _call_with_config(check_model, config)


def _call_with_config(func, config) -> None:
    """Call `func` with the config fields its signature names (skip it if it needs something else)."""
    kwargs = {}
    for name, param in inspect.signature(func).parameters.items():
        if hasattr(config, name):
            kwargs[name] = getattr(config, name)
        elif param.default is inspect.Parameter.empty:
            return
    func(**kwargs)
