"""Strict readers for the files people hand the toolkit: bounded size, UTF-8 with the line named, no duplicate keys,
no NaN/Infinity, bounded nesting, and YAML without anchors or aliases (so a 400-byte spec cannot expand to 600 MiB).

Every failure is a `ValueError` whose message names the file (as `where`) and, where known, the line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from toolkit.errors import BadInput
from toolkit.limits import MAX_LINE_BYTES, MAX_NESTING, MAX_SPEC_BYTES


class StrictLoadError(BadInput):
    """A file (or line) that is not the strict JSON / YAML the toolkit reads."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise StrictLoadError(f"duplicate key {key!r:.60}")
        out[key] = value
    return out


def _no_constants(name: str):
    raise StrictLoadError(f"{name} is not a number the toolkit accepts (finite numbers only)")


_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_constant=_no_constants)


def json_loads(text: str) -> Any:
    """`json.loads`, refusing duplicate keys, NaN/Infinity and deep nesting (StrictLoadError or JSONDecodeError)."""
    try:
        value, end = _DECODER.raw_decode(text.strip())
    except RecursionError:
        raise StrictLoadError(f"nested too deeply (more than {MAX_NESTING} levels)") from None
    if end != len(text.strip()):
        raise json.JSONDecodeError("Extra data", text.strip(), end)
    if _depth(value) > MAX_NESTING:
        raise StrictLoadError(f"nested too deeply (more than {MAX_NESTING} levels)")
    return value


def _depth(value: Any) -> int:
    """Nesting depth, iteratively (a recursive walk would overflow on the input it is meant to refuse)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            if deepest > MAX_NESTING:
                return deepest
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def decode_utf8(data: bytes, where: str, lineno: int | None = None) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = lineno if lineno is not None else data[: exc.start].count(b"\n") + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise StrictLoadError(
            f"{where} line {line}: not UTF-8 (byte 0x{data[exc.start]:02x} at column {column})"
        ) from None


def read_bounded(path: Path, where: str, max_bytes: int = MAX_SPEC_BYTES) -> str:
    """A whole small file as text, refusing files over `max_bytes` before reading them."""
    with path.open("rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise StrictLoadError(f"{where}: larger than the limit of {max_bytes} bytes")
    return decode_utf8(data, where)


def iter_lines(handle: BinaryIO, where: str, max_bytes: int = MAX_LINE_BYTES) -> Iterator[str]:
    """Text lines of a binary file, each read with a length cap and decoded as UTF-8 (errors name the line)."""
    lineno = 0
    while True:
        data = handle.readline(max_bytes + 1)
        if not data:
            return
        lineno += 1
        if len(data) > max_bytes:
            raise StrictLoadError(f"{where} line {lineno}: longer than the limit of {max_bytes} bytes")
        yield decode_utf8(data, where, lineno)


def yaml_loads(text: str, where: str) -> Any:
    """`yaml.safe_load` without anchors/aliases, duplicate keys or deep nesting; errors name the line."""
    import yaml

    class _Loader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark
                raise StrictLoadError(f"{where} line {mark.line + 1}: YAML aliases (*name) are not allowed")
            self.depth += 1
            if self.depth > MAX_NESTING:
                mark = self.peek_event().start_mark
                raise StrictLoadError(
                    f"{where} line {mark.line + 1}: nested too deeply (more than {MAX_NESTING} levels)"
                )
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                except TypeError:
                    raise StrictLoadError(
                        f"{where} line {key_node.start_mark.line + 1}: a mapping key must be a scalar"
                    ) from None
                if duplicate:
                    raise StrictLoadError(f"{where} line {key_node.start_mark.line + 1}: duplicate key {key!r:.60}")
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:
        raise StrictLoadError(f"{where}: nested too deeply (more than {MAX_NESTING} levels)") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise StrictLoadError(f"{where}{at}: not valid YAML: {problem}") from None
