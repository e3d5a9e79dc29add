"""Flat parameters (a command line's options, a sweep cell, a params.json) -> `ExperimentConfig` field values.

The names are the config's fields, spelled with `-` or `_`, a section by its name with a mapping of its fields, and
three spellings of the command line: `baseline` (repeatable, comma-separated: adds to `baselines`), `no_fine_grained`
and `no_negative_control` (true flips the field). A value of None means the field's default.

Values are converted as `kvtk replay` converts its words, so a sweep cell and a command line mean the same:
- the fields replay has an option for (`COMMAND_LINE_FIELDS`) take text too (`cpu_gib: "0.5"`, `tp: "4"`, `phases:
  "cold,hot"`), and a bad value is refused in argparse's words, naming the option (`argument --cpu-gib: invalid
  float value: 'lots'`);
- the others take values of their annotated type only (`seed: expected an integer, got 'x'`).
`prefix_match_unit: 0` asks for vLLM's default hash unit (the config's None); not given, the model's geometry at
the run's TP and DCP decides (`config.default_prefix_match_unit`).
"""

from __future__ import annotations

import types
import typing
from typing import Any, Callable

from toolkit.errors import BadInput
from toolkit.experiments.config_fields import SECTIONS, TopLevelOptions, option_fields


def field_types() -> dict[str, Any]:
    """Every field by its flat name -> its resolved annotation (a section by its name -> its class)."""
    out = typing.get_type_hints(TopLevelOptions)
    out.update({name: cls for name, cls in SECTIONS.items()})
    for cls in SECTIONS.values():
        out.update(typing.get_type_hints(cls))
    return out


def _option_kind(annotation: Any) -> Any:
    """The converter a field's option applies to its word: int, float or str (a list: its comma-separated word)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    base = args[0] if typing.get_origin(annotation) in (typing.Union, types.UnionType) else annotation
    return str if typing.get_origin(base) is tuple else base


def _options() -> list[tuple[str, dict[str, Any], Any]]:
    """Every field with a replay option: (name, metadata, annotation)."""
    annotations = field_types()
    return [(f.name, dict(f.metadata), annotations[f.name]) for f in option_fields()]


# The command line's own spellings of three fields: the name of their option -> the field.
ALIASES = {meta["flag"]: name for name, meta, _ in _options() if meta.get("flag", name) != name}
# Fields with a `kvtk replay` option, by the converter that option applies to its word (None: a true/false flag).
COMMAND_LINE_FIELDS: dict[str, Any] = {
    name: None if annotation is bool else _option_kind(annotation)
    for name, meta, annotation in _options()
    if meta.get("flag", name) == name
}


def choices() -> dict[str, tuple[str, ...]]:
    """The options whose one word is checked against a list, as replay's parser checks them (a comma-separated
    list, such as phases, is checked by the config)."""
    return {
        name: tuple(meta["choices"]) for name, meta, annotation in _options() if "choices" in meta and annotation is str
    }


def accepted_names() -> list[str]:
    """Every name `from_params` takes."""
    return sorted(set(field_types()) | set(ALIASES))


def normalize_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise BadInput(f"parameter name: expected a non-empty string, got {name!r}")
    return name.replace("-", "_")


def canonical_params(params: dict[str, Any]) -> dict[str, Any]:
    """Field values by flat name; a bad name or value raises ValueError naming both."""
    annotations = field_types()
    flat: dict[str, tuple[Any, Any]] = {}  # name -> (the name as given, value)
    for raw, value in params.items():
        name = normalize_name(raw)
        if name in SECTIONS and isinstance(value, dict):
            flat.update({normalize_name(k): (f"{raw}.{k}", v) for k, v in value.items()})
        else:
            flat[name] = (raw, value)
    out: dict[str, Any] = {}
    for name, (raw, value) in [(n, rv) for n, rv in flat.items() if n not in ALIASES]:
        if name not in annotations or name in SECTIONS:
            raise BadInput(f"parameter: unknown parameter {raw!r}; accepted: {', '.join(accepted_names())}")
        if value is not None:
            out[name] = convert(name, raw, value, annotations[name])
    for alias, (raw, value) in [(n, rv) for n, rv in flat.items() if n in ALIASES]:
        _apply_alias(out, alias, raw, value)  # after the fields: a command line's baseline wins over a preset's
    if out.get("prefix_match_unit") == 0:
        out["prefix_match_unit"] = None  # 0 asks for vLLM's default; not given, the config picks it from the model
    return out


def _apply_alias(out: dict[str, Any], alias: str, raw: Any, value: Any) -> None:
    if value is None:
        return
    if alias == "baseline":
        items = value if isinstance(value, (list, tuple)) else [value]
        named = [part for item in items for part in _word(raw, item).split(",") if part]
        out["baselines"] = tuple(named)
        return
    if not isinstance(value, bool):
        raise BadInput(f"{raw}={value!r}: expected true or false, got {value!r}")
    out[ALIASES[alias]] = not value


def convert(name: str, raw: Any, value: Any, annotation: Any) -> Any:
    """One value: by replay's option converter where the field has one, else by the field's annotation."""
    if name not in COMMAND_LINE_FIELDS:
        return coerce(name, annotation, value)
    kind = COMMAND_LINE_FIELDS[name]
    if kind is None:
        if not isinstance(value, bool):
            raise BadInput(f"{raw}={value!r}: expected true or false, got {value!r}")
        return value
    word = ",".join(_word(raw, v) for v in value) if isinstance(value, (list, tuple)) else _word(raw, value)
    flag = f"argument --{name.replace('_', '-')}"
    try:
        converted = kind(word)
    except ValueError:
        raise BadInput(f"{raw}={value!r}: {flag}: invalid {kind.__name__} value: {word!r}") from None
    allowed = choices().get(name)
    if allowed is not None and converted not in allowed:
        listed = ", ".join(map(repr, allowed))
        raise BadInput(f"{raw}={value!r}: {flag}: invalid choice: {converted!r} (choose from {listed})")
    if name == "phases":
        return tuple(p.strip() for p in converted.split(",") if p.strip())
    return converted


def _word(raw: Any, value: Any) -> str:
    """A value as the word a command line would carry."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list, tuple)):
        raise BadInput(f"{raw}={value!r}: expected a scalar, got {value!r}")
    return str(value)


def coerce(name: str, annotation: Any, value: Any) -> Any:
    """A value for a field without a replay option, checked against the field's annotation."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return coerce(name, arg, value)
            except ValueError as exc:
                errors.append(str(exc))
        raise BadInput(errors[0] if errors else f"{name}: bad value {value!r}")
    if origin is tuple:
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)):
            raise BadInput(f"{name}: expected a list, got {value!r}")
        inner = args[0] if args else Any
        return tuple(coerce(name, inner, v) for v in items if not (isinstance(v, str) and not v.strip()))
    checks: dict[Any, tuple[Callable[[Any], bool], str]] = {
        bool: (lambda v: isinstance(v, bool), "true or false"),
        int: (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
        float: (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
        str: (lambda v: isinstance(v, str), "a string"),
    }
    if annotation in checks:
        ok, what = checks[annotation]
        if not ok(value):
            raise BadInput(f"{name}: expected {what}, got {value!r}")
        return float(value) if annotation is float else value.strip() if annotation is str else value
    return value
