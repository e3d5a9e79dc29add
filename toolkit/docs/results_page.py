"""A dated results page (docs/results/DATE-NAME.md) rendered from run folders: the numbers, the host they were
measured on and the commit, so a headline in the README can point at a page that says where it came from.

A run folder is what `kvtk replay` / `kvtk demo` write (`toolkit.experiments.results`): params.json (the config,
the engine, the host, the versions), summary.json (one row per variant x phase) and metrics.json where written.
The headline sentence, the phase table and the serving-metrics table are the run report's own (`report.py`,
`report_tables.py`): the same code builds both, so the page and report.html show the same columns and numbers.
"""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import toolkit
from toolkit.errors import BadInput

CHECKOUT = Path(toolkit.__file__).resolve().parent.parent
# The config entries that say how a run was made, shown when set (params.json "config"; the rest are defaults).
CONFIG_KEYS = (
    "engine",
    "model",
    "trace",
    "phases",
    "connector",
    "baselines",
    "cpu_gib",
    "device_blocks",
    "device_gib",
    "prefix_match_unit",
    "tp",
    "dcp",
    "gpu",
    "concurrency",
    "max_requests",
    "time_scale",
    "dtype",
    "seed",
)


def read_run(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(params, summary) of a run folder; a folder without both files is bad input."""
    run_dir = Path(run_dir)
    out = []
    for name in ("params.json", "summary.json"):
        path = run_dir / name
        if not path.is_file():
            raise FileNotFoundError(f"{run_dir}: no {name} (not a finished run folder of kvtk replay / kvtk demo)")
        try:
            out.append(json.loads(path.read_text(encoding="utf-8")))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BadInput(f"{path}: not JSON: {exc}") from None
    return out[0], out[1]


def git_commit(checkout: Path = CHECKOUT) -> tuple[str, bool] | None:
    """(the checkout's HEAD, short; whether tracked files have uncommitted changes); None outside git."""
    try:
        head = subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=30
        )
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip(), dirty.returncode == 0 and bool(dirty.stdout.strip())


def commit_line(params: dict[str, Any], commit: tuple[str, bool] | None) -> str:
    if commit:
        changes = ", with uncommitted changes" if commit[1] else ""
        return f"- commit: `{commit[0]}` (the checkout's HEAD when this page was generated{changes})"
    versions = params.get("versions", {})
    recorded = versions.get("commit") or versions.get("git_commit")
    if recorded:
        return f"- commit: `{recorded}` (recorded in params.json)"
    return f"- commit: unknown (no git checkout); hybrid-kv-toolkit {versions.get('hybrid-kv-toolkit', '?')}"


def host_line(params: dict[str, Any]) -> str:
    host = params.get("host") or {}
    if not host:
        return "- host: not recorded in params.json"
    bf16 = "native bf16" if host.get("native_bf16") else "no native bf16"
    flags = ", ".join(host.get("native_bf16_flags") or []) or "none"
    cap = host.get("onednn_max_cpu_isa")
    capped = f", oneDNN capped at {cap}" if cap else ""
    return (
        f"- host: {host.get('cpu_model', '?')}, {host.get('logical_cpus', '?')} logical CPUs, {bf16} "
        f"(flags: {flags}){capped}; live model dtype {host.get('live_model_dtype', '?')}"
    )


def versions_line(params: dict[str, Any]) -> str:
    versions = params.get("versions") or {}
    return "- versions: " + (", ".join(f"{name} {value}" for name, value in versions.items()) or "not recorded")


def setup_line(summary: dict[str, Any]) -> str:
    cpu_mib = (summary.get("cpu_bytes") or 0) / 2**20
    return (
        f"- set-up: hash unit {summary.get('hash_block_tokens')} tokens, scheduler block "
        f"{summary.get('scheduler_block_tokens')}, CPU tier {summary.get('cpu_blocks')} blocks ({cpu_mib:.1f} MiB), "
        f"device {summary.get('device_blocks')} blocks, store policy {summary.get('policy')}, "
        f"fine-grained {'on' if summary.get('fine_grained') else 'off'}, eviction {summary.get('eviction')}"
    )


def config_line(params: dict[str, Any]) -> str:
    config = params.get("config") or {}
    shown = []
    for key in CONFIG_KEYS:
        value = config.get(key)
        if value is None or value == []:
            continue
        shown.append(f"{key}={','.join(map(str, value)) if isinstance(value, list) else value}")
    return "- config: " + (" ".join(f"`{item}`" for item in shown) or "not recorded")


def _count(value: Any) -> str:
    return "-" if value is None else f"{int(value):,}"


def phase_table(summary: dict[str, Any]) -> list[str]:
    """The run report's phase table (`report_tables.phase_table`: its columns, names and numbers) in Markdown."""
    from toolkit.experiments.report import in_run_order
    from toolkit.experiments.report_tables import markdown_lines
    from toolkit.experiments.report_tables import phase_table as table

    return markdown_lines(table(in_run_order(summary.get("phases", []))))


def metrics_lines(run_dir: Path) -> list[str]:
    """The run report's serving metrics (`report_tables.comparison` of the folder), its notes, then the table."""
    from toolkit.experiments.compare import load_rows, with_deltas
    from toolkit.experiments.compare_table import header_lines
    from toolkit.experiments.report_tables import comparison, markdown_lines

    rows = with_deltas(load_rows([run_dir]))
    notes = header_lines(rows, [], None)[1:]
    return [*(f"{note}." for note in notes), "", *markdown_lines(comparison(rows, swept=[], over=None))]


def run_section(run_dir: Path, params: dict[str, Any], summary: dict[str, Any]) -> list[str]:
    from toolkit.experiments.report import question_sentence

    trace = params.get("trace") or {}
    engine = summary.get("engine", "?")
    gpu = (params.get("config") or {}).get("gpu")
    timing = f"modelled (GPU profile {gpu})" if engine == "dry" else "measured"
    lines = [
        f"## {engine} engine, {summary.get('model', '?')}, {summary.get('trace', '?')}",
        "",
        f"- run folder: `{Path(run_dir).name}` ({_count(trace.get('requests'))} requests, "
        f"{_count(trace.get('prompt_tokens'))} prompt tokens, {summary.get('elapsed_s', '?')} s)",
        config_line(params),
        host_line(params),
        versions_line(params),
        setup_line(summary),
        "",
    ]
    answer = question_sentence(summary)
    lines += [answer, ""] if answer else []
    lines += [f"Token counts per variant and phase; TTFT {timing}.", "", *phase_table(summary), ""]
    lines += ["Serving metrics per variant and phase (as in the run's report.html):", "", *metrics_lines(run_dir), ""]
    return lines


def render_page(run_dirs: list[Path], *, title: str, date: str, commit: tuple[str, bool] | None) -> str:
    runs = [(Path(run_dir), *read_run(Path(run_dir))) for run_dir in run_dirs]
    if not runs:
        raise BadInput("kvtk docs results: give at least one run folder")
    folders = " ".join(path.name for path, _, _ in runs)
    lines = [
        f"# {title} ({date})",
        "",
        f"Generated by `kvtk docs results {folders} --out ...` from each run folder's params.json, summary.json and "
        "metrics.json, with the tables of its report.html; regenerate it rather than editing it.",
        "",
        f"- date: {date}",
        commit_line(runs[0][1], commit),
        "",
    ]
    for run_dir, params, summary in runs:
        lines += run_section(run_dir, params, summary)
    return "\n".join(lines)


def write_page(run_dirs: list[Path], out: Path, *, title: str | None = None, force: bool = False) -> Path:
    """Render the page into `out` (refusing to overwrite a page unless `force`: hand-written pages stay)."""
    out = Path(out)
    if out.suffix != ".md":
        raise BadInput(f"--out {out}: a results page is a .md file")
    if out.exists() and not force:
        raise BadInput(f"--out {out}: exists (a results page is never overwritten without --force)")
    if not out.parent.is_dir():
        raise NotADirectoryError(f"--out {out}: no folder {out.parent}")
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    text = render_page(run_dirs, title=title or out.stem, date=date, commit=git_commit())
    out.write_text(text, encoding="utf-8")
    return out
