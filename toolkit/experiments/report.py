"""An HTML report of one run folder: the summary table, the target lines, and the experiment figures.

`write_report(run_dir)` reads the folder back (`results.load_run`) and writes `report.html` next to it (mode 0600).
plotly.js is inlined once, so the file renders offline; without plotly the report keeps the tables only.
Phases appear in run order; tables show every row and their full text (cells wrap, a wide table scrolls
sideways); Belady is drawn at the hash unit the hits land on (`run_bounds.experiment_bounds`), never the scheduler-block
version that fine-grained hits exceed.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.workloads.phase_names import PHASE_ORDER

if TYPE_CHECKING:
    import polars as pl

    from toolkit.experiments.oracle import PhaseBounds

SUMMARY_COLUMNS = (
    "variant",
    "phase",
    "requests",
    "prompt_tokens",
    "local_hit_tokens",
    "external_hit_tokens",
    "recomputed_tokens",
    "oracle_reusable_tokens",
    "hit_fraction_of_oracle",
    "belady_hit_tokens",
    "load_bytes",
    "store_bytes",
    "median_ttft_s",
    "outputs_identical",
    "tokens_identical",
    "max_abs_logprob_delta",
    "miss_reasons",
)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, dict):
        text = json.dumps(value, sort_keys=True)
    else:
        text = "" if value is None else str(value)
    return f"<td>{html.escape(text)}</td>"


def summary_table(summary: dict[str, Any]) -> str:
    head = "".join(f"<th>{html.escape(c.replace('_', ' '))}</th>" for c in SUMMARY_COLUMNS)
    phases = summary["phases"]
    rows = "".join("<tr>" + "".join(_cell(p.get(c)) for c in SUMMARY_COLUMNS) + "</tr>" for p in phases)
    return (
        f"<div class='scroll'><table data-rows='{len(phases)}'><thead><tr>{head}</tr></thead>"
        f"<tbody>{rows}</tbody></table></div>"
    )


def headline(summary: dict[str, Any]) -> list[str]:
    """The lines a reader wants first: hot/cold TTFT, output identity, the negative control."""
    rows = {(p["variant"], p["phase"]): p for p in summary["phases"]}
    main = summary["phases"][0]["variant"] if summary["phases"] else ""
    out = []
    cold, hot = rows.get((main, "cold")), rows.get((main, "hot"))
    if cold and hot and cold.get("median_ttft_s") and hot.get("median_ttft_s"):
        out.append(
            f"median TTFT per request: cold {cold['median_ttft_s'] * 1e3:.1f} ms, hot "
            f"{hot['median_ttft_s'] * 1e3:.1f} ms, hot/cold {hot['median_ttft_s'] / cold['median_ttft_s']:.3f}"
        )
    for phase in ("hot", "replay"):
        row = rows.get((main, phase))
        if row and row.get("outputs_identical") is not None:
            level = (
                "exact (tokens and top-1 logprobs bit-identical)"
                if row["outputs_identical"]
                else f"within the tolerance {summary.get('logprob_tolerance')}"
                if row.get("within_tolerance")
                else "NOT identical"
            )
            out.append(f"{phase} outputs vs cold: {level}, max |logprob delta| {row.get('max_abs_logprob_delta')}")
    control = rows.get(("corrupted_kv", "hot"))
    if control:
        out.append(
            f"negative control (corrupted loads), hot vs cold: outputs identical "
            f"{control.get('outputs_identical')}, {control.get('differing_output_tokens')}/"
            f"{control.get('output_tokens')} output tokens differ, max |logprob delta| "
            f"{control.get('max_abs_logprob_delta')}"
        )
    return out


def _bounds(run_dir: Path) -> dict[str, PhaseBounds] | None:
    """Hash-unit Belady per phase, rebuilt from the run's config (None when it cannot be: an unknown trace)."""
    from toolkit.experiments.run_bounds import folder_bounds

    try:
        return folder_bounds(run_dir)
    except Exception:  # a report of an older or foreign folder keeps the other figures
        return None


def _figures(phases: pl.DataFrame, requests: pl.DataFrame | None, params: dict[str, Any], run_dir: Path) -> list[str]:
    try:
        from toolkit.viz.experiments import (
            group_boundary_figure,
            phase_hits_figure,
            ttft_cdf_figure,
            ttft_figure,
            with_bounds,
        )
    except ImportError:
        return []
    bounds = _bounds(run_dir)
    kinds = (params.get("engine") or {}).get("group_kinds")
    figures = [phase_hits_figure(with_bounds(phases, bounds) if bounds else phases)]
    if requests is not None and requests["hit_boundary_per_group"].list.len().sum() > 0:
        figures.append(group_boundary_figure(requests, group_kinds=kinds))
    if requests is not None and requests["ttft_s"].drop_nulls().len() > 0:
        figures += [ttft_figure(requests), ttft_cdf_figure(requests)]
    parts = []
    for i, fig in enumerate(figures):
        parts.append(fig.to_html(full_html=False, include_plotlyjs=(i == 0), default_width="100%"))
    return parts


def _in_run_order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Variants in the order they ran, each one's phases in `PHASE_ORDER` (a folder read back may list them
    alphabetically)."""
    variants = list(dict.fromkeys(r.get("variant") for r in rows))
    rank = {p: i for i, p in enumerate(PHASE_ORDER)}
    return sorted(rows, key=lambda r: (variants.index(r.get("variant")), rank.get(str(r.get("phase")), len(rank))))


def _status_lines(run: dict[str, Any]) -> list[str]:
    """The run's state when it is not complete: a killed run says dead (with its pid and last heartbeat), not
    running; its phases below are the ones that finished."""
    status = run.get("status") or {}
    if status.get("state") in (None, "complete"):
        return []
    return [f"run status: {status.get('line')}"]


def write_report(run_dir: str | Path) -> Path:
    import polars as pl

    from toolkit.experiments.results import load_run

    run_dir = Path(run_dir)
    run = load_run(run_dir)
    summary = dict(run["summary"] or {"phases": (run["progress"] or {}).get("phases", [])})
    summary["phases"] = _in_run_order(summary["phases"])
    phases_path = run_dir / "phases.parquet"
    phases = pl.read_parquet(phases_path) if phases_path.exists() else None
    if phases is not None:
        from toolkit.viz.style import sort_phases

        phases = sort_phases(phases)
    params = run["params"]
    title = f"kvtk experiment: {summary.get('engine')} / {summary.get('model')} / {summary.get('trace')}"
    body = [
        f"<h1>{html.escape(title)}</h1>",
        "<p>" + "<br>".join(html.escape(line) for line in _status_lines(run) + headline(summary)) + "</p>",
        "<h2>Phases</h2>",
        summary_table(summary),
    ]
    if phases is not None:
        body += ["<h2>Figures</h2>", *_figures(phases, run["requests"], params, run_dir)]
    body += [
        "<h2>Parameters and versions</h2>",
        f"<pre>{html.escape(json.dumps(params, indent=2, default=str))}</pre>",
        f"<p>Run folder: {html.escape(str(run_dir))} (requests.parquet, phases.parquet, summary.json)</p>",
    ]
    style = (
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:12px}"
        "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right;white-space:normal;"
        "word-break:break-word;max-width:30em}div.scroll{overflow-x:auto;max-width:100%}"
        "pre{font-size:11px;white-space:pre-wrap}"
    )
    text = (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head><body>{''.join(body)}</body></html>"
    )
    target = run_dir / "report.html"
    tmp = run_dir / ".report.html.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, target)
    return target
