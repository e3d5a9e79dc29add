"""The pieces every offline HTML report shares: the page, whole tables with numbers formatted for reading, the
set-up line of a run's title, and the config, miss reasons and comparison as tables (never raw JSON).

Tables carry `data-rows` (their row count) so a test can check that every row is shown; headers wrap between
words only; a wide table scrolls sideways.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any, Sequence

from toolkit.experiments.compare import Row
from toolkit.experiments.report_tables import Table, comparison, number_text

STYLE = (
    "body{font-family:sans-serif;margin:2em;max-width:110em}table{border-collapse:collapse;font-size:12px}"
    "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right;vertical-align:top}"
    "th{word-break:normal;overflow-wrap:normal;hyphens:none;background:#f4f4f4}"
    "div.scroll{overflow-x:auto;max-width:100%}"
    + "".join(f"table.lead{k} td:nth-child(-n+{k}){{text-align:left;white-space:nowrap}}" for k in range(1, 7))
    + "p.headline{font-size:16px;font-weight:bold}pre{font-size:11px;white-space:pre-wrap}"
)


def html_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, text_columns: int = 0) -> str:
    """A whole table: every row; the first `text_columns` columns left-aligned text, the others formatted numbers."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = "".join(f"<td>{html.escape(v if isinstance(v, str) else number_text(v))}</td>" for v in row)
        body.append(f"<tr>{cells}</tr>")
    return (
        f"<div class='scroll'><table class='lead{min(text_columns, 6)}' data-rows='{len(rows)}'><thead><tr>{head}"
        f"</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
    )


def dict_table(values: dict[str, Any], *, key: str = "field", value: str = "value") -> str:
    """Two columns, one row per key; lists joined with commas, nested mappings as key=value."""
    rows = []
    for name, v in values.items():
        if isinstance(v, dict):
            v = "; ".join(f"{k}={x}" for k, x in v.items())
        elif isinstance(v, (list, tuple)):
            v = ", ".join(str(x) for x in v)
        rows.append([name, v if isinstance(v, (int, float, str)) and not isinstance(v, bool) else str(v)])
    return html_table([key, value], rows, text_columns=1)


def miss_reasons_table(phases: list[dict[str, Any]]) -> str | None:
    """Requests per miss reason, one row per (variant, phase); None when nothing was missed."""
    reasons: list[str] = []
    for p in phases:
        reasons += [r for r in (p.get("miss_reasons") or {}) if r not in reasons]
    if not reasons:
        return None
    rows = [
        [p.get("variant"), p.get("phase"), *((p.get("miss_reasons") or {}).get(r, 0) for r in reasons)] for p in phases
    ]
    return html_table(["variant", "phase", *(r.replace("_", " ") for r in reasons)], rows, text_columns=2)


def comparison_table(rows: list[Row], *, swept: list[str] | None, over: str | None) -> str:
    """The comparison (`report_tables.comparison`) as HTML: every column some row fills, mean ± 95% half-width."""
    return render_table(comparison(rows, swept=swept, over=over))


def render_table(table: Table) -> str:
    return html_table(table.headers, table.rows, text_columns=table.text_columns)


def gib_text(num_bytes: Any) -> str:
    if not isinstance(num_bytes, (int, float)) or isinstance(num_bytes, bool):
        return "?"
    gib = num_bytes / 2**30
    return f"{gib:,.0f} GiB" if gib >= 10 else f"{gib:.3g} GiB"


def setup_line(config: dict[str, Any], summary: dict[str, Any], engine_facts: dict[str, Any]) -> str:
    """Model, TP/DCP, device and tier size, hash unit, GPU profile, engine, trace: what a title must say."""
    engine = summary.get("engine") or config.get("engine")
    parts = [str(summary.get("model") or config.get("model")), f"TP{config.get('tp', 1)}/DCP{config.get('dcp', 1)}"]
    device = engine_facts.get("device_blocks") or summary.get("device_blocks")
    if device:
        tokens = engine_facts.get("device_tokens")
        parts.append(f"device {device:,} blocks" + (f" ({tokens:,} tokens)" if tokens else "") + " per rank")
    tier = config.get("cpu_gib")
    if isinstance(tier, (int, float)) and not isinstance(tier, bool):
        parts.append(f"CPU tier {tier:g} GiB")
    elif isinstance(tier, str) and tier:  # a grid's swept sizes
        parts.append(f"CPU tier {tier} GiB")
    else:
        parts.append(f"CPU tier {gib_text(summary.get('cpu_bytes'))}")
    unit = summary.get("hash_block_tokens") or config.get("prefix_match_unit")
    parts.append(f"hash unit {unit}")
    parts.append(f"GPU profile {config.get('gpu')}" if engine == "dry" else "measured on this host")
    parts.append(f"{engine} engine")
    parts.append(f"trace {summary.get('trace') or config.get('trace')}")
    return ", ".join(parts)


# Every report figure sits in a div with a fixed id (`fig-` and its name: `fig-capacity`, `fig-ttft-cdf`), so a
# figure can be found again in the page (`kvtk docs figures` exports the README's from there).
FIGURE_ID_PREFIX = "fig-"


def figure_html(fig: Any, name: str, *, first: bool) -> str:
    """A plotly figure as a fragment with the div id `fig-<name>`; plotly.js inlined with the page's first one."""
    return str(
        fig.to_html(full_html=False, include_plotlyjs=first, default_width="100%", div_id=FIGURE_ID_PREFIX + name)
    )


def write_page(target: Path, title: str, body: list[str]) -> Path:
    """The page, written owner-only (a new temporary name, then renamed into place)."""
    from toolkit.private_fs import write_private_file

    text = (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>"
    )
    return write_private_file(target, text)
