"""One option vocabulary across `kvtk` commands: old spellings keep working, each saying its new name once on stderr.

The words: `--model` names a model (a tiny model or a preset of data/models, as `kvtk replay` has always taken it),
`--prefix-match-unit` the hash unit in tokens (vLLM's own name, and the experiment config's field), `--cpu-gib` a
CPU-tier budget (the unit of every size the user types; `--cpu-blocks` stays where blocks are the point, in
`kvtk soak`, whose small counts force eviction). An old spelling is rewritten in argv before the parser reads it, and
only for a parser that has the new option and not the old one (`kvtk bench` targets included: each target's own
parser is asked)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Alias:
    new: str
    convert: Callable[[str], str] | None = None  # the old value in the new option's unit


def _bytes_to_gib(word: str) -> str:
    """Exact for any byte count below 2**53: a GiB float times 2**30 gives the bytes back."""
    try:
        count_bytes = int(word)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--cpu-bytes: not a whole number of bytes: {word!r}") from None
    return repr(count_bytes / 2**30)


ALIASES = {
    "--preset": Alias("--model"),
    "--hash-block": Alias("--prefix-match-unit"),
    "--hash-unit": Alias("--prefix-match-unit"),
    "--cpu-bytes": Alias("--cpu-gib", _bytes_to_gib),
}


def rewrite_old_options(parser: argparse.ArgumentParser, argv: list[str], prog: str) -> list[str]:
    """argv with each old spelling that `parser` does not know, and whose new one it does, made the new one; one
    stderr line per old spelling used ("kvtk geometry: --preset is now --model"). Tokens after `--` stay as given."""
    known = set(parser._option_string_actions)  # argparse has no public list of a parser's option strings
    out: list[str] = []
    told: set[str] = set()
    words = iter(argv)
    for word in words:
        if word == "--":
            out.append(word)
            out.extend(words)
            break
        old, eq, value = word.partition("=")
        alias = ALIASES.get(old)
        if alias is None or old in known or alias.new not in known:
            out.append(word)
            continue
        if old not in told:
            print(f"{prog}: {old} is now {alias.new}", file=sys.stderr)
            told.add(old)
        if alias.convert is None:
            out.append(alias.new + eq + value)
            continue
        raw = value if eq else next(words, None)
        if raw is None:
            parser.error(f"argument {old}: expected one argument")
        try:
            out.append(f"{alias.new}={alias.convert(raw)}")
        except argparse.ArgumentTypeError as exc:
            parser.error(str(exc))
    return out


def rewrite_command_line(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """`rewrite_old_options` for the sub-command that argv names (its first word that is not an option)."""
    subparsers = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    command = next((i for i, word in enumerate(argv) if not word.startswith("-")), None)
    if subparsers is None or command is None or argv[command] not in subparsers.choices:
        return argv
    name = argv[command]
    rest = rewrite_old_options(subparsers.choices[name], argv[command + 1 :], f"kvtk {name}")
    return argv[: command + 1] + rest
