"""`kvtk replay`'s options, made from the experiment config's fields (`experiments/config_fields.py`): each field's
help, default and choices are written once, there; the option takes the field's name with `-` for `_`, or its
`flag` (`--no-fine-grained`, `--baseline`).

A numeric option keeps its word as given (`64`, or a comma list `64,128,256`): `kvtk replay` converts it, so a bad
value is one line naming the option, and a list sweeps the option (`toolkit/cli/replay_sweep.py`)."""

from __future__ import annotations

import argparse
from typing import Any

# The parser's groups: one per section of the config, the top-level fields first.
GROUP_TITLES = {
    "": "engine, model and sizes",
    "workload": "the trace and how it is sent",
    "variant": "the connector variants",
    "dry": "the dry engine",
    "live": "the live and server engines",
}


NUMERIC = (int, float)
LIST_HELP = "; a comma list sweeps it"


def numeric_fields() -> dict[str, type]:
    """The fields whose option takes a number, or a comma list of numbers to sweep: name -> int or float."""
    from toolkit.experiments.config_params import COMMAND_LINE_FIELDS

    return {name: kind for name, kind in COMMAND_LINE_FIELDS.items() if kind in NUMERIC}


def add_config_options(parser: argparse.ArgumentParser) -> None:
    """One option per field with help, in a group per section."""
    import typing

    from toolkit.experiments.config_fields import SECTION_OF, option_fields
    from toolkit.experiments.config_params import COMMAND_LINE_FIELDS, field_types

    groups = {section: parser.add_argument_group(title) for section, title in GROUP_TITLES.items()}
    annotations = field_types()
    for f in option_fields():
        meta, group = f.metadata, groups[SECTION_OF.get(f.name, "")]
        flag = "--" + meta.get("flag", f.name).replace("_", "-")
        if meta.get("repeat"):
            group.add_argument(flag, action="append", default=[], metavar=meta.get("metavar"), help=meta["help"])
        elif annotations[f.name] is bool:
            group.add_argument(flag, action="store_true", help=meta["help"])
        else:
            is_list = typing.get_origin(annotations[f.name]) is tuple
            numeric = COMMAND_LINE_FIELDS[f.name] in NUMERIC
            group.add_argument(
                flag,
                type=str if numeric else COMMAND_LINE_FIELDS[f.name],
                default=",".join(f.default) if is_list else f.default,
                choices=None if is_list else meta.get("choices"),
                metavar=meta.get("metavar") or (f"{f.name.upper()}[,...]" if numeric else None),
                help=_help(meta, f.default, is_list) + (LIST_HELP if numeric else ""),
            )


def _help(meta: Any, default: Any, is_list: bool) -> str:
    """The field's help, then its valid words where the parser does not list them, then its default."""
    text = str(meta["help"])
    if is_list and "choices" in meta:
        text += f"; valid: {', '.join(meta['choices'])}"
    shown = meta.get("default_text", ",".join(default) if is_list else default)
    if shown is not None:
        text += f" (default {shown})"
    return text.replace("%", "%%")  # argparse formats help with %
