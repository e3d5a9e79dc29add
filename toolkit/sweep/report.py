"""The sweep's offline HTML report: counts, failed cells with their errors, heatmaps, the results table.

plotly.js is inlined once, so the file renders with no network; without plotly the report keeps the tables.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from toolkit.sweep.folder import write_private

TABLE_COLUMNS = (
    "cell_label",
    "variant",
    "phase",
    "prompt_tokens",
    "local_hit_tokens",
    "external_hit_tokens",
    "oracle_reusable_tokens",
    "belady_hit_tokens",
    "hit_fraction_of_oracle",
    "hit_fraction_of_belady",
    "median_ttft_s",
    "ttft_p50_s",
    "ttft_p99_s",
    "queue_p50_s",
)


def figure_axes(spec_document: dict[str, Any]) -> list[str]:
    """The parameters that vary between cells (the spec's axes, then extra-cell keys)."""
    spec = spec_document.get("spec", {})
    names = list(spec.get("axes", {}))
    for extra in spec.get("cells", []):
        names.extend(k for k in extra if k not in names and k not in spec.get("fixed", {}))
    return [n.replace("-", "_") for n in names]


def sweep_figures(results, axes: list[str]) -> list[Any]:
    """Hit tokens over the oracle and over Belady, and TTFT when modelled, for the last phase run."""
    from toolkit.viz.sweep import sweep_heatmap, ttft_column, with_ratios

    df = with_ratios(results)
    if df.height == 0:
        return []
    phases = df["phase"].unique(maintain_order=True).to_list()
    phase = "replay" if "replay" in phases else phases[-1]
    axes = [a for a in axes if a in df.columns]
    rows = "variant" if df["variant"].n_unique() > 1 or not axes else axes[-1]
    facet = axes[0] if len([a for a in axes if a != rows]) > 1 else None
    figures = []
    for metric, better in (("hit_fraction_of_oracle", True), ("hit_fraction_of_belady", True)):
        if metric in df.columns:
            figures.append(
                sweep_heatmap(
                    df, metric=metric, axes=axes, rows=rows, facet=facet, phase=phase, higher_is_better=better
                )
            )
    ttft = ttft_column(df)
    if ttft:
        figures.append(
            sweep_heatmap(
                df,
                metric=ttft,
                axes=axes,
                rows=rows,
                facet=facet,
                phase=phase,
                higher_is_better=False,
                value_format=".3g",
            )
        )
    return figures


def _table(results) -> str:
    from toolkit.viz.sweep import with_ratios

    df = with_ratios(results)
    columns = [c for c in TABLE_COLUMNS if c in df.columns]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for row in df.select(columns).iter_rows(named=True):
        cells = []
        for c in columns:
            v = row[c]
            text = f"{v:.4g}" if isinstance(v, float) else ("" if v is None else str(v))
            cells.append(f"<td>{html.escape(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def write_sweep_report(sweep_dir: str | Path, summary: dict[str, Any], results) -> Path:
    sweep_dir = Path(sweep_dir)
    spec_document = json.loads((sweep_dir / "spec.json").read_text())
    title = f"kvtk sweep: {summary.get('name')}"
    lines = [
        f"{summary['done']}/{summary['cells']} cells done, {summary['failed']} failed, "
        f"{summary['skipped_finished']} finished earlier (resume), {summary['retried']} retried; "
        f"executor {summary.get('executor')}, {summary['elapsed_s']:.1f} s"
    ]
    body = [f"<h1>{html.escape(title)}</h1>", "<p>" + "<br>".join(html.escape(x) for x in lines) + "</p>"]
    if summary["failed_cells"]:
        items = "".join(
            f"<li><b>{html.escape(f['cell_id'])}</b> ({html.escape(f['label'])}), "
            f"{f['attempts']} attempts: <code>{html.escape(str(f['error']))}</code></li>"
            for f in summary["failed_cells"]
        )
        body.append(f"<h2>Failed cells</h2><ul>{items}</ul>")
    try:
        figures = sweep_figures(results, figure_axes(spec_document))
    except ImportError:
        figures = []
    if figures:
        body.append("<h2>Figures</h2>")
        body += [
            fig.to_html(full_html=False, include_plotlyjs=(i == 0), default_width="100%")
            for i, fig in enumerate(figures)
        ]
    if results.height:
        body += ["<h2>Results (results.parquet)</h2>", _table(results)]
    body += [
        "<h2>Spec and versions</h2>",
        f"<pre>{html.escape(json.dumps({k: spec_document[k] for k in ('spec', 'versions', 'runs')}, indent=2, default=str))}</pre>",
    ]
    style = (
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:12px}"
        "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}pre{font-size:11px}"
    )
    text = (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head><body>{''.join(body)}</body></html>"
    )
    return write_private(sweep_dir / "report.html", text)
