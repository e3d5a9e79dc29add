"""An HTML report of one run folder (`kvtk replay` writes one for every run): the set-up in the title (model,
TP/DCP, device and tier size, hash unit, GPU profile, engine, trace), the run's answer in one sentence, the phase
table, the serving metrics (`metrics.py`), the miss reasons, the figures (CPU-tier tokens on their own axis first),
the config, engine and versions as tables.

`write_report(run_dir)` reads the folder back (`results.load_run`) and writes `report.html` next to it (mode 0600).
plotly.js is inlined once, so the file renders offline; without plotly the report keeps the tables only.
Phases appear in run order; tables show every row and their full text (cells wrap, a wide table scrolls
sideways); Belady is drawn at the hash unit the hits land on (`run_bounds.experiment_bounds`), never the scheduler-block
version that fine-grained hits exceed.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.workloads.phase_names import PHASE_ORDER

if TYPE_CHECKING:
    import polars as pl

    from toolkit.experiments.oracle import PhaseBounds


def summary_table(summary: dict[str, Any]) -> str:
    """Every phase row; the columns some row fills, with units in their headers and numbers formatted (the table
    `kvtk docs results` writes too: `report_tables.phase_table`)."""
    from toolkit.experiments.report_html import render_table
    from toolkit.experiments.report_tables import phase_table

    return render_table(phase_table(summary["phases"]))


def question_sentence(summary: dict[str, Any]) -> str | None:
    """The run's answer in numbers: the main variant's CPU-tier tokens in its last measured phase, as a share of
    the prompt, against SimpleCPU and no offload where they ran."""
    rows = {(p["variant"], p["phase"]): p for p in summary.get("phases", [])}
    if not rows:
        return None
    main = summary["phases"][0]["variant"]
    measured = [p["phase"] for p in summary["phases"] if p["variant"] == main and p["phase"] != "pressure"]
    phase = next((q for q in ("hot", "replay", "cold") if q in measured), None)
    row = rows.get((main, phase)) if phase else None
    if not row or not row.get("prompt_tokens"):
        return None
    cpu, prompt = row.get("external_hit_tokens") or 0, row["prompt_tokens"]
    text = (
        f"{main}, {phase} phase: {cpu:,} of {prompt:,} prompt tokens ({100 * cpu / prompt:.1f}%) came from the CPU "
        f"tier, {row.get('local_hit_tokens') or 0:,} from the device cache"
    )
    other = rows.get(("simplecpu", phase))
    if other is not None and main != "simplecpu":
        theirs = other.get("external_hit_tokens") or 0
        delta = f" ({100 * (cpu - theirs) / theirs:+.1f}%)" if theirs else ""
        text += f"; SimpleCPU {theirs:,}, {cpu - theirs:+,}{delta}"
    ttft, base = row.get("ttft_p50_s"), (rows.get(("no_offload", phase)) or {}).get("ttft_p50_s")
    if ttft:
        clock = "modelled" if summary.get("engine") == "dry" else "measured"
        text += f"; TTFT p50 {ttft * 1e3:,.4g} ms ({clock})"
        if base:
            text += f" against {base * 1e3:,.4g} ms with no offload"
    return text + "."


def headline(summary: dict[str, Any]) -> list[str]:
    """The lines a reader wants first: hot/cold TTFT, output identity, the negative control."""
    rows = {(p["variant"], p["phase"]): p for p in summary["phases"]}
    main = summary["phases"][0]["variant"] if summary["phases"] else ""
    out = []
    cold, hot = rows.get((main, "cold")), rows.get((main, "hot"))
    if cold and hot and cold.get("median_ttft_s") and hot.get("median_ttft_s"):
        out.append(
            f"median TTFT per request (p50): cold {cold['median_ttft_s'] * 1e3:,.4g} ms, hot "
            f"{hot['median_ttft_s'] * 1e3:,.4g} ms, hot/cold {hot['median_ttft_s'] / cold['median_ttft_s']:.3f}"
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
    from toolkit.experiments.report_html import figure_html
    from toolkit.viz.report_figures import cpu_tier_figure

    bounds = _bounds(run_dir)
    kinds = (params.get("engine") or {}).get("group_kinds")
    measured = phases.filter(phases["phase"] != "pressure") if phases["phase"].n_unique() > 1 else phases
    figures = [
        (
            "cpu-tier",
            cpu_tier_figure(
                measured["variant"].to_list(),
                measured["phase"].to_list(),
                measured["external_hit_tokens"].to_list(),
                title="CPU-tier hit tokens per variant and phase",
            ),
        ),
        ("phase-hits", phase_hits_figure(with_bounds(phases, bounds) if bounds else phases)),
    ]
    if requests is not None and requests["hit_boundary_per_group"].list.len().sum() > 0:
        figures.append(("group-boundaries", group_boundary_figure(requests, group_kinds=kinds)))
    if requests is not None and requests["ttft_s"].drop_nulls().len() > 0:
        figures += [("ttft", ttft_figure(requests)), ("ttft-cdf", ttft_cdf_figure(requests))]
    return [figure_html(fig, name, first=i == 0) for i, (name, fig) in enumerate(figures)]


def in_run_order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
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
    """report.html in the run folder: title with the set-up, the answer in numbers, the tables, the figures."""
    import polars as pl

    from toolkit.experiments.report_html import dict_table, miss_reasons_table, setup_line, write_page
    from toolkit.experiments.results import load_run

    run_dir = Path(run_dir)
    run = load_run(run_dir)
    summary = dict(run["summary"] or {"phases": (run["progress"] or {}).get("phases", [])})
    summary["phases"] = in_run_order(summary["phases"])
    phases_path = run_dir / "phases.parquet"
    phases = pl.read_parquet(phases_path) if phases_path.exists() else None
    if phases is not None:
        from toolkit.viz.style import sort_phases

        phases = sort_phases(phases)
    params = run["params"]
    config, facts = params.get("config") or {}, params.get("engine") or {}
    title = f"kvtk run: {setup_line(config, summary, facts)}"
    answer = question_sentence(summary)
    body = [f"<h1>{html.escape(title)}</h1>"]
    if answer:
        body.append(f"<p class='headline'>{html.escape(answer)}</p>")
    body += [
        "<p>" + "<br>".join(html.escape(line) for line in _status_lines(run) + headline(summary)) + "</p>",
        "<h2>Phases</h2>",
        summary_table(summary),
    ]
    body += _metrics_section(run_dir, run["summary"] is not None)
    reasons = miss_reasons_table(summary["phases"])
    if reasons:
        body += ["<h2>Why hits stopped (requests per miss reason)</h2>", reasons]
    if phases is not None:
        from toolkit.experiments.report_tiers import tier_section

        body += tier_section(phases.to_dicts())
        body += ["<h2>Figures</h2>", *_figures(phases, run["requests"], params, run_dir)]
    body += ["<h2>Configuration</h2>", dict_table(config), "<h2>Engine</h2>", dict_table(facts)]
    body += ["<h2>Host and versions</h2>", dict_table({**(params.get("host") or {}), **(params.get("versions") or {})})]
    body.append(f"<p>Run folder: {html.escape(str(run_dir))} (requests.parquet, phases.parquet, summary.json)</p>")
    return write_page(run_dir / "report.html", title, body)


def _metrics_section(run_dir: Path, finished: bool) -> list[str]:
    """The serving metrics of each phase (metrics.json where written; else the summary's TTFT and e2e)."""
    if not finished:
        return []
    from toolkit.experiments.compare import load_rows, with_deltas
    from toolkit.experiments.compare_table import header_lines
    from toolkit.experiments.report_html import comparison_table

    rows = with_deltas(load_rows([run_dir]))
    notes = header_lines(rows, [], None)[1:]
    out = [
        "<h2>Serving metrics</h2>",
        "<p>" + "<br>".join(html.escape(n) for n in notes) + "</p>",
        comparison_table(rows, swept=[], over=None),
    ]
    return out + _turns_section(run_dir)


def _turns_section(run_dir: Path) -> list[str]:
    """TTFT per turn of a multi-turn session trace (metrics.json's `ttft_by_turn`), when the trace has sessions."""
    from toolkit.experiments.compare import read_json
    from toolkit.experiments.metrics import METRICS_FILE
    from toolkit.experiments.report_html import html_table

    path = run_dir / METRICS_FILE
    turns = read_json(path).get("ttft_by_turn", []) if path.is_file() else []
    if not turns:
        return []
    keys = ("variant", "phase", "turn", "requests", "ttft_p50_ms", "ttft_p90_ms")
    rows = [[t.get(k) for k in keys] for t in turns]
    headers = ["variant", "phase", "turn", "requests", "TTFT p50 ms", "TTFT p90 ms"]
    return ["<h2>TTFT per turn of a session</h2>", html_table(headers, rows, text_columns=2)]
