"""Checks a reviewer's eye makes on a figure, as functions over plotly figure JSON and notebook HTML.

Each returns a list of problems (empty: the figure passes), so the test names every offending figure at once.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from numbers import Number

from toolkit.experiments.results import PHASE_ORDER
from toolkit.viz.style import GROUP_KIND_COLORS, VARIANT_COLORS

UNIT = re.compile(r"\([^()]+\)\s*$")
BOUND_NAME = re.compile(r"belady|oracle|\bbound\b", re.IGNORECASE)
CARTESIAN = {"bar", "scatter", "box", "histogram", "scattergl", "violin"}


def _title(axis: dict) -> str:
    title = (axis or {}).get("title")
    if isinstance(title, dict):
        return title.get("text") or ""
    return title or ""


def _xs(trace: dict) -> list:
    """Per point, its x (a tuple for multi-category axes)."""
    x = trace.get("x")
    if x is None:
        return []
    if x and isinstance(x[0], list):
        return list(zip(*x))
    return list(x)


def phase_order_problems(fig: dict) -> list[str]:
    """Within every trace (and every variant of a multi-category axis) phases appear in run order."""
    rank = {p: i for i, p in enumerate(PHASE_ORDER)}
    out = []
    for trace in fig.get("data", []):
        groups: dict = {}
        for x in _xs(trace):
            key, phase = (x[:-1], x[-1]) if isinstance(x, tuple) else ((), x)
            if isinstance(phase, str) and phase in rank:
                groups.setdefault(key, []).append(rank[phase])
        for key, ranks in groups.items():
            distinct = list(dict.fromkeys(ranks))
            if distinct != sorted(distinct):
                out.append(
                    f"trace {trace.get('name')!r} {key}: phases out of run order {[PHASE_ORDER[r] for r in distinct]}"
                )
    for axis_name, axis in fig.get("layout", {}).items():
        if axis_name.startswith("xaxis") and isinstance(axis, dict) and axis.get("categoryarray"):
            phases = [rank[p] for p in axis["categoryarray"] if p in rank]
            if phases != sorted(phases):
                out.append(f"{axis_name}: category order {axis['categoryarray']} is not the run order")
    return out


def bound_problems(fig: dict) -> list[str]:
    """A trace named as a bound carries `meta.bounds` (a sum of traces) or `meta.bounds_each`; no value it bounds
    is drawn above it."""
    data = fig.get("data", [])
    by_name = {t.get("name"): t for t in data}
    out = []
    for trace in data:
        name = trace.get("name") or ""
        meta = trace.get("meta") or {}
        if not isinstance(meta, dict) or not ({"bounds", "bounds_each"} & set(meta)):
            if BOUND_NAME.search(name):
                out.append(f"trace {name!r} is named as a bound but does not say what it bounds")
            continue
        bound = dict(zip(_xs(trace), trace.get("y") or []))
        if "bounds" in meta:
            sums: dict = {}
            for other in meta["bounds"]:
                for x, y in zip(_xs(by_name.get(other, {})), by_name.get(other, {}).get("y") or []):
                    sums[x] = sums.get(x, 0) + (y or 0)
            pairs = [("+".join(meta["bounds"]), x, v) for x, v in sums.items()]
        else:
            pairs = [
                (other, x, y)
                for other in meta["bounds_each"]
                for x, y in zip(_xs(by_name.get(other, {})), by_name.get(other, {}).get("y") or [])
            ]
        for what, x, value in pairs:
            limit = bound.get(x)
            if limit is not None and value is not None and value > limit:
                out.append(f"{what} at {x}: {value} drawn above the bound {name!r} ({limit})")
    return out


def _axes_used(trace: dict) -> tuple[str, str]:
    def long(ref: str, letter: str) -> str:
        return f"{letter}axis" + ref[1:] if ref and ref != letter else f"{letter}axis"

    return long(trace.get("xaxis", "x"), "x"), long(trace.get("yaxis", "y"), "y")


def unit_problems(fig: dict) -> list[str]:
    """Every axis that carries numbers of a cartesian trace has a title ending in its unit: "TTFT (ms)".

    Category axes (phases, requests) need none; an axis sharing another's scale (`matches`) is titled once.
    """
    layout = fig.get("layout", {})
    out = []
    checked: set[str] = set()
    for trace in fig.get("data", []):
        if trace.get("type", "scatter") not in CARTESIAN:
            continue
        needs = []
        for axis, values in zip(_axes_used(trace), (_xs(trace), list(trace.get("y") or []))):
            numbers = [v for v in values if v is not None]
            if numbers and all(isinstance(v, Number) and not isinstance(v, bool) for v in numbers):
                needs.append(axis)
        for axis in needs:
            if axis in checked or (layout.get(axis) or {}).get("matches"):
                continue
            checked.add(axis)
            if not UNIT.search(_title(layout.get(axis, {}))):
                out.append(f"{axis} title {_title(layout.get(axis, {}))!r} names no unit")
    return out


def _colour(trace: dict):
    for part in ("line", "marker"):
        value = (trace.get(part) or {}).get("color")
        if isinstance(value, str):
            return value
    return None


def colour_problems(fig: dict, seen: dict[str, set]) -> list[str]:
    """A trace named after a variant or a group kind wears its fixed colour ("variant: group" traces: the group's
    kind colour fills, the variant's outlines); `seen` collects name -> colours across figures."""
    out = []

    def check(name: str, colour, expected) -> None:
        if expected is None or not isinstance(colour, str):
            return
        seen.setdefault(name, set()).add(colour.upper())
        if colour.upper() != expected.upper():
            out.append(f"{name!r}: colour {colour}, its fixed colour is {expected}")

    for trace in fig.get("data", []):
        variant, _, group = (trace.get("name") or "").partition(":")
        variant, group = variant.strip(), group.strip()
        marker = trace.get("marker") or {}
        if group:
            check(group, marker.get("color"), GROUP_KIND_COLORS.get(re.sub(r" \d+$", "", group)))
            check(variant, (marker.get("line") or {}).get("color"), VARIANT_COLORS.get(variant))
        else:
            colour = _colour(trace)
            check(variant, colour, VARIANT_COLORS.get(variant) or GROUP_KIND_COLORS.get(re.sub(r" \d+$", "", variant)))
    return out


class _Tables(HTMLParser):
    """Counts body rows of every table with `data-rows`, and spots polars' truncated reprs."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[int]] = []  # [declared, shown]
        self._stack: list[list[int] | None] = []
        self._in_body = False
        self._in_td = False
        self.truncated_cells = 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            entry = [int(attrs["data-rows"]), 0] if "data-rows" in attrs else None
            self._stack.append(entry)
            if entry is not None:
                self.tables.append(entry)
        elif tag == "tbody":
            self._in_body = True
        elif tag == "tr" and self._in_body and self._stack and self._stack[-1] is not None:
            self._stack[-1][1] += 1
        elif tag == "td":
            self._in_td = True

    def handle_endtag(self, tag):
        if tag == "table" and self._stack:
            self._stack.pop()
        elif tag == "tbody":
            self._in_body = False
        elif tag == "td":
            self._in_td = False

    def handle_data(self, data):
        if self._in_td and data.strip() in ("…", "&hellip;", "..."):
            self.truncated_cells += 1


def table_problems(html: str) -> list[str]:
    """Every table shows all its rows (shown == data-rows) and no cell is an ellipsis (a cut-off frame)."""
    parser = _Tables()
    parser.feed(html)
    out = [f"table shows {shown} of {declared} rows" for declared, shown in parser.tables if shown != declared]
    if parser.truncated_cells:
        out.append(f"{parser.truncated_cells} cells are an ellipsis: a frame was cut off")
    return out


def plotly_table_problems(fig: dict) -> list[str]:
    """A plotly table is tall enough for its rows (each at least 20 px) or it hides the last ones."""
    out = []
    for trace in fig.get("data", []):
        if trace.get("type") == "table":
            rows = len(((trace.get("cells") or {}).get("values") or [[]])[0])
            height = fig.get("layout", {}).get("height") or 450
            if height < 100 + 20 * rows:
                out.append(f"table of {rows} rows in a {height} px figure")
    return out


POLARS_CUT_ROW = re.compile(r"^│(\s*…\s*[┆│])+\s*$", re.MULTILINE)
POLARS_CUT_CELL = re.compile(r"[^\s…]…\s*[┆│]")


def text_table_problems(text: str) -> list[str]:
    """A frame printed as text shows every row (no "…" row) and full cells (no cell cut with "…")."""
    out = []
    if POLARS_CUT_ROW.search(text):
        out.append("a printed frame hides rows (a '…' row)")
    if POLARS_CUT_CELL.search(text):
        out.append("a printed frame cuts a cell short ('…')")
    return out
