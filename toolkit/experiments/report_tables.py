"""The tables a run's report and a results page (`kvtk docs results`) both show, built once: the phase table of a
summary and the serving-metrics comparison, as headers and cells. `report_html` renders them as HTML,
`markdown_lines` as a Markdown table; the numbers, their formats and the column names are the same in both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from toolkit.experiments.compare import Row
from toolkit.experiments.compare_table import IDENT_HEADERS, cell_text, shown_columns, table_rows

# (summary key, header, scale): the phase table's columns; a column no row fills is not shown.
SUMMARY_COLUMNS = (
    ("variant", "variant", None),
    ("phase", "phase", None),
    ("requests", "requests", None),
    ("prompt_tokens", "prompt tokens", None),
    ("local_hit_tokens", "device-hit tokens", None),
    ("external_hit_tokens", "CPU-tier tokens", None),
    ("recomputed_tokens", "recomputed tokens", None),
    ("oracle_reusable_tokens", "oracle tokens", None),
    ("hit_fraction_of_oracle", "hits / oracle", None),
    ("belady_hit_tokens", "Belady tokens", None),
    ("load_bytes", "loaded bytes", None),
    ("store_bytes", "stored bytes", None),
    ("ttft_p50_s", "TTFT p50 ms", 1e3),
    ("ttft_p99_s", "TTFT p99 ms", 1e3),
    ("outputs_identical", "outputs identical", None),
    ("tokens_identical", "tokens identical", None),
    ("max_abs_logprob_delta", "max |logprob delta|", None),
)


@dataclass(frozen=True, slots=True)
class Table:
    headers: list[str]
    rows: list[list[Any]]  # numbers (formatted by `number_text` when rendered) or text
    text_columns: int  # the leading columns that are text (left-aligned)


def number_text(value: Any) -> str:
    """Integers with thousands separators, floats to four significant digits (separated when large)."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if value != value:  # NaN
        return "nan"
    return f"{value:,.0f}" if abs(value) >= 10_000 else f"{value:,.4g}"


def _value(phase: dict[str, Any], key: str, scale: float | None) -> Any:
    value = phase.get(key)
    if key == "ttft_p50_s" and value is None:  # an older summary: the median only
        value = phase.get("median_ttft_s")
    if scale is not None and isinstance(value, (int, float)):
        return value * scale
    return str(value) if isinstance(value, bool) else value


def phase_table(phases: Sequence[dict[str, Any]]) -> Table:
    """Every phase row; the columns some row fills, with units in their headers."""
    columns = [c for c in SUMMARY_COLUMNS if any(_value(p, c[0], c[2]) is not None for p in phases)]
    rows = [[_value(p, key, scale) for key, _, scale in columns] for p in phases]
    return Table([header for _, header, _ in columns], rows, text_columns=2)


def comparison(rows: list[Row], *, swept: list[str] | None, over: str | None) -> Table:
    """The comparison (`compare_table`): every column some row fills, mean ± 95% half-width with seeds."""
    idents, table = table_rows(rows, swept, over)
    columns = shown_columns(table, brief=False)
    headers = [IDENT_HEADERS.get(i, i) for i in idents] + [c.header for c in columns]
    body: list[list[Any]] = [
        [_ident_text(t.ident.get(i)) for i in idents] + [cell_text(t, c) for c in columns] for t in table
    ]
    return Table(headers, body, text_columns=len(idents))


def _ident_text(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else "" if value is None else str(value)


def markdown_lines(table: Table) -> list[str]:
    """The table in Markdown: text columns left-aligned, numbers right-aligned, cells as the HTML report shows."""
    align = ["---" if k < table.text_columns else "---:" for k in range(len(table.headers))]
    lines = ["| " + " | ".join(h.replace("|", "\\|") for h in table.headers) + " |", "|" + "|".join(align) + "|"]
    for row in table.rows:
        cells = [(v if isinstance(v, str) else number_text(v)).replace("|", "\\|") for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return lines
