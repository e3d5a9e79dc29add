"""report.html of a command-line grid (`kvtk replay --cpu-gib 64,128 --seeds 1,2`): the set-up in the title, the
answer in one sentence, the capacity curve (tier size against CPU-tier tokens) when the tier was swept, the
tier-size table of the question's phase, every phase's comparison, the config as a table. Offline: plotly.js is
inlined once; without plotly the report keeps its tables.

Reads the sweep folder's JSON only (`compare.load_rows`), as `kvtk compare` does.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from toolkit.experiments.compare import Row, TableRow, aggregate
from toolkit.experiments.compare_table import COLUMNS, header_lines, table_rows

TIER = "cpu_gib"


def question_phase(rows: list[Row]) -> str:
    """The phase the comparison is about: hot, else replay, else cold (pressure is unrelated traffic)."""
    phases = {r.key[1] for r in rows}
    return next((p for p in ("hot", "replay", "cold") if p in phases), sorted(phases)[0] if phases else "cold")


def _points(rows: list[Row], over: str | None) -> list[TableRow]:
    getters = {c.name: c.get for c in COLUMNS if c.name in ("cpu_tier_tokens", "device_hit_tokens", "oracle_tokens")}
    getters["prompt_tokens"] = next(c.get for c in COLUMNS if c.name == "prompt_tokens")
    return aggregate(rows, getters, [TIER, "variant"], over)


def capacity_sentence(rows: list[Row], phase: str, over: str | None) -> str | None:
    """At the largest tier: the main variant's CPU-tier tokens, its share of the prompt and the delta against
    SimpleCPU; and the smallest tier where the tier served anything."""
    rows = [r for r in rows if r.key[1] == phase]
    points = [t for t in _points(rows, over) if isinstance(t.ident.get(TIER), (int, float))]
    if not points:
        return None
    main = rows[0].key[0]
    mine = sorted((t for t in points if t.ident["variant"] == main), key=lambda t: t.ident[TIER])
    if not mine:
        return None
    top = mine[-1]
    cpu, prompt = float(top.values["cpu_tier_tokens"] or 0), float(top.values["prompt_tokens"] or 0)
    share = f" ({100 * cpu / prompt:.1f}% of {prompt:,.0f} prompt tokens)" if prompt else ""
    text = f"{phase} phase, {main}: at {top.ident[TIER]:g} GiB the CPU tier serves {cpu:,.0f} tokens{share}"
    simple = [t for t in points if t.ident["variant"] == "simplecpu" and t.ident[TIER] == top.ident[TIER]]
    if simple and main != "simplecpu":
        theirs = float(simple[0].values["cpu_tier_tokens"] or 0)
        pct = f" ({100 * (cpu - theirs) / theirs:+.1f}%)" if theirs else ""
        text += f", against SimpleCPU's {theirs:,.0f}: {cpu - theirs:+,.0f}{pct}"
    first = next((t for t in mine if float(t.values["cpu_tier_tokens"] or 0) > 0), None)
    if first is None:
        text += "; no tier size tried serves any token"
    elif first is not mine[0]:
        text += f"; below {first.ident[TIER]:g} GiB the tier serves nothing"
        below = [r.summary for r in rows if float(r.config.get(TIER) or 0) < float(first.ident[TIER])]
        if below and all((s.get("cpu_blocks") or 0) < (s.get("device_blocks") or 0) for s in below):
            text += " (there it holds fewer blocks per rank than the device cache, and an inclusive tier adds hits "
            text += "only after the device evicts or is reset)"
    return text + "."


def _capacity_figure(rows: list[Row], phase: str, over: str | None) -> Any:
    from toolkit.viz.report_figures import CapacityPoint, capacity_figure

    points = []
    for t in _points(rows, over):
        if not isinstance(t.ident.get(TIER), (int, float)):
            continue
        oracle, device = t.values.get("oracle_tokens"), t.values.get("device_hit_tokens")
        ceiling = float(oracle) - float(device) if oracle is not None and device is not None else None
        points.append(
            CapacityPoint(
                variant=str(t.ident["variant"]),
                tier_gib=float(t.ident[TIER]),
                cpu_tier_tokens=float(t.values["cpu_tier_tokens"] or 0),
                halfwidth=t.halfwidths.get("cpu_tier_tokens"),
                ceiling_tokens=ceiling if t.ident["variant"] == rows[0].key[0] else None,
            )
        )
    return capacity_figure(points, phase=phase)


def write_grid_report(path: Path, rows: list[Row], *, swept: list[str], over: str | None) -> Path:
    from toolkit.experiments.report_html import comparison_table, dict_table, figure_html, setup_line, write_page

    if not rows:
        return write_page(path / "report.html", "kvtk replay grid: no finished runs", ["<p>no finished runs</p>"])
    phase = question_phase(rows)
    first = rows[0]
    varied = [*swept, *([over] if over else [])]
    config = {k: v for k, v in first.config.items() if k not in varied}
    shown = dict(config)
    for name in varied:
        shown[name] = ", ".join(dict.fromkeys(_text(r.config.get(name)) for r in rows))
    title = "kvtk replay grid: " + setup_line(shown, first.summary, {})
    body = [f"<h1>{html.escape(title)}</h1>"]
    sentence = capacity_sentence(rows, phase, over) if TIER in swept else None
    if sentence:
        body.append(f"<p class='headline'>{html.escape(sentence)}</p>")
    notes = header_lines(rows, table_rows(rows, swept, over)[1], over)
    body.append("<p>" + "<br>".join(html.escape(n) for n in notes) + "</p>")
    figures = []
    if TIER in swept:
        try:
            figures.append(_capacity_figure([r for r in rows if r.key[1] == phase], phase, over))
        except ImportError:
            pass
        body += [
            f"<h2>Tier size against CPU-tier tokens ({html.escape(phase)} phase)</h2>",
            *[figure_html(f, "capacity", first=i == 0) for i, f in enumerate(figures)],
            comparison_table([r for r in rows if r.key[1] == phase], swept=swept, over=over),
        ]
    body += ["<h2>Every phase</h2>", comparison_table(rows, swept=swept, over=over)]
    body += ["<h2>Configuration (the swept fields list their values)</h2>", dict_table(shown)]
    body.append(f"<p>Sweep folder: {html.escape(str(path))} (cells/, compare.csv, compare.parquet)</p>")
    return write_page(path / "report.html", title, body)


def _text(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
